"""A random Marian of OPUS-MT's size, imported, fine-tuned on Multi30k for a few minutes (so
that its translations end on their own), then decoded on the same test2016 sentences by mtkit,
by transformers' `generate` and by CTranslate2 (mtkit's export), same beam, same threads:
sentences/s and CPU-seconds of each, interleaved.

    python bench/hf_import.py --work /tmp/hf-bench --minutes 4 --sentences 500 --beam 4

Steps (each skipped when its output is already in --work):
1. `marian/`: a random `MarianMTModel` built by transformers as OPUS-MT's en-de is sized (d 512,
   6+6 layers, 8 heads, feed-forward 2048, swish, 58,101 ids: sentencepiece models of 7,000
   pieces per language trained on Multi30k, and a vocab.json by Marian's rules filled up to
   OPUS-MT's size with pieces no text produces), saved with its tokenizer files;
2. `imported/`: `mtkit import marian -o imported` (its function, `import_model`);
3. `tuned/`: `mtkit train` with `--init-from imported` on Multi30k (the imported sentencepiece
   models through data.spm.from_run), for --minutes;
4. `ct2/` and `hf/`: `mtkit export tuned` for CTranslate2 (float32) and `--engine hf`.

Then the first --sentences of test2016 are decoded in chunks of --chunk, every system on each
chunk in turn (interleaved, so that a shared machine's changing load falls on all of them):
mtkit's `mtkit.load(tuned)`, transformers' `generate` on `hf/` in batches of --hf-batch sorted
by length (each limited to mtkit's limit for its longest source), CTranslate2 through
`mtkit.load(ct2)`, with beam --beam and mtkit's `average` length penalty (transformers' and
CTranslate2's length_penalty 1), --threads threads each. Wall
seconds (perf_counter) and CPU seconds (process_time: every thread of this process) per chunk
and system, load average beside; then the totals, sentences/s, the ratios to transformers, how
many outputs are mtkit's, BLEU, and the output lengths (that translations end on their own).
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MTKIT = [sys.executable, "-m", "mtkit"]
OPUS_VOCAB = 58101  # Helsinki-NLP/opus-mt-en-de's vocab_size


def _args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, required=True, help="folder for the models and runs")
    ap.add_argument("--mirror", type=Path, default=Path(os.environ.get(
        "MTKIT_DATA_MIRROR", REPO.parent / "shared" / "data" / "multi30k")))
    ap.add_argument("--minutes", type=float, default=4.0, help="fine-tuning budget (4)")
    ap.add_argument("--sentences", type=int, default=500, help="test2016 sentences (500)")
    ap.add_argument("--beam", type=int, default=4, help="beam size of every system (4)")
    ap.add_argument("--threads", type=int, default=2, help="threads of every system (2)")
    ap.add_argument("--chunk", type=int, default=100, help="sentences each system decodes "
                    "in turn (100): the systems are interleaved chunk by chunk")
    ap.add_argument("--time-limit", type=float, default=0, help="minutes of decoding after "
                    "which no further chunk is started (0: none)")
    ap.add_argument("--hf-batch", type=int, default=32, help="transformers' batch (32)")
    ap.add_argument("--min-len", type=int, default=0, help="pieces before the end token is "
                    "allowed, in every system (mtkit's min_len, transformers' min_new_tokens, "
                    "CTranslate2's min_decoding_length): outputs of a realistic length from a "
                    "model that ends them too early (0: none); the limit's constant max_len_b "
                    "is then raised to min_len + 10 where it is lower")
    return ap.parse_args(argv)


def _lines(path: Path) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def _spm(lines: list[str], size: int) -> bytes:
    import sentencepiece as spm

    out = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_writer=out,
                                   vocab_size=size, character_coverage=1.0,
                                   model_type="unigram", minloglevel=2)
    return out.getvalue()


def _pieces(proto: bytes) -> list[str]:
    import sentencepiece as spm

    p = spm.SentencePieceProcessor(model_proto=proto)
    return [p.id_to_piece(i) for i in range(p.get_piece_size())
            if not (p.is_control(i) or p.is_unknown(i))]


def make_marian(folder: Path, mirror: Path, *, d_model: int = 512, layers: int = 6,
                heads: int = 8, ffn: int = 2048, pieces: int = 7000,
                vocab_size: int = OPUS_VOCAB) -> None:
    """Step 1: a random MarianMTModel (by default OPUS-MT's size) and its tokenizer files:
    sentencepiece models of `pieces` per language trained on Multi30k, and a vocab.json of
    `vocab_size` ids by Marian's rules (0: as many as the pieces)."""
    import torch
    from transformers import MarianConfig, MarianMTModel

    folder.mkdir(parents=True)
    src = _spm(_lines(mirror / "train.en.gz"), pieces)
    tgt = _spm(_lines(mirror / "train.de.gz"), pieces)
    (folder / "source.spm").write_bytes(src)
    (folder / "target.spm").write_bytes(tgt)
    rest = sorted(set(_pieces(src) + _pieces(tgt)))
    random.Random(0).shuffle(rest)  # Marian's order is its own, not sentencepiece's
    vocab = {"</s>": 0, "<unk>": 1, **{p: i + 2 for i, p in enumerate(rest)}}
    while len(vocab) < vocab_size - 1:  # up to OPUS-MT's size; no text produces these
        vocab[f"\u2581unused{len(vocab)}"] = len(vocab)
    vocab["<pad>"] = len(vocab)
    (folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    pad = vocab["<pad>"]
    config = MarianConfig(
        vocab_size=len(vocab), decoder_vocab_size=len(vocab), d_model=d_model,
        encoder_layers=layers, decoder_layers=layers, encoder_attention_heads=heads,
        decoder_attention_heads=heads, encoder_ffn_dim=ffn, decoder_ffn_dim=ffn,
        max_position_embeddings=512,
        activation_function="swish", scale_embedding=True, pad_token_id=pad,
        decoder_start_token_id=pad, eos_token_id=0, forced_eos_token_id=0,
        share_encoder_decoder_embeddings=True, dropout=0.1)
    torch.manual_seed(0)
    MarianMTModel(config).save_pretrained(folder)
    (folder / "tokenizer_config.json").write_text(json.dumps(
        {"source_lang": "en", "target_lang": "de", "separate_vocabs": False,
         "tokenizer_class": "MarianTokenizer"}), encoding="utf-8")
    (folder / "generation_config.json").write_text(json.dumps(
        {"bad_words_ids": [[pad]], "decoder_start_token_id": pad, "eos_token_id": 0,
         "forced_eos_token_id": 0, "max_length": 512, "num_beams": 4, "pad_token_id": pad}),
        encoding="utf-8")


def import_model(folder: Path, run: Path) -> None:
    """`mtkit import FOLDER -o RUN`, through the function the command calls."""
    from mtkit.hf.importer import import_model as imp

    print(f"+ import {folder} -> {run}", flush=True)
    imp(str(folder), run)


def _mtkit(*args: object) -> None:
    print("+ mtkit", *args, flush=True)
    subprocess.run([*MTKIT, *map(str, args)], check=True, cwd=REPO)


def finetune_recipe(work: Path, imported: Path, minutes: float) -> Path:
    """Step 3's recipe: recipes/en-de-finetune.yaml with the imported run's model and
    sentencepiece sections, the Multi30k splits and a budget of `minutes`."""
    import yaml

    base = yaml.safe_load((REPO / "recipes" / "en-de-finetune.yaml").read_text())
    parent = yaml.safe_load((imported / "recipe.yaml").read_text())
    base["name"] = "hf-bench-tuned"
    base["model"] = parent["model"]
    base["model"]["transformer"]["dropout"] = 0.1
    base["data"]["spm"] = {**parent["data"]["spm"], "from_run": str(imported)}
    base["train"].update(max_time=f"{minutes * 60:.0f}s", max_epochs=0, lr=7e-4, warmup=30,
                         batch_tokens=2048, valid_every=100000, valid_sentences=200,
                         device="cpu",
                         threads=0, keep_last=1)
    path = work / "finetune.yaml"
    path.write_text(yaml.safe_dump(base, sort_keys=False), encoding="utf-8")
    return path


def prepare(a: argparse.Namespace) -> None:
    """Steps 1-4, each unless its folder is there."""
    work = a.work
    work.mkdir(parents=True, exist_ok=True)
    if not (work / "marian").exists():
        make_marian(work / "marian", a.mirror)
    if not (work / "imported").exists():
        import_model(work / "marian", work / "imported")
    if not (work / "tuned" / "last.pt").exists():
        recipe = finetune_recipe(work, work / "imported", a.minutes)
        env_mirror = ["--mirror", a.mirror]
        _mtkit("prep", recipe, "--run-dir", work / "tuned", *env_mirror)
        _mtkit("train", recipe, "--run-dir", work / "tuned", "--init-from", work / "imported")
    for engine, out in (("ctranslate2", "ct2"), ("hf", "hf")):
        if not (work / out).exists():
            _mtkit("export", "--engine", engine, work / "tuned", "-o", work / out)


class HfSystem:
    """transformers' generate on the export, batches sorted by length, order restored; each
    batch limited as mtkit limits its longest sentence (`limit`: source pieces -> output
    pieces; max_new_tokens adds the end token), rather than by generation_config's one
    max_length, which an output that does not end would run to."""

    def __init__(self, folder: Path, beam: int, batch: int, limit, min_len: int) -> None:
        from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

        self.tok = AutoTokenizer.from_pretrained(folder)
        self.model = AutoModelForSeq2SeqLM.from_pretrained(folder).eval()
        self.beam, self.batch, self.limit = beam, batch, limit
        self.extra = {"min_new_tokens": min_len} if min_len else {}

    def translate(self, lines: list[str]) -> list[str]:
        import torch

        order = sorted(range(len(lines)), key=lambda i: len(lines[i]))
        out: dict[int, str] = {}
        for k in range(0, len(order), self.batch):
            ids = order[k: k + self.batch]
            batch = self.tok([lines[i] for i in ids], return_tensors="pt", padding=True)
            longest = int(batch["attention_mask"].sum(1).max()) - 1  # without </s>
            with torch.inference_mode():
                gen = self.model.generate(**batch, num_beams=self.beam, length_penalty=1.0,
                                          max_new_tokens=self.limit(longest) + 1,
                                          **self.extra)
            out.update(zip(ids, self.tok.batch_decode(gen, skip_special_tokens=True),
                           strict=True))
        return [out[i] for i in range(len(lines))]


def systems(a: argparse.Namespace) -> dict[str, object]:
    import mtkit

    opts = {"beam_size": a.beam, "length_penalty": "average", "method": "beam",
            "min_len": a.min_len}
    if a.min_len:
        recipe_b = mtkit.load(a.work / "ct2").defaults.max_len_b
        opts["max_len_b"] = max(recipe_b, a.min_len + 10)
    ours = mtkit.load(a.work / "tuned", device="cpu", threads=a.threads, **opts)
    return {"mtkit": ours,
            "transformers": HfSystem(a.work / "hf", a.beam, a.hf_batch,
                                     ours.defaults.output_limit, a.min_len),
            "ctranslate2": mtkit.load(a.work / "ct2", device="cpu", threads=a.threads, **opts)}


def main(argv: list[str] | None = None) -> None:
    a = _args(argv)
    prepare(a)
    import sacrebleu
    import torch

    src = _lines(a.mirror / "test_2016_flickr.en.gz")[: a.sentences]
    ref = _lines(a.mirror / "test_2016_flickr.de.gz")[: a.sentences]
    systems_ = systems(a)
    print(f"{platform.node()}, {os.cpu_count()} CPUs, torch {torch.__version__}, "
          f"{len(src)} sentences in chunks of {a.chunk}, beam {a.beam}, {a.threads} threads, "
          f"min_len {a.min_len}",
          flush=True)
    totals = {n: [0.0, 0.0] for n in systems_}
    outputs: dict[str, list[str]] = {n: [] for n in systems_}
    start, done = time.monotonic(), 0
    for k in range(0, len(src), a.chunk):
        chunk = src[k: k + a.chunk]
        for name, system in systems_.items():  # interleaved: every system on each chunk
            torch.set_num_threads(a.threads)  # a loaded model may have set its own
            load = os.getloadavg()[0]
            t0, c0 = time.perf_counter(), time.process_time()
            outputs[name] += system.translate(chunk)
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            totals[name][0] += wall
            totals[name][1] += cpu
            print(f"sentences {k + 1}-{k + len(chunk)} {name:13s} {wall:7.1f} s wall "
                  f"{cpu:7.1f} s CPU (load {load:.1f})", flush=True)
        done += len(chunk)
        if a.time_limit and time.monotonic() - start > a.time_limit * 60:
            print(f"--time-limit {a.time_limit} min reached after {done} sentences")
            break
    report(totals, outputs, ref[:done], a, sacrebleu)


def report(totals, outputs, ref, a, sacrebleu) -> None:
    n = len(ref)
    hf_wall, hf_cpu = totals["transformers"]
    print(f"\n{n} sentences; load average now {os.getloadavg()}")
    for name, (wall, cpu) in totals.items():
        bleu = sacrebleu.corpus_bleu(outputs[name], [ref]).score
        same = sum(o == m for o, m in zip(outputs[name], outputs["mtkit"], strict=True))
        print(f"{name:13s} {n / wall:6.2f} sentences/s {wall:7.1f} s wall {cpu:7.1f} s CPU "
              f"| transformers / this: wall {hf_wall / wall:.2f}x CPU {hf_cpu / cpu:.2f}x "
              f"| same as mtkit {same}/{n} | BLEU {bleu:.2f}")
    lengths = [len(o.split()) for o in outputs["mtkit"]]
    print(f"mtkit's outputs: median {statistics.median(lengths)} words, longest {max(lengths)}"
          f"; references: median {statistics.median(len(r.split()) for r in ref)} words")


if __name__ == "__main__":
    main()
