"""How mtkit's beam search on an imported MarianMTModel differs from transformers' `generate`:
the two tiny random models of tests/unit/hf/test_marian_exact.py (shared vocabulary and swish,
separate vocabularies and relu), 50 sentences each, 4 beams, length penalty 1.0 (mtkit's
`average`), a limit of 60 tokens, transformers' early_stopping True (mtkit's stopping rule)
and False (its default). Prints, per setting, how many outputs differ, how many of those were
cut at the length limit, and the score gap (transformers' score minus mtkit's).

    .venv/bin/python bench/marian_beam.py
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import mtkit  # noqa: E402
from mtkit.hf.importer import import_model  # noqa: E402
from tests.marian import WORDS_SRC, build_marian, marian_tokenizer, toy_lines  # noqa: E402

LIMIT = 60


def main() -> None:
    from transformers import MarianMTModel

    torch.set_num_threads(1)
    lines = toy_lines(WORDS_SRC, 50, 7)
    for shared, act, eos_bias in ((True, "swish", 2.7), (False, "relu", 3.8)):
        with tempfile.TemporaryDirectory() as tmp:
            folder = build_marian(Path(tmp) / "hf", shared=shared, activation=act,
                                  eos_bias=eos_bias).path
            import_model(str(folder), Path(tmp) / "run")
            ours = mtkit.load(Path(tmp) / "run", device="cpu", threads=1).translate_full(
                lines, method="beam", beam_size=4, length_penalty="average", max_len_a=0.0,
                max_len_b=LIMIT - 2)
            hf, tok = MarianMTModel.from_pretrained(str(folder)).eval(), marian_tokenizer(folder)
            pad = hf.config.pad_token_id
            enc = tok(lines, return_tensors="pt", padding=True)
            for early in (True, False):
                with torch.no_grad():
                    out = hf.generate(**enc, num_beams=4, max_length=LIMIT, length_penalty=1.0,
                                      early_stopping=early, bad_words_ids=[[pad]],
                                      output_scores=True, return_dict_in_generate=True)
                theirs = tok.batch_decode(out.sequences, skip_special_tokens=True)
                cut = ((out.sequences != pad).sum(1) >= LIMIT - 1).tolist()
                differ = [i for i in range(len(lines)) if ours[i].text != theirs[i]]
                gaps = [float(out.sequences_scores[i]) - ours[i].candidates[0].score
                        for i in differ]
                print(f"{'shared' if shared else 'separate'}/{act} early_stopping={early}: "
                      f"{len(differ)} of {len(lines)} differ, {sum(cut[i] for i in differ)} of "
                      f"them cut at the limit ({sum(cut)} cut in all); score gap max "
                      f"{max(gaps, default=0):.3f}, mean {sum(gaps) / max(1, len(gaps)):.3f}")


if __name__ == "__main__":
    main()
