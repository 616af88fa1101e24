"""What a training run tells the user and leaves behind: a progress bar and log lines on
stderr, ``train.log``, ``metrics.jsonl`` (one JSON object per line, each with a `kind`:
train, valid, average, end, ddp_check) and, as `train.tensorboard` asks, TensorBoard event
files under ``tensorboard/``. Only rank 0 reports; other ranks get a disabled reporter.

On a terminal the bottom of the screen is live: the latest validations as a table, above the
progress line, which drops its least useful fields to fit the terminal's width. Elsewhere (a
log file, a pipe) each validation is one line."""

from __future__ import annotations

import json
import logging
import math
import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

from rich.console import Console, RenderableType
from rich.progress import Progress, ProgressColumn, Task
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from mtkit.errors import ConfigError
from mtkit.fileio import atomic_write, open_own, write_error
from mtkit.train.progress import Window, WindowTotals

METRICS, LOG = "metrics.jsonl", "train.log"


class _ConsoleHandler(logging.Handler):
    """Log records as plain lines on the rich console (above a live progress bar)."""

    def __init__(self, console: Console) -> None:
        super().__init__(logging.INFO)
        self.console = console

    def emit(self, record: logging.LogRecord) -> None:
        prefix = "" if record.levelno < logging.WARNING else record.levelname.lower() + ": "
        self.console.print(prefix + record.getMessage(), markup=False, highlight=False,
                           soft_wrap=True)


class _LogFile(logging.FileHandler):
    """train.log; a failed write (disk full) stops the run with one error line, instead of
    logging's default of printing a traceback and going on without a log. A link in its place
    is replaced, not written through (`fileio.open_own`)."""

    def _open(self) -> Any:
        return os.fdopen(open_own(self.baseFilename), "a", encoding=self.encoding)

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 (logging's name)
        import sys

        e = sys.exc_info()[1]
        if isinstance(e, OSError):
            raise write_error(self.baseFilename, e) from None
        super().handleError(record)


def _tensorboard(run_dir: Path, mode: Literal["auto", "on", "off"]) -> Any:
    """The event-file writer `train.tensorboard` asks for, or None."""
    if mode == "off":
        return None
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:  # the optional extra: pip install 'mtkit[tensorboard]'
        if mode == "on":
            raise ConfigError("train.tensorboard is on but the tensorboard package is not "
                              "installed: pip install 'mtkit[tensorboard]', or set "
                              "train.tensorboard to auto or off") from None
        return None
    return SummaryWriter(str(run_dir / "tensorboard"))


# The progress line's optional fields, the least useful first: a narrow terminal drops them in
# this order, and never the update count or the ETA.
DROP_ORDER = ("lr", "tok_s", "epoch", "loss")
BAR_WIDTH, BAR_MIN = 40, 10


def fit_line(head: str, fields: dict[str, str], eta: str, width: int) -> tuple[int, str]:
    """The progress line for a terminal `width` columns wide: `head` (the update count), a bar
    and the `fields` (in display order, keyed as in `DROP_ORDER`) then `eta`, joined by ' | '.
    Fields are dropped, least useful first, while the bar would be narrower than `BAR_MIN`;
    the bar then takes what is left, up to `BAR_WIDTH` (0: no room for one).
    Returns the bar's width and what follows it."""
    shown = dict(fields)
    droppable = [key for key in DROP_ORDER if key in shown]
    while True:
        tail = " | ".join([*shown.values(), eta])
        room = width - len(head) - len(tail) - 2  # a space each side of the bar
        if room >= BAR_MIN or not droppable:
            break
        del shown[droppable.pop(0)]
    bar = min(room, BAR_WIDTH) if room >= BAR_MIN else 0
    return bar, tail


class _TrainLine(ProgressColumn):
    """The whole progress line as one column, fitted to the console's width at each refresh."""

    def __init__(self, console: Console) -> None:
        super().__init__()
        self.console = console

    def render(self, task: Task) -> RenderableType:
        f = task.fields
        head = f"update {task.completed:,.0f}{f['of']}"
        bar, tail = fit_line(head, f["parts"], f"ETA {f['eta']}", self.console.width - 1)
        if not bar:
            return Text(f"{head} {tail}", no_wrap=True, overflow="ellipsis")
        grid = Table.grid(padding=(0, 1))
        grid.add_row(Text(head), ProgressBar(total=task.total, completed=task.completed,
                                             width=bar), Text(tail))
        return grid


class _LiveView(Progress):
    """The progress line with the latest validations' table above it."""

    table: Table | None = None

    def get_renderables(self) -> Iterable[RenderableType]:
        if self.table is not None:
            yield self.table
        yield self.make_tasks_table(self.tasks)


def _fmt(value: float, spec: str) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) \
        else format(value, spec)


def trim_metrics(path: Path, *, after_update: int | None) -> list[int]:
    """Start ``metrics.jsonl`` afresh (None) or drop the records of updates after
    `after_update` (a resumed run redoes them). Returns the numbers (from 1) of lines that
    were not a record and were dropped: a line cut short by kill -9 or a full disk."""
    if after_update is None or not path.is_file():
        with atomic_write(path, own=True) as f:
            f.write("")
        return []
    keep, torn = [], []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        try:
            rec = json.loads(line) if line.strip() else None
        except ValueError:
            rec = None
        if not isinstance(rec, dict):
            torn += [number] if line.strip() else []
        elif rec.get("update", 0) <= after_update:
            keep.append(line)
    with atomic_write(path, own=True) as f:
        f.write("".join(line + "\n" for line in keep))
    return torn


class Reporter:
    """Progress bar, log handlers and metric files of one run; a no-op when not `enabled`."""

    def __init__(self, run_dir: Path, console: Console, *, enabled: bool,
                 resumed_at: int | None,
                 tensorboard: Literal["auto", "on", "off"] = "auto") -> None:
        self.run_dir, self.console, self.enabled = run_dir, console, enabled
        self._resumed_at, self._tb_mode = resumed_at, tensorboard
        self._handlers: list[logging.Handler] = []
        self._tb: Any = None
        self._valid_rows: list[tuple] = []
        self._live = enabled and console.is_terminal
        self._progress = _LiveView(_TrainLine(console), console=console,
                                   disable=not self._live)
        self._task = None

    def __enter__(self) -> Reporter:
        if not self.enabled:
            return self
        self._tb = _tensorboard(self.run_dir, self._tb_mode)  # refused before anything is written
        self.run_dir.mkdir(parents=True, exist_ok=True)
        torn = trim_metrics(self.run_dir / METRICS, after_update=self._resumed_at)
        root = logging.getLogger("mtkit")
        self._old_level = root.level
        root.setLevel(logging.INFO)
        fh = _LogFile(self.run_dir / LOG, encoding="utf-8")
        fh.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        self._handlers = [fh, _ConsoleHandler(self.console)]
        for h in self._handlers:
            root.addHandler(h)
        if torn:
            s = "s" if len(torn) > 1 else ""
            root.warning("%s: dropped %d unreadable line%s (line%s %s%s)", METRICS, len(torn),
                         s, s, ", ".join(map(str, torn[:5])), ", ..." if len(torn) > 5 else "")
        if self._tb is not None:
            root.info("TensorBoard event files in %s (train.tensorboard: %s)",
                      self.run_dir / "tensorboard", self._tb_mode)
        self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if not self.enabled:
            return
        self._progress.stop()
        root = logging.getLogger("mtkit")
        for h in self._handlers:
            root.removeHandler(h)
            h.close()
        root.setLevel(self._old_level)
        if self._tb is not None:
            self._tb.close()

    def record(self, kind: str, **fields: Any) -> None:
        """Append one record to metrics.jsonl (and its numbers to TensorBoard)."""
        if not self.enabled:
            return
        rec = {"kind": kind, **fields}
        try:
            with os.fdopen(open_own(self.run_dir / METRICS), "a", encoding="utf-8") as f:
                f.write(json.dumps(rec) + "\n")
        except OSError as e:
            raise write_error(self.run_dir / METRICS, e) from None
        if self._tb is not None and "update" in rec:
            for key, value in rec.items():
                if isinstance(value, int | float) and key != "update":
                    self._tb.add_scalar(f"{kind}/{key}", value, rec["update"])

    def train_window(self, *, update: int, epoch: int, totals: WindowTotals, window: Window,
                     lr: float, elapsed: float, guided: bool) -> tuple[float, float]:
        """Record and log a training window that ends at `update` (`totals`: its sums over
        every rank; `window`: this rank's, for the gradient norm, skips and start). Returns
        the window's mean loss and target tokens/s, for the progress line."""
        t, w = totals, window
        secs = max(time.monotonic() - w.start, 1e-9)
        mean = t.loss / t.tokens if t.tokens else math.nan
        mean_nll = t.nll / t.tokens if t.tokens else math.nan
        rec = {"update": update, "epoch": epoch, "loss": mean, "nll": mean_nll,
               "ppl": math.exp(min(mean_nll, 700)) if t.tokens else math.nan, "lr": lr,
               "gnorm": w.gnorm / w.updates if w.updates else math.nan,
               "tgt_tokens": int(t.all_tokens), "tgt_tokens_per_s": t.all_tokens / secs,
               "skipped": w.skipped, "elapsed": elapsed}
        shown = ""
        if guided:  # the mean over linked target pieces
            rec["align_loss"] = t.align / t.align_rows if t.align_rows else math.nan
            shown = f" | align {rec['align_loss']:.3f}"
        self.record("train", **rec)
        skipped = f" | {w.skipped} skipped" if w.skipped else ""
        logging.getLogger("mtkit.train").info(
            "update %s | epoch %d | loss %.3f%s | ppl %.2f | lr %.2e | gnorm %.2f | %s tgt tok/s%s",
            f"{update:,}", epoch, mean, shown, rec["ppl"], lr, rec["gnorm"],
            f"{rec['tgt_tokens_per_s']:,.0f}", skipped)
        return mean, rec["tgt_tokens_per_s"]

    def bar(self, *, update: int, total: int | None, epoch: int, loss: float | None,
            lr: float, tok_s: float, eta: float | None) -> None:
        """Move the progress line (`eta` in seconds, None when unknown)."""
        if not self.enabled:
            return
        parts = {"epoch": f"epoch {epoch}", "loss": f"loss {_fmt(loss, '.3f')}",
                 "lr": f"lr {lr:.2e}", "tok_s": f"{tok_s:,.0f} tgt tok/s"}
        fields = {"of": f"/{total:,}" if total else "", "parts": parts,
                  "eta": "-" if eta is None else duration(eta)}
        if self._task is None:
            self._task = self._progress.add_task("train", total=total, completed=update,
                                                 **fields)
        self._progress.update(self._task, total=total, completed=update, **fields)

    def valid_table(self, row: dict[str, Any], *, metric: str, best: bool) -> None:
        """Show a validation: on a terminal, the live table of the last few (the newest
        last); elsewhere, and in train.log, one line."""
        if not self.enabled:
            return
        line = (f"validation at update {row['update']:,}: loss {_fmt(row['loss'], '.3f')}, "
                f"ppl {_fmt(row['ppl'], '.2f')}, BLEU {_fmt(row['bleu'], '.2f')}, chrF "
                f"{_fmt(row['chrf'], '.2f')}{' (best)' if best else ''}")
        if row.get("directions"):  # a recipe of several directions: each tag's own
            line += "; " + ", ".join(f"{tag} BLEU {_fmt(d['bleu'], '.2f')}"
                                     for tag, d in row["directions"].items())
        if not self._live:  # a log file or a pipe keeps every line it was given
            logging.getLogger("mtkit.train").info("%s", line)
            return
        self._valid_rows = (self._valid_rows + [(row, best)])[-5:]
        self._progress.table = self._table(metric)
        self._progress.refresh()
        # the table is the terminal's; train.log (a run followed with `tail -f`) gets the line
        for h in self._handlers:
            if isinstance(h, _LogFile):
                h.handle(logging.LogRecord("mtkit.train", logging.INFO, __file__, 0, line, None,
                                           None))

    def _table(self, metric: str) -> Table:
        table = Table(title=f"validation (best by {metric})", title_justify="left")
        for col in ("update", "loss", "ppl", "BLEU", "chrF", "best", "time"):
            table.add_column(col, justify="right")
        for r, b in self._valid_rows:
            table.add_row(f"{r['update']:,}", _fmt(r["loss"], ".3f"), _fmt(r["ppl"], ".2f"),
                          _fmt(r["bleu"], ".2f"), _fmt(r["chrf"], ".2f"), "*" if b else "",
                          f"{r['seconds']:.1f}s")
        return table


def duration(seconds: float) -> str:
    s = int(max(seconds, 0))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"
