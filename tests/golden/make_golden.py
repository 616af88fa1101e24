"""Regenerate the golden values of tests/golden/ (run from the repository root):

    .venv/bin/python tests/golden/make_golden.py

Golden values pin what the real models compute from a fixed initialisation, so that a bug
applied the same way in `forward` and in `step` (a dropped sqrt(d) scale, a swapped gate),
which every invariant test passes, still fails a test. Regenerate them only for a change
that is meant to alter the numbers, and say so in the commit message.

It writes:
- values.json: for each tiny model (Transformer pre/post norm; RNN with LSTM, GRU and tanh
  cells), teacher-forced logits and the returned attention on a fixed batch;
- format1-run/: a run directory (best.pt in checkpoint format 1, data/spm.model) that every
  later mtkit must keep loading, and its greedy output on a fixed input.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))

from mtkit.config import ModelConfig, RNNConfig, TransformerConfig  # noqa: E402

VOCAB = 20
SRC = torch.tensor([[5, 6, 7, 8, 3], [9, 10, 3, 0, 0]])  # EOS-terminated, padded
SRC_LENS = torch.tensor([5, 3])
TGT_IN = torch.tensor([[2, 11, 12, 13], [2, 14, 15, 0]])  # BOS-first

_TF = dict(d_model=16, heads=2, enc_layers=2, dec_layers=2, ffn_dim=32, dropout=0.0,
           max_positions=32)
MODELS = {
    "transformer-pre": ModelConfig(arch="transformer",
                                   transformer=TransformerConfig(norm="pre", **_TF)),
    "transformer-post": ModelConfig(arch="transformer", transformer=TransformerConfig(
        norm="post", activation="gelu", positions="learned", share_embeddings=False, **_TF)),
    **{f"rnn-{cell}": ModelConfig(arch="rnn", rnn=RNNConfig(
        cell=cell, emb_dim=8, hidden_dim=8, attn_dim=8, enc_layers=2, dec_layers=2,
        dropout=0.0)) for cell in ("lstm", "gru", "rnn")},
}


def outputs(name: str) -> dict[str, list]:
    """Logits (B, T, V) and attention (B, T, S) of model `name` from seed 0, rounded."""
    from mtkit.models.build import build_model

    torch.manual_seed(0)
    model = build_model(MODELS[name], VOCAB, VOCAB).eval()
    with torch.no_grad():
        out = model(SRC, SRC_LENS, TGT_IN, return_attn=True)
    return {"logits": out.logits.tolist(), "attn": out.attn.tolist()}


FORMAT1_INPUT = "ka lo mi"


def make_format1_run(out: Path) -> str:
    """A tiny toy-task Transformer saved as a format-1 checkpoint; returns its greedy
    output for FORMAT1_INPUT."""
    import dataclasses
    import tempfile

    from mtkit.config import dump_recipe, load_recipe
    from mtkit.data.prep import prepare
    from mtkit.data.spm import Tokenizer
    from mtkit.models.build import build_model
    from mtkit.run import save_checkpoint

    recipe = load_recipe(ROOT / "recipes" / "toy.yaml")
    recipe = dataclasses.replace(recipe, model=dataclasses.replace(
        recipe.model, transformer=TransformerConfig(**_TF)))
    with tempfile.TemporaryDirectory() as tmp:
        prepare(recipe, tmp)
        tok = Tokenizer.load(Path(tmp) / "data")
        shutil.rmtree(out, ignore_errors=True)
        (out / "data").mkdir(parents=True)
        shutil.copy(Path(tmp) / "data" / "spm.model", out / "data" / "spm.model")
    torch.manual_seed(0)
    model = build_model(recipe.model, tok.src_vocab_size, tok.tgt_vocab_size)
    save_checkpoint(out / "best.pt", {
        "recipe": dump_recipe(recipe), "model": model.state_dict(),
        "vocab": {"src": tok.src_vocab_size, "tgt": tok.tgt_vocab_size,
                  "sha256": tok.fingerprint()}})
    return greedy(out)


def greedy(run: Path) -> str:
    from mtkit.config import DecodeConfig
    from mtkit.data.batch import collate
    from mtkit.decode import decode_batch
    from mtkit.run import load_model

    model, _, tok = load_model(run)
    batch = collate([tok.encode_src(FORMAT1_INPUT)], None, [0])
    with torch.no_grad():
        (best, *_), = decode_batch(model, batch, DecodeConfig(method="greedy"))
    return " ".join(tok.tgt_pieces(best.tokens))


def main() -> None:
    values = {name: outputs(name) for name in MODELS}
    values["format1"] = {"input": FORMAT1_INPUT,
                         "greedy_pieces": make_format1_run(HERE / "format1-run")}
    (HERE / "values.json").write_text(json.dumps(values, indent=None) + "\n", encoding="utf-8")
    print(f"wrote {HERE / 'values.json'} and {HERE / 'format1-run'}")


if __name__ == "__main__":
    main()
