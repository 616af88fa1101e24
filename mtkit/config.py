"""Recipes: typed, frozen dataclasses loaded from YAML and validated once, here.

A recipe has a top-level `name` and four sections, `data`, `model`, `train` and `decode`.
Everything below this module receives a `Recipe` (or one of its sections), never a dict.

Validation is driven by the dataclass fields themselves: the type annotation gives the
expected type (``Literal`` lists the valid choices), ``field(metadata=...)`` gives numeric
ranges (``ge``, ``gt``, ``le``, ``lt``), and a section may add cross-field rules with a
``_problems(valid)`` method. Every problem found is collected and reported together in one
`ConfigError`, each with its dotted key and the recipe's path: a rule runs whenever the
fields it reads are valid (``valid(*names)``), whatever else is wrong in the recipe, and a
missing section is validated as its defaults, so one run shows every problem.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Union

import yaml

from mtkit.errors import ConfigError


def _rng(default: Any, **bounds: float) -> Any:
    """A field with a default and numeric bounds (ge, gt, le, lt) checked at load time."""
    return field(default=default, metadata=bounds)


# --------------------------------------------------------------------------- data


@dataclass(frozen=True)
class FileSource:
    """One side of one split: a local file (plain or .gz) or a URL with its sha256.

    In YAML either a plain string (a path, or a URL when it has a scheme) or a mapping
    ``{url: ..., sha256: ...}`` / ``{path: ...}``. Relative paths are resolved against the
    recipe file's folder at load time.
    """

    path: str | None = None
    url: str | None = None
    sha256: str | None = None

    @classmethod
    def _coerce(cls, value: Any) -> Any:
        if isinstance(value, str):
            if re.match(r"^[a-z][a-z0-9+.-]*://", value):
                return {"url": value}
            return {"path": value}
        return value

    def _problems(self, valid: Valid) -> list[tuple[str, str]]:
        out = []
        if not valid("path", "url", "sha256"):
            return out
        if self.path is None and self.url is None:
            out.append(("", "missing: expected a file path, or {url: ..., sha256: ...}"))
        elif self.path is not None and self.url is not None:
            out.append(("", "expected exactly one of `path` or `url`"))
        if self.url is not None and self.sha256 is None:
            out.append(("sha256", "a URL source needs its sha256 checksum"))
        if self.sha256 is not None and not re.fullmatch(r"[0-9a-f]{64}", self.sha256):
            out.append(("sha256", f"expected 64 lowercase hex digits, got {self.sha256!r}"))
        return out

    @property
    def file_name(self) -> str:
        """The name a mirror or the download cache stores this file under."""
        return Path(self.url or self.path or "").name

    def __str__(self) -> str:
        return self.url or self.path or ""


@dataclass(frozen=True)
class SplitConfig:
    """A parallel corpus: the source-language file and the target-language file."""

    src: FileSource = field(default_factory=FileSource)
    tgt: FileSource = field(default_factory=FileSource)


# A split is one corpus (a mapping with `src` and `tgt`) or a list of corpora, concatenated in
# the order given (real training data is several corpora). A mapping stays a mapping when the
# recipe is saved, so the data section of a one-corpus recipe hashes as it always did.
Split = SplitConfig | tuple[SplitConfig, ...]


def split_corpora(split: Split) -> list[tuple[str, SplitConfig]]:
    """The corpora of a split with the suffix naming each in a recipe key: ``""`` for a split
    given as one mapping, ``"[i]"`` for the i-th corpus of a list."""
    if isinstance(split, SplitConfig):
        return [("", split)]
    return [(f"[{i}]", corpus) for i, corpus in enumerate(split)]


@dataclass(frozen=True)
class CleanConfig:
    """Filters applied to the training split only (validation and test are never filtered)."""

    max_len: int = _rng(250, ge=1)  # sentencepiece tokens, either side
    min_len: int = _rng(1, ge=1)  # sentencepiece tokens, either side
    max_ratio: float = _rng(3.0, ge=1.0)  # longer side / shorter side, in tokens
    dedup: bool = False  # drop exact duplicate (source, target) pairs


@dataclass(frozen=True)
class SpmConfig:
    """Sentencepiece training. Ids are fixed: see `mtkit.data.vocab`."""

    model_type: Literal["unigram", "bpe"] = "unigram"
    vocab_size: int = _rng(8000, ge=16)
    joint: bool = True  # one model for both languages (needed to share embeddings)
    character_coverage: float = _rng(1.0, gt=0.0, le=1.0)
    input_sentence_size: int = _rng(2_000_000, ge=0)  # 0 = use every training sentence


@dataclass(frozen=True)
class DataConfig:
    src_lang: str = "src"
    tgt_lang: str = "tgt"
    train: Split | None = None
    valid: Split | None = None
    test: dict[str, Split] = field(default_factory=dict)
    clean: CleanConfig = field(default_factory=CleanConfig)
    spm: SpmConfig = field(default_factory=SpmConfig)
    # Sequences longer than this (tokens, without BOS/EOS) are truncated at training and
    # translation time, with a count in the log.
    max_len: int = _rng(256, ge=2)

    def _problems(self, valid: Valid) -> list[tuple[str, str]]:
        out = []
        if self.train is None and valid("train"):
            out.append(("train", "missing: every recipe needs a `train` split"))
        if self.valid is None and valid("valid"):
            out.append(("valid", "missing: every recipe needs a `valid` split"))
        for name, split in (("train", self.train), ("valid", self.valid),
                            *((f"test.{n}", t) for n, t in self.test.items())):
            if split == ():
                out.append((name, "expected a corpus ({src, tgt}) or a non-empty list of them"))
        for name in self.test:
            if name in ("train", "valid") or not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
                out.append((f"test.{name}", "test set names use letters, digits, '_', '-', '.'"
                            " and may not be 'train' or 'valid'"))
        return out


# --------------------------------------------------------------------------- model


@dataclass(frozen=True)
class RNNConfig:
    """RNN encoder-decoder (Sutskever et al. 2014; Bahdanau et al. 2015; Luong et al. 2015)."""

    cell: Literal["lstm", "gru", "rnn"] = "gru"
    emb_dim: int = _rng(256, ge=1)
    hidden_dim: int = _rng(256, ge=1)  # per direction in the encoder
    enc_layers: int = _rng(1, ge=1)
    dec_layers: int = _rng(1, ge=1)
    bidirectional: bool = True
    dropout: float = _rng(0.2, ge=0.0, lt=1.0)
    attention: Literal["none", "dot", "general", "concat", "additive", "scaled_dot", "cosine",
                       "location", "local-m", "local-p"] = "additive"
    attn_dim: int = _rng(256, ge=1)  # hidden size of additive/concat scoring
    local_window: int = _rng(10, ge=1)  # D of Luong local attention: window 2D+1
    # Source positions `location` attention can score (Luong 2015 eq. 8: W_a has one row per
    # position); must cover data.max_len + 1 (EOS). Unused by other attentions.
    max_positions: int = _rng(512, ge=2)
    placement: Literal["bahdanau", "luong"] = "bahdanau"
    # Luong §3.3. Bahdanau placement feeds the context into the recurrence by design, so
    # there it must stay true.
    input_feeding: bool = True
    init: Literal["bridge", "zeros"] = "bridge"  # decoder initial state
    tie_embeddings: bool = False  # target embedding shared with the output projection

    def _problems(self, valid: Valid) -> list[tuple[str, str]]:
        out = []
        if not valid("placement"):
            return out
        if self.placement == "bahdanau" and self.attention in ("location", "local-m", "local-p"):
            out.append(("attention", f"`{self.attention}` is Luong attention; "
                        "use placement: luong"))
        if self.placement == "bahdanau" and not self.input_feeding and valid("input_feeding"):
            out.append(("input_feeding", "Bahdanau placement always feeds the context into "
                        "the recurrence; input_feeding: false needs placement: luong"))
        return out


@dataclass(frozen=True)
class TransformerConfig:
    """Transformer (Vaswani et al. 2017)."""

    d_model: int = _rng(256, ge=1)
    heads: int = _rng(4, ge=1)
    enc_layers: int = _rng(3, ge=1)
    dec_layers: int = _rng(3, ge=1)
    ffn_dim: int = _rng(1024, ge=1)
    dropout: float = _rng(0.1, ge=0.0, lt=1.0)  # residual and embedding dropout
    attn_dropout: float = _rng(0.0, ge=0.0, lt=1.0)
    act_dropout: float = _rng(0.0, ge=0.0, lt=1.0)
    activation: Literal["relu", "gelu"] = "relu"
    norm: Literal["pre", "post"] = "pre"
    positions: Literal["sinusoidal", "learned"] = "sinusoidal"
    max_positions: int = _rng(512, ge=2)
    share_embeddings: bool = True  # source, target and output embeddings (needs data.spm.joint)
    align_layer: int = -1  # decoder layer whose cross-attention is returned (negative: from top)
    align_head: int | None = None  # None: mean over heads

    def _problems(self, valid: Valid) -> list[tuple[str, str]]:
        out = []
        if valid("d_model", "heads") and self.d_model % self.heads:
            out.append(("heads", f"d_model ({self.d_model}) must be divisible by heads "
                        f"({self.heads})"))
        if valid("dec_layers", "align_layer") and not (
                -self.dec_layers <= self.align_layer < self.dec_layers):
            out.append(("align_layer", f"expected a layer in [{-self.dec_layers}, "
                        f"{self.dec_layers - 1}], got {self.align_layer}"))
        if valid("heads", "align_head") and self.align_head is not None and not (
                0 <= self.align_head < self.heads):
            out.append(("align_head", f"expected null (mean) or 0..{self.heads - 1}"))
        return out


@dataclass(frozen=True)
class ModelConfig:
    arch: Literal["rnn", "transformer"] = "transformer"
    rnn: RNNConfig = field(default_factory=RNNConfig)
    transformer: TransformerConfig = field(default_factory=TransformerConfig)

    @property
    def size(self) -> int:
        """The model's width: d_model, or the RNN's hidden size (the noam schedule's scale)."""
        return self.transformer.d_model if self.arch == "transformer" else self.rnn.hidden_dim


# --------------------------------------------------------------------------- train


@dataclass(frozen=True)
class TrainConfig:
    seed: int = 1
    device: str = "auto"  # auto | cpu | cuda | cuda:N | mps
    precision: Literal["bf16", "fp16", "fp32"] = "bf16"  # autocast on CUDA; CPU always fp32
    compile: bool = False  # torch.compile the model
    threads: int = _rng(0, ge=0)  # CPU threads; 0 = torch's default
    batch_tokens: int = _rng(4096, ge=16)  # padded tokens per side per batch
    update_freq: int = _rng(1, ge=1)  # gradient accumulation: batches per update
    max_updates: int = _rng(0, ge=0)  # 0 = no limit
    max_epochs: int = _rng(0, ge=0)  # 0 = no limit
    max_time: str | None = None  # wall-clock budget such as "90s", "10m", "2h"
    optimizer: Literal["adam", "adamw"] = "adam"
    lr: float = _rng(5e-4, gt=0.0)  # peak lr; with schedule noam, a factor on d_model^-0.5
    betas: tuple[float, float] = (0.9, 0.98)
    eps: float = _rng(1e-9, gt=0.0)
    weight_decay: float = _rng(0.0, ge=0.0)
    schedule: Literal["inverse_sqrt", "noam", "plateau", "constant"] = "inverse_sqrt"
    warmup: int = _rng(4000, ge=0)  # updates of linear warm-up
    plateau_factor: float = _rng(0.5, gt=0.0, lt=1.0)
    plateau_patience: int = _rng(2, ge=0)  # validations without improvement
    min_lr: float = _rng(1e-6, ge=0.0)  # plateau never lowers the learning rate below this
    clip_norm: float = _rng(1.0, ge=0.0)  # 0 = no clipping
    label_smoothing: float = _rng(0.1, ge=0.0, lt=1.0)
    log_every: int = _rng(100, ge=1)
    valid_every: int = _rng(1000, ge=1)  # updates between validations
    valid_metric: Literal["bleu", "chrf", "loss", "ppl"] = "bleu"
    valid_beam: int = _rng(1, ge=1)  # 1 = greedy
    # Validate on a fixed sample of this many sentences of the validation split (0 = all):
    # on a CPU, decoding the whole split can take as long as many updates.
    valid_sentences: int = _rng(0, ge=0)
    patience: int = _rng(0, ge=0)  # validations without improvement before stopping; 0 = off
    keep_last: int = _rng(3, ge=1)  # last-k checkpoints kept besides best.pt
    checkpoint_every: int = _rng(0, ge=0)  # updates between checkpoints; 0 = at each validation
    average_last: int = _rng(0, ge=0)  # average the last k checkpoints at the end; 0 = off
    max_nonfinite: int = _rng(5, ge=1)  # consecutive non-finite losses before aborting

    def _problems(self, valid: Valid) -> list[tuple[str, str]]:
        out = []
        if self.max_time is not None and valid("max_time"):
            try:
                parse_duration(self.max_time)
            except ValueError as e:
                out.append(("max_time", str(e)))
        if valid("device") and not re.fullmatch(r"auto|cpu|mps|cuda(:\d+)?", self.device):
            out.append(("device", f"expected auto, cpu, cuda, cuda:N or mps, got {self.device!r}"))
        if valid("betas") and not all(0.0 <= b < 1.0 for b in self.betas):
            out.append(("betas", "expected two numbers in [0, 1)"))
        if valid("average_last", "keep_last") and self.average_last > self.keep_last:
            out.append(("average_last", f"cannot average more than keep_last "
                        f"({self.keep_last}) checkpoints"))
        return out


def parse_duration(text: str) -> float:
    """'90s', '10m', '1.5h', '2h30m' or a bare number of seconds -> seconds."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    text = str(text).strip()
    if re.fullmatch(r"\d+(\.\d+)?", text):
        return float(text)
    parts = re.findall(r"(\d+(?:\.\d+)?)([smhd])", text)
    if not parts or "".join(n + u for n, u in parts) != text.replace(" ", ""):
        raise ValueError(f"expected a duration such as 90s, 10m, 2h30m, got {text!r}")
    return sum(float(n) * units[u] for n, u in parts)


# --------------------------------------------------------------------------- decode


@dataclass(frozen=True)
class DecodeConfig:
    method: Literal["beam", "greedy", "sample"] = "beam"
    beam_size: int = _rng(5, ge=1)
    nbest: int = _rng(1, ge=1)
    length_penalty: Literal["gnmt", "average", "none"] = "gnmt"
    alpha: float = _rng(1.0, ge=0.0)  # GNMT length-penalty exponent (Wu et al. 2016, eq. 14)
    max_len_a: float = _rng(1.5, ge=0.0)  # max output length = a * source length + b
    max_len_b: int = _rng(10, ge=1)
    min_len: int = _rng(0, ge=0)  # tokens before EOS is allowed
    temperature: float = _rng(1.0, gt=0.0)
    top_k: int = _rng(0, ge=0)  # 0 = off
    top_p: float = _rng(1.0, gt=0.0, le=1.0)  # 1.0 = off
    seed: int = 1
    batch_tokens: int = _rng(8000, ge=16)  # source tokens per translation batch

    def _problems(self, valid: Valid) -> list[tuple[str, str]]:
        out = []
        if valid("method", "nbest", "beam_size"):
            if self.method == "beam" and self.nbest > self.beam_size:
                out.append(("nbest", f"cannot exceed beam_size ({self.beam_size})"))
            if self.method == "greedy" and self.nbest > 1:
                out.append(("nbest", "greedy search gives one hypothesis; use method beam or "
                            "sample"))
        if valid("min_len", "max_len_a", "max_len_b") and self.min_len > self.shortest_limit:
            out.append(("min_len", f"{self.min_len} is more than the output limit for a "
                        f"one-token source, max_len_a * 1 + max_len_b = {self.shortest_limit}; "
                        "EOS could never be chosen"))
        return out

    @property
    def shortest_limit(self) -> int:
        """The output limit (tokens before EOS) for a one-token source (`decode.limits`)."""
        return int(self.max_len_a) + self.max_len_b  # floor(a * 1) + b


# --------------------------------------------------------------------------- recipe


@dataclass(frozen=True)
class Recipe:
    name: str = "run"
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    decode: DecodeConfig = field(default_factory=DecodeConfig)

    def _problems(self, valid: Valid) -> list[tuple[str, str]]:
        out = []
        # The name becomes the folder runs/<name>: "." or ".." would make it another folder.
        if valid("name") and (not re.fullmatch(r"[A-Za-z0-9_.-]+", self.name)
                              or not self.name.strip(".")):
            out.append(("name", "expected a plain folder name of letters, digits, '_', '-', "
                        f"'.' (not . or ..), got {self.name!r}"))
        if (valid("model.arch", "model.transformer.share_embeddings", "data.spm.joint")
                and self.model.arch == "transformer" and self.model.transformer.share_embeddings
                and not self.data.spm.joint):
            out.append(("model.transformer.share_embeddings",
                        "needs a joint vocabulary (data.spm.joint: true)"))
        rnn, tf = self.model.rnn, self.model.transformer
        lengths_ok = valid("model.arch", "data.max_len")
        if (lengths_ok and valid("model.rnn.attention", "model.rnn.max_positions")
                and self.model.arch == "rnn" and rnn.attention == "location"
                and rnn.max_positions < self.data.max_len + 1):
            out.append(("model.rnn.max_positions", f"location attention must score every "
                        f"source position: expected >= data.max_len + 1 ({self.data.max_len + 1})"))
        if (lengths_ok and valid("model.transformer.positions",
                                 "model.transformer.max_positions")
                and self.model.arch == "transformer" and tf.positions == "learned"
                and tf.max_positions < self.data.max_len + 1):
            out.append(("model.transformer.max_positions", f"learned positions must cover "
                        f"data.max_len + 1 ({self.data.max_len + 1}) tokens"))
        return out


# --------------------------------------------------------------------------- loading


class _Problems:
    def __init__(self) -> None:
        self.items: list[tuple[str, str]] = []

    def add(self, key: str, msg: str) -> None:
        self.items.append((key, msg))


class Valid:
    """Which fields of the object being validated converted without a problem, for its
    cross-field rules: ``valid("d_model", "heads")`` is False when either (or anything under
    it) has a problem, so a rule never reasons from a default that stands in for a bad value."""

    def __init__(self, bad_keys: list[str]) -> None:
        self._bad = bad_keys

    def __call__(self, *names: str) -> bool:
        return not any(k == n or k.startswith((n + ".", n + "["))
                       for k in self._bad for n in names)


def _join(prefix: str, key: str) -> str:
    return f"{prefix}.{key}" if prefix and key else prefix or key


def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(tp))
    if origin in (Union, types.UnionType):
        return " or ".join("null" if a is type(None) else _type_name(a)
                           for a in typing.get_args(tp))
    if origin is tuple:
        args = typing.get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:
            item = _type_name(args[0]).removeprefix("a ").removeprefix("an ")
            return f"a list of {item}s"
        return f"a list of {len(args)} items ({', '.join(_type_name(a) for a in args)})"
    if origin is dict:
        return "a mapping"
    if dataclasses.is_dataclass(tp):
        return "a mapping"
    return {int: "an integer", float: "a number", bool: "true or false", str: "a string"}.get(
        tp, str(tp))


def _convert(tp: Any, value: Any, key: str, problems: _Problems, base: Path | None) -> Any:
    """Convert a YAML value to `tp`, recording problems; returns a usable value or None."""
    origin = typing.get_origin(tp)
    if origin is Literal:
        choices = typing.get_args(tp)
        if value in choices:
            return value
        problems.add(key, f"invalid choice {value!r}; expected one of "
                     + ", ".join(str(c) for c in choices))
        return None
    if origin in (Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        shaped = [a for a in inner if _shape_fits(a, value)]
        if len(inner) == 1 or len(shaped) == 1:
            # One branch takes this shape of value: convert with it, so that problems deep
            # inside (a bad sha256 in one corpus of a list) keep their own key and message.
            return _convert((shaped or inner)[0], value, key, problems, base)
        for a in inner:
            trial = _Problems()
            out = _convert(a, value, key, trial, base)
            if not trial.items:
                return out
        problems.add(key, f"expected {_type_name(tp)}, got {value!r}")
        return None
    if origin is tuple and len(typing.get_args(tp)) == 2 and typing.get_args(tp)[1] is Ellipsis:
        item = typing.get_args(tp)[0]
        if not isinstance(value, list | tuple):
            problems.add(key, f"expected {_type_name(tp)}, got {value!r}")
            return None
        return tuple(_convert(item, v, f"{key}[{i}]", problems, base) for i, v in enumerate(value))
    if origin is tuple:
        args = typing.get_args(tp)
        if not isinstance(value, list | tuple) or len(value) != len(args):
            problems.add(key, f"expected {_type_name(tp)}, got {value!r}")
            return None
        return tuple(_convert(a, v, f"{key}[{i}]", problems, base)
                     for i, (a, v) in enumerate(zip(args, value, strict=True)))
    if origin is dict:
        _, vtype = typing.get_args(tp)
        if value is None:
            return {}
        if not isinstance(value, dict):
            problems.add(key, f"expected a mapping, got {value!r}")
            return {}
        return {str(k): _convert(vtype, v, _join(key, str(k)), problems, base)
                for k, v in value.items()}
    if dataclasses.is_dataclass(tp):
        return _build(tp, value, key, problems, base)
    return _scalar(tp, value, key, problems)


def _shape_fits(tp: Any, value: Any) -> bool:
    """Whether `value` has the YAML shape `tp` is written in: a list for a tuple, a mapping for
    a section or a dict. Scalars fit anything else (their conversion checks them)."""
    origin = typing.get_origin(tp)
    if origin is tuple:
        return isinstance(value, list | tuple)
    if origin is dict or dataclasses.is_dataclass(tp):
        return isinstance(value, dict)
    return not isinstance(value, list | tuple | dict)


def _scalar(tp: Any, value: Any, key: str, problems: _Problems) -> Any:
    if tp is float and isinstance(value, str):
        # YAML 1.1 reads "1e-3" (no dot) as a string; accept what Python reads as a number.
        try:
            value = float(value)
        except ValueError:
            pass
    ok = (
        (tp is bool and isinstance(value, bool))
        or (tp is int and isinstance(value, int) and not isinstance(value, bool))
        or (tp is float and isinstance(value, int | float) and not isinstance(value, bool))
        or (tp is str and isinstance(value, str | int | float) and not isinstance(value, bool))
    )
    if not ok:
        problems.add(key, f"expected {_type_name(tp)}, got {value!r}")
        return None
    return tp(value)


def _check_range(meta: Any, value: Any, key: str, problems: _Problems) -> None:
    if value is None or not isinstance(value, int | float):
        return
    tests = {"ge": (lambda b: value >= b, ">="), "gt": (lambda b: value > b, ">"),
             "le": (lambda b: value <= b, "<="), "lt": (lambda b: value < b, "<")}
    for name, (test, sym) in tests.items():
        if name in meta and not test(meta[name]):
            problems.add(key, f"out of range: expected a value {sym} {meta[name]}, got {value!r}")


def _build(cls: Any, value: Any, prefix: str, problems: _Problems, base: Path | None) -> Any:
    coerce = getattr(cls, "_coerce", None)
    if coerce is not None:
        value = coerce(value)
    if value is None:
        value = {}
    if not isinstance(value, dict):
        problems.add(prefix or "(top level)", f"expected a mapping, got {value!r}")
        value = {}
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for k in value:
        if k not in fields:
            close = difflib.get_close_matches(str(k), list(fields), n=1, cutoff=0.6)
            hint = f"; did you mean `{_join(prefix, close[0])}`?" if close else \
                f"; valid keys: {', '.join(fields)}"
            problems.add(_join(prefix, str(k)), f"unknown key{hint}")
    kwargs = {}
    before = len(problems.items)
    for name, f in fields.items():
        key = _join(prefix, name)
        if name not in value:
            if dataclasses.is_dataclass(hints[name]):  # a missing section: check its defaults
                _build(hints[name], {}, key, problems, base)
            continue
        converted = _convert(hints[name], value[name], key, problems, base)
        _check_range(f.metadata, converted, key, problems)
        if converted is not None or value[name] is None:
            kwargs[name] = converted
    if cls is FileSource and base is not None and kwargs.get("path"):
        p = Path(kwargs["path"]).expanduser()
        kwargs["path"] = str(p if p.is_absolute() else (base / p).resolve())
    try:
        obj = cls(**kwargs)
    except TypeError as e:  # pragma: no cover - a field left None by a reported problem
        problems.add(prefix, str(e))
        return None
    if hasattr(obj, "_problems"):
        bad = [_relative(key, prefix) for key, _ in problems.items[before:]]
        for key, msg in obj._problems(Valid(bad)):
            problems.add(_join(prefix, key) or "(top level)", msg)
    return obj


def _relative(key: str, prefix: str) -> str:
    """`key` relative to the object at `prefix` ("" for a problem of the object itself)."""
    if not prefix:
        return key
    return key[len(prefix) + 1:] if key.startswith(prefix + ".") else ""


def apply_override(raw: dict, assignment: str) -> None:
    """Apply one ``dotted.key=value`` override in place; the value is parsed as YAML."""
    if "=" not in assignment:
        raise ConfigError(f"--set {assignment!r}: expected KEY=VALUE, e.g. train.lr=3e-4")
    key, text = assignment.split("=", 1)
    parts = key.strip().split(".")
    if not all(parts):
        raise ConfigError(f"--set {assignment!r}: empty key part in {key!r}")
    try:
        value = yaml.safe_load(text) if text.strip() else ""
    except yaml.YAMLError:
        value = text
    node = raw
    for i, p in enumerate(parts[:-1]):
        child = node.get(p)
        if child is None:
            child = node[p] = {}
        elif not isinstance(child, dict):
            raise ConfigError(f"--set {assignment!r}: `{'.'.join(parts[:i + 1])}` is not a section")
        node = child
    node[parts[-1]] = value


def recipe_from_dict(raw: Any, *, source: str = "<recipe>", base: Path | None = None,
                     overrides: tuple[str, ...] = ()) -> Recipe:
    """Validate a raw mapping into a `Recipe`, raising one ConfigError listing every problem.
    A problem at a key that an override set is attributed to that ``--set`` instead of the
    recipe file."""
    problems = _Problems()
    recipe = _build(Recipe, raw, "", problems, base)
    if problems.items:
        lines = [f"{_origin(key, msg, source, overrides)}: {key}: {msg}"
                 for key, msg in problems.items]
        head = f"{len(lines)} problems in recipe:\n" if len(lines) > 1 else ""
        raise ConfigError(head + "\n".join(lines))
    return recipe


def section_from_dict(cls: Any, raw: dict, *, source: str, prefix: str) -> Any:
    """Validate one section (e.g. `DecodeConfig` built from a recipe plus command-line options)."""
    problems = _Problems()
    obj = _build(cls, raw, prefix, problems, None)
    if problems.items:
        raise ConfigError("\n".join(f"{source}: {key}: {msg}" for key, msg in problems.items))
    return obj


def _origin(key: str, msg: str, source: str, overrides: tuple[str, ...]) -> str:
    for o in reversed(overrides):  # the last --set of a key wins
        k = o.split("=", 1)[0].strip()
        if key == k or key.startswith((k + ".", k + "[")):
            return f"--set {o}"
        if k.startswith(key + ".") and msg.startswith("unknown key"):
            return f"--set {o}"  # the override created an unknown section
    return source


def load_recipe(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> Recipe:
    """Read a YAML recipe, apply ``--set`` overrides, validate. Relative paths in the recipe
    are relative to the recipe file."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: recipe file not found")
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise ConfigError(f"{path}:{where} not valid YAML ({getattr(e, 'problem', e)})") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text") from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping with sections data, model, train, decode")
    for o in overrides:
        apply_override(raw, o)
    return recipe_from_dict(raw, source=str(path), base=path.resolve().parent,
                            overrides=tuple(overrides))


def recipe_to_dict(recipe: Any) -> Any:
    """A plain, YAML-safe structure of a recipe or section (tuples become lists)."""
    if dataclasses.is_dataclass(recipe):
        return {f.name: recipe_to_dict(getattr(recipe, f.name))
                for f in dataclasses.fields(recipe)}
    if isinstance(recipe, dict):
        return {k: recipe_to_dict(v) for k, v in recipe.items()}
    if isinstance(recipe, list | tuple):
        return [recipe_to_dict(v) for v in recipe]
    return recipe


def dump_recipe(recipe: Recipe) -> str:
    """The resolved recipe as YAML: every field, defaults included, paths absolute."""
    return yaml.safe_dump(recipe_to_dict(recipe), sort_keys=False, allow_unicode=True)


def recipe_from_yaml_text(text: str, *, source: str) -> Recipe:
    """Rebuild a recipe saved by `dump_recipe` (e.g. inside a checkpoint)."""
    return recipe_from_dict(yaml.safe_load(text), source=source)
