"""The recipe's sections as typed, frozen dataclasses: their fields, defaults, numeric ranges
and cross-field rules (`_problems(valid)`). Loading and validation are in `loading`."""

from __future__ import annotations

import math
import re
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from mtkit.config.attention import HardAttentionConfig, Normalizer, hard_problems
from mtkit.config.guided import GuidedAlignmentConfig
from mtkit.config.regularize import RDropConfig, SubwordSamplingConfig, regularize_problems
from mtkit.errors import ConfigError

if typing.TYPE_CHECKING:
    from mtkit.config.loading import Valid


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
        digest = value.get("sha256") if isinstance(value, dict) else None
        if isinstance(digest, int) and not isinstance(digest, bool):
            # YAML reads digits alone as a number (leading zeros lost): the problem says so
            return {**value, "sha256": f"{digest} (a number to YAML: quote the checksum)"}
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
    """A parallel corpus: the source-language file and the target-language file, and for a
    training corpus optionally its word alignment (Pharaoh ``i-j`` links, one line per pair;
    guided alignment trains on them, `guided.GuidedAlignmentConfig`)."""

    src: FileSource = field(default_factory=FileSource)
    tgt: FileSource = field(default_factory=FileSource)
    align: FileSource | None = None
    # A target-language tag ("<2de>") put before every source line of this corpus, so that one
    # model learns several directions from corpora tagged by their target (Johnson et al. 2017,
    # §3); sentencepiece keeps it whole. `mtkit translate --tag` (or data.tag) picks one.
    tag: str | None = None


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

    def _problems(self, valid: Valid) -> list[tuple[str, str]]:
        if valid("min_len", "max_len") and self.min_len > self.max_len:
            return [("min_len", f"{self.min_len} is more than max_len ({self.max_len}): "
                     "every pair would be dropped")]
        return []


@dataclass(frozen=True)
class SpmConfig:
    """Sentencepiece training. Ids are fixed: see `mtkit.models.vocab`."""

    model_type: Literal["unigram", "bpe"] = "unigram"
    # sentencepiece's fields: vocab_size an int32, input_sentence_size a uint64 (larger ones
    # failed to parse); its other limits are its version's, said when it trains (`train_spm`)
    vocab_size: int = _rng(8000, ge=16, le=2**31 - 1)
    # one vocabulary for both languages (needed to share embeddings): one sentencepiece model,
    # or (an imported model's) one piece table over two (`mtkit.data.pieces`)
    joint: bool = True
    character_coverage: float = _rng(1.0, gt=0.0, le=1.0)
    input_sentence_size: int = _rng(2_000_000, ge=0, le=2**63 - 1)  # 0 = every sentence
    # A run directory (relative to the current one, as --run-dir) whose sentencepiece
    # model(s) prep reuses instead of training: a fine-tuned child must use its parent's
    # vocabulary. The fields above must then be the ones that run trained its model with.
    from_run: str | None = None
    # Strings sentencepiece keeps as one piece wherever they occur (its user_defined_symbols):
    # markup, placeholders. The corpora's tags are added to them.
    user_symbols: tuple[str, ...] = ()

    def _problems(self, valid: Valid) -> list[tuple[str, str]]:
        out = []
        if not valid("user_symbols"):
            return out
        for i, symbol in enumerate(self.user_symbols):
            if not symbol or any(c.isspace() for c in symbol):
                out.append((f"user_symbols[{i}]", f"expected a string without spaces, got "
                            f"{symbol!r}"))
        if len(set(self.user_symbols)) != len(self.user_symbols):
            out.append(("user_symbols", "a symbol is listed twice"))
        return out


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
    # The corpora's tag `mtkit translate` (and the API, the server) puts before a source line
    # when none is asked for; null: a model with tags then needs one asked for.
    tag: str | None = None

    def tags(self) -> list[str]:
        """The tags of the training corpora, in recipe order, each once."""
        found = [c.tag for _, c in split_corpora(self.train or ()) if c.tag is not None]
        return list(dict.fromkeys(found))

    def reserved_symbols(self) -> tuple[str, ...]:
        """What sentencepiece must keep whole: data.spm.user_symbols, then the tags."""
        return tuple(dict.fromkeys([*self.spm.user_symbols, *self.tags()]))

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
            if (name in ("train", "valid") or not re.fullmatch(r"[A-Za-z0-9_.-]+", name)
                    or not name.strip(".")):  # '..' wrote data/...src.txt
                out.append((f"test.{name}", "test set names use letters, digits, '_', '-', '.'"
                            " and may not be 'train', 'valid' or dots alone"))
        return out + self._tag_problems(valid)

    def _tag_problems(self, valid: Valid) -> list[tuple[str, str]]:
        if not valid("train", "valid", "test", "tag"):
            return []
        out = []
        known = self.tags()
        for name, split in (("train", self.train), ("valid", self.valid),
                            *((f"test.{n}", t) for n, t in self.test.items())):
            for suffix, corpus in split_corpora(split or ()):
                key = f"{name}{suffix}.tag"
                if corpus.tag is None:
                    continue
                if not corpus.tag or any(c.isspace() for c in corpus.tag):
                    out.append((key, f"expected a string without spaces, got {corpus.tag!r}"))
                elif corpus.align is not None:
                    out.append((key, "a corpus with word alignments (align) cannot have a tag: "
                                "the tag would shift the links' source words"))
                elif name != "train" and corpus.tag not in known:
                    out.append((key, f"{corpus.tag!r} tags no training corpus; expected one of "
                                f"{', '.join(known) or '(none: no training corpus has a tag)'}"))
        if self.tag is not None and self.tag not in known:
            out.append(("tag", f"{self.tag!r} tags no training corpus; expected one of "
                        f"{', '.join(known) or '(none: no training corpus has a tag)'}"))
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
    hard: HardAttentionConfig = field(default_factory=HardAttentionConfig)

    def _problems(self, valid: Valid) -> list[tuple[str, str]]:
        out = hard_problems(self.attention, self.placement, self.input_feeding, self.hard,
                            valid)
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
    # swish: x * sigmoid(x), also called SiLU (Ramachandran et al. 2017), Marian's choice
    activation: Literal["relu", "gelu", "swish"] = "relu"
    norm: Literal["pre", "post"] = "pre"
    # sinusoidal_halves: the same waves as sinusoidal, the sines in the first half of the
    # features and the cosines in the second (Marian's layout) instead of interleaved
    positions: Literal["sinusoidal", "sinusoidal_halves", "learned"] = "sinusoidal"
    max_positions: int = _rng(512, ge=2)
    scale_embeddings: bool = True  # token embeddings times sqrt(d_model) (Vaswani et al., §3.4)
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
    # How cross-attention scores become weights (mtkit.models.normalizers), either arch.
    attention_normalizer: Normalizer = "softmax"
    rnn: RNNConfig = field(default_factory=RNNConfig)
    transformer: TransformerConfig = field(default_factory=TransformerConfig)

    @property
    def size(self) -> int:
        """The model's width: d_model, or the RNN's hidden size (the noam schedule's scale)."""
        return self.transformer.d_model if self.arch == "transformer" else self.rnn.hidden_dim


# --------------------------------------------------------------------------- train


@dataclass(frozen=True)
class TrainConfig:
    seed: int = _rng(1, ge=0, le=2**63 - 1)  # what numpy's and torch's generators take
    device: str = "auto"  # auto | cpu | cuda | cuda:N | mps
    precision: Literal["bf16", "fp16", "fp32"] = "bf16"  # autocast on CUDA; CPU always fp32
    compile: bool = False  # torch.compile the model; compiling counts in max_time
    threads: int = _rng(0, ge=0)  # CPU threads; 0 = torch's default
    batch_tokens: int = _rng(4096, ge=16)  # padded tokens per side per batch
    update_freq: int = _rng(1, ge=1)  # gradient accumulation: batches per update
    max_updates: int = _rng(0, ge=0)  # 0 = no limit
    max_epochs: int = _rng(0, ge=0)  # 0 = no limit
    max_time: str | None = None  # wall-clock budget such as "90s", "10m", "2h", "1h30"
    optimizer: Literal["adam", "adamw"] = "adam"
    lr: float = _rng(5e-4, gt=0.0)  # peak lr; with schedule noam, a factor on d_model^-0.5
    betas: tuple[float, float] = (0.9, 0.98)
    eps: float = _rng(1e-9, gt=0.0)
    weight_decay: float = _rng(0.0, ge=0.0)
    # linear: decays to min_lr over the run's length (max_updates, max_epochs, or the updates
    # max_time holds at the pace of the warm-up), as budgeted training wants
    schedule: Literal["inverse_sqrt", "noam", "plateau", "constant", "linear"] = "inverse_sqrt"
    warmup: int = _rng(4000, ge=0)  # updates of linear warm-up
    plateau_factor: float = _rng(0.5, gt=0.0, lt=1.0)
    plateau_patience: int = _rng(2, ge=0)  # validations without improvement
    min_lr: float = _rng(1e-6, ge=0.0)  # plateau never goes below it; linear ends at it
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
    # wall-clock between checkpoints besides those ("10m", as max_time); null = none: bounds
    # the work a killed or preempted job loses
    checkpoint_every_time: str | None = None
    average_last: int = _rng(0, ge=0)  # average the last k checkpoints at the end; 0 = off
    max_nonfinite: int = _rng(5, ge=1)  # consecutive non-finite losses before aborting
    # TensorBoard event files under tensorboard/: auto when the package is installed
    # (pip install 'mtkit[tensorboard]'), on (an error without it), off
    tensorboard: Literal["auto", "on", "off"] = "auto"
    guided_alignment: GuidedAlignmentConfig = field(default_factory=GuidedAlignmentConfig)
    # subword regularization of the training batches (`regularize`); off by default
    subword_sampling: SubwordSamplingConfig = field(default_factory=SubwordSamplingConfig)
    rdrop: RDropConfig = field(default_factory=RDropConfig)  # R-Drop (`regularize`); off

    def _problems(self, valid: Valid) -> list[tuple[str, str]]:
        out = []
        if self.max_time is not None and valid("max_time"):
            try:
                if parse_duration(self.max_time) == 0:  # would stop after the first update
                    out.append(("max_time", "a budget of 0 stops training at once; null (or no "
                                "max_time) for no limit"))
            except ValueError as e:
                out.append(("max_time", str(e)))
        if self.checkpoint_every_time is not None and valid("checkpoint_every_time"):
            try:
                if parse_duration(self.checkpoint_every_time) == 0:
                    out.append(("checkpoint_every_time", "0 would save after every update; "
                                "null for no time-based checkpoints"))
            except ValueError as e:
                out.append(("checkpoint_every_time", str(e)))
        if valid("device") and not re.fullmatch(r"auto|cpu|mps|cuda(:\d+)?", self.device):
            out.append(("device", f"expected auto, cpu, cuda, cuda:N or mps, got {self.device!r}"))
        if valid("betas") and not all(0.0 <= b < 1.0 for b in self.betas):
            out.append(("betas", "expected two numbers in [0, 1)"))
        if (valid("schedule", "max_updates", "max_epochs", "max_time")
                and self.schedule == "linear"
                and not (self.max_updates or self.max_epochs or self.max_time)):
            out.append(("schedule", "linear decays over the run's length: set train.max_updates, "
                        "train.max_epochs or train.max_time"))
        if (valid("schedule", "warmup", "max_updates") and self.schedule == "linear"
                and 0 < self.max_updates <= self.warmup):
            out.append(("warmup", f"{self.warmup} updates of warm-up leave linear none of "
                        f"train.max_updates ({self.max_updates}) to decay over"))
        if (valid("schedule", "lr", "min_lr") and self.schedule == "linear"
                and self.min_lr >= self.lr):
            out.append(("min_lr", f"linear decays from train.lr ({self.lr:g}) to min_lr: "
                        "expected less than lr"))
        if valid("average_last", "keep_last") and self.average_last > self.keep_last:
            out.append(("average_last", f"cannot average more than keep_last "
                        f"({self.keep_last}) checkpoints"))
        return out


def parse_duration(text: str) -> float:
    """'90s', '10m', '1.5h', '2h30m', '1h30' (the next unit down) or a bare number of seconds
    -> seconds."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    given = str(text).strip()
    text = re.sub(r"(?<=\d)\s+(?=[smhd])|(?<=[smhd])\s+(?=\d)", "", given)  # '90 s', '1h 30
    if re.fullmatch(r"\d+(\.\d+)?", text):
        return float(text)
    if m := re.fullmatch(r"(.*\d([dhm]))(\d+)", text):  # 1h30 = 1h30m, 10m30 = 10m30s
        text = m[1] + m[3] + {"d": "h", "h": "m", "m": "s"}[m[2]]
    parts = re.findall(r"(\d+(?:\.\d+)?)([smhd])", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"expected a duration such as 90s, 10m, 2h30m, got {given!r}")
    return sum(float(n) * units[u] for n, u in parts)


# --------------------------------------------------------------------------- decode


SearchMethod = Literal["beam", "greedy", "sample"]
LengthPenalty = Literal["gnmt", "average", "power", "none"]
# What a decoding option is about, which says where it is offered: `translate` takes every
# kind, `align` (one hypothesis per sentence, searched) search and batching, the server every
# kind but batching (its batcher batches).
OptionKind = Literal["search", "output", "sampling", "batching"]


def _decoding(default: Any, kind: OptionKind, help: str, metavar: str, **bounds: float) -> Any:
    """A decoding option: its default and numeric bounds (ge, gt, le, lt, checked at load
    time), and what every face says of it, so that the command line's flags
    (`mtkit.cli.options`) and the server's request model (`mtkit.serve.schema`) are derived
    from this one declaration: its `kind`, a `help` phrase and the `metavar` of its value
    (its flag is `--` + the field with dashes, unless `mtkit.cli.options.flag_of` says
    otherwise)."""
    return field(default=default, metadata={**bounds, "kind": kind, "help": help,
                                            "metavar": metavar})


@dataclass(frozen=True)
class DecodeConfig:
    """The search and its limits: the recipe's `decode` section, every face's decoding
    options (command flags, server requests, the API's keywords)."""

    # chosen on the command line by a switch of each method but beam (--beam N): its kind
    # and help
    method: SearchMethod = field(default="beam", metadata={"kind": "search", "switches": {
        "greedy": ("search", "greedy search"), "sample": ("sampling", "sample instead of "
                                                          "searching")}})
    beam_size: int = _decoding(5, "search", "beam size", "N", ge=1)
    nbest: int = _decoding(1, "output", "hypotheses per sentence", "N", ge=1)
    length_penalty: LengthPenalty = _decoding(
        "gnmt", "search", "gnmt (Wu et al. 2016), average (÷ length), power (÷ length^alpha, "
        "transformers' and CTranslate2's) or none", "PENALTY")
    # GNMT length-penalty exponent (Wu et al. 2016, eq. 14; they tune it in [0, 1]); beyond
    # 10 the penalty of long outputs overflows float32 ((1000 / 6) ** 17 > 3.4e38)
    alpha: float = _decoding(1.0, "search", "exponent of the gnmt or power length penalty",
                             "A", ge=0.0, le=10.0)
    # max output length = a * source length + b; the upper bounds are past any sentence's
    # (outputs end by the model's cap, `Recipe.output_cap`, anyway) and keep the limit within
    # a tensor's int64
    max_len_a: float = _decoding(1.5, "search", "output limit A·source length + B: A", "A",
                                 ge=0.0, le=100.0)
    max_len_b: int = _decoding(10, "search", "output limit A·source length + B: B", "B", ge=1,
                               le=100_000)
    min_len: int = _decoding(0, "search", "tokens before the end of sentence", "N", ge=0)
    temperature: float = _decoding(1.0, "sampling", "sampling temperature", "T", gt=0.0)
    top_k: int = _decoding(0, "sampling", "sample from the K best tokens", "K", ge=0)  # 0 = off
    top_p: float = _decoding(1.0, "sampling", "nucleus sampling mass", "P",  # 1.0 = off
                             gt=0.0, le=1.0)
    # any integer (`mtkit.decode.sampling.batch_seed`)
    seed: int = _decoding(1, "sampling", "sampling seed", "N")
    batch_tokens: int = _decoding(8000, "batching", "padded source tokens per batch", "N",
                                  ge=16)

    def __post_init__(self) -> None:
        # the API's `decode` takes a DecodeConfig built by its caller: one with alpha=nan or
        # beam_size=0 must be refused here, not searched with (nan scores end no hypothesis)
        from mtkit.config.ranges import range_problems

        if problems := range_problems(self, "decode"):
            raise ConfigError("\n".join(f"DecodeConfig: {key}: {msg}" for key, msg in problems))

    def _problems(self, valid: Valid) -> list[tuple[str, str]]:
        out = []
        if valid("method", "nbest", "beam_size"):
            if self.method == "beam" and self.nbest > self.beam_size:
                out.append(("nbest", f"cannot exceed beam_size ({self.beam_size})"))
            if self.method == "greedy" and self.nbest > 1:
                out.append(("nbest", "greedy search gives one hypothesis; use method beam or "
                            "sample"))
        if valid("min_len", "max_len_a", "max_len_b") and self.min_len > self.output_limit(1):
            out.append(("min_len", f"{self.min_len} is more than the output limit for a "
                        f"one-token source, max_len_a * 1 + max_len_b = {self.output_limit(1)}; "
                        "EOS could never be chosen"))
        return out

    def output_limit(self, src_tokens: int) -> int:
        """An output's limit, tokens before EOS, for n source tokens (EOS not counted)."""
        return math.floor(self.max_len_a * src_tokens) + self.max_len_b


# --------------------------------------------------------------------------- recipe


def guided_problems(recipe: Recipe, valid: Valid) -> list[tuple[str, str]]:
    """Cross-field rules: alignments belong to the training split, to every corpus of it or to
    none, and exactly when guided alignment is on; the model must have attention to guide."""
    out: list[tuple[str, str]] = []
    data, guide = recipe.data, recipe.train.guided_alignment
    others: list[tuple[str, Any]] = [("data.valid", data.valid),
                                     *((f"data.test.{n}", t) for n, t in data.test.items())]
    if valid("data.valid", "data.test"):
        for name, split in others:
            for suffix, corpus in split_corpora(split) if split else []:
                if corpus.align is not None:
                    out.append((f"{name}{suffix}.align", "alignments are read for the "
                                "training split only (guided alignment trains on them)"))
    if not valid("data.train", "train.guided_alignment.weight") or not data.train:
        return out
    corpora = split_corpora(data.train)
    missing = [f"data.train{suffix}.align" for suffix, c in corpora if c.align is None]
    if guide.enabled and missing:
        out += [(key, "missing: train.guided_alignment.weight > 0 needs the word alignment of "
                 "every training corpus (a Pharaoh file of i-j links, one line per pair)")
                for key in missing]
    elif missing and len(missing) < len(corpora):
        out += [(key, "missing: some training corpora name an alignment, so every one must")
                for key in missing]
    elif not guide.enabled and not missing:  # the keys named: a --set of one is blamed
        named = ", ".join(f"data.train{suffix}.align" for suffix, _ in corpora)
        out.append(("train.guided_alignment.weight", f"is 0 (off), but the training split "
                    f"names alignments ({named}): set a weight (Garg et al. 2019 use 0.05) or "
                    "drop `align`"))
    if not (guide.enabled and valid("model.arch") and recipe.model.arch == "rnn"):
        return out
    if valid("model.rnn.attention") and recipe.model.rnn.attention == "none":
        out.append(("train.guided_alignment.weight", "model.rnn.attention is none: the model "
                    "has no attention to guide"))
    if valid("model.rnn.hard") and recipe.model.rnn.hard.enabled:
        out.append(("train.guided_alignment.weight", "model.rnn.hard.estimator is "
                    f"{recipe.model.rnn.hard.estimator}: a hard-attention step attends to one "
                    "drawn position, whose one-hot row gives the scores no gradient to guide"))
    # An RNN's one attention is the context of the word its step predicts: pulled to the
    # previous word's source it either does not learn that (Bahdanau GRU, synthetic
    # permutation task: AER 0.26) or leaves the model nothing to translate with (Luong GRU:
    # exact match 0.5% against 99.5% unguided).
    if valid("train.guided_alignment.readout") and guide.readout == "shift":
        out.append(("train.guided_alignment.readout", "shift needs a Transformer: an RNN's one "
                    "attention gives the context of the word its step predicts; use current"))
    return out



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
        return out + guided_problems(self, valid) + regularize_problems(self, valid)

    def position_rows(self) -> int:
        """The positions a decoder of this recipe is made for (the sinusoid rows an export
        writes): the model's max_positions, or more when the longest output the decode
        section allows (a * data.max_len + b, plus BOS and EOS) needs more."""
        d, tf = self.decode, self.model.transformer
        return max(tf.max_positions, d.output_limit(self.data.max_len) + 2, self.data.max_len + 1)

    def output_cap(self) -> int:
        """The most tokens before EOS an output of this recipe's model has, whatever a
        caller's max_len_a/b: learned positions end by their table; sinusoids and an RNN,
        which take any length, by `position_rows` (as an export of the model does), so that
        no request keeps a decoder busy for thousands of steps."""
        tf = self.model.transformer
        if self.model.arch == "transformer" and tf.positions == "learned":
            return tf.max_positions - 1
        return self.position_rows() - 1
