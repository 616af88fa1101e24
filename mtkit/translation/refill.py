"""Lines decoded by a search that takes more lines while it runs (`mtkit.decode.refill`):
what `mtkit serve` refills its batches with, so that a short sentence is answered when it is
done, not when the longest of its pass is.

Each line is prepared as `LineTranslator.decoded` prepares it (tokenized, language tag,
truncation, the output cap) and gets the hypotheses its search alone gives. Lines with
prefixes or glossary terms are not taken (a caller decodes those through `decoded`).
"""

from __future__ import annotations

import threading
from collections.abc import Hashable
from typing import TYPE_CHECKING

from mtkit.translation.lines import Item, TranslateStats, _Searched

if TYPE_CHECKING:
    from mtkit.translation.lines import StreamTranslator


class LineRefill:
    """Lines in with a handle each (`join`), decoded lines out (`step`)."""

    def __init__(self, translator: StreamTranslator) -> None:
        """translator: one whose `refill` allowed it (`StreamTranslator.refill`)."""
        from mtkit.decode.refill import BeamStepper

        self.translator = translator
        self.model = _Searched(translator.model, threading.Event(),
                               max_target_len=translator.max_out_len + 1)
        self.stepper = BeamStepper(self.model, translator.cfg,
                                   need_attn=translator.need_attn)
        self.stats = TranslateStats(max_src_len=translator.max_src_len)
        self._items: dict[Hashable, Item] = {}

    @property
    def size(self) -> int:
        """Lines searching."""
        return self.stepper.size

    def join(self, lines: list[str], handles: list[Hashable]) -> list[tuple[Hashable, Item]]:
        """Start decoding `lines`, each known by its handle from now on; the blank ones,
        which need no search, come back at once (with no hypotheses)."""
        import torch

        from mtkit.data.batch import collate
        from mtkit.decode import output_limits

        items = self.translator.prepared(lines, self.stats)
        blank = [(h, it) for h, it in zip(handles, items, strict=True) if not it.ids]
        work = [(h, it) for h, it in zip(handles, items, strict=True) if it.ids]
        if work:
            tr = self.translator
            with self._context():
                batch = collate([it.ids for _, it in work], None, range(len(work))).to(
                    tr.device, non_blocking=True)
                enc = self.model.encode(batch.src, batch.src_lens)
                self.stepper.join(enc, output_limits(self.model, batch, tr.cfg).to(
                    torch.long), [h for h, _ in work])
            self._items.update(work)
        return blank

    def step(self) -> list[tuple[Hashable, Item]]:
        """One step of the search; the lines it finished, their `Item.nbest` set."""
        with self._context():
            done = self.stepper.step()
        out = []
        for handle, hyps in done:
            item = self._items.pop(handle)
            item.nbest = hyps
            out.append((handle, item))
        return out

    def drop(self, handles: set[Hashable]) -> None:
        """Stop decoding the lines of `handles` (their callers gave up)."""
        self.stepper.drop(handles)
        for h in handles:
            self._items.pop(h, None)

    def _context(self):  # noqa: ANN202 (a context manager of torch's)
        import contextlib

        import torch

        tr = self.translator
        stack = contextlib.ExitStack()
        stack.enter_context(torch.inference_mode())
        stack.enter_context(torch.autocast(tr.device.type, dtype=tr.dtype,
                                           enabled=tr.dtype is not None))
        return stack
