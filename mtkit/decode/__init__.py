"""Search: greedy, beam and sampling over the model interface, plus forced decoding.

Nothing here asks which architecture it drives: everything goes through
`Translator.encode / init_state / step / forward` (mtkit.models.base). Call `model.eval()`
first; every search runs under ``torch.no_grad()``.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from mtkit.config import DecodeConfig
from mtkit.data.batch import Batch
from mtkit.decode.beam import beam_search
from mtkit.decode.forced import forced
from mtkit.decode.greedy import greedy
from mtkit.decode.sampling import sample
from mtkit.decode.scoring import (
    Hypothesis,
    Prefix,
    force_prefix,
    length_penalty,
    max_lengths,
)
from mtkit.decode.shortlist import GROUP, InColumns, OutputShortlist, to_columns, to_ids
from mtkit.models.base import Encoded, Translator

__all__ = ["Hypothesis", "OutputShortlist", "Prefix", "beam_search", "decode_batch",
           "force_prefix", "forced", "greedy", "length_penalty", "max_lengths", "sample"]


@torch.no_grad()
def decode_batch(model: Translator, batch: Batch, cfg: DecodeConfig, *,
                 need_attn: bool = False, prefix: Prefix | None = None,
                 continuing: torch.Tensor | None = None,
                 shortlist: OutputShortlist | None = None) -> list[list[Hypothesis]]:
    """Translate one batch with cfg.method; the output limit per sentence is
    ``max_len_a * source tokens + max_len_b`` (see `max_lengths`), and within the model's
    `max_target_len`.

    batch.src: (B, S) on the model's device. prefix: the target ids each sentence's outputs
    start with: forced, scored and given attention like the tokens the search chose; they
    count towards the output limit, which is raised to a prefix's length where it is shorter
    (the caller keeps prefixes within the model's `max_target_len`); after a `new_word`
    row's prefix the next token is one that begins a word, of those `continuing` (V,) does
    not mark (`force_prefix`). With a `shortlist`, the output layer computes only the ids
    the sources' lists name, for each group of GROUP sentences (`mtkit.decode.shortlist`;
    `model.restricted`). Returns,
    in batch order, each sentence's hypotheses sorted by score: cfg.nbest for beam and
    sampling, one for greedy.
    """
    if shortlist is not None and len(batch.src) > GROUP:
        return _in_groups(model, batch, cfg, need_attn, prefix, continuing, shortlist)
    enc = model.encode(batch.src, batch.src_lens)
    max_len = max_lengths(batch.src_lens, cfg).to(batch.src.device)
    if model.max_target_len is not None:  # e.g. learned positions: EOS by the last one
        max_len = max_len.clamp(max=model.max_target_len - 1)
    if prefix is not None:
        prefix = prefix.to(batch.src.device)
        max_len = torch.maximum(max_len, prefix.lengths)
        continuing = None if continuing is None else continuing.to(batch.src.device)
    if shortlist is not None:
        rows = shortlist.rows(batch.src, None if prefix is None else prefix.tokens)
        model = InColumns(model.restricted(rows), rows)  # type: ignore[assignment]
        if prefix is not None:
            prefix = replace(prefix, tokens=to_columns(prefix.tokens, rows))
        continuing = None if continuing is None else continuing.index_select(0, rows)
        return to_ids(_search(model, enc, cfg, batch, max_len, need_attn, prefix, continuing),
                      rows)
    return _search(model, enc, cfg, batch, max_len, need_attn, prefix, continuing)


def _in_groups(model: Translator, batch: Batch, cfg: DecodeConfig, need_attn: bool,
               prefix: Prefix | None, continuing: torch.Tensor | None,
               shortlist: OutputShortlist) -> list[list[Hypothesis]]:
    """`decode_batch` of each GROUP sentences of `batch` in turn (each over its own union of
    lists, sources trimmed to the group's longest), in batch order."""
    out: list[list[Hypothesis]] = []
    for start in range(0, len(batch.src), GROUP):
        part = torch.arange(start, min(start + GROUP, len(batch.src)))
        lens = batch.src_lens[part]
        group = Batch(batch.src[part, : int(lens.max())], lens, None, None, batch.ids[part])
        out += decode_batch(model, group, cfg, need_attn=need_attn, continuing=continuing,
                            prefix=None if prefix is None else prefix.select(part),
                            shortlist=shortlist)
    return out


def _search(model: Translator, enc: Encoded, cfg: DecodeConfig, batch: Batch,
            max_len: torch.Tensor, need_attn: bool, prefix: Prefix | None,
            continuing: torch.Tensor | None) -> list[list[Hypothesis]]:
    if cfg.method == "sample":  # each batch its own random stream, from its first sentence
        stream = int(batch.ids.min()) if batch.ids.numel() else 0
        return sample(model, enc, cfg, max_len=max_len, need_attn=need_attn, stream=stream,
                      prefix=prefix, continuing=continuing)
    search = beam_search if cfg.method == "beam" else greedy
    return search(model, enc, cfg, max_len=max_len, need_attn=need_attn, prefix=prefix,
                  continuing=continuing)
