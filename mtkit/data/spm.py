"""Sentencepiece (Kudo & Richardson 2018): training and the `Tokenizer` every command uses.

The special ids are fixed in `mtkit.models.vocab` (pad 0, unk 1, bos 2, eos 3) and passed to the
trainer here, so every model mtkit trains agrees on them. A joint model (one vocabulary for both
languages, needed to share embeddings) is stored as ``spm.model``; separate models as
``spm.src.model`` and ``spm.tgt.model``, in the prepared data directory. A model imported from
elsewhere numbers its pieces in a table of its own, ``pieces.json`` beside them
(`mtkit.data.pieces`), through which the tokenizer then encodes and decodes.
"""

from __future__ import annotations

import hashlib
import io
import os
import threading
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Literal

from mtkit.config import SpmConfig
from mtkit.data.pieces import PIECES, PieceTable, TableSide
from mtkit.errors import ConfigError, DataError
from mtkit.models.vocab import BOS_ID, EOS_ID, PAD_ID, UNK_ID

if TYPE_CHECKING:  # numpy only for guided alignment: translating with an export needs none
    import numpy as np

Side = Literal["src", "tgt"]  # a pair's source or target side


def _import_sentencepiece() -> ModuleType:
    """Import sentencepiece with its OpenMP threads waiting passively.

    The trainer's seed extraction starts a second OpenMP (libgomp) thread that, by libgomp's
    default, spins while the first runs the long single-threaded part: on 1M sentences it
    kept the second core busy for most of the phase, doing nothing (and, on a loaded machine,
    took half the working thread's CPU). Passive waiting gives byte-identical models. libgomp
    reads the policy once, when it is loaded by this import; the variable is set only for
    that moment, so that torch's own OpenMP runtime, if loaded later, keeps its default, and a
    value the user set is left alone."""
    ours = "OMP_WAIT_POLICY" not in os.environ
    if ours:
        os.environ["OMP_WAIT_POLICY"] = "passive"
    try:
        import sentencepiece
    finally:
        if ours:
            del os.environ["OMP_WAIT_POLICY"]
    return sentencepiece


spm = _import_sentencepiece()

JOINT_MODEL = "spm.model"
SRC_MODEL = "spm.src.model"
TGT_MODEL = "spm.tgt.model"

# Sentencepiece samples `input_sentence_size` sentences with its own generator: seed it so a
# prep run is reproducible. Fixed (not train.seed) because the data section alone decides prep.
_SPM_SEED = 1


def model_files(joint: bool) -> list[str]:
    """File names of the sentencepiece model(s) in a data directory."""
    return [JOINT_MODEL] if joint else [SRC_MODEL, TGT_MODEL]


def train_spm(sentences: Iterable[str], cfg: SpmConfig, *, what: str = "joint",
              symbols: Sequence[str] = ()) -> bytes:
    """Train a sentencepiece model on `sentences` (in memory) and return its serialized bytes;
    `symbols` are kept whole (sentencepiece's user_defined_symbols).

    Raises DataError when the text cannot support the requested vocabulary size.
    """
    spm.set_random_generator_seed(_SPM_SEED)
    out = io.BytesIO()
    try:
        _interruptible(
            spm.SentencePieceTrainer.train,
            sentence_iterator=iter(sentences),
            model_writer=out,
            model_type=cfg.model_type,
            vocab_size=cfg.vocab_size,
            character_coverage=cfg.character_coverage,
            # 0 means "every sentence": sentencepiece reads 0 as no sampling too.
            input_sentence_size=cfg.input_sentence_size,
            shuffle_input_sentence=True,
            pad_id=PAD_ID, unk_id=UNK_ID, bos_id=BOS_ID, eos_id=EOS_ID,
            pad_piece="<pad>", unk_piece="<unk>", bos_piece="<s>", eos_piece="</s>",
            num_threads=max(1, os.cpu_count() or 1),
            # only when given: the models trained without it stay byte for byte the same
            **({"user_defined_symbols": list(symbols)} if symbols else {}),
            minloglevel=2,  # sentencepiece's INFO log is pages long; warnings still show
        )
    except RuntimeError as e:
        msg = str(e).strip().splitlines()[-1] if str(e).strip() else repr(e)
        # sentencepiece's own limits (0.2.x: coverage >= 0.98, a sample of 0 or > 100
        # sentences) fail a check that names its field: "[character_coverage() >= 0.98 ...]"
        for key in ("character_coverage", "input_sentence_size"):
            if f"{key}()" in msg and "[" in msg:
                rule = msg.rsplit("[", 1)[-1].rstrip("] ").replace("trainer_spec.", "")
                raise ConfigError(f"data.spm.{key}: sentencepiece refuses "
                                  f"{getattr(cfg, key)} (it needs {rule.replace('()', '')})"
                                  ) from None
        msg = msg.rsplit("] ", 1)[-1]  # drop sentencepiece's "INTERNAL: file.cc(744) [...]"
        raise DataError(f"data.spm: cannot train the {what} sentencepiece model "
                        f"(vocab_size {cfg.vocab_size}): {msg}") from None
    return out.getvalue()


def _interruptible(fn: Callable[..., object], **kwargs: object) -> None:
    """`fn(**kwargs)` in a thread of its own while this one waits in short joins, so that
    Ctrl-C and SIGTERM stop prep at once: Python runs signal handlers in the main thread only
    between bytecodes, and sentencepiece's training (released from the interpreter's lock)
    held them for as long as it ran (22-29 s after the signal on Tatoeba, minutes on a 2M
    sample). Interrupted, the trainer is left to the process's exit (a daemon thread); it
    writes only into memory."""
    failed: list[BaseException] = []

    def run() -> None:
        try:
            fn(**kwargs)
        except BaseException as e:  # handed to the waiting thread
            failed.append(e)

    worker = threading.Thread(target=run, name="mtkit-sentencepiece", daemon=True)
    worker.start()
    while worker.is_alive():
        worker.join(0.2)
    if failed:
        raise failed[0]


def _processor(proto: bytes) -> spm.SentencePieceProcessor:
    return spm.SentencePieceProcessor(model_proto=proto)


class DamagedModelError(DataError):
    """A sentencepiece model file that is there but does not parse."""


def _parses(proto: bytes) -> bool:
    """Whether `proto` is a sentencepiece model (damage fails with sentencepiece's
    'INTERNAL: src/sentencepiece_processor.cc(109) [model_proto->ParseFromArray...]')."""
    try:
        _processor(proto)
    except RuntimeError:
        return False
    return True


class Tokenizer:
    """Source and target sentencepiece models (the same object when joint), and a table of
    model ids when the model numbers its pieces otherwise (`mtkit.data.pieces`).

    Encoding returns ids without BOS/EOS; decoding ignores pad, bos and eos ids (and, through
    a table, unk) and returns detokenized text.
    """

    def __init__(self, src_proto: bytes, tgt_proto: bytes | None = None, *,
                 table: PieceTable | None = None) -> None:
        self.joint = tgt_proto is None
        self._src = _processor(src_proto)
        self._tgt = self._src if tgt_proto is None else _processor(tgt_proto)
        self.table = table
        self._sides = None if table is None else {
            "src": TableSide(self._src, table.src), "tgt": TableSide(self._tgt, table.tgt)}
        self._starts: dict[str, np.ndarray] = {}  # `starts_word`, computed once per side

    @classmethod
    def load(cls, data_dir: str | Path) -> Tokenizer:
        """Load the model(s) that `mtkit prep` wrote into `data_dir`."""
        data_dir = Path(data_dir)
        for names in ([JOINT_MODEL], [SRC_MODEL, TGT_MODEL]):
            if all((data_dir / n).is_file() for n in names):
                protos = [(data_dir / n).read_bytes() for n in names]
                try:
                    # an empty file would parse, as a model of no pieces (a copy cut short),
                    # and sentencepiece would log about it
                    bad = next((n for n, p in zip(names, protos, strict=True) if not p), None)
                    if bad is None:
                        return cls(*protos, table=PieceTable.load(data_dir))
                except RuntimeError:
                    bad = next(n for n, p in zip(names, protos, strict=True) if not _parses(p))
                raise DamagedModelError(f"{data_dir / bad}: not a sentencepiece model "
                                        "(damaged?); run `mtkit prep --force` to prepare "
                                        "the data again")
        raise DataError(f"{data_dir}: no sentencepiece model ({JOINT_MODEL}, or {SRC_MODEL} and "
                        f"{TGT_MODEL}); run `mtkit prep` first")

    @property
    def files(self) -> list[str]:
        """The names `save` writes: the sentencepiece model(s), and the table if any."""
        return model_files(self.joint) + ([PIECES] if self.table is not None else [])

    def save(self, data_dir: str | Path) -> list[Path]:
        """Write the model file(s) into `data_dir` (the caller makes the directory atomic)."""
        data_dir = Path(data_dir)
        names = model_files(self.joint)
        procs = [self._src] if self.joint else [self._src, self._tgt]
        for name, proc in zip(names, procs, strict=True):
            (data_dir / name).write_bytes(proc.serialized_model_proto())
        if self.table is not None:
            (data_dir / PIECES).write_text(self.table.to_json(), encoding="utf-8")
        return [data_dir / n for n in self.files]

    def fingerprint(self) -> str:
        """sha256 of the sentencepiece model(s) (and the table): checkpoints record it, so a
        model is never paired with a vocabulary it was not trained on (sizes alone can match
        by chance)."""
        h = hashlib.sha256(self._src.serialized_model_proto())
        if not self.joint:
            h.update(self._tgt.serialized_model_proto())
        if self.table is not None:
            h.update(self.table.to_json().encode("utf-8"))
        return h.hexdigest()

    @property
    def src_vocab_size(self) -> int:
        return len(self.table.src) if self.table is not None else self._src.get_piece_size()

    @property
    def tgt_vocab_size(self) -> int:
        return len(self.table.tgt) if self.table is not None else self._tgt.get_piece_size()

    def encode_src(self, line: str) -> list[int]:
        if self._sides is not None:
            return self._sides["src"].encode(line)
        return self._src.encode(line, out_type=int)

    def encode_tgt(self, line: str) -> list[int]:
        if self._sides is not None:
            return self._sides["tgt"].encode(line)
        return self._tgt.encode(line, out_type=int)

    def encode_src_lines(self, lines: Sequence[str]) -> list[list[int]]:
        """Encode many lines at once on every core (ids without BOS/EOS)."""
        if self._sides is not None:
            return self._sides["src"].encode_lines(lines, os.cpu_count() or 1)
        return self._src.encode(list(lines), out_type=int, num_threads=os.cpu_count() or 1)

    def encode_tgt_lines(self, lines: Sequence[str]) -> list[list[int]]:
        if self._sides is not None:
            return self._sides["tgt"].encode_lines(lines, os.cpu_count() or 1)
        return self._tgt.encode(list(lines), out_type=int, num_threads=os.cpu_count() or 1)

    def sample_lines(self, side: Side, lines: Sequence[str], *, alpha: float,
                     nbest_size: int, seed: int) -> list[list[int]]:
        """A sampled segmentation of each line (ids without BOS/EOS): the unigram model's
        lattice sampling, or BPE-dropout for a BPE model (`config.regularize`); the same
        `seed` (0 to 2**32 - 2) gives the same segmentations."""
        proc = self._src if side == "src" else self._tgt
        if self._sides is None:
            return sample_encode(proc, lines, alpha=alpha, nbest_size=nbest_size, seed=seed)
        pieces = sample_encode(proc, lines, alpha=alpha, nbest_size=nbest_size, seed=seed,
                               out_type=str)
        return [self._sides[side].ids(p) for p in pieces]

    def decode_src(self, ids: Iterable[int]) -> str:
        if self._sides is not None:
            return self._sides["src"].decode(_ints(ids))
        return self._src.decode(_plain(ids))

    def decode_tgt(self, ids: Iterable[int]) -> str:
        if self._sides is not None:
            return self._sides["tgt"].decode(_ints(ids))
        return self._tgt.decode(_plain(ids))

    def src_pieces(self, ids: Iterable[int]) -> list[str]:
        if self.table is not None:
            return [self.table.src[i] for i in _ints(ids)]
        return [self._src.id_to_piece(i) for i in _ints(ids)]

    def tgt_pieces(self, ids: Iterable[int]) -> list[str]:
        if self.table is not None:
            return [self.table.tgt[i] for i in _ints(ids)]
        return [self._tgt.id_to_piece(i) for i in _ints(ids)]

    def starts_word(self, side: Side) -> np.ndarray:
        """(V,) bool for the `side` ("src" or "tgt") vocabulary: True for the pieces that begin
        a word, which sentencepiece marks with a leading U+2581 (special pieces never do)."""
        if side not in self._starts:
            import numpy as np

            pieces = self.src_pieces if side == "src" else self.tgt_pieces
            size = self.src_vocab_size if side == "src" else self.tgt_vocab_size
            self._starts[side] = np.array([p.startswith("\u2581") for p in pieces(range(size))])
        return self._starts[side]

    def tag_id(self, tag: str) -> int | None:
        """The source id of a language tag kept as one piece (`data.spm.user_symbols`), or
        None when sentencepiece cuts it. (A line's first piece is a lone word-start mark
        before the tag's: `encode_src(tag)` gives both.)"""
        ids = self.encode_src(tag)
        return ids[-1] if ids and self.src_pieces(ids[-1:]) == [tag] else None

    def normalize_src(self, line: str) -> str:
        """`line` as sentencepiece normalizes it (NFKC, collapsed spaces): what decoding the
        encoded line gives back when every character is in the vocabulary."""
        return _unescape(self._src.normalize(line))

    def normalize_tgt(self, line: str) -> str:
        return _unescape(self._tgt.normalize(line))


def _ints(ids: Iterable[int]) -> list[int]:
    # Accepts lists, numpy arrays and tensors alike.
    return [int(i) for i in ids]


def _plain(ids: Iterable[int]) -> list[int]:
    return [i for i in _ints(ids) if i not in (PAD_ID, BOS_ID, EOS_ID)]


def _unescape(normalized: str) -> str:
    # Sentencepiece marks spaces (and the dummy prefix) with U+2581 in normalized text.
    return normalized.replace("\u2581", " ").strip(" ")


# sentencepiece draws from one generator per thread, seeded from a process-wide seed when
# the thread first samples (util.cc, `random::GetRandomGenerator`); its API has no per-call
# seed. So each call sets the seed and samples in a thread of its own, under a lock: the
# only way to make a draw reproducible from (seed, step). Tested in tests/unit/data.
_SAMPLING = threading.Lock()


def sample_encode(proc: spm.SentencePieceProcessor, lines: Sequence[str], *, alpha: float,
                  nbest_size: int, seed: int, out_type: type = int) -> list[list]:
    """`lines` encoded by `proc` with sampling, reproducibly from `seed`: ids, or pieces
    with out_type str."""
    out: list[list] = []

    def draw() -> None:  # line by line: a batch call would sample on pool threads
        out.extend(proc.encode(line, out_type=out_type, enable_sampling=True, alpha=alpha,
                               nbest_size=nbest_size) for line in lines)

    with _SAMPLING:
        spm.set_random_generator_seed(seed)
        worker = threading.Thread(target=draw, name="mtkit-spm-sample")
        worker.start()
        worker.join()
    if len(out) != len(lines):  # the thread failed (its exception was printed)
        raise RuntimeError("sentencepiece sampling failed")
    return out
