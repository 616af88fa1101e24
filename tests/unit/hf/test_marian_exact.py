"""An imported MarianMTModel computes what transformers computes: tiny random models built by
transformers (tests/marian.py), imported by `mtkit.hf.importer`, then compared on teacher-forced
logits, greedy and beam output, and tokenization both ways."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("safetensors")

import mtkit  # noqa: E402
from mtkit.hf.importer import import_model  # noqa: E402
from mtkit.models.vocab import BOS_ID, EOS_ID, PAD_ID  # noqa: E402
from mtkit.run import load_model  # noqa: E402
from tests.marian import (  # noqa: E402
    WORDS_SRC,
    WORDS_TGT,
    build_marian,
    hard_lines,
    marian_tokenizer,
    toy_lines,
)

LIMIT = 60  # transformers' max_length: the start token, 58 tokens, the end token


@dataclass
class Pair:
    """A Marian folder, transformers' model and tokenizer for it, and its mtkit import."""

    hf: object
    tok: object
    run: Path
    pad: int


# (vocabularies, activation, end-token bias): the bias that makes 30-60% of the outputs of
# that random model end before the limit
@pytest.fixture(scope="module", params=[("shared", "swish", 2.7), ("separate", "relu", 3.8)],
                ids=["shared-swish", "separate-relu"])
def pair(request, tmp_path_factory) -> Pair:
    from transformers import MarianMTModel

    shared, act, eos_bias = request.param[0] == "shared", request.param[1], request.param[2]
    base = tmp_path_factory.mktemp(f"marian-{request.param[0]}")
    folder = build_marian(base / "hf", shared=shared, activation=act, eos_bias=eos_bias).path
    import_model(str(folder), base / "run")
    hf = MarianMTModel.from_pretrained(str(folder)).eval()
    return Pair(hf, marian_tokenizer(folder), base / "run", hf.config.pad_token_id)


def _marian_of(run: Path) -> tuple[dict[int, int], dict[int, int]]:
    """Marian id -> mtkit id, per side, from the run's piece table and the tokenizer's vocab."""
    table = load_model(run).tokenizer.table
    return {p: i for i, p in enumerate(table.src)}, {p: i for i, p in enumerate(table.tgt)}


def test_teacher_forced_logits_equal_transformers(pair: Pair) -> None:
    loaded = load_model(pair.run)
    table = loaded.tokenizer.table
    src_lines = toy_lines(WORDS_SRC, 12, 3)
    tgt_lines = toy_lines(WORDS_TGT, 12, 4)
    enc = pair.tok(src_lines, text_target=tgt_lines, padding=True, return_tensors="pt")
    src_vocab, tgt_vocab = pair.tok.get_src_vocab(), (
        pair.tok.target_encoder if pair.tok.separate_vocabs else pair.tok.get_src_vocab())
    src_of = {v: table.src.index(k) if k != "<pad>" else PAD_ID for k, v in src_vocab.items()}
    tgt_of = {v: table.tgt.index(k) if k != "<pad>" else BOS_ID for k, v in tgt_vocab.items()}
    mask = enc["attention_mask"].bool()
    src = torch.tensor([[src_of[int(x)] for x in row] for row in enc["input_ids"]])
    src = src.masked_fill(~mask, PAD_ID)
    labels = enc["labels"]
    real = labels != pair.pad
    tgt = torch.tensor([[tgt_of[int(x)] for x in row] for row in labels]).masked_fill(~real,
                                                                                       PAD_ID)
    tgt_in = torch.cat([torch.full((len(src_lines), 1), BOS_ID), tgt[:, :-1]], 1)
    with torch.no_grad():
        theirs = pair.hf(**enc).logits
        ours = loaded.model(src, mask.sum(1), tgt_in).logits
    # every Marian row (mtkit's extra PAD row stands for none), at every real position
    marian_ids = sorted(tgt_of)
    rows = torch.tensor([tgt_of[m] for m in marian_ids])
    at = torch.cat([torch.ones(len(src_lines), 1, dtype=torch.bool), real[:, :-1]], 1)
    ours_m, theirs_m = ours[..., rows][at], theirs[..., marian_ids][at]
    assert ours_m.numel() > 1000 and theirs_m.abs().max() > 1.0  # outputs of some size
    torch.testing.assert_close(ours_m, theirs_m, atol=1e-5, rtol=0)
    # the extra row never takes probability mass from Marian's
    assert float(ours.log_softmax(-1)[..., PAD_ID].max()) < -50


def _generate(pair: Pair, lines: list[str], **kwargs) -> tuple[list[str], object]:
    enc = pair.tok(lines, return_tensors="pt", padding=True)
    with torch.no_grad():
        out = pair.hf.generate(**enc, do_sample=False, max_length=LIMIT,
                               bad_words_ids=[[pair.pad]], output_scores=True,
                               return_dict_in_generate=True, **kwargs)
    return pair.tok.batch_decode(out.sequences, skip_special_tokens=True), out


def test_greedy_output_is_transformers_on_50_sentences(pair: Pair) -> None:
    lines = toy_lines(WORDS_SRC, 50, 7)
    model = mtkit.load(pair.run, device="cpu", threads=1)
    ours = model.translate(lines, method="greedy", max_len_a=0.0, max_len_b=LIMIT - 2)
    theirs, _ = _generate(pair, lines, num_beams=1)
    assert ours == theirs
    assert len(set(ours)) > 10  # not one degenerate output


@pytest.mark.parametrize("penalty", [1.0, 0.6])
def test_beam_4_is_transformers_but_where_an_output_meets_the_length_limit(pair: Pair,
                                                                          penalty) -> None:
    """transformers' early_stopping=True is mtkit's stopping rule (a sentence is done with 4
    finished hypotheses; mtkit's earlier bound stops only when no active one can win) and
    length_penalty p its `power` with alpha p (`average` for 1). One difference stays: an
    output cut at the length limit ends with a forced end token that transformers scores 0
    and mtkit at the model's own log-probability, so among such outputs the two may choose
    differently."""
    lines = toy_lines(WORDS_SRC, 50, 7)
    model = mtkit.load(pair.run, device="cpu", threads=1)
    ours = model.translate_full(lines, method="beam", beam_size=4, length_penalty="power",
                                alpha=penalty, max_len_a=0.0, max_len_b=LIMIT - 2)
    theirs, out = _generate(pair, lines, num_beams=4, length_penalty=penalty,
                            early_stopping=True)
    cut = (out.sequences != pair.pad).sum(1) >= LIMIT - 1  # 58 tokens and the end token
    ended = [i for i in range(len(lines)) if not cut[i]]
    assert len(ended) >= 15
    assert [ours[i].text for i in ended] == [theirs[i] for i in ended]
    for i in ended:  # the same scores too
        assert ours[i].candidates[0].score == pytest.approx(float(out.sequences_scores[i]),
                                                            abs=1e-4)


def test_token_ids_are_marian_tokenizers_on_200_hard_sentences(pair: Pair) -> None:
    tok = load_model(pair.run).tokenizer
    src_of, tgt_of = _marian_of(pair.run)
    vocab = pair.tok.get_src_vocab()
    to_marian = {i: vocab[p] for p, i in src_of.items() if p in vocab}
    to_marian[EOS_ID] = vocab["</s>"]
    lines = hard_lines(200, 11)
    assert any("😀" in line for line in lines) and any(c.isdigit() for c in "".join(lines))
    theirs = pair.tok(lines)["input_ids"]
    ours = [[to_marian[i] for i in ids] + [vocab["</s>"]] for ids in tok.encode_src_lines(lines)]
    assert ours == theirs
    assert sum(ids.count(vocab["<unk>"]) for ids in theirs) > 50  # unknown characters met
    # target side: ids, and the text decoded from them
    tgt_lines = [line.replace("cat", "Katze") for line in lines]
    theirs_t = pair.tok(text_target=tgt_lines)["input_ids"]
    target = pair.tok.target_encoder if pair.tok.separate_vocabs else vocab
    ids_t = tok.encode_tgt_lines(tgt_lines)
    to_marian_t = {i: target[p] for p, i in tgt_of.items() if p in target}
    assert [[to_marian_t[i] for i in ids] + [target["</s>"]] for ids in ids_t] == theirs_t
    decoded = pair.tok.batch_decode(theirs_t, skip_special_tokens=True)
    assert [tok.decode_tgt(ids) for ids in ids_t] == decoded


def test_from_mtkit_gives_back_the_marian_tensors(pair: Pair) -> None:
    import json

    from safetensors.torch import load_file

    from mtkit.hf.marian import from_mtkit, marian_ids, transformer_fields

    folder = Path(pair.hf.name_or_path)
    config = json.loads((folder / "config.json").read_text())
    vocab = json.loads((folder / "vocab.json").read_text())
    target = (json.loads((folder / "target_vocab.json").read_text())
              if (folder / "target_vocab.json").is_file() else None)
    fields, ids = transformer_fields(config), marian_ids(config, vocab, target)
    saved = load_file(folder / "model.safetensors")
    back = from_mtkit(load_model(pair.run).model.state_dict(), fields, ids)
    # transformers may save a tied lm_head.weight (the target embedding) or leave it out
    assert set(back) - {"lm_head.weight"} == set(saved) - {"lm_head.weight"}
    for name, tensor in back.items():
        assert torch.equal(tensor, saved[name]), name
    if "lm_head.weight" in saved and "lm_head.weight" not in back:
        tied = back.get("model.decoder.embed_tokens.weight", back.get("model.shared.weight"))
        assert torch.equal(saved["lm_head.weight"], tied)
