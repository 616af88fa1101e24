"""The arithmetic every search shares: length penalty, length limits, the masking of tokens
that may not be produced at a step, and the making of what they return (`Hypothesis`,
defined in `mtkit.data.hypothesis`).

Shapes: B batch (times beam), S source length, T target length, V vocabulary.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from mtkit.config import DecodeConfig
from mtkit.data.batch import padded_ids
from mtkit.data.hypothesis import Hypothesis
from mtkit.models.vocab import BOS_ID, EOS_ID, PAD_ID

__all__ = ["Hypothesis", "Prefix", "Scratch", "as_lengths", "force_prefix", "length_penalty",
           "max_lengths", "source_lengths", "step_logprobs", "to_hypotheses"]


def length_penalty(lengths: torch.Tensor | int, kind: str,
                   alpha: float) -> torch.Tensor | float:
    """The divisor of a hypothesis's log-probability, for lengths (...) or one int length.

    'gnmt': ((5 + |Y|) / 6) ** alpha (Wu et al. 2016, eq. 14); 'average': |Y|; 'power':
    |Y| ** alpha (transformers' `length_penalty` and CTranslate2's, whose 1 is 'average');
    'none': 1. |Y| counts the final EOS. None decreases with |Y| (alpha >= 0), which is what
    beam search's stopping bound relies on.
    """
    if kind == "gnmt":
        return ((5.0 + lengths) / 6.0) ** alpha
    if kind == "average":
        return lengths * 1.0
    if kind == "power":
        return (lengths * 1.0) ** alpha
    assert kind == "none", kind
    return torch.ones_like(lengths, dtype=torch.float) if torch.is_tensor(lengths) else 1.0


def max_lengths(src_lens: torch.Tensor, cfg: DecodeConfig) -> torch.Tensor:
    """Per-sentence output limit: src_lens (B,) (counting the source EOS) -> (B,) long.

    `DecodeConfig.output_limit` of each: an output has at most that many tokens before its
    EOS (which is then forced).
    """
    n = (src_lens - 1).clamp(min=0).double()
    return torch.floor(cfg.max_len_a * n).long() + cfg.max_len_b


def as_lengths(max_len: torch.Tensor | int, batch: int, device: torch.device) -> torch.Tensor:
    """An int or a (B,) tensor of output limits as a (B,) long tensor on `device`."""
    if isinstance(max_len, int):
        return torch.full((batch,), max_len, dtype=torch.long, device=device)
    assert max_len.shape == (batch,), (max_len.shape, batch)
    return max_len.to(device=device, dtype=torch.long)


class Scratch:
    """Memory a search reuses from step to step for its (rows, V) temporaries on CPU (none on
    other devices, whose allocators cache). Tens of MB each for a beam: fresh, glibc maps them
    and the kernel faults in and zeroes their pages at every step, which cost a beam's
    log-softmax half its time (bench/RESULTS.md, "Figures behind the code's comments").
    A tensor `take` returns is valid until the next `take` of the same name."""

    def __init__(self, device: torch.device) -> None:
        self.enabled = device.type == "cpu"
        self._memory: dict[str, torch.Tensor] = {}

    def take(self, name: str, shape: tuple[int, ...], dtype: torch.dtype = torch.float32
             ) -> torch.Tensor | None:
        """A tensor of `shape` to write into, or None (allocate as usual) when disabled."""
        if not self.enabled:
            return None
        size = math.prod(shape)
        mem = self._memory.get(name)
        if mem is None or mem.numel() < size or mem.dtype != dtype:
            mem = self._memory[name] = torch.empty(size, dtype=dtype)
        return mem[:size].view(shape)


def step_logprobs(logits: torch.Tensor, t: int, min_len: int, max_len: torch.Tensor, *,
                  shortest: int | None = None, scratch: Scratch | None = None) -> torch.Tensor:
    """Log-probabilities of the next token with the impossible ones set to -inf.

    logits: (B, V) for output position t (0-based); max_len: (B,) per-row limits; shortest:
    a lower bound of max_len, known on the host, if the caller has one; scratch: where to
    write them (the result is then valid until the next step's).
    PAD and BOS are never produced; EOS is banned while t < min_len; at t == max_len only EOS
    is allowed, so every hypothesis ends in EOS. The surviving values are the model's own
    log-probabilities (not renormalised), so scores stay comparable with forced decoding.
    """
    out = None if scratch is None else scratch.take("logprobs", tuple(logits.shape))
    lp = torch.log_softmax(logits.float(), dim=-1, out=out)
    if shortest is not None and t < shortest:
        # No row is at its limit: skip the pass over (B, V) that forces EOS (2% of a beam).
        lp[:, PAD_ID] = -math.inf
        lp[:, BOS_ID] = -math.inf
        if t < min_len:
            lp[:, EOS_ID] = -math.inf
        return lp
    eos = lp[:, EOS_ID].clone()
    forced = max_len <= t
    # in place: one pass over (B, V) besides the softmax
    lp[:, PAD_ID] = -math.inf
    lp[:, BOS_ID] = -math.inf
    lp.masked_fill_(forced.unsqueeze(1), -math.inf)
    lp[:, EOS_ID] = torch.where(forced, eos, -math.inf) if t < min_len else eos
    return lp


@dataclass(frozen=True)
class Prefix:
    """The target ids each row's outputs start with. tokens: (R, P) long, PAD after each
    row's prefix (a row of PAD for none); lengths: (R,) long, each prefix's length;
    new_word: (R,) bool, the rows whose next token after the prefix must begin a word (one
    of those `continuing` does not mark, `force_prefix`)."""

    tokens: torch.Tensor
    lengths: torch.Tensor
    new_word: torch.Tensor

    @classmethod
    def of(cls, prefixes: Sequence[Sequence[int]],
           new_word: Sequence[bool] | None = None) -> Prefix:
        """From each row's ids (empty: none) and whether its next token begins a word
        (None: no row's must)."""
        tokens = padded_ids(prefixes)
        opens = [False] * len(prefixes) if new_word is None else list(new_word)
        return cls(tokens, (tokens > PAD_ID).sum(1), torch.tensor(opens, dtype=torch.bool))

    def to(self, device: torch.device | str) -> Prefix:
        return Prefix(self.tokens.to(device), self.lengths.to(device), self.new_word.to(device))

    def select(self, rows: torch.Tensor) -> Prefix:
        """The prefixes of `rows` (long indices), in that order."""
        return Prefix(self.tokens[rows], self.lengths[rows], self.new_word[rows])


def force_prefix(lp: torch.Tensor, t: int, prefix: Prefix | None,
                 continuing: torch.Tensor | None = None) -> torch.Tensor:
    """Step t's log-probabilities with each row's prefix token forced: lp (R, V) masked as
    `step_logprobs` leaves it; prefix: R rows' (None: no prefixes). A row still inside its
    prefix keeps only its prefix token, at the model's own log-probability, so the prefix is
    scored like any other token and a search expands nothing else there; rows past their
    prefix are left as they are, except that at the step right after a `new_word` row's
    prefix the tokens `continuing` (V,) marks (pieces that continue a word) are banned.
    Changes `lp` in place.

    The caller keeps every row's limit at or past its prefix's length, so the forced token is
    never one that `step_logprobs` banned for the limit.
    """
    if prefix is None or t > prefix.tokens.size(1):
        return lp
    if continuing is not None:
        opens = prefix.new_word & (prefix.lengths == t)
        lp.masked_fill_(opens.unsqueeze(1) & continuing.unsqueeze(0), -math.inf)
    if t == prefix.tokens.size(1):
        return lp
    tok = prefix.tokens[:, t].unsqueeze(1)  # (R, 1)
    forced = tok != PAD_ID
    kept = lp.gather(1, tok)
    lp.masked_fill_(forced, -math.inf)
    lp.scatter_(1, tok, torch.where(forced, kept, lp.gather(1, tok)))
    return lp


def source_lengths(src_mask: torch.Tensor) -> list[int]:
    """Real source lengths from a (B, S) bool mask, as a host list (for trimming attention)."""
    return src_mask.sum(1).tolist()


def to_hypotheses(tokens: torch.Tensor, token_lps: torch.Tensor, attn: torch.Tensor | None,
                  src_lens: list[int], *, kind: str, alpha: float) -> list[Hypothesis]:
    """Turn N finished paths into Hypotheses with one host transfer.

    tokens: (N, T) ids, each row holding exactly one EOS at its end position (later
    positions are ignored); token_lps: (N, T), 0 after the EOS; attn: (N, T, S) or None;
    src_lens: N real source lengths for trimming attention; kind/alpha: the length penalty.
    """
    ends = (tokens == EOS_ID).long().argmax(1)  # first EOS
    assert bool((tokens.gather(1, ends[:, None]) == EOS_ID).all()), "a path without EOS"
    logprob = token_lps.sum(1)
    score = logprob / length_penalty(ends + 1, kind, alpha)
    toks, lps = tokens.tolist(), token_lps.tolist()
    attn_cpu = None if attn is None else attn.float().cpu()
    out = []
    for i, (e, lp, sc) in enumerate(zip(ends.tolist(), logprob.tolist(), score.tolist(),
                                              strict=True)):
        a = None if attn_cpu is None else attn_cpu[i, : e + 1, : src_lens[i]].clone()
        out.append(Hypothesis(toks[i][:e], sc, lp, lps[i][: e + 1], a))
    return out
