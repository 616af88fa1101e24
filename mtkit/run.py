"""The run directory contract: what makes a folder an mtkit run, who may write into it, and
what is left over when a writer dies.

A run directory holds what `prep` and `train` write (``recipe.yaml``, ``data/`` with its
``manifest.json``, checkpoints, ``metrics.jsonl``, ``train.log``) and nothing mtkit must
protect. mtkit writes into a folder only when it can prove the folder is its own, and never
replaces what it cannot prove it wrote:

- a folder that does not exist, or is empty (but for mtkit's own lock and staging leftovers),
  becomes a run directory;
- a folder whose ``data/manifest.json`` is an mtkit manifest, whose ``recipe.yaml`` carries
  mtkit's header line, or whose ``last.pt``/``best.pt`` is an mtkit checkpoint (a run whose
  ``data/`` was deleted), is a run directory;
- anything else (a project folder, a ``data/`` of the user's) is refused, ``--force`` or not.

One writer at a time: `prep` and `train` hold the run directory's ``.mtkit.lock``
(`mtkit.process.lock`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from mtkit.errors import CheckpointError, DataError, MtkitError
from mtkit.fileio import atomic_write, write_error

if TYPE_CHECKING:  # torch and sentencepiece load only with a model
    from mtkit.config import Recipe
    from mtkit.data.spm import Tokenizer
    from mtkit.models.base import Translator

log = logging.getLogger(__name__)

CHECKPOINT_FORMAT = 1
LAST, BEST, AVERAGED = "last.pt", "best.pt", "averaged.pt"
# What was chosen after training: the run's model (best.pt or averaged.pt) and the decoding
# defaults tuned for it (`RunChoice`); translate, score --run and align follow it.
CHOICE = "model.json"
METRICS = "metrics.jsonl"  # training's records, one JSON object a line, and the length sweep's
NUMBERED = re.compile(r"checkpoint_(\d+)\.pt")  # training's checkpoint_<update>.pt
EXPORT_MARKER = "mtkit-export.json"  # what `mtkit export` wrote into a folder (mtkit.export)
DATA_DIR = "data"
MANIFEST = "manifest.json"
RECIPE = "recipe.yaml"
LOCK = ".mtkit.lock"
SHORTLIST = "shortlist.npz"  # the vocabulary shortlist (mtkit.data.shortlist), built on first use
# The first line of every recipe.yaml that mtkit writes into a run directory: the proof that
# mtkit may replace it.
RECIPE_HEADER = "# Written by mtkit: the resolved recipe of this run (replaced by each prep)."
# The line after it in a run that `train --init-from` started: the parent checkpoint (path,
# update, sha256) as JSON in a comment, so that recipe.yaml stays a recipe that --resume,
# data.spm.from_run and a user's next run load unchanged.
INIT_FROM_PREFIX = "# init_from: "
# Hidden names mtkit itself leaves in a run directory: its lock, prep's staging folders and
# the temporary files of interrupted atomic writes.
_OWN_LEFTOVERS = re.compile(r"\.mtkit\.lock|\.data\.(tmp|old)-.*|\..*\.tmp")
# Temporary files of checkpoint writes (`atomic_write`'s ``.NAME.XXXXXXXX.tmp``, mkstemp's
# eight characters, and the hard link's ``.NAME.link.tmp``) that a process killed mid-write
# leaves behind; only those (a user's '.best.pt.old.tmp' was removed too).
_STALE_CHECKPOINT_TMP = re.compile(
    r"\.(checkpoint_\d+|last|best|averaged)\.pt\.(link|[a-z0-9_]{8})\.tmp")
_CHOICE_FORMAT = 1


class RunDirError(MtkitError):
    """A folder is not an mtkit run directory, or another process is writing into it."""


def numbered_checkpoint(run_dir: str | Path, update: int) -> Path:
    """The checkpoint training saves at `update` (`NUMBERED`)."""
    return Path(run_dir) / f"checkpoint_{update}.pt"


def data_dir(run_dir: str | Path) -> Path:
    """The prepared data directory of a run."""
    return Path(run_dir) / DATA_DIR


def is_mtkit_manifest(path: Path) -> bool:
    """True when `path` is a manifest that `mtkit prep` wrote (whatever its format)."""
    try:
        man = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(man, dict) and {"format", "data_hash", "files"} <= man.keys()


def run_recipe_text(recipe_yaml: str, init_from: dict[str, Any] | None) -> str:
    """What a run's recipe.yaml holds: the header, the parent checkpoint `init_from` of
    `train --init-from` (a comment; none when None), the resolved recipe `recipe_yaml`."""
    parent = f"{INIT_FROM_PREFIX}{json.dumps(init_from)}\n" if init_from is not None else ""
    return f"{RECIPE_HEADER}\n{parent}{recipe_yaml}"


def recorded_init_from(run_dir: str | Path) -> dict[str, Any] | None:
    """The parent checkpoint `run_dir`'s recipe.yaml records (`run_recipe_text`), or None."""
    try:
        with open(Path(run_dir) / RECIPE, encoding="utf-8") as f:
            header, line = f.readline().rstrip("\n"), f.readline()
        record = json.loads(line.removeprefix(INIT_FROM_PREFIX))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    ours = header == RECIPE_HEADER and line.startswith(INIT_FROM_PREFIX)
    return record if ours and isinstance(record, dict) else None


def _has_mtkit_recipe(run_dir: Path) -> bool:
    try:
        with open(run_dir / RECIPE, encoding="utf-8") as f:
            return f.readline().rstrip("\n") == RECIPE_HEADER
    except (OSError, UnicodeDecodeError):
        return False


def _has_mtkit_checkpoint(run_dir: Path) -> bool:
    for name in (LAST, BEST):
        if (run_dir / name).is_file():
            try:
                load_checkpoint(run_dir / name, mmap=True)  # weights only: runs no code
                return True
            except CheckpointError:
                pass
    return False


def check_writable_run_dir(run_dir: str | Path) -> None:
    """Refuse a `run_dir` that mtkit cannot prove is its own (see the module doc)."""
    run_dir = Path(run_dir)
    if not run_dir.exists():
        return
    if not run_dir.is_dir():
        raise RunDirError(f"{run_dir}: is a file; the run directory must be a folder")
    ddir = data_dir(run_dir)
    if is_mtkit_manifest(ddir / MANIFEST) or _has_mtkit_recipe(run_dir):
        return
    if not ddir.exists() and _has_mtkit_checkpoint(run_dir):
        return
    if ddir.exists():
        raise RunDirError(f"{ddir}: was not written by mtkit prep (no mtkit {MANIFEST} in "
                          "it); mtkit replaces only data it prepared: choose another "
                          "--run-dir or recipe name")
    others = sorted(p.name for p in run_dir.iterdir() if not _OWN_LEFTOVERS.fullmatch(p.name))
    if others:
        shown = ", ".join(others[:3]) + (", ..." if len(others) > 3 else "")
        raise RunDirError(f"{run_dir}: not empty ({shown}) and not an mtkit run directory; "
                          "train into a new or empty folder (--run-dir or the recipe's name)")


def remove_stale_temporaries(run_dir: str | Path) -> int:
    """Delete checkpoint temporaries left by a writer that was killed mid-write; call it only
    while holding the run lock (no live writer can own them then). Returns how many."""
    removed = 0
    for p in Path(run_dir).iterdir():
        if _STALE_CHECKPOINT_TMP.fullmatch(p.name) and p.is_file():
            with contextlib.suppress(FileNotFoundError):
                p.unlink()
                removed += 1
    if removed:
        log.info("removed %d temporary checkpoint file(s) left by an interrupted write in %s",
                 removed, run_dir)
    return removed


# --------------------------------------------------------------------------- checkpoint files


def save_checkpoint(path: str | Path, state: dict[str, Any]) -> Path:
    """Write `state` to `path` through a temporary file and a rename: a crash mid-write
    leaves the previous file (or none), never half of one."""
    import torch  # here, not at the top: `mtkit prep` needs run.py but not torch

    path = Path(path)
    with atomic_write(path, "wb", own=True) as f:
        out = _Writes(f)
        try:
            torch.save({"format": CHECKPOINT_FORMAT, **state}, out)
        except RuntimeError:
            # torch's writer turns the OSError of a failed write (disk full) into a
            # RuntimeError without its reason: report the OSError it swallowed.
            if out.error is None:
                raise
            raise write_error(path, out.error) from None
    return path


class _Writes:
    """A file that remembers the OSError of a failed write (see `save_checkpoint`)."""

    def __init__(self, f) -> None:
        self.f, self.error = f, None

    def write(self, data: bytes) -> int:
        try:
            return self.f.write(data)
        except OSError as e:
            self.error = e
            raise

    def flush(self) -> None:
        self.f.flush()


def load_checkpoint(path: str | Path, *, mmap: bool = False) -> dict[str, Any]:
    """Read a checkpoint on the CPU with ``weights_only=True``; CheckpointError when the file
    is missing, unreadable or not an mtkit checkpoint.

    mmap: map the file instead of reading it, so that only the tensors used are read (a
    model for inference needs the weights, not the optimizer's two moments, which make up
    two thirds of a training checkpoint)."""
    import torch

    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: checkpoint not found")
    try:
        try:
            state = torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
        except RuntimeError:
            if not mmap:
                raise
            # Files in torch's legacy (non-zip) format, or on file systems that cannot be
            # mapped: read them whole.
            state = torch.load(path, map_location="cpu", weights_only=True)
    except (OSError, MemoryError) as e:  # the file is fine, the reading failed
        why = "out of memory" if isinstance(e, MemoryError) else (
            e.strerror or str(e) or type(e).__name__)
        raise CheckpointError(f"{path}: cannot be read: {why}") from None
    except Exception:  # torch raises many types, with long messages, for foreign files
        raise CheckpointError(f"{path}: not a readable checkpoint (expected a .pt file written "
                              "by mtkit train or mtkit average)") from None
    if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT:
        raise CheckpointError(f"{path}: not an mtkit checkpoint (format "
                              f"{CHECKPOINT_FORMAT} expected)")
    for key in ("recipe", "vocab", "model"):
        if key not in state:
            raise CheckpointError(f"{path}: checkpoint lacks `{key}`")
    return state


# --------------------------------------------------------------------------- loading a model



# --------------------------------------------------------------------------- the run's model


@dataclass(frozen=True)
class RunChoice:
    """The run's model and decoding defaults, as chosen after training (``model.json``).

    checkpoint: the file name in the run directory that `resolve_checkpoint` gives for the
    run (best.pt, or averaged.pt when it validated better); fingerprint: that file's (size,
    modification time in ns) when chosen: a file written since (`mtkit average` again, a
    resumed training) is another model, and the choice no longer holds; decode: `decode`
    fields that override the recipe's for this model (the length sweep's winner), {} for
    none; why: what chose them, for people reading the file."""

    checkpoint: str
    fingerprint: tuple[int, int]
    decode: dict[str, Any] = field(default_factory=dict)
    why: dict[str, Any] = field(default_factory=dict)


def file_fingerprint(path: Path) -> tuple[int, int]:
    st = path.stat()
    return st.st_size, st.st_mtime_ns


def read_choice(run_dir: str | Path) -> RunChoice | None:
    """The run's choice when one was made and its checkpoint is still the file it was made
    for; None otherwise (a stale choice is said once in the log)."""
    path = Path(run_dir) / CHOICE
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        choice = RunChoice(raw["checkpoint"], tuple(raw["fingerprint"]), dict(raw["decode"]),
                           dict(raw.get("why", {})))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError):
        _warn_once(path, f"{path}: unreadable; using {BEST} and the recipe's decoding")
        return None
    ckpt = Path(run_dir) / choice.checkpoint
    if "/" in choice.checkpoint or not ckpt.is_file() or (
            file_fingerprint(ckpt) != choice.fingerprint):
        _warn_once(path, f"{path}: {choice.checkpoint} is not the file chosen (written since, "
                   f"or gone); using {BEST} and the recipe's decoding")
        return None
    return choice


_warned: set[tuple[Path, str]] = set()


def _warn_once(path: Path, line: str) -> None:
    """A command resolves its run several times: the warning is said once."""
    if (path, line) not in _warned:
        _warned.add((path, line))
        log.warning("%s", line)


def write_choice(run_dir: str | Path, choice: RunChoice) -> Path:
    """Record `choice` as the run's model and decoding (atomically)."""
    path = Path(run_dir) / CHOICE
    with atomic_write(path, own=True) as f:
        json.dump({"format": _CHOICE_FORMAT, **dataclasses.asdict(choice)}, f, indent=1)
        f.write("\n")
    return path


def clear_choice(run_dir: str | Path) -> bool:
    """Forget the run's choice (training is about to change its checkpoints); True when there
    was one."""
    try:
        (Path(run_dir) / CHOICE).unlink()
        return True
    except FileNotFoundError:
        return False


def chosen_decode(ckpt: Path) -> dict[str, Any]:
    """The decoding defaults chosen for checkpoint `ckpt`: its run's choice when `ckpt` is the
    run's model, else none."""
    choice = read_choice(ckpt.parent)
    if choice is None or not _same_file(ckpt, ckpt.parent / choice.checkpoint):
        return {}
    return choice.decode


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.samefile(b)
    except OSError:
        return False


def resolve_checkpoint(run_dir_or_ckpt: str | Path) -> Path:
    """A checkpoint file as given, or a run directory's model: the one its `RunChoice` names
    (averaged.pt when it validated better than best.pt), else ``best.pt``, else ``last.pt``."""
    p = Path(run_dir_or_ckpt)
    if p.is_dir():
        if (choice := read_choice(p)) is not None:
            return p / choice.checkpoint
        for name in (BEST, LAST):
            if (p / name).is_file():
                return p / name
        if (p / EXPORT_MARKER).is_file():
            raise CheckpointError(f"{p}: an exported model (CTranslate2), not a run directory "
                                  f"or checkpoint; `mtkit translate {p}` decodes it")
        if (p / "model.bin").is_file() and (p / "config.json").is_file():
            raise CheckpointError(f"{p}: a CTranslate2 model that mtkit export did not write "
                                  f"(no {EXPORT_MARKER}); mtkit decodes its own exports, "
                                  "which carry the tokenizer and the decoding settings")
        if p.name == DATA_DIR and (p / MANIFEST).is_file():
            raise CheckpointError(f"{p}: a run's prepared data, not the run directory; give "
                                  f"{p.parent}")
        raise CheckpointError(f"{p}: no {BEST} or {LAST} in this run directory; train a "
                              f"model first (mtkit train RECIPE --run-dir {p})")
    if not p.exists():
        raise CheckpointError(f"{p}: no such checkpoint file or run directory")
    return p


def vocab_info(tokenizer: Any) -> dict[str, Any]:
    """What a checkpoint records of its vocabulary: the sizes, and the sentencepiece models'
    sha256 (which hashes the models: compute it once per run)."""
    return {"src": tokenizer.src_vocab_size, "tgt": tokenizer.tgt_vocab_size,
            "sha256": tokenizer.fingerprint()}


def same_vocab(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """The same sizes, and the same sentencepiece models where both record them (checkpoints
    written before the sha256 was recorded have none)."""
    return (a["src"], a["tgt"]) == (b["src"], b["tgt"]) and (
        a.get("sha256") is None or b.get("sha256") is None or a["sha256"] == b["sha256"])


def check_vocab(saved: dict[str, Any], now: dict[str, Any], *, ddir: Path, what: str) -> None:
    """Refuse a data folder whose vocabulary (`now`, `vocab_info`) is not the one a checkpoint
    was trained with (`saved`, its ``vocab``); `what` names the checkpoint in the message."""
    if (now["src"], now["tgt"]) != (saved["src"], saved["tgt"]):
        raise CheckpointError(f"{what}: trained with vocabularies {saved['src']}/{saved['tgt']}"
                              f" but {ddir} holds {now['src']}/{now['tgt']}; was the data "
                              "prepared again?")
    if not same_vocab(saved, now):
        raise CheckpointError(f"{what}: the sentencepiece model in {ddir} is not the one this "
                              "checkpoint was trained with; was the data prepared again?")


def weights_mismatch(path: Path, e: RuntimeError) -> CheckpointError:
    """The one line for a checkpoint whose weights do not fit the model its recipe describes
    (torch's load_state_dict error: a header line, then the keys and shapes at fault)."""
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    detail = lines[1] if len(lines) > 1 and lines[0].endswith(":") else lines[0] if lines else ""
    return CheckpointError(f"{path}: weights do not fit the model its recipe describes "
                           f"({detail[:200]})")


def check_weights(path: Path, state: dict[str, Any], model_cfg: Any) -> None:
    """Refuse (`weights_mismatch`'s line) a checkpoint whose weights do not fit the model its
    recipe's `model_cfg` describes, before anything is built or written: the model is laid out
    on the meta device, which holds no memory, and handed the weights as they are."""
    import torch

    from mtkit.models.build import build_model

    vocab = state["vocab"]
    with torch.device("meta"):
        skeleton = build_model(model_cfg, vocab["src"], vocab["tgt"])
    try:
        skeleton.load_state_dict(state["model"], assign=True)
    except RuntimeError as e:
        raise weights_mismatch(path, e) from None


class Loaded(NamedTuple):
    """A trained model ready for inference, with what it was trained from."""

    model: Translator  # in eval mode on the device asked for
    recipe: Recipe
    tokenizer: Tokenizer


def checkpoint_recipe(run_dir_or_ckpt: str | Path) -> Recipe:
    """The recipe a model decodes with (`load_model`'s), without building the model: its
    checkpoint's, with the decoding chosen for the run's model. The weights are mapped, not
    read."""
    from mtkit.device import host_memory_defaults

    host_memory_defaults()  # before torch's first allocation, as `load_model` does
    path = resolve_checkpoint(run_dir_or_ckpt)
    return _decoding_recipe(path, load_checkpoint(path, mmap=True))


def _decoding_recipe(path: Path, state: dict[str, Any]) -> Recipe:
    from mtkit.config import recipe_from_yaml_text

    recipe = recipe_from_yaml_text(state["recipe"], source=f"{path} (its recipe)")
    if tuned := chosen_decode(path):  # the run's model decodes as chosen for it
        try:
            recipe = dataclasses.replace(recipe, decode=dataclasses.replace(recipe.decode,
                                                                            **tuned))
        except TypeError:
            raise CheckpointError(f"{path.parent / CHOICE}: `decode` holds a key that is not "
                                  f"a decode field ({', '.join(sorted(tuned))})") from None
    return recipe


def load_model(run_dir_or_ckpt: str | Path, device: Any = "cpu") -> Loaded:
    """Rebuild a trained model for inference. The tokenizer is read from the ``data/`` folder
    of the run directory that holds the checkpoint."""
    from mtkit.device import host_memory_defaults

    host_memory_defaults()  # before torch allocates its first tensor (the checkpoint's)
    import torch

    from mtkit.data.spm import DamagedModelError, Tokenizer
    from mtkit.models.build import build_model

    path = resolve_checkpoint(run_dir_or_ckpt)
    state = load_checkpoint(path, mmap=True)
    recipe = _decoding_recipe(path, state)
    ddir = data_dir(path.parent)
    try:
        tokenizer = Tokenizer.load(ddir)
    except DamagedModelError as e:
        raise CheckpointError(str(e)) from None
    except DataError as e:
        raise CheckpointError(f"{path}: a checkpoint needs its run directory's data/ folder "
                              f"beside it for the tokenizer ({e})") from None
    vocab = state["vocab"]
    check_vocab(vocab, vocab_info(tokenizer), ddir=ddir, what=str(path))
    try:
        model = build_model(recipe.model, vocab["src"], vocab["tgt"], weights=state["model"])
    except RuntimeError as e:
        raise weights_mismatch(path, e) from None
    if torch.device(device).type == "cuda":
        from mtkit.device import cuda_defaults

        cuda_defaults()
    return Loaded(model.to(device).eval(), recipe, tokenizer)


def average_destination(inputs: list[Path], paths: list[Path], output: Path | None) -> Path:
    """Where `mtkit average` of `paths` (chosen from `inputs`) writes: `output` (the option of
    that name), else averaged.pt in the run directory or beside the first file. Refused before
    anything is read: one of the checkpoints averaged, a folder, a file that is not a
    checkpoint, a place without a data/ folder beside it (nothing could load the average),
    and the names that are training's (last.pt, best.pt, the numbered checkpoints)."""
    out = output or (inputs[0] if inputs[0].is_dir() else inputs[0].parent) / AVERAGED

    def refused(why: str) -> MtkitError:
        if output is not None:
            return MtkitError.about("output", why, value=out)
        return MtkitError.about(None, f"{out} (where the average goes without {{0}}): {why}",
                                others=("output",))

    if any(out.resolve() == p.resolve() or out.is_file() and out.samefile(p) for p in paths):
        raise refused("is one of the checkpoints being averaged")
    if out.is_dir():  # said before the checkpoints are read
        raise refused("is a folder; expected a file name")
    if out.exists() and not is_checkpoint_file(out):
        raise refused("exists and is not a checkpoint; an average replaces only a checkpoint: "
                      "give a new file name")
    if not data_dir(out.parent).is_dir():
        raise refused(f"{out.parent} has no data/ folder; translate, score and align read a "
                      "checkpoint's tokenizer from the data/ folder beside it: write the "
                      "average into the run directory")
    if out.name in (LAST, BEST):
        raise refused(f"the run's {out.name} is its training's ({LAST}: what training resumes "
                      f"from; {BEST}: its best checkpoint), which an average is not; give "
                      "another name")
    if NUMBERED.fullmatch(out.name):
        raise refused("the name of the run's numbered checkpoints, which `average --last` and "
                      "training take as theirs; give another name")
    return out


def is_checkpoint_file(path: Path) -> bool:
    """Whether `path` is a file torch.save wrote (a zip archive holding NAME/data.pkl); a
    device or pipe is not opened."""
    import zipfile

    if not path.is_file():
        return False
    try:
        with zipfile.ZipFile(path) as z:
            return any(n.endswith("/data.pkl") for n in z.namelist())
    except (zipfile.BadZipFile, OSError):
        return False


def run_shortlist(run_dir_or_ckpt: str | Path) -> tuple[Any, str | None]:
    """The vocabulary shortlist of the run that holds this model (`mtkit.data.shortlist`):
    read from ``shortlist.npz``, or counted from the run's prepared training data when that
    file is missing or was counted on other data, and saved there. Returns it and a line
    saying it was built (None when read). A run without its training data and without the
    file: a CheckpointError."""
    import time

    from mtkit.data.manifest import read_manifest
    from mtkit.data.shortlist import build_shortlist, load_shortlist, save_shortlist
    from mtkit.data.spm import Tokenizer
    from mtkit.data.store import ParallelData

    run_dir = resolve_checkpoint(run_dir_or_ckpt).parent
    path = run_dir / SHORTLIST
    manifest = read_manifest(run_dir) or {}
    data_hash = str(manifest.get("data_hash", ""))
    if path.exists():
        found = load_shortlist(path)
        if found.data_hash == data_hash or not data_hash:
            return found, None
    start = time.perf_counter()
    try:
        train = ParallelData.load(data_dir(run_dir), "train")
    except DataError as e:
        raise CheckpointError(f"{run_dir}: the vocabulary shortlist is counted from the run's "
                              f"prepared training data, which is not there ({e})") from None
    tok = Tokenizer.load(data_dir(run_dir))
    built = build_shortlist(train, tok.src_vocab_size, tok.tgt_vocab_size, data_hash)
    try:
        save_shortlist(path, built)
        where = f"saved to {path}"
    except OSError as e:  # a read-only run: the shortlist is counted again next time
        where = f"not saved ({e.strerror or e})"
    return built, (f"counted the vocabulary shortlist from {len(train):,} training pairs in "
                   f"{time.perf_counter() - start:.1f} s; {where}")
