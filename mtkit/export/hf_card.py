"""The model card (README.md) of a Hugging Face export: the front matter the Hub reads
(languages, library, pipeline, the run's test scores as a model-index; the license left for
the user), then how to load the model, its scores with their sacreBLEU signatures, the data
and recipe it was trained with, and how the class holds it.

Scores come from the run's own translations of its splits (`mtkit score --run`), only those
that their key files prove were made by the exported checkpoint; none are computed here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mtkit import __version__
from mtkit.config import FileSource, Recipe, split_corpora
from mtkit.export.hf_layout import HfModel
from mtkit.score.split_translation import CachedTranslation


@dataclass(frozen=True)
class SplitScore:
    """A split's corpus BLEU and chrF, with sacreBLEU's signatures, and how it was decoded."""

    split: str
    decoding: str  # "beam 5, length penalty gnmt (alpha 1.0)", "greedy"
    bleu: float
    chrf: float
    signatures: dict[str, str]  # sacreBLEU's metric name -> signature


def score_cached(cached: list[CachedTranslation]) -> list[SplitScore]:
    """Score each translation against its split's reference."""
    from mtkit.score import MetricOptions, score_files

    out = []
    for c in cached:
        report = score_files([c.reference], [c.path],
                             metrics=MetricOptions(metrics=("bleu", "chrf")))
        bleu, chrf = report.scores[0].values()
        out.append(SplitScore(c.split, _decoding(c.decode), bleu.score, chrf.score,
                              report.signatures))
    return out


def _decoding(d: dict[str, Any]) -> str:
    if d.get("method") == "beam":
        lp = d.get("length_penalty")
        alpha = f" (alpha {d.get('alpha')})" if lp == "gnmt" else ""
        return f"beam {d.get('beam_size')}, length penalty {lp}{alpha}"
    return str(d.get("method"))


def _q(text: str) -> str:
    """A YAML scalar: a JSON string is one."""
    return json.dumps(text, ensure_ascii=False)


def _front_matter(recipe: Recipe, scores: list[SplitScore]) -> list[str]:
    d = recipe.data
    lines = ["---", "language:", f"- {_q(d.src_lang)}", f"- {_q(d.tgt_lang)}",
             "# license: fill in the license of this model and of its training data",
             "# (https://huggingface.co/docs/hub/repositories-licenses)",
             "# datasets: the Hub ids of the training data, where it is on the Hub",
             "library_name: transformers", "pipeline_tag: translation",
             "tags:", "- translation", "- mtkit"]
    if scores:
        lines += ["model-index:", f"- name: {_q(recipe.name)}", "  results:"]
    for s in scores:
        lines += ["  - task:", "      type: translation",
                  f"      name: {_q(f'Translation {d.src_lang}-{d.tgt_lang}')}",
                  "    dataset:", f"      name: {_q(s.split)}", f"      type: {_q(s.split)}",
                  "    metrics:",
                  "    - type: bleu", f"      value: {s.bleu:.2f}", "      name: BLEU",
                  "    - type: chrf", f"      value: {s.chrf:.2f}", "      name: chrF"]
    return [*lines, "---", ""]


def _source(side: FileSource) -> str:
    if side.url:
        return f"{side.url} (sha256 {side.sha256})" if side.sha256 else side.url
    return f"a local file, {Path(side.path or '').name}"


def _data(recipe: Recipe) -> list[str]:
    d = recipe.data
    lines = ["## Training", "",
             f"Trained with mtkit {__version__} from the recipe in `recipe.yaml` (the "
             "checkpoint's own, resolved: every option it trained with).", ""]
    named = [("train", d.train), ("valid", d.valid), *d.test.items()]
    for name, split in named:
        for suffix, corpus in split_corpora(split) if split is not None else ():
            tag = f", tagged {corpus.tag}" if corpus.tag else ""
            lines.append(f"- {name}{suffix}{tag}: {d.src_lang} {_source(corpus.src)}; "
                         f"{d.tgt_lang} {_source(corpus.tgt)}")
    return [*lines, ""]


def _scores(scores: list[SplitScore]) -> list[str]:
    if not scores:
        return ["## Scores", "", "None recorded: `mtkit score --run RUN_DIR --split NAME` "
                "before exporting puts the run's test scores here.", ""]
    lines = ["## Scores", "", "| split | decoding | BLEU | chrF |", "|---|---|---|---|"]
    lines += [f"| {s.split} | {s.decoding} | {s.bleu:.2f} | {s.chrf:.2f} |" for s in scores]
    lines += ["", "sacreBLEU signatures:", ""]
    for sig in dict.fromkeys(v for s in scores for v in s.signatures.values()):
        lines.append(f"- `{sig}`")
    return [*lines, ""]


def _use(recipe: Recipe, hf: HfModel) -> list[str]:
    d, tf = recipe.decode, recipe.model.transformer
    search = f"beam search of {d.beam_size}" if d.method == "beam" else d.method
    return [
        "## Use", "", "Below, THIS_DIR stands for this folder's path or its Hub id.", "",
        "```python", "from transformers import AutoModelForSeq2SeqLM, AutoTokenizer", "",
        "tokenizer = AutoTokenizer.from_pretrained(\"THIS_DIR\")",
        "model = AutoModelForSeq2SeqLM.from_pretrained(\"THIS_DIR\")",
        "batch = tokenizer([\"...\"], return_tensors=\"pt\", padding=True, truncation=True)",
        "print(tokenizer.batch_decode(model.generate(**batch), skip_special_tokens=True))",
        "```", "",
        f"`generation_config.json` holds the run's decoding ({search}); `<pad>` and `<s>` are "
        "suppressed,", "as mtkit's search never produces them.",
        *(["`mtkit import THIS_DIR -o RUN_DIR` makes it an mtkit run again (translate, serve, "
           "fine-tune)."] if hf.architecture == "MarianMTModel" else []), "",
        "## The model", "",
        f"An mtkit Transformer, {tf.norm}-norm, d_model {tf.d_model}, {tf.enc_layers}+"
        f"{tf.dec_layers} layers, {tf.heads} heads, feed-forward {tf.ffn_dim} ({tf.activation}),"
        f" {tf.positions} positions, in the layout of `{hf.architecture}`, which holds it",
        f"exactly: sequences of up to {hf.max_positions} tokens (the decoder's start token or "
        "the source's `</s>` included).",
        "The tokenizer is `MarianTokenizer`: the sentencepiece model(s) (`source.spm`, "
        "`target.spm`) and", "`vocab.json`, which maps their pieces to the model's ids.", ""]


def model_card(recipe: Recipe, hf: HfModel, scores: list[SplitScore], *,
               note: str | None) -> str:
    """README.md of the export."""
    lines = [*_front_matter(recipe, scores),
             f"# {recipe.name}: {recipe.data.src_lang} -> {recipe.data.tgt_lang}, "
             f"exported by mtkit {__version__}", "",
             *_use(recipe, hf), *_scores(scores), *_data(recipe)]
    if note:
        lines += [f"Note: {note}.", ""]
    return "\n".join(lines)
