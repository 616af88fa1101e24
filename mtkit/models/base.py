"""The one interface every translation model offers; search, training and alignment use only this.

Shapes: B batch (times beam), S source length, T target length, H hidden, V vocabulary.

Every tensor in an `Encoded` and in a decoder state has the batch on dimension 0, so a single
``index_select(0, idx)`` (see `reorder`) both tiles a batch and reorders it.

Who owns a decoder state: the search that holds it. `Translator.step` returns the state for
the next position and may write into the memory of the state it was given (the Transformer
keeps its cache in reused buffers, `mtkit.models.kv_cache`), so a state is spent
once stepped: step it once, or copy it first with `reorder` (which always copies) to go on
from it twice. A search reorders rows (beam parents, finished sentences dropped) by passing
`order` to the next step, which lets a model fuse the reorder with its cache update.

A state may carry, beside what the model means (caches, recurrent states), scratch memory that
the next step writes into rather than allocating (the Transformer's ``spare_*`` tensors, its
logits' included): it travels with the state, so it has the state's one owner and is spent
with it, and a search never reads it. A search's own scratch (`mtkit.decode.scoring.Scratch`,
its log-probabilities) stays in the search. Logits a step returns are valid until the next
step of the state they came with.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Literal, TypeVar, get_args

import torch
from torch import nn

from mtkit.errors import OptionError, Problem
from mtkit.errors import choice as choice_of

M = TypeVar("M", bound=nn.Module)

# A decoder state: a flat mapping of named tensors, each batch-first. Models choose the names.
State = dict[str, torch.Tensor]
# Which attention to read: decoder-over-source, or the encoder's or the decoder's own.
AttentionKind = Literal["cross", "encoder", "decoder"]
KINDS: tuple[str, ...] = get_args(AttentionKind)
# The parts of a model whose shapes follow the vocabularies (`Translator.vocabulary_parts`):
# what fine-tuning may re-initialize instead of taking from the parent (`train --init-fresh`).
VocabularyPart = Literal["src_embeddings", "tgt_embeddings", "output"]
VOCABULARY_PARTS: tuple[str, ...] = get_args(VocabularyPart)
# Which cross-attention weights to read (`AttentionChoice.view`): `chosen`, those each step
# used (a hard-attention model's: the one-hot row of its position); `prior`, the distribution
# a hard-attention model picks its position from (a soft model's weights again); `posterior`,
# p(z_t | x, y_<=t), that distribution given the word the step produced (`Translator.views`
# says which a model has).
AttentionView = Literal["chosen", "prior", "posterior"]
VIEWS: tuple[str, ...] = get_args(AttentionView)
# `AttentionChoice.layer` for the mean over a Transformer's decoder layers of their
# cross-attention: on the en-de CPU model it placed more markup tags than any one layer
# (bench/RESULTS.md, "Placement, the attempts"), so documents place markup by it.
LAYER_MEAN = "mean"
LayerMean = Literal["mean"]


def kind_problems(kind: str, *, self_only: bool = False) -> list[Problem]:
    """What is wrong with an attention kind (`choose_attention`'s `kind`); `self_only`: a
    choice of self-attention (the cross-attention is what choosing none gives)."""
    if kind in (KINDS[1:] if self_only else KINDS):
        return []
    return [Problem("kind", f"invalid choice {kind!r}; expected encoder or decoder")]


@dataclass(frozen=True)
class AttentionChoice:
    """A checked choice of attention weights to read (`Translator.choose_attention`).

    layer: a layer index (negative from the top), or LAYER_MEAN (the cross-attention only: the
    mean over the decoder's layers), None for a model with one attention (the RNN); head: one
    head or "mean" (the mean over heads), None for a model without heads."""

    kind: AttentionKind = "cross"
    layer: int | LayerMean | None = None
    head: int | Literal["mean"] | None = None
    view: AttentionView = "chosen"

    def describe(self) -> str:
        """E.g. 'cross-attention, layer -1, head mean' (an RNN's: 'cross-attention'; with a
        view other than chosen: 'cross-attention, posterior')."""
        what = "cross-attention" if self.kind == "cross" else f"{self.kind} self-attention"
        if self.view != "chosen":
            what = f"{what}, {self.view}"
        if self.layer is None:
            return what
        return f"{what}, layer {self.layer}, head {self.head}"


@dataclass(frozen=True)
class Encoded:
    """The encoder's output for one batch.

    memory: (B, S, H) encoder states; src_mask: (B, S) bool, True on real tokens;
    extras: further batch-first tensors a model needs at every step (e.g. final states,
    precomputed cross-attention keys and values); group: decoder rows per row of these
    tensors (`Translator.expand`): rows g*b .. g*b+g-1 of a step read row b.
    """

    memory: torch.Tensor
    src_mask: torch.Tensor
    extras: State
    group: int = 1

    def index_select(self, idx: torch.Tensor) -> Encoded:
        """The decoder rows idx (B',) (reordered or tiled); of a grouped Encoded, whole
        groups in order (as beam search drops finished sentences)."""
        if self.group == 1:
            rows = idx
        else:  # any other idx would make rows read another sentence's source
            assert idx.numel() % self.group == 0, (idx.numel(), self.group)
            groups = idx.reshape(-1, self.group)
            rows = groups[:, 0] // self.group
            assert (groups == rows[:, None] * self.group + torch.arange(
                self.group, device=idx.device)).all(), "not whole groups in order"
        return Encoded(self.memory.index_select(0, rows), self.src_mask.index_select(0, rows),
                       reorder(self.extras, rows), self.group)


@dataclass(frozen=True)
class Step:
    """One decoder step: logits (B, V); attn (B, S), rows summing to 1 over real source tokens
    and exactly 0 on padding, or None for a model without attention; the state for the next
    position (the one passed in is spent: see the module doc)."""

    logits: torch.Tensor
    attn: torch.Tensor | None
    state: State


@dataclass(frozen=True)
class Output:
    """A teacher-forced pass: logits (B, T, V); attn (B, T, S) when asked and available.

    aux: for a model that trains a discrete choice by its reward (hard attention's
    REINFORCE), a function of the targets (B, T) (the tokens the logits predict, PAD where
    padded) to a 0-d term the trainer adds to the summed token loss; None for the others."""

    logits: torch.Tensor
    attn: torch.Tensor | None
    aux: Callable[[torch.Tensor], torch.Tensor] | None = None


def source_mask(src: torch.Tensor, src_lens: torch.Tensor) -> torch.Tensor:
    """src (B, S), src_lens (B,) -> (B, S) bool on src's device, True on the first
    src_lens[b] positions of row b.

    src_lens may stay on the host (`Batch.to` leaves it there): it is copied without waiting
    for the device, so building the mask never stalls a GPU's queue."""
    lens = host_to_device(src_lens, src.device)
    return torch.arange(src.size(1), device=src.device) < lens.unsqueeze(1)


def host_to_device(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """`t` on `device`, copied without making the host wait for the device's queue.

    A blocking host-to-GPU copy synchronises the stream, and one from pageable memory may make
    the driver do so; from pinned memory with non_blocking it is only queued. Pinning a
    small tensor is cheap (PyTorch caches pinned blocks)."""
    if t.device == device:
        return t
    if device.type == "cuda" and t.device.type == "cpu" and not t.is_pinned():
        t = t.pin_memory()
    return t.to(device, non_blocking=True)


def parameter_names(prefix: str, module: nn.Module) -> list[str]:
    """The state_dict names of `module`'s parameters, held by a model at `prefix`."""
    return [f"{prefix}.{name}" for name, _ in module.named_parameters(remove_duplicate=False)]


def with_child(module: M, name: str, child: nn.Module) -> M:
    """A shallow copy of `module` with its submodule `name` replaced by `child`; `module`
    itself and every other submodule and parameter are shared, not copied."""
    out = copy.copy(module)
    # the copy's own table of children: setting one leaves the original's as it was
    out._modules = dict(module._modules)
    setattr(out, name, child)
    return out


def reorder(state: State, idx: torch.Tensor) -> State:
    """Select (tile or reorder) batch rows of every tensor in a state: idx (B',) -> (B', ...).
    The result is a copy, sharing no memory with `state`."""
    return {k: v.index_select(0, idx) for k, v in state.items()}


class Translator(nn.Module):
    """Base class of every model. Subclasses implement the six methods that raise
    NotImplementedError below (`expand` has a default).

    Token ids (BOS, EOS, PAD) are fixed in `mtkit.models.vocab`. `has_attention` is False only
    for the fixed-vector baseline (attention `none`), whose steps return attn=None.
    """

    has_attention: bool = True
    # The longest decoder input (BOS + tokens) the model accepts, e.g. a Transformer's learned
    # positions; None: no limit. Searches stop every output before it (`decode_batch`).
    max_target_len: int | None = None
    # The longest source (tokens + EOS) it accepts (learned positions, location attention's
    # scores) and the recipe key that sets it; `mtkit align` checks its lines against it.
    max_source_len: int | None = None
    # The cross-attention a caller may choose among: (decoder layers, heads), None where
    # there is no choice (an RNN has one attention); `mtkit.api.ModelInfo` reports it.
    attention_grid: tuple[int, int] | None = None
    source_len_key: str = ""
    # The cross-attention views (`AttentionView`) `attention_maps` can give.
    views: tuple[str, ...] = ("chosen", "prior")
    # Whether `join` can add rows to a search under way (the server's refilled batches).
    joins: bool = False

    def encode(self, src: torch.Tensor, src_lens: torch.Tensor) -> Encoded:
        """src: (B, S) token ids, padded; src_lens: (B,) lengths (incl. EOS), on the host
        or on src's device (see `source_mask`)."""
        raise NotImplementedError

    def init_state(self, enc: Encoded) -> State:
        """The decoder state before the first target token."""
        raise NotImplementedError

    def expand(self, enc: Encoded, k: int) -> Encoded:
        """`enc` (B rows) for k decoder rows per sentence, rows b*k .. b*k+k-1 reading
        sentence b (a beam). Here every tensor is tiled; a model whose step can read one copy
        for k rows returns `enc` grouped instead (`Encoded.group`), without copying."""
        rows = torch.arange(enc.src_mask.size(0), device=enc.src_mask.device)
        return enc.index_select(rows.repeat_interleave(k))

    def step(self, prev: torch.Tensor, state: State, enc: Encoded, *,
             need_attn: bool = True, order: torch.Tensor | None = None) -> Step:
        """prev: (B',) the previous target token (BOS at the first step) of each row; enc: B'
        rows. order: (B',) row r continues row order[r] of `state` (B rows), as if `state`
        were ``reorder(state, order)``; None: each row its own (B' = B). With
        need_attn=False the step may skip computing attention weights and returns
        attn=None. `state` is spent: the step may have written into its memory (module doc),
        and the returned logits may live in the returned state's memory, valid until it is
        stepped in turn.
        """
        raise NotImplementedError

    def join(self, state: State, enc: Encoded, new: Encoded) -> tuple[State, Encoded]:
        """The rows of `new` (as `expand` made it, with enc's group) appended after those of
        `enc` (B rows) and of `state` (B decoder rows, stepped any number of times, spent
        here), each new row's state as `init_state` starts one: its next step is its first,
        and it gives what that row would give decoded alone. Only for a model whose `joins`
        is True (a model with a per-row clock; the others' searches cannot take rows)."""
        raise NotImplementedError

    def forward(self, src: torch.Tensor, src_lens: torch.Tensor, tgt_in: torch.Tensor,
                return_attn: bool = False) -> Output:
        """Teacher forcing over tgt_in: (B, T), which starts with BOS."""
        raise NotImplementedError

    def choose_attention(self, kind: str = "cross", layer: int | str | None = None,
                         head: int | str | None = None) -> AttentionChoice:
        """Check a choice of attention against this model, before any work, and fill in its
        defaults (a Transformer: the top layer and the mean over heads; layer LAYER_MEAN: the
        mean of every decoder layer's cross-attention). Raises OptionError naming the argument
        at fault (kind, layer, head)."""
        raise NotImplementedError

    def choose_view(self, choice: AttentionChoice, view: str) -> AttentionChoice:
        """`choice` (from `choose_attention`) reading the cross-attention view `view`;
        OptionError naming `view` when the model has no such view."""
        checked: AttentionView = choice_of("view", view, AttentionView)
        if checked != "chosen" and choice.kind != "cross":
            raise OptionError.about("view", "applies to the cross-attention", value=view)
        if checked not in self.views:
            raise OptionError.about("view", "needs a hard-attention RNN (model.rnn.hard) with "
                                    "placement: luong and input_feeding: false, whose steps "
                                    "can score each position's context", value=view)
        return dataclasses.replace(choice, view=checked)

    def attention_maps(self, src: torch.Tensor, src_lens: torch.Tensor, tgt_in: torch.Tensor,
                       choice: AttentionChoice) -> torch.Tensor:
        """Teacher-forced attention weights for visualisation and alignment, as `choice`
        (from `choose_attention`) says: kind "cross" (B, T, S) decoder-over-source,
        "encoder" (B, S, S) or "decoder" (B, T, T) self-attention, where T counts tgt_in's
        tokens (BOS first). One forward pass, the mean over heads included. Rows at padded
        query positions carry no meaning; slice them off by length."""
        raise NotImplementedError

    def drawing_positions(self, generator: torch.Generator) -> AbstractContextManager:
        """Within the block, steps of a model with a discrete latent choice (hard
        attention's position) draw it from its distribution with `generator` instead of
        taking the likeliest: ancestral sampling (`mtkit.decode.sampling`). Here nothing
        changes: the other models have no such choice."""
        return nullcontext()

    def restricted(self, rows: torch.Tensor) -> Translator:
        """This model with an output layer that computes only target ids `rows` (V',): its
        steps' logits are (B, V'), column j for id rows[j], each as the full layer computes
        it (their inputs are still ids). Every other module and parameter is shared
        (`with_child`); `forward` and the forced paths are meant for the full model.
        Decoding with a vocabulary shortlist (`mtkit.decode.shortlist`)."""
        raise NotImplementedError

    def vocabulary_parts(self) -> dict[str, list[str]]:
        """The state_dict names of each `VocabularyPart`'s parameters: the source and the
        target token embeddings and the output layer. Tied parts (shared embeddings) name the
        one tensor each under its own names."""
        raise NotImplementedError

    def parameter_counts(self) -> dict[str, int]:
        """Trainable parameters per top-level component, plus 'total'. A parameter shared
        between components (tied embeddings) counts once, in the first component that holds
        it, so the components add up to the total."""
        seen: set[int] = set()

        def fresh(params: Iterable[nn.Parameter]) -> int:
            n = 0
            for p in params:
                if p.requires_grad and id(p) not in seen:
                    seen.add(id(p))
                    n += p.numel()
            return n

        counts = {name: fresh(m.parameters()) for name, m in self.named_children()}
        counts["total"] = sum(counts.values()) + fresh(self.parameters())
        return counts
