"""Regenerate tests/golden/search.json (run from the repository root):

    .venv/bin/python tests/golden/make_search_golden.py

The outputs of every search (greedy, beam of several sizes and length limits, sampling,
forced decoding, ensembles) on tiny seeded models, as the decoder computed them at
commit 076da29, before the decoding cache was preallocated (issue 14). A faster decoder
must give the same tokens, scores and attention; regenerate only for a change meant to
alter the outputs, and say so in the commit message.

The models are untrained, so their outputs would run to the length limit; the EOS logit of
each is shifted by `EOS_BIAS` so that hypotheses end at many different steps and beam search
finishes, prunes and reorders as it does on a trained model.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))

from mtkit.config import DecodeConfig, ModelConfig, RNNConfig, TransformerConfig  # noqa: E402
from mtkit.data.batch import collate  # noqa: E402
from mtkit.models.vocab import EOS_ID  # noqa: E402

VOCAB = 14
# Raised EOS logit per model (see the module doc), tuned so that outputs end at many lengths.
EOS_BIAS = {"transformer-pre": 1.1, "transformer-post": 0.6, "rnn-gru": 0.15}
# Source sentences (ids 4..VOCAB-1, EOS appended by collate) of 1 to 9 tokens.
SOURCES = [[5, 6, 7, 8, 9, 10, 11], [9, 10], [4, 12, 13, 5, 6, 7, 8, 9, 10], [13],
           [7, 7, 8, 8, 9]]
_TF = dict(d_model=16, heads=2, enc_layers=2, dec_layers=2, ffn_dim=32, dropout=0.0,
           max_positions=40)
MODELS = {
    "transformer-pre": ModelConfig(arch="transformer", transformer=TransformerConfig(
        norm="pre", dec_layers=3, **{k: v for k, v in _TF.items() if k != "dec_layers"})),
    "transformer-post": ModelConfig(arch="transformer", transformer=TransformerConfig(
        norm="post", activation="gelu", positions="learned", share_embeddings=False,
        align_layer=0, align_head=1, **_TF)),
    "rnn-gru": ModelConfig(arch="rnn", rnn=RNNConfig(
        cell="gru", emb_dim=8, hidden_dim=8, attn_dim=8, enc_layers=1, dec_layers=2,
        dropout=0.0)),
}
# (name, members as (model, seed), ensemble mode)
SYSTEMS = [("transformer-pre", [("transformer-pre", 0)], None),
           ("transformer-post", [("transformer-post", 1)], None),
           ("rnn-gru", [("rnn-gru", 2)], None),
           ("ensemble-tf", [("transformer-pre", 3), ("transformer-post", 4)], "logprob"),
           ("ensemble-mixed", [("transformer-pre", 5), ("rnn-gru", 6)], "prob")]
SEARCHES = {
    "greedy": dict(method="greedy"),
    "greedy-short": dict(method="greedy", max_len_a=0.0, max_len_b=3, min_len=2),
    "beam1": dict(beam_size=1, length_penalty="none"),
    "beam2-nbest2": dict(beam_size=2, nbest=2, length_penalty="average"),
    "beam3-short": dict(beam_size=3, nbest=3, max_len_a=0.5, max_len_b=2),
    "beam4-min": dict(beam_size=4, nbest=2, min_len=3, alpha=0.6),
    "beam5": dict(beam_size=5, nbest=5),
    "beam5-long": dict(beam_size=5, nbest=1, max_len_a=2.0, max_len_b=12,
                       length_penalty="average"),
    "sample": dict(method="sample", nbest=3, seed=7, top_k=6, top_p=0.9, temperature=1.3),
}


def build(name: str, seed: int) -> torch.nn.Module:
    """Model `name` from `seed`, in eval mode, its EOS logit shifted by EOS_BIAS."""
    from mtkit.models.build import build_model

    torch.manual_seed(seed)
    model = build_model(MODELS[name], VOCAB, VOCAB).eval()
    generator = model.generator if hasattr(model, "generator") else model.decoder.generator
    with torch.no_grad():
        generator.bias[EOS_ID] += EOS_BIAS[name]
    return model


def system(name: str):
    """The model or ensemble of SYSTEMS entry `name`."""
    from mtkit.models.ensemble import Ensemble

    _, members, mode = next(s for s in SYSTEMS if s[0] == name)
    models = [build(m, seed) for m, seed in members]
    return models[0] if mode is None else Ensemble(models, mode=mode).eval()


def search_outputs(name: str, search: str) -> list[list[dict]]:
    """Per source sentence, its hypotheses: tokens, score, token log-probs, attention."""
    from mtkit.decode import decode_batch

    torch.set_num_threads(1)
    model = system(name)
    batch = collate(SOURCES, None, range(len(SOURCES)))
    with torch.no_grad():
        nbests = decode_batch(model, batch, DecodeConfig(**SEARCHES[search]), need_attn=True)
    return [[{"tokens": h.tokens, "score": h.score, "token_logprobs": h.token_logprobs,
              "attn": h.attn.tolist()} for h in hyps] for hyps in nbests]


def forced_outputs(name: str) -> list[list[float]]:
    """Teacher-forced token log-probabilities of the sources' reversals as targets."""
    from mtkit.decode import forced

    torch.set_num_threads(1)
    model = system(name)
    batch = collate(SOURCES, [s[::-1] for s in SOURCES], range(len(SOURCES)))
    with torch.no_grad():
        return [h.token_logprobs for h in forced(model, batch)]


def main() -> None:
    values = {name: {"searches": {s: search_outputs(name, s) for s in SEARCHES},
                     "forced": forced_outputs(name)} for name, _, _ in SYSTEMS}
    (HERE / "search.json").write_text(json.dumps(values) + "\n", encoding="utf-8")
    print(f"wrote {HERE / 'search.json'}")


if __name__ == "__main__":
    main()
