"""The training loop: a `Trainer` runs updates over a built `Setup`, validates, checkpoints.

The loop keeps the GPU busy: an update's losses, gradient norm and skip flag stay on the
device and are read back in bulk at "sync points" (every update on a CPU, where reading is
free; every `train.log_every` updates on a GPU). Warnings about skipped updates, the
non-finite abort, log lines and the stop checks (time budget, Ctrl-C) happen there.

A run is exactly resumable: a checkpoint is written only between updates and holds the
weights, optimizer, schedule, epoch and position in the epoch, and every RNG state, so a
resumed run draws the same batches and the same dropout masks as an uninterrupted one.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import time
from pathlib import Path

import numpy as np
import torch
from rich.console import Console

from mtkit.config import Recipe, parse_duration, recipe_from_yaml_text
from mtkit.data.batch import Batch, iterate_batches
from mtkit.errors import MtkitError
from mtkit.fileio import WriteError
from mtkit.process.signals import GracefulStop
from mtkit.run import AVERAGED, BEST, load_checkpoint, numbered_checkpoint
from mtkit.train import checkpoint as ckpt
from mtkit.train.choose import choose_model
from mtkit.train.distributed import Dist, shared_store_warning
from mtkit.train.optim import HORIZON_PACE, PACE_SKIP
from mtkit.train.progress import (
    Closing,
    Progress,
    TrainResult,
    Window,
    WindowTotals,
    planned_updates,
)
from mtkit.train.report import Reporter, duration
from mtkit.train.setup import Setup, carried_and_fresh
from mtkit.train.step import Guide, finish_update, forward_backward, token_normalizer
from mtkit.train.validate import HIGHER_IS_BETTER, ValidResult, validate

log = logging.getLogger(__name__)

# A linear horizon this far (a share of the run's updates) from where the time budget ended
# training is said at the end: the schedule was sized for another pace.
HORIZON_MISS = 0.05


class Trainer:
    """One training run over a built `Setup`. `run` is the whole of it; the methods below
    are its steps. Everything it holds is set here; only `p` (progress), the windows and the
    checkpoint paths change as it trains."""

    def __init__(self, recipe: Recipe, run_dir: Path, setup: Setup, *, state: dict | None,
                 dist: Dist, device: torch.device, console: Console) -> None:
        self.recipe = recipe
        self.cfg = recipe.train
        self.run_dir = run_dir
        self.s = setup
        self.dist = dist
        self.device = device
        self.console = console
        self.max_time = parse_duration(self.cfg.max_time) if self.cfg.max_time else None
        self.save_every_s = (parse_duration(self.cfg.checkpoint_every_time)
                             if self.cfg.checkpoint_every_time else None)
        self.saved_at = time.monotonic()  # of the latest checkpoint, or the start
        # Reading device values back stalls a GPU's queue; on a CPU it costs nothing.
        self.sync_every = self.cfg.log_every if device.type == "cuda" else 1
        # (update, UpdateSums.packed(), target tokens, linked target pieces, lr) per update
        self.pending: list[tuple[int, torch.Tensor, int, int, float]] = []
        self.p = Progress()
        # batches per update on this rank: the recipe's, or what keeps a resumed run's
        # global batch when it comes back on another number of processes (`_restore`)
        self.update_freq = self.cfg.update_freq
        self.notes: list[tuple[int, str]] = []  # (level, line) of the restore, logged at start
        self.closing = Closing()  # kept inside train.max_time
        self.last_checkpoint: Path | None = None
        self.last_good_checkpoint: Path | None = None  # written after a finite update
        if state is not None:
            self._restore(state)
        self.stop = GracefulStop()
        self.best_unsaved = False  # the latest validation was the best and is not saved yet
        self.rep = Reporter(run_dir, console, enabled=dist.is_main,
                            resumed_at=self.p.update if state is not None else None,
                            tensorboard=self.cfg.tensorboard)
        self.resumed = state is not None
        self.window = Window()
        self.t0 = time.monotonic()  # when this session's training started
        self.session_update0 = self.p.update  # the update it started from
        self.lr = self.s.schedule.lr_at(self.p.update)  # of the latest update
        self.last_loss: float | None = None  # mean loss of the latest log window
        self.tok_s: float | None = None  # throughput of the latest log window
        self.pace_from: tuple[float, int] | None = None  # (clock, update) after PACE_SKIP

    # ------------------------------------------------------------------ setup

    def run(self) -> TrainResult:
        """Train until a limit, patience or a signal ends the run; save; report."""
        try:
            with self.rep, self.stop:
                self._log_start()
                self.t0 = time.monotonic()
                self.session_update0 = self.p.update
                self.saved_at = self.t0
                self.window = Window()
                return self._finish(self._loop())
        except WriteError as e:  # disk full, read-only: say what is still usable
            last = self.last_checkpoint or "none (no checkpoint was written)"
            raise WriteError(f"{e}; the last complete checkpoint is {last}") from None

    def _restore(self, state: dict) -> None:
        """Progress and random generators of a resumed run (weights: `build_setup`)."""
        saved_world = state["progress"].pop("world_size")
        saved_uf = state["progress"].pop("update_freq", None)
        self.p = Progress(**state["progress"])
        self.update_freq = self._keep_global_batch(state, saved_world, saved_uf)
        self._keep_horizon(state)
        self.last_checkpoint = numbered_checkpoint(self.run_dir, self.p.update)
        if self.p.nonfinite_run == 0:
            self.last_good_checkpoint = self.last_checkpoint
        if saved_world == self.dist.world_size:
            ckpt.restore_rng(state["rng"][self.dist.rank])
        else:  # batches are dealt to ranks differently: start the next epoch afresh
            log.warning("resuming %d process(es) from a run of %d: continuing with epoch %d",
                        self.dist.world_size, saved_world, self.p.epoch + 1)
            self._next_epoch()

    def _keep_horizon(self, state: dict) -> None:
        """A linear schedule keeps the horizon it was sized with (so a resumed run decays as
        the uninterrupted one); said when the recipe's limits have changed since."""
        horizon = self.s.schedule.horizon
        if horizon is None:
            return
        was = recipe_from_yaml_text(state["recipe"], source="last.pt (its recipe)").train
        limits = [(c.max_updates, c.max_epochs,
                   parse_duration(c.max_time) if c.max_time else None) for c in (was, self.cfg)]
        if limits[0] != limits[1]:
            self.notes.append((logging.WARNING, (
                "train.max_updates, max_epochs or max_time changed since the checkpoint, but "
                "train.schedule linear keeps the horizon it was sized with: the lr reaches "
                f"train.min_lr at update {horizon:,} (and stays there should the run go on; a "
                "run that ends before it ends above it)")))

    def _keep_global_batch(self, state: dict, saved_world: int, saved_uf: int | None) -> int:
        """The update_freq that keeps the global batch (processes x update_freq batches of
        train.batch_tokens) of a resumed run, said in the log when the number of processes
        changed. A recipe whose update_freq changed since the checkpoint asks for its own.
        """
        was = recipe_from_yaml_text(state["recipe"], source="last.pt (its recipe)")
        saved_uf = saved_uf or was.train.update_freq
        if was.train.update_freq != self.cfg.update_freq:
            return self.cfg.update_freq
        world = self.dist.world_size
        if world == saved_world:  # what an earlier resume on another world size chose
            return saved_uf
        batches = saved_world * saved_uf
        uf = max(1, round(batches / world))
        tokens = f"{batches} x {self.cfg.batch_tokens:,} tokens"
        if uf * world == batches:
            self.notes.append((logging.INFO, f"resuming {world} process(es) from a run of "
                               f"{saved_world}: update_freq {uf} (was {saved_uf}) keeps the "
                               f"global batch at {tokens}"))
        else:
            self.notes.append((logging.WARNING, f"resuming {world} process(es) from a run of "
                               f"{saved_world}: the global batch of {tokens} is not a multiple"
                               f" of {world}; update_freq {uf} makes it {uf * world} x "
                               f"{self.cfg.batch_tokens:,} tokens"))
        return uf

    def _log_start(self) -> None:
        counts = self.s.model.parameter_counts()
        doing = f"resuming at update {self.p.update:,}" if self.resumed else "training"
        model = "an RNN" if self.recipe.model.arch == "rnn" else "a Transformer"
        what = f"{doing} {model}"
        log.info("%s: %s model, %s parameters, %d batches of <= %d tokens per epoch%s, "
                 "device %s%s", self.recipe.name, what, f"{counts['total']:,}",
                 len(self.s.sampler), self.cfg.batch_tokens,
                 f" per rank x {self.dist.world_size}" if self.dist.enabled else "",
                 self.device, f" ({self.s.amp.dtype})" if self.s.amp.dtype else "")
        for level, line in self.notes:
            log.log(level, "%s", line)
        log.info("global batch: %d process(es) x update_freq %d x %s tokens",
                 self.dist.world_size, self.update_freq, f"{self.cfg.batch_tokens:,}")
        if self.dist.enabled and self.dist.is_main and (hazard := shared_store_warning()):
            log.warning("%s", hazard)
        if self.s.init_from is not None and not self.resumed:
            self._log_init()
        self._log_regularizers()
        if self.max_time is not None:
            log.info("train.max_time %s holds the whole run: training stops early enough for "
                     "the closing validation and checkpoint, judged by the latest ones",
                     self.cfg.max_time)
        if self.s.amp.dtype is None and self.cfg.precision != "fp32":
            log.info("train.precision %s applies to CUDA only: on %s this run trains in fp32",
                     self.cfg.precision, self.device.type)

    def _log_regularizers(self) -> None:
        """The regularizers that are on, and what they do to the log's figures: in the run's
        log, so that it says the setting took."""
        sw, rdrop = self.cfg.subword_sampling, self.cfg.rdrop
        bpe = self.recipe.data.spm.model_type == "bpe"
        if sw.enabled:
            log.info("train.subword_sampling: %s (alpha %g%s) of the %s of each training batch; "
                     "tgt tokens count the sampled pieces",
                     "BPE-dropout" if bpe else "unigram sampling", sw.alpha,
                     "" if bpe else f", nbest_size {sw.nbest_size}",
                     "source and target" if sw.target else "source")
        if rdrop.enabled:
            log.info("train.rdrop: weight %g; each batch passes twice through the model "
                     "(R-Drop), and tgt tok/s counts its tokens once, so it shows the cost",
                     rdrop.weight)

    def _log_init(self) -> None:
        meta = self.s.init_from
        assert meta is not None
        carried, fresh = carried_and_fresh(meta)
        log.info("--init-from %s (update %s, sha256 %s): carried over: %s; fresh: %s",
                 meta["checkpoint"], meta["update"], meta["sha256"][:16], ", ".join(carried),
                 ", ".join(fresh))
        self.rep.record("init_from", **meta, carried=carried, fresh=fresh)

    # ------------------------------------------------------------------ the loop

    def _loop(self) -> str:
        uf = self.update_freq
        spent = "patience" if self._patience_spent() else None
        if reason := self._limit_reached() or spent or self._stop_requested():  # before any
            if self.resumed and reason != "interrupted":
                log.info("train.%s was reached before this resume: nothing to train (raise "
                         "it with --set train.%s=... to train further)", reason, reason)
            return reason
        while True:
            if reason := self._limit_reached():
                return reason
            self.s.sampler.set_epoch(self.p.epoch)
            todo = self.s.sampler.batches()[self.p.position:]
            for i in range(0, len(todo), uf):
                self._update(todo[i:i + uf])
                if reason := self._after_update():
                    return reason
            self._next_epoch()

    def _set_horizon(self) -> None:
        """The linear schedule's length: the updates the limits plan, or those the rest of
        train.max_time (less the closing validation and checkpoint) holds at the pace of this
        session's updates since its first PACE_SKIP (rank 0's clock decides for every rank),
        whichever is fewer. Set once; checkpoints keep it."""
        p = self.p
        ends = []
        if planned := planned_updates(p, self.cfg, len(self.s.sampler),
                                      update_freq=self.update_freq):
            ends.append(planned)
        pace = None
        if self.max_time is not None and self.pace_from is not None:
            t, u = self.pace_from
            pace = (time.monotonic() - t) / max(p.update - u, 1)
            left = self.max_time - self._elapsed() - self.closing.seconds(
                averaging=self.cfg.average_last > 0)
            ends.append(p.update + int(max(left, 0.0) / pace))
        horizon = int(self.dist.broadcast(min(ends)))
        self.s.schedule.set_horizon(horizon, now=p.update)
        by = (f"train.max_time {self.cfg.max_time} at {pace:.2f} s an update"
              if pace is not None and horizon == ends[-1] else "the planned updates")
        log.info("train.schedule linear: the lr falls from %.2e to train.min_lr %.2e at update %s "
                 "(%s)", self.cfg.lr, self.cfg.min_lr, f"{horizon:,}", by)
        self.rep.record("horizon", update=p.update, horizon=horizon, pace=pace)

    def _next_epoch(self) -> None:
        self.p.epoch += 1
        self.p.position = 0

    def _limit_reached(self) -> str | None:
        if self.cfg.max_updates and self.p.update >= self.cfg.max_updates:
            return "max_updates"
        if self.cfg.max_epochs and self.p.epoch > self.cfg.max_epochs:
            return "max_epochs"
        return None

    def _update(self, group: list[np.ndarray]) -> None:
        """One update on the batches `group` (arrays of sentence indices)."""
        batches = list(iterate_batches(self.s.train_data, group, self.recipe.data.max_len)
                       if self.s.resegment is None else self.s.resegment.batches(
                           self.s.train_data, group, epoch=self.p.epoch,
                           position=self.p.position))
        ntok = sum(b.num_tgt_tokens for b in batches)
        normalizer = token_normalizer(ntok, dist=self.dist, device=self.device)
        guide, rows = self._guide(batches)
        lr = self.s.schedule.apply(self.s.optimizer, self.p.update + 1)
        try:
            fb = forward_backward(
                self.s.net, batches, device=self.device, amp=self.s.amp,
                smoothing=self.cfg.label_smoothing, normalizer=normalizer, guide=guide,
                no_sync=self.s.net.no_sync if self.dist.enabled else None,
                rdrop=self.cfg.rdrop.weight)
            sums = finish_update(self.s.params, self.s.optimizer, self.s.amp,
                                 clip_norm=self.cfg.clip_norm, loss_sum=fb.loss,
                                 nll_sum=fb.nll, align_sum=fb.align, dist=self.dist)
        except torch.OutOfMemoryError:
            sums = None
        self.p.position += len(group)
        if sums is None:
            self._skip_oom(batches)
            return
        self.p.update += 1
        self.p.tokens += ntok
        self.pending.append((self.p.update, sums.packed(), ntok, rows, lr))

    def _guide(self, batches: list[Batch]) -> tuple[Guide | None, int]:
        """Guided alignment in this update (None when off) and its linked target pieces."""
        cfg = self.cfg.guided_alignment
        if not cfg.enabled:
            return None, 0
        rows = sum(b.num_linked_rows for b in batches)
        return Guide(cfg.weight, cfg.readout,
                     token_normalizer(rows, dist=self.dist, device=self.device)), rows

    def _skip_oom(self, batches: list) -> None:
        self.s.optimizer.zero_grad(set_to_none=True)
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
        shape = max((tuple(b.src.shape) for b in batches), key=lambda s: s[0] * s[1])
        if self.dist.enabled:  # the other ranks are waiting in an all-reduce: cannot skip
            raise MtkitError(f"out of memory on rank {self.dist.rank} after update "
                             f"{self.p.update}; lower train.batch_tokens")
        log.warning("out of memory after update %d on a batch of %d sentences x %d source "
                    "tokens; batch skipped (lower train.batch_tokens if this repeats)",
                    self.p.update, *shape)

    def _after_update(self) -> str | None:
        """Sync, validate, checkpoint and decide whether to stop, as the update asks."""
        cfg, u = self.cfg, self.p.update
        valid_now = u % cfg.valid_every == 0
        save_now = valid_now or (cfg.checkpoint_every > 0 and u % cfg.checkpoint_every == 0)
        limit = self._limit_reached()
        synced = bool(u % self.sync_every == 0 or valid_now or save_now or limit)
        if synced:
            self._sync()
            save_now = save_now or self._save_time_due()
        if u - self.session_update0 == PACE_SKIP:
            self.pace_from = (time.monotonic(), u)  # the pace a time budget is sized by
        if self.s.schedule.wants_horizon(u) and (
                self.max_time is None or u - self.session_update0 >= HORIZON_PACE):
            self._set_horizon()
        patience_out = self._validate_or_save() if valid_now else False
        if save_now:
            self._save()
        if limit:
            return limit
        if patience_out:
            return "patience"
        return self._stop_requested() if synced else None

    # ------------------------------------------------------------------ sync points

    def _sync(self) -> None:
        """Read the pending updates' device values: warn about (and count) skipped updates,
        abort after train.max_nonfinite in a row, write log lines, move the bar."""
        if not self.pending:
            return
        values = torch.stack([v for _, v, _, _, _ in self.pending]).tolist()
        for (u, _, ntok, rows, lr), vals in zip(self.pending, values, strict=True):
            if self.window.add(ntok, rows, vals):
                self.p.nonfinite_run = 0
            else:
                self._nonfinite(u)
            self.lr = lr
            if u % self.cfg.log_every == 0:
                self._log_train(u)
        self.pending.clear()
        self._bar()

    def _nonfinite(self, update: int) -> None:
        run = self.p.nonfinite_run = self.p.nonfinite_run + 1
        log.warning("update %d: non-finite loss or gradient norm; update skipped (%d in a row)",
                    update, run)
        if run >= self.cfg.max_nonfinite:
            fix = "lower train.lr, raise train.warmup or train with precision bf16/fp32"
            if self.last_good_checkpoint is None:  # nothing to resume
                then = (f"no checkpoint was written, so {fix} and train again (the same command "
                        "starts afresh)")
            else:
                then = (f"last good checkpoint: {self.last_good_checkpoint}; {fix}, then resume "
                        "with --resume")
            raise MtkitError(f"update {update}: {run} non-finite losses in a row "
                             f"(train.max_nonfinite); training stopped; {then}")

    def _log_train(self, update: int) -> None:
        """One log line and metrics record for the window that ends at `update`, its sums
        taken over every rank."""
        w = self.window
        sums = torch.tensor([w.loss, w.nll, w.tokens, w.all_tokens, w.align, w.align_rows],
                            dtype=torch.float64, device=self.device if self.dist.enabled else "cpu")
        totals = WindowTotals(*self.dist.all_reduce(sums).tolist())
        self.last_loss, self.tok_s = self.rep.train_window(
            update=update, epoch=self.p.epoch, totals=totals, window=w, lr=self.lr,
            elapsed=self._elapsed(), guided=self.cfg.guided_alignment.enabled)
        self.window = Window()

    def _bar(self) -> None:
        now = time.monotonic()
        planned = planned_updates(self.p, self.cfg, len(self.s.sampler),
                                  update_freq=self.update_freq)
        rate = (self.p.update - self.session_update0) / max(now - self.t0, 1e-9)
        etas = []
        if planned and rate > 0:
            etas.append((planned - self.p.update) / rate)
        if self.max_time is not None:
            etas.append(self.max_time - self._elapsed())
        # the window under way, else the latest logged one
        w = self.window
        loss = w.loss / w.tokens if w.tokens else self.last_loss
        tok_s = self.tok_s or w.all_tokens / max(now - w.start, 1e-9)
        self.rep.bar(update=self.p.update, total=planned, epoch=self.p.epoch, loss=loss,
                     lr=self.lr, tok_s=tok_s, eta=min(etas) if etas else None)

    def _elapsed(self) -> float:
        return self.p.seconds + time.monotonic() - self.t0

    def _stop_requested(self) -> str | None:
        """Time budget or a signal; under torchrun every rank stops at the same update."""
        end = self.closing.seconds(averaging=self.cfg.average_last > 0)
        # 2: a signal, 1: the time budget, 0: neither; the largest of all ranks wins
        local = 0.0
        if self.stop.requested:
            local = 2.0
        elif self.max_time is not None and self._elapsed() + end >= self.max_time:
            local = 1.0
        if self.dist.enabled:
            local = self.dist.all_reduce(torch.tensor(local, device=self.device), "max").item()
        return {0.0: None, 1.0: "max_time", 2.0: "interrupted"}[local]

    # ------------------------------------------------------------------ validate, save

    def _save_time_due(self) -> bool:
        """train.checkpoint_every_time has passed since the latest checkpoint (rank 0's
        clock decides for every rank: saving is a collective)."""
        if self.save_every_s is None:
            return False
        return bool(self.dist.broadcast(time.monotonic() - self.saved_at >= self.save_every_s))

    def _validate_or_save(self) -> bool:
        """`_validate`; should validation fail, the updates since the last checkpoint are
        saved first, so that the run can be resumed once the cause is fixed."""
        try:
            return self._validate()
        except BaseException as e:
            saved_already = self.p.saved_update == self.p.update
            save = not (saved_already or isinstance(e, WriteError | KeyboardInterrupt))
            # rank 0's choice for every rank (the others know only that it failed): saving
            # is a collective that every rank or none must enter
            if not self.dist.broadcast(save):
                raise
            self.best_unsaved = False
            self._save()
            if not self.dist.is_main:  # its error is rank 0's to tell
                raise
            note = (f"validation at update {self.p.update} failed; checkpoint saved to "
                    f"{self.last_checkpoint} (resume with --resume once fixed)")
            if isinstance(e, MtkitError):
                raise e.with_note(note) from None
            log.error("%s", note)
            raise

    def _validate(self) -> bool:
        """Validate on rank 0 and share the result; True when patience has run out."""
        start = time.monotonic()
        res = self.dist.main_result(lambda: validate(
            self.s.model, self.s.valid_batches, self.s.valid_refs, self.s.tokenizer,
            recipe=self.recipe, device=self.device, amp=self.s.amp).as_dict(),
            f"validation at update {self.p.update} failed on rank 0")
        self.closing.valid = time.monotonic() - start
        name = self.cfg.valid_metric
        metric, higher = res[name], HIGHER_IS_BETTER[name]
        p = self.p
        improved = p.best is None or (metric > p.best if higher else metric < p.best)
        if improved:
            p.best = metric
            p.best_update = p.update
            p.bad = 0
        else:
            p.bad += 1
        self.best_unsaved = improved
        p.valid_update = p.update
        self.rep.record("valid", update=p.update, epoch=p.epoch, **res, best=improved)
        self.rep.valid_table({"update": p.update, **res}, metric=name, best=improved)
        if self.s.schedule.observe(metric, higher_is_better=higher):
            log.info("plateau: %s has not improved for %d validations; lr lowered to %.2e",
                     name, self.cfg.plateau_patience + 1, self.s.schedule.lr_at(p.update))
        return self._patience_spent()

    def _patience_spent(self) -> bool:
        return self.cfg.patience > 0 and self.p.bad >= self.cfg.patience

    def _save(self) -> None:
        start = time.monotonic()
        rngs = self.dist.gather(ckpt.capture_rng())
        p = self.p
        if self.dist.is_main:
            progress = {**dataclasses.asdict(p), "seconds": self._elapsed(),
                        "saved_update": p.update, "world_size": self.dist.world_size,
                        "update_freq": self.update_freq}
            state = {"recipe": self.s.recipe_text, "vocab": self.s.vocab_info,
                     "model": self.s.model.state_dict(),
                     "optimizer": self.s.optimizer.state_dict(),
                     "schedule": self.s.schedule.state_dict(),
                     "scaler": self.s.amp.scaler.state_dict() if self.s.amp.scaler else None,
                     "progress": progress, "rng": rngs}
            if self.s.init_from is not None:  # a fine-tuned run keeps naming its parent
                state["init_from"] = self.s.init_from
            self.last_checkpoint = ckpt.write_run_checkpoint(
                self.run_dir, state, update=p.update, keep_last=self.cfg.keep_last,
                is_best=self.best_unsaved and p.valid_update == p.update)
            if p.nonfinite_run == 0:
                self.last_good_checkpoint = self.last_checkpoint
        p.saved_update = p.update
        self.saved_at = time.monotonic()
        self.best_unsaved = False
        self.closing.save = time.monotonic() - start

    # ------------------------------------------------------------------ the end

    def _finish(self, reason: str) -> TrainResult:
        self._sync()
        p = self.p
        if reason != "interrupted" and p.valid_update != p.update and p.update > 0:
            self._validate_or_save()
        if p.saved_update != p.update or self.best_unsaved:
            self._save()
        averaged = None
        if reason != "interrupted" and self.cfg.average_last > 0 and self.dist.is_main:
            averaged = self._average()
        if self.dist.enabled:
            self._check_ranks_agree()
        if p.update > self.session_update0 or not self.resumed:  # else recorded before
            self.rep.record("end", update=p.update, epoch=p.epoch, reason=reason,
                            best=p.best, best_update=p.best_update, elapsed=self._elapsed())
        best = ("not validated yet" if p.best is None else
                f"best {self.cfg.valid_metric} {p.best:.2f} at update {p.best_update:,} "
                f"({self.run_dir / BEST})")
        epoch = p.epoch
        if p.position == 0 and p.epoch > 1:  # the next epoch, not started: name the last one
            epoch -= 1
        log.info("stopped (%s) at update %s, epoch %d, after %s of training; %s; "
                 "checkpoints in %s", reason, f"{p.update:,}", epoch,
                 duration(self._elapsed()), best, self.run_dir)
        self._log_horizon_miss(reason)
        return TrainResult(self.run_dir, reason, p.update, p.epoch, self.last_checkpoint,
                           p.best, averaged, self.stop.requested)

    def _log_horizon_miss(self, reason: str) -> None:
        """How far a linear schedule's horizon, sized once from the pace of the first updates,
        was from where the time budget ended training, when the pace changed by more than
        HORIZON_MISS of the run since (a shared machine's load comes and goes)."""
        horizon, end = self.s.schedule.horizon, self.p.update
        if reason != "max_time" or horizon is None or abs(end - horizon) <= HORIZON_MISS * end:
            return
        if end > horizon:
            log.warning("train.schedule linear: training went on %s updates past the horizon of "
                        "%s it was sized for (the pace changed): the lr sat at train.min_lr "
                        "for %.0f%% of the run", f"{end - horizon:,}", f"{horizon:,}",
                        100 * (end - horizon) / end)
        else:
            log.warning("train.schedule linear: training stopped %s updates before the horizon "
                        "of %s it was sized for (the pace changed): the lr ended at %.2e, not "
                        "train.min_lr", f"{horizon - end:,}", f"{horizon:,}", self.lr)

    def _average(self) -> Path | None:
        paths = ckpt.numbered_checkpoints(self.run_dir)[-self.cfg.average_last:]
        if len(paths) < 2:
            log.warning("train.average_last: only %d checkpoint(s) kept; nothing to average",
                        len(paths))
            return None
        out = ckpt.save_average(paths, self.run_dir / AVERAGED)
        model = copy.deepcopy(self.s.model)
        model.load_state_dict(load_checkpoint(out)["model"])
        res: ValidResult = validate(model, self.s.valid_batches, self.s.valid_refs,
                                    self.s.tokenizer, recipe=self.recipe, device=self.device,
                                    amp=self.s.amp)
        self.rep.record("average", update=self.p.update, checkpoints=[q.name for q in paths],
                        **res.as_dict())
        log.info("averaged %d checkpoints (%s) into %s: valid BLEU %.2f, chrF %.2f, ppl %.2f",
                 len(paths), ", ".join(q.name for q in paths), out, res.bleu, res.chrf, res.ppl)
        choose_model(self.run_dir, self.rep, metric=self.cfg.valid_metric, best=self.p.best,
                     best_update=self.p.best_update, averaged=res, update=self.p.update)
        return out

    def _check_ranks_agree(self) -> None:
        digests = self.dist.gather(ckpt.weights_digest(self.s.model.state_dict()))
        self.rep.record("ddp_check", update=self.p.update, digests=digests)
        if len(set(digests)) > 1:
            log.warning("ranks hold different weights at the end (digests %s)", digests)
