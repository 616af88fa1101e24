"""A trained model loaded once and asked to translate many times: what `mtkit translate`, `mtkit
serve` and Python programs share (`mtkit.load`).

One code path: the command, the server and a program all decode through the same
`LineTranslator` (mtkit's search over a checkpoint or an ensemble, or CTranslate2 over an
export), so their outputs cannot drift apart. Decoding options are the recipe's
`decode` section's fields, validated by `DecodeConfig` itself; a problem is named by the
field (``beam_size (decode.beam_size): ...``), or by whatever the caller says set it (the
command's flags).

Thread safety: concurrent calls are safe and decode at once (torch and CTranslate2 decode
without Python's lock); each call builds its own translator over the shared model.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from mtkit.api.results import (
    WEIGHT_DECIMALS,
    Attention,
    AttentionMatrix,
    Candidate,
    Translation,
)
from mtkit.config import DecodeConfig, Recipe
from mtkit.config.guided import Readout
from mtkit.errors import ConfigError, OptionError, Problem, choice
from mtkit.fileio import unicode_problem
from mtkit.translation.formats import OutputFormat
from mtkit.translation.lines import (
    CHUNK_LINES,
    AlignFn,
    Item,
    LineTranslator,
    TranslateStats,
)

if TYPE_CHECKING:
    from mtkit.data.hypothesis import Hypothesis
    from mtkit.documents.formats import DocumentResult
    from mtkit.models.base import AttentionChoice
    from mtkit.translation.refill import LineRefill
    from mtkit.translation.terms import Glossary

log = logging.getLogger(__name__)
DECODE_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(DecodeConfig))
Engine = Literal["mtkit", "ctranslate2"]


def _decode_namer(origins: Mapping[str, str]) -> Callable[[str], str]:
    """How a DecodeConfig field is named, as `updated_section` names it: by what set it
    (`origins`: a flag, ``--seed (decode.seed)``), else by its recipe key (``decode.seed``)."""
    return lambda f: f"{origins[f]} (decode.{f})" if f in origins else f"decode.{f}"


def _refuse_decoding(problems: list[Problem], origins: Mapping[str, str]) -> None:
    """Raise the decoding choices a model cannot honour, every one at once, named by
    `_decode_namer(origins)`."""
    if problems:
        raise ConfigError("; ".join(p.text(_decode_namer(origins)) for p in problems))


def decode_options(base: DecodeConfig, changes: Mapping[str, Any], *,
                   origins: Mapping[str, str] | None = None,
                   source: str = "request") -> DecodeConfig:
    """`base` with `changes` (DecodeConfig fields; None values are left out) on top, validated
    like a recipe section: one ConfigError naming every problem by its origin (``origins``:
    field -> what set it; the field itself where none is given). Greedy search without an
    `nbest` means one hypothesis, whatever `base` says."""
    from mtkit.config import updated_section

    given = {k: v for k, v in changes.items() if v is not None}
    named = {k: k for k in given} if origins is None else dict(origins)
    if given.get("method") == "greedy" and "nbest" not in given:
        given["nbest"] = 1
    return updated_section(base, given, prefix="decode", source=source, origins=named)


@dataclass(frozen=True)
class Extras:
    """What a translation returns beside its text: Pharaoh word links (`align`, by
    `align_method` from the rows of `readout` of the search's cross-attention, or with
    `align_layer` of that layer's in a teacher-forced pass over the translation: an index or
    "mean", the decoder layers' mean), and attention matrices (`attention`: the search's own,
    or a `layer` and `head` chosen)."""

    align: bool = False
    align_method: str | None = None
    readout: str | None = None
    attention: bool = False
    layer: int | None = None
    head: int | Literal["mean"] | None = None
    align_layer: int | Literal["mean"] | None = None


@dataclass(frozen=True)
class ModelInfo:
    """What is loaded: the recipe's name and languages, the architecture, the checkpoint(s) or
    export, which engine decodes on which device, the decoding defaults, the precision, and the
    attention a caller may choose (`layers`, `heads`: None where there is no choice), and the
    language tags that choose a direction (`tags`: none for a model of one direction)."""

    name: str
    src_lang: str
    tgt_lang: str
    arch: str
    paths: list[str]
    engine: Engine
    device: str
    decode: DecodeConfig
    has_attention: bool
    precision: str  # fp32 or bf16 for mtkit's own decoder; the engine's compute type
    layers: int | None
    heads: int | None
    tags: tuple[str, ...] = ()


class TranslationModel:
    """A loaded model (a run, a checkpoint, an ensemble of checkpoints, or an export).

    >>> tr = mtkit.load("runs/en-de-multi30k")
    >>> tr.translate(["A dog runs in the snow."])
    ['Ein Hund rennt im Schnee.']
    """

    def __init__(self, translator: LineTranslator, recipe: Recipe, info: ModelInfo,
                 model: Any = None) -> None:
        self._base = translator  # decodes with the load-time options; copied per call
        self.recipe = recipe
        self.info = info
        self._model = model  # mtkit's own model (for chosen attention), None for an export

    @property
    def defaults(self) -> DecodeConfig:
        """The decoding options a call without options uses."""
        return self._base.cfg

    def options(self, changes: Mapping[str, Any] | None = None, *,
                origins: Mapping[str, str] | None = None) -> DecodeConfig:
        """The load-time options with `changes` (DecodeConfig fields) on top, validated once,
        with what this model's decoder cannot honour (an export has no GNMT penalty, say)."""
        cfg = decode_options(self._base.cfg, changes or {}, origins=origins)
        named = {k: k for k in changes or {}} if origins is None else origins
        _refuse_decoding(self._base.decode_problems(cfg), named)
        return cfg

    def translator(self, cfg: DecodeConfig, *, align_fn: AlignFn | None = None,
                   attention: bool = False, chunk_lines: int | None = None,
                   terms: Glossary | None = None, tag: str | None = None,
                   fmt: OutputFormat | None = None,
                   max_output: int | None = None) -> LineTranslator:
        """A `LineTranslator` of this model with `cfg` (from `options`), a glossary (from
        `glossary`), the language tag `checked_tag` gives for `tag`, `fmt` (None: the
        model's), and outputs capped at `max_output` tokens below the model's own cap: what
        `mtkit translate` streams files through."""
        return self._base.configured(cfg, align_fn=align_fn, attention=attention,
                                     chunk_lines=chunk_lines, terms=terms,
                                     tag=self.checked_tag(tag), fmt=fmt,
                                     max_out_len=max_output)

    @property
    def network(self) -> Any:
        """mtkit's own model (`mtkit.models.base.Translator`) when one checkpoint is loaded;
        None for an ensemble or an export."""
        return self._model

    @property
    def tokenizer(self) -> Any:
        """The sentencepiece tokenizer (`mtkit.data.spm.Tokenizer`) of mtkit's own model."""
        return self._base.tok

    def untagged(self, cfg: DecodeConfig) -> LineTranslator:
        """A `LineTranslator` with `cfg` that puts no language tag before the source: for text
        whose lines carry their tags already (a run's prepared splits)."""
        return self._base.configured(cfg, tag=None)

    def close(self) -> None:
        """End the decoding threads this model started (a later call starts new ones):
        what unloading a model of several (`mtkit.load_many`) does before letting it go."""
        self._base.close()

    @property
    def tags(self) -> list[str]:
        """The language tags this model was trained with (data.*.tag), each a direction."""
        return list(self._base.tags)

    def checked_tag(self, tag: str | None) -> str | None:
        """The tag put before every source line: `tag`, else the recipe's data.tag; an
        OptionError for a tag the model does not have, or for none chosen where the model
        has tags."""
        tags = self.tags
        if tag is None:
            tag = self.recipe.data.tag
            if tag is None and tags:
                raise OptionError.about("tag", f"this model translates {len(tags)} ways, by the "
                                        f"tag put before the source; choose one of "
                                        f"{', '.join(tags)}")
        if tag is not None and tag not in tags:
            have = ", ".join(tags) if tags else "none (it translates one way)"
            raise OptionError.about("tag", f"{tag!r} is not a tag of this model; its tags: {have}")
        return tag

    def glossary(self, terms: Any, method: str = "prefix", *, name: str = "terms"
                 ) -> Glossary:
        """A checked glossary for this model: `terms` a mapping of source term to target
        term, or (source, target) pairs; `method` prefix or align (`mtkit.translation.terms`);
        `name` what errors call the terms."""
        from mtkit.align.readout import default_readout
        from mtkit.translation.terms import as_pairs, glossary

        if not self.info.has_attention:
            raise ConfigError(f"{name}: terms are placed through the model's attention, and "
                              "this model has none (model.rnn.attention: none)")
        return glossary(as_pairs(terms), method=method, readout=default_readout(self.recipe),
                        name=name)

    def translate(self, text: str | Sequence[str], *,
                  prefix: str | Sequence[str] | None = None, terms: Any = None,
                  terms_method: str = "prefix", tag: str | None = None, **options: Any) -> Any:
        """The best translation of one sentence (a str) or of each of a list of sentences
        (a list of str); `prefix`: the target text each translation starts with (a str for
        one sentence, one per sentence for a list, "" for none); `terms`, `terms_method`,
        `tag`: as for `translate_full`; `options`: DecodeConfig fields (beam_size=5,
        method='greedy', ...)."""
        one = isinstance(text, str)
        lines = [checked_text(text, "text")] if one else checked_lines(text)
        if one and isinstance(prefix, str):
            prefix = [checked_text(prefix, "prefix")]
        out = [t.text for t in self.translate_full(lines, prefix=prefix, terms=terms,
                                                   terms_method=terms_method, tag=tag,
                                                   **options)]
        return out[0] if one else out

    def translate_full(self, lines: Iterable[str], *, align: bool = False,
                       attention: bool = False, layer: int | None = None,
                       head: int | Literal["mean"] | None = None,
                       align_method: str | None = None, readout: str | None = None,
                       prefix: Sequence[str] | None = None, terms: Any = None,
                       terms_method: str = "prefix", tag: str | None = None, **options: Any
                       ) -> list[Translation]:
        """Every sentence's hypotheses (`options`: DecodeConfig fields; nbest=3 for three),
        with Pharaoh word links (`align`, by `align_method` from the rows of `readout`, as
        `mtkit translate --align`), and attention matrices (`attention`): the search's own
        (the model's alignment layer, heads averaged), or with `layer`/`head` that layer's
        and head's (mtkit's own decoder only: one more forced pass). `prefix`: one target
        text per sentence that its hypotheses start with ("" for none): forced, scored and
        given attention like the rest of the output. `terms`: a glossary, source term ->
        target term (a mapping or pairs), that every hypothesis of a sentence holding a
        source term must use, placed by `terms_method` (prefix or align: `mtkit.translation.terms`).
        `tag`: for a model trained with language tags, the direction (one of `tags`; default
        the recipe's data.tag), put before every source line."""
        extras = self.extras(align=align, attention=attention, layer=layer, head=head,
                             align_method=align_method, readout=readout)
        lines = checked_lines(lines)
        cfg = self.options(options)
        found = None if terms is None else self.glossary(terms, terms_method)
        return self.decode(lines, cfg, extras, terms=found, tag=self.checked_tag(tag),
                           prefixes=self.checked_prefixes(prefix, len(lines)))

    def translate_document(self, data: str | bytes, format: str, *,
                           placement: str = "align", tag: str | None = None,
                           terms: Any = None, terms_method: str = "prefix",
                           **options: Any) -> DocumentResult:
        """A whole document translated into its own format (`mtkit.documents`): `format`
        one of lines, paragraphs, html, markdown, srt, vtt, po, xliff, docx (`data` a str or
        the file's bytes; docx: bytes); its sentences split, translated in length-sorted
        batches with `options` (DecodeConfig fields) and rejoined, its markup placed by
        `placement` (align: the word alignment; position: relative place); `terms`: a
        glossary every sentence follows, placed by `terms_method`, as `translate_full`'s.
        Returns the document's bytes (`.data`; `.text` for a text format), the sentence
        count and what was kept untranslated (`.problems`)."""
        from mtkit.documents.formats import format_for, translate_document

        fmt = format_for(None, format)
        raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
        found = None if terms is None else self.glossary(terms, terms_method)
        return translate_document(self, raw, fmt, placement=placement, tag=tag,
                                  options=options, terms=found)

    def checked_prefixes(self, prefix: Any, n: int) -> list[str] | None:
        """`prefix` as one target text for each of n sentences (None: none), checked against
        this model's positions; a ConfigError or a `PrefixError` otherwise."""
        prefixes = checked_prefixes(prefix, n)
        if prefixes is not None:
            self._base.prefix_ids(prefixes)
        return prefixes

    def extras(self, *, align: bool = False, attention: bool = False,
               layer: int | None = None, head: int | Literal["mean"] | None = None,
               align_method: str | None = None, readout: str | None = None,
               align_layer: int | Literal["mean"] | None = None) -> Extras:
        """What `decode` returns beside the text, checked against this model."""
        if not attention and (layer is not None or head is not None):
            raise ConfigError("layer and head: they choose the attention returned, which "
                              "needs attention")
        if attention and not self.info.has_attention:
            raise ConfigError("attention: this model has no attention (model.rnn.attention: "
                              "none)")
        if align_layer is not None and not align:
            raise ConfigError("align_layer: it chooses the attention the word links are read "
                              "from, which needs align")
        extras = Extras(align, align_method, readout, attention, layer, head, align_layer)
        self._aligner(extras)  # checks the choices
        if attention:
            self.attention_choice(layer, head)
        self._link_choice(extras)
        return extras

    def decode(self, lines: Iterable[str], cfg: DecodeConfig, extras: Extras | None = None, *,
               prefixes: Sequence[str] | None = None, terms: Glossary | None = None,
               tag: str | None = None, stop: threading.Event | None = None,
               max_output: int | None = None) -> list[Translation]:
        """`translate_full` with options already checked (`options`, `extras`,
        `checked_prefixes`, `glossary`, `checked_tag`). stop: once set (the caller gave up),
        the search ends at its next step by raising `Stopped`; max_output: a cap on the
        outputs below the model's own."""
        extras = extras or Extras()
        choice = self.attention_choice(extras.layer, extras.head) if extras.attention else None
        translator = self.translator(cfg, align_fn=self._aligner(extras),
                                     attention=extras.attention and choice is None,
                                     terms=terms, tag=tag, max_output=max_output)
        stats = TranslateStats(max_src_len=translator.max_src_len)
        items = [it for chunk in translator.decoded(lines, stats, prefixes=prefixes, stop=stop)
                 for it in chunk]
        forced = self._forced(items, choice, cfg.batch_tokens) if choice else None
        link_choice = self._link_choice(extras)
        linked = self._forced(items, link_choice, cfg.batch_tokens) if link_choice else None
        return [self._result(translator, it, attention=extras.attention, choice=choice,
                             forced=None if forced is None else forced[n],
                             linked=None if linked is None else linked[n])
                for n, it in enumerate(items)]

    def refilling(self, cfg: DecodeConfig, extras: Extras, *, tag: str | None = None,
                  max_output: int | None = None) -> Refilling | None:
        """A search with `cfg` (from `options`) that takes lines while it runs, each line
        getting what `decode` gives it alone: a server's batches kept full. None where
        there is none: an export, an ensemble, a model without a per-row clock (an RNN),
        sampling, a shortlist, or a chosen attention layer or head or `align_layer` (its
        teacher-forced pass is made per batch); lines with prefixes or glossary terms go
        through `decode`."""
        if extras.layer is not None or extras.head is not None or extras.align_layer is not None:
            return None
        translator = self.translator(cfg, align_fn=self._aligner(extras),
                                     attention=extras.attention, tag=tag,
                                     max_output=max_output)
        if not translator.refills:
            return None
        from mtkit.translation.refill import LineRefill

        return Refilling(self, translator, LineRefill(translator), extras.attention)

    def _link_choice(self, extras: Extras) -> AttentionChoice | None:
        """The checked cross-attention `extras.align_layer` reads the links from (head mean;
        None: the search's own)."""
        if extras.align_layer is None:
            return None
        if self._model is None:
            raise ConfigError("align_layer: an exported model or an ensemble gives the "
                              "attention its search used only")
        if not self.info.has_attention:
            raise ConfigError("align_layer: this model has no attention")
        return self._model.choose_attention("cross", extras.align_layer, "mean")

    def attention_choice(self, layer: int | None, head: int | Literal["mean"] | None
                         ) -> AttentionChoice | None:
        """The checked cross-attention a caller chose (None: the search's own)."""
        if layer is None and head is None:
            return None
        if self._model is None:
            raise ConfigError("layer and head: an exported model gives the attention of the "
                              "layer and head it was exported with only")
        if not self.info.has_attention:
            raise ConfigError("attention: this model has no attention")
        return self._model.choose_attention("cross", layer, head)  # validates both

    def _aligner(self, extras: Extras) -> AlignFn | None:
        """The Pharaoh aligner `extras` asks for, or None."""
        method, readout = extras.align_method, extras.readout
        if not extras.align:
            if method is not None or readout is not None:
                raise ConfigError("align_method and readout: they choose the word links, "
                                  "which need align")
            return None
        return self.aligner(method, readout)

    def aligner(self, method: str | None = None, readout: str | None = None) -> AlignFn:
        """The Pharaoh word aligner of this model's translations: links by `method`
        (default argmax-tgt) from the attention rows of `readout` (default: what the run's
        guided alignment supervised, else current)."""
        if not self.info.has_attention:
            raise ConfigError("align: this model has no attention (model.rnn.attention: "
                              "none), so it gives no alignment")
        from mtkit.align import DEFAULT_METHOD
        from mtkit.align.readout import default_readout
        from mtkit.translation.lines import aligner_problems, pharaoh_aligner

        if problems := aligner_problems(method, readout):
            raise OptionError(*problems)
        read = default_readout(self.recipe) if readout is None else readout
        return pharaoh_aligner(method or DEFAULT_METHOD, choice("readout", read, Readout))

    def _forced(self, items: list[Item], choice: AttentionChoice, batch_tokens: int
                ) -> list[list[Any]]:
        """Each item's hypotheses' teacher-forced attention of `choice`, (T + 1, S + 1)
        numpy arrays, in `items` and n-best order."""
        import torch

        from mtkit.align.pairs import Pair, pair_attention

        pairs = [Pair(0, it.ids, list(h.tokens)) for it in items for h in it.nbest]
        maps = iter(pair_attention(self._model, pairs, choice,
                                   device=torch.device(self.info.device),
                                   batch_tokens=batch_tokens))
        return [[next(maps) for _ in it.nbest] for it in items]

    def _result(self, translator: LineTranslator, it: Item, *, attention: bool,
                choice: AttentionChoice | None, forced: list[Any] | None,
                linked: list[Any] | None = None) -> Translation:
        """`it` as a Translation; `forced`: its hypotheses' teacher-forced attention of
        `choice` (shown), `linked`: that of the links' attention (`_link_choice`)."""
        tok = translator.tok
        # a tag put before the source (`Item.tagged`) is none of the sentence's pieces: the
        # source tokens, the attention and the links leave it out alike (`source_view`)
        src_pieces = tok.src_pieces(it.ids[it.tagged:])
        hyps: list[Hypothesis | None] = list(it.nbest) or [None]
        candidates = []
        for n, h in enumerate(hyps):
            if h is None:
                candidates.append(Candidate("", 0.0, 0.0, [], [],
                                            "" if translator.align_fn else None))
                continue
            text = tok.decode_tgt(h.tokens)
            links = None
            if translator.align_fn:
                links = translator.alignment(it, h if linked is None else _with_attn(
                    h, linked[n]), text)
            weights = h.attn if forced is None else forced[n]
            att = None
            if attention and weights is not None:
                att = self._attention(translator, it, tok.tgt_pieces(h.tokens), weights,
                                      choice)
            candidates.append(Candidate(text, float(h.score), float(h.logprob),
                                        tok.tgt_pieces(h.tokens),
                                        [float(x) for x in h.token_logprobs], links, att))
        return Translation(it.line, src_pieces, candidates, truncated=it.truncated)

    def _attention(self, translator: LineTranslator, it: Item, tgt: list[str], weights: Any,
                   choice: AttentionChoice | None) -> Attention:
        """The matrices of `weights` (T + 1, tag + S + 1) without the tag's columns."""
        from mtkit.align import from_attention

        src, words, weights = translator.source_view(it, weights)
        sub = from_attention(weights, src, tgt, level="subword", keep_eos=True)
        word = from_attention(weights, src, tgt, level="word", keep_eos=True, src_words=words)
        return Attention(self._describe(choice),
                         _matrix(sub.weights, sub.src_tokens, sub.tgt_tokens, "subword"),
                         _matrix(word.weights, word.src_tokens, word.tgt_tokens, "word"))

    def _describe(self, choice: AttentionChoice | None) -> str:
        """What a matrix shows: the chosen attention, else the search's own."""
        if choice is not None:
            return choice.describe()
        tf = self.recipe.model.transformer
        if self.recipe.model.arch != "transformer":
            return "cross-attention"
        head = "mean" if tf.align_head is None else tf.align_head
        return f"cross-attention, layer {tf.align_layer}, head {head}"


class Refilling:
    """`TranslationModel.refilling`'s search: lines in with a handle each (`join`),
    `Translation`s out as each line is done (`step`)."""

    def __init__(self, model: TranslationModel, translator: LineTranslator, lines: LineRefill,
                 attention: bool) -> None:
        self._model, self._translator, self._lines = model, translator, lines
        self._attention = attention

    @property
    def size(self) -> int:
        """Lines searching."""
        return self._lines.size

    def join(self, lines: list[str], handles: list[Hashable]) -> list[tuple[Hashable,
                                                                           Translation]]:
        """Start decoding `lines`; blank ones come back at once."""
        return [(h, self._result(it)) for h, it in self._lines.join(lines, handles)]

    def step(self) -> list[tuple[Hashable, Translation]]:
        """One step; the lines it finished."""
        return [(h, self._result(it)) for h, it in self._lines.step()]

    def drop(self, handles: set[Hashable]) -> None:
        """Stop decoding these lines."""
        self._lines.drop(handles)

    def _result(self, item: Item) -> Translation:
        return self._model._result(self._translator, item, attention=self._attention,
                                   choice=None, forced=None)


def _with_attn(h: Hypothesis, attn: Any) -> Hypothesis:
    """`h` carrying `attn` (a (T + 1, S + 1) numpy array: the forced pass's) as its own."""
    import torch

    return dataclasses.replace(h, attn=torch.from_numpy(attn))


def checked_text(value: Any, name: str) -> str:
    """`value` if it is a str of valid Unicode text, else a ConfigError naming `name`."""
    if not isinstance(value, str):
        raise ConfigError(f"{name}: expected a string, got "
                          f"{'None' if value is None else type(value).__name__}")
    if problem := unicode_problem(value):
        raise ConfigError(f"{name}: {problem}")
    return value


def checked_lines(lines: Any, name: str = "text") -> list[str]:
    """`lines` (an iterable of sentences) as a list, each item `checked_text` (named
    text[i]), or a ConfigError."""
    if isinstance(lines, str | bytes | bytearray) or not isinstance(lines, Iterable):
        raise ConfigError(f"{name}: expected a string or a list of strings, got "
                          f"{type(lines).__name__}")
    return [checked_text(line, f"{name}[{i}]") for i, line in enumerate(lines)]


def checked_prefixes(prefix: Any, n: int) -> list[str] | None:
    """`prefix` as one target text per sentence (None: none), or a ConfigError."""
    if prefix is None:
        return None
    if isinstance(prefix, str) or not all(isinstance(p, str) for p in prefix):
        raise ConfigError("prefix: expected a list of strings, one per sentence")
    prefixes = checked_lines(prefix, "prefix")
    if len(prefixes) != n:
        raise ConfigError(f"prefix: {len(prefixes)} prefixes for {n} sentences; expected one "
                          "per sentence (\"\" for none)")
    if any("\n" in p or "\r" in p for p in prefixes):
        raise ConfigError("prefix: a prefix is one line; found a line break")
    return None if not any(prefixes) else prefixes


def _matrix(weights: Any, src: Sequence[str], tgt: Sequence[str],
            level: Literal["subword", "word"]) -> AttentionMatrix:
    rows = [[round(float(w), WEIGHT_DECIMALS) for w in row] for row in weights]
    return AttentionMatrix(level, list(src), list(tgt), rows)


# --------------------------------------------------------------------------- loading


Precision = Literal["auto", "fp32", "bf16", "int8"]
PRECISIONS: tuple[str, ...] = ("auto", "fp32", "bf16", "int8")


def load(*paths: str | Path, device: str = "auto", threads: int = 0,
         ensemble_mode: Literal["logprob", "prob"] = "logprob",
         precision: Precision | None = None, shortlist: bool = False,
         **decode: Any) -> TranslationModel:
    """Load a run directory (its best.pt, else last.pt), a checkpoint, several checkpoints
    (an ensemble sharing one vocabulary) or a directory written by `mtkit export` (decoded by
    CTranslate2; torch is then never imported).

    device: auto, cpu, cuda, cuda:N or mps; threads: CPU threads (0: the engine's default);
    precision: mtkit's own decoder computes in fp32 (None, the default, as `mtkit translate`
    does), bf16 (under autocast), int8 (on a CPU: the linear layers and the output projection
    with 8-bit weights, `mtkit.models.quantize`; fp32, with one warning, on a CPU without
    torch's quantized engines), or auto: bf16 on a GPU that has it, else fp32; an export
    computes in the type it was exported with (None or auto); shortlist: searches score only
    the target pieces the run's vocabulary shortlist names for each batch's sources (counted
    from the run's training data on first use and saved in the run, `mtkit.data.shortlist`;
    faster for large vocabularies, and the output may change); decode: DecodeConfig fields
    over the recipe's `decode` section, the defaults of every call (beam_size=4, ...).
    Raises `mtkit.errors.MtkitError` (a one-line message) for a missing, damaged or foreign
    file and for invalid options."""
    if not paths:
        raise ConfigError("load: give a run directory, a checkpoint or an export")
    return open_model([Path(p) for p in paths], device=device, threads=threads,
                      ensemble_mode=ensemble_mode, precision=precision, decode=decode,
                      shortlist=shortlist)


def open_model(paths: list[Path], *, device: str = "auto", threads: int = 0,
               ensemble_mode: str = "logprob", precision: str | None = None,
               decode: Mapping[str, Any] | None = None,
               origins: Mapping[str, str] | None = None, streaming: bool = False,
               chunk_lines: int = CHUNK_LINES, shortlist: bool = False) -> TranslationModel:
    """`load`, for callers that name the options' origins (the command's flags) and stream
    line by line (`streaming`: one batch at a time, on every thread)."""
    if ensemble_mode != "logprob":  # its owner imports torch, which an export never needs
        from mtkit.models.ensemble import Ensemble

        if problems := Ensemble.mode_problems(ensemble_mode):
            raise OptionError(*problems)
    if precision is not None and precision not in PRECISIONS:
        raise ConfigError(f"precision: invalid choice {precision!r}; expected one of "
                          f"{', '.join(PRECISIONS)}")
    exported = exported_model(paths)
    if exported is not None:
        if precision not in (None, "auto"):
            raise ConfigError(f"precision {precision}: an exported model computes in the type "
                              "it was exported with (mtkit export --quantize)")
        if shortlist:
            raise ConfigError("shortlist: mtkit's own decoder's; an exported model decodes "
                              "with its engine's whole vocabulary")
        return _open_export(exported, device=device, threads=threads, decode=decode or {},
                            origins=origins, streaming=streaming, chunk_lines=chunk_lines)
    return _open_checkpoints(paths, device=device, threads=threads, mode=ensemble_mode,
                             precision=precision, decode=decode or {}, origins=origins,
                             streaming=streaming, chunk_lines=chunk_lines, shortlist=shortlist)


def exported_model(paths: list[Path]) -> Any:
    """The export among `paths` (read back), or None; an export translates alone."""
    from mtkit.export.ct2_dir import is_export

    found = [m for m in paths if is_export(m)]
    if found and len(paths) > 1:
        from mtkit.run import resolve_checkpoint

        for m in paths:  # a mistyped second argument is named as such first
            if m not in found:
                resolve_checkpoint(m)
        raise ConfigError(f"{found[0]}: an exported model translates alone, not in an ensemble")
    if not found:
        return None
    from mtkit.export.ct2_translate import open_export

    return open_export(found[0])


def _open_export(export: Any, *, device: str, threads: int, decode: Mapping[str, Any],
                 origins: Mapping[str, str] | None, streaming: bool, chunk_lines: int
                 ) -> TranslationModel:
    from mtkit.data.batching import decode_parallelism
    from mtkit.export.ct2_translate import CT2Translator, device_problems, engine_problems

    recipe = export.recipe
    if problems := device_problems(device):
        raise OptionError(*problems)
    cfg = decode_options(recipe.decode, decode, origins=origins)
    named = {k: k for k in decode} if origins is None else origins
    _refuse_decoding(engine_problems(cfg), named)
    from mtkit.export.ct2_translate import runs_on_cpu

    # torch is not loaded to say how many physical cores there are: the CPUs this process
    # may run on
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (
        os.cpu_count() or 1)
    workers, each = decode_parallelism(threads, cfg, cpu=runs_on_cpu(device),
                                       streaming=streaming, default=usable)
    translator = CT2Translator(export, cfg, device=device, threads=each,
                               chunk_lines=chunk_lines, workers=workers)
    _refuse_decoding(translator.decode_problems(cfg), named)
    info = ModelInfo(recipe.name, recipe.data.src_lang, recipe.data.tgt_lang,
                     recipe.model.arch, [str(export.path)], "ctranslate2",
                     str(translator.engine.device), cfg, has_attention=True,
                     precision=translator.engine.compute_type, layers=None,
                     heads=None, tags=tuple(recipe.data.tags()))
    return TranslationModel(translator, recipe, info)


def _open_checkpoints(paths: list[Path], *, device: str, threads: int, mode: str,
                      precision: str | None, decode: Mapping[str, Any],
                      origins: Mapping[str, str] | None, streaming: bool, chunk_lines: int,
                      shortlist: bool = False) -> TranslationModel:
    import torch

    from mtkit.device import inference_device
    from mtkit.translation.lines import StreamTranslator, load_translator

    if threads > 0:
        torch.set_num_threads(threads)
    dev = inference_device(device)
    model, recipe, tok = load_translator(paths, dev, mode=mode)
    from mtkit.data.batching import decode_parallelism
    from mtkit.run import resolve_checkpoint

    cfg = decode_options(recipe.decode, decode, origins=origins)
    workers, each = decode_parallelism(threads, cfg, cpu=dev.type == "cpu",
                                       streaming=streaming, default=torch.get_num_threads())
    if workers > 1:
        torch.set_num_threads(each)
    bf16 = precision == "bf16" or (precision == "auto" and dev.type == "cuda"
                                    and torch.cuda.is_bf16_supported())
    int8 = precision == "int8" and _int8_ready(dev)
    if int8:
        from mtkit.models.quantize import quantize_linear

        model = quantize_linear(model)
    translator = StreamTranslator(model, tok, cfg, device=dev, max_src_len=recipe.data.max_len,
                                  max_out_len=recipe.output_cap(),
                                  chunk_lines=chunk_lines, workers=workers,
                                  dtype=torch.bfloat16 if bf16 else None,
                                  tags=recipe.data.tags(),
                                  shortlist=_shortlist(paths[0], tok, dev) if shortlist else None)
    named = {k: k for k in decode} if origins is None else origins
    _refuse_decoding(translator.decode_problems(cfg), named)
    grid = model.attention_grid if len(paths) == 1 else None  # an ensemble has no choice
    info = ModelInfo(recipe.name, recipe.data.src_lang, recipe.data.tgt_lang,
                     recipe.model.arch, [str(resolve_checkpoint(p)) for p in paths], "mtkit",
                     str(dev), cfg, has_attention=bool(model.has_attention),
                     precision="bf16" if bf16 else "int8" if int8 else "fp32",
                     layers=None if grid is None else grid[0],
                     heads=None if grid is None else grid[1], tags=tuple(recipe.data.tags()))
    return TranslationModel(translator, recipe, info, model=model if len(paths) == 1 else None)


def _int8_ready(dev: Any) -> bool:
    """Whether int8 decoding can run on `dev`: a CPU with one of torch's quantized engines
    (else one warning, and the caller decodes in fp32). On another device, a ConfigError."""
    from mtkit.models.quantize import ENGINES, int8_engine

    if dev.type != "cpu":
        raise ConfigError(f"precision int8: mtkit's int8 decoding runs on a CPU, not {dev.type} "
                          "(there: precision bf16, or an export with --quantize int8)")
    if int8_engine() is None:
        log.warning("precision int8: this CPU has none of torch's quantized engines (%s); "
                    "decoding in fp32", ", ".join(ENGINES))
        return False
    return True


def _shortlist(path: Path, tok: Any, dev: Any) -> Any:
    """The run's vocabulary shortlist (`mtkit.run.run_shortlist`), on `dev`."""
    from mtkit.decode.shortlist import OutputShortlist
    from mtkit.run import run_shortlist

    found, note = run_shortlist(path)
    if note is not None:
        log.info("%s", note)
    return OutputShortlist.of(found.table, found.frequent, tok.tgt_vocab_size, dev)
