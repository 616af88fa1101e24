"""The Transformer (Vaswani et al. 2017), with incremental decoding from a key/value cache.

Shapes: B batch (times beam), S source length, T target length, d model size, h heads,
dh = d / h, V vocabulary, N decoder layers.

Modules are composed by `mtkit.models.build.build_model`; this file only defines them.

Attention runs through `torch.nn.functional.scaled_dot_product_attention` (fused kernels; the
weights are never materialised) unless a caller asks for the weights, or a decoding step
runs on CPU: then an explicit softmax path computes the same thing (see `_attend`); the
explicit path also serves a cross-attention with a sparse normaliser
(`model.attention_normalizer`, `mtkit.models.normalizers`).

Encoded.extras: "cross_k{i}", "cross_v{i}" (B, h, S, dh) for decoder layer i (contiguous
when decoding): the cross-attention keys and values, computed once per sentence in `encode`.
Decoder state: "self_k{i}", "self_v{i}" (B, h, t, dh), the self-attention cache after t
steps (a view into a buffer with room for more), "spare_k{i}", "spare_v{i}" (B, n), the
memory a reordering step copies it into (`mtkit.models.kv_cache`), and "spare_logits"
(B, n), the memory the next step writes its logits into on CPU. Batch-first.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from mtkit.config.attention import Normalizer
from mtkit.errors import OptionError, choice
from mtkit.models import kv_cache
from mtkit.models.base import (
    LAYER_MEAN,
    AttentionChoice,
    AttentionKind,
    Encoded,
    LayerMean,
    Output,
    State,
    Step,
    Translator,
    kind_problems,
    parameter_names,
    source_mask,
    with_child,
)
from mtkit.models.embedding import ScaledEmbedding
from mtkit.models.normalizers import normalize
from mtkit.models.quantize import is_float_linear, restricted_linear

Weights = torch.Tensor | None  # (B, h, T, S) attention weights, when asked for
# One layer's self-attention cache: keys, values (B, h, t, dh), and their spares (B, n).
Cache = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]


class _Attention(nn.Module):
    """Multi-head scaled dot-product attention (Vaswani et al. 2017, §3.2.2): the part shared
    by self- and cross-attention."""

    def __init__(self, d_model: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.heads = heads
        self.dropout = dropout
        self.out = nn.Linear(d_model, d_model)
        self.normalizer: Normalizer = "softmax"  # a sparse one needs the explicit path

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, d) -> (B, h, T, dh)."""
        b, t, d = x.shape
        return x.view(b, t, self.heads, d // self.heads).transpose(1, 2)

    def _attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                mask: torch.Tensor | None, *, causal: bool, need_weights: bool,
                incremental: bool = False) -> tuple[torch.Tensor, Weights]:
        """q (B, h, T, dh), k/v (B, h, S, dh), mask (B, 1, 1, S) True on keys to attend to ->
        output (B, T, d) after the output projection, weights (B, h, T, S) or None.
        incremental: a decoding step (T is 1, or a beam's few queries per row)."""
        p = self.dropout if self.training else 0.0
        # On CPU, a decoding step's few queries per row go faster through two batched matmuls
        # than through the fused kernel, which is tiled for long query blocks (bench/RESULTS.md,
        # "Attention of a decoding step on a CPU"); outputs agree within 1e-6.
        if need_weights or self.normalizer != "softmax" or (
                incremental and q.device.type == "cpu"):
            scores = (q @ k.transpose(-2, -1)).div_(math.sqrt(q.size(-1)))
            if mask is not None:
                scores = scores.masked_fill_(~mask, float("-inf"))
            if causal:
                future = torch.ones(q.size(2), k.size(2), dtype=torch.bool,
                                    device=q.device).triu(1)
                scores = scores.masked_fill(future, float("-inf"))
            weights = normalize(scores, self.normalizer)
            out = F.dropout(weights, p, self.training) @ v
            weights = weights if need_weights else None
        else:
            weights = None
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p,
                                                 is_causal=causal)
        b, h, t, dh = out.shape
        return self.out(out.transpose(1, 2).reshape(b, t, h * dh)), weights


class SelfAttention(_Attention):
    """Self-attention with one fused query/key/value projection."""

    def __init__(self, d_model: int, heads: int, dropout: float) -> None:
        super().__init__(d_model, heads, dropout)
        self.qkv = nn.Linear(d_model, 3 * d_model)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, *, causal: bool = False,
                need_weights: bool = False) -> tuple[torch.Tensor, Weights]:
        """x (B, T, d) over a whole sequence -> (B, T, d), weights."""
        q, k, v = (self._split(t) for t in self.qkv(x).chunk(3, dim=-1))
        return self._attend(q, k, v, mask, causal=causal, need_weights=need_weights)

    def step(self, x: torch.Tensor, cache: Cache, order: torch.Tensor | None,
             mask: torch.Tensor | None = None) -> tuple[torch.Tensor, Cache]:
        """x (B', 1, d); cache: keys, values (B, h, t, dh) and their spares; order (B',) the
        cache row each row continues, or None -> (B', 1, d), the cache one position longer
        (`kv_cache.extend`). The one new query may see every cached position (mask None)
        or, for rows that joined late (`Transformer.join`), those mask (B', 1, 1, t+1)
        marks True."""
        q, k, v = (self._split(t) for t in self.qkv(x).chunk(3, dim=-1))
        keys, key_spare = kv_cache.extend(cache[0], cache[2], k, order)
        values, value_spare = kv_cache.extend(cache[1], cache[3], v, order)
        out, _ = self._attend(q, keys, values, mask, causal=False, need_weights=False,
                              incremental=True)
        return out, (keys, values, key_spare, value_spare)


class CrossAttention(_Attention):
    """Decoder-over-encoder attention; keys and values come from `kv` once per sentence."""

    def __init__(self, d_model: int, heads: int, dropout: float, *,
                 normalizer: Normalizer = "softmax") -> None:
        super().__init__(d_model, heads, dropout)
        self.normalizer = normalizer
        self.q = nn.Linear(d_model, d_model)
        self.kv = nn.Linear(d_model, 2 * d_model)

    def kv_heads(self, memory: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """memory (B, S, d) -> keys, values (B, h, S, dh). Without autograd (decoding) each is
        made contiguous: they are read at every decoding step, and as views into the
        projection's output the step's matmuls copied them each time (a beam's
        cross-attention step over 216 sentences: 4.4 ms strided, 1.9 ms contiguous; the fused
        kernel 6.4 and 4.5 ms). Training reads them once and keeps the views."""
        k, v = (self._split(t) for t in self.kv(memory).chunk(2, dim=-1))
        if torch.is_grad_enabled():
            return k, v
        return k.contiguous(), v.contiguous()

    def forward(self, x: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, *,
                need_weights: bool = False, incremental: bool = False
                ) -> tuple[torch.Tensor, Weights]:
        """x (B, T, d), k/v (B, h, S, dh), mask (B, 1, 1, S) -> (B, T, d), weights."""
        return self._attend(self._split(self.q(x)), k, v, mask, causal=False,
                            need_weights=need_weights, incremental=incremental)


class FeedForward(nn.Module):
    """Position-wise FFN (§3.3) with dropout on the activations."""

    def __init__(self, d_model: int, ffn_dim: int, activation: str, act_dropout: float) -> None:
        super().__init__()
        self.inner = nn.Linear(d_model, ffn_dim)
        self.outer = nn.Linear(ffn_dim, d_model)
        # ReLU in place: nothing else needs the inner output (a Linear's backward uses its input).
        self.act = (nn.GELU() if activation == "gelu" else nn.SiLU() if activation == "swish"
                    else nn.ReLU(inplace=True))
        self.dropout = nn.Dropout(act_dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.outer(self.dropout(self.act(self.inner(x))))


class _Sublayers(nn.Module):
    """Residual connections around sublayers, post-norm x = LN(x + f(x)) as in Vaswani et al.
    2017, or pre-norm x = x + f(LN(x)) (Wang et al. 2019; Xiong et al. 2020), which trains
    without warm-up tuning and needs a final LayerNorm on the stack."""

    def __init__(self, d_model: int, n: int, dropout: float, pre_norm: bool) -> None:
        super().__init__()
        self.norms = nn.ModuleList(nn.LayerNorm(d_model) for _ in range(n))
        self.dropout = nn.Dropout(dropout)
        self.pre_norm = pre_norm

    def inp(self, i: int, x: torch.Tensor) -> torch.Tensor:
        """What sublayer i reads."""
        return self.norms[i](x) if self.pre_norm else x

    def res(self, i: int, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """The stream after sublayer i produced y from x."""
        x = x + self.dropout(y)
        return x if self.pre_norm else self.norms[i](x)


class EncoderLayer(_Sublayers):
    def __init__(self, d_model: int, heads: int, ffn: FeedForward, *, dropout: float,
                 attn_dropout: float, pre_norm: bool) -> None:
        super().__init__(d_model, 2, dropout, pre_norm)
        self.self_attn = SelfAttention(d_model, heads, attn_dropout)
        self.ffn = ffn

    def forward(self, x: torch.Tensor, mask: torch.Tensor, *, need_weights: bool = False
                ) -> tuple[torch.Tensor, Weights]:
        """x (B, S, d), mask (B, 1, 1, S) -> (B, S, d), self-attention weights or None."""
        y, weights = self.self_attn(self.inp(0, x), mask, need_weights=need_weights)
        x = self.res(0, x, y)
        return self.res(1, x, self.ffn(self.inp(1, x))), weights


class DecoderLayer(_Sublayers):
    def __init__(self, d_model: int, heads: int, ffn: FeedForward, *, dropout: float,
                 attn_dropout: float, pre_norm: bool, normalizer: Normalizer = "softmax"
                 ) -> None:
        super().__init__(d_model, 3, dropout, pre_norm)
        self.self_attn = SelfAttention(d_model, heads, attn_dropout)
        self.cross_attn = CrossAttention(d_model, heads, attn_dropout, normalizer=normalizer)
        self.ffn = ffn

    def forward(self, x: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, *,
                self_weights: bool = False, cross_weights: bool = False
                ) -> tuple[torch.Tensor, Weights, Weights]:
        """Teacher forcing. x (B, T, d); k/v (B, h, S, dh) this layer's cross keys/values;
        mask (B, 1, 1, S) -> (B, T, d), self weights (B, h, T, T), cross weights (B, h, T, S).
        Target padding sits after the real tokens, so the causal mask alone keeps it out."""
        y, sw = self.self_attn(self.inp(0, x), causal=True, need_weights=self_weights)
        x = self.res(0, x, y)
        y, cw = self.cross_attn(self.inp(1, x), k, v, mask, need_weights=cross_weights)
        x = self.res(1, x, y)
        return self.res(2, x, self.ffn(self.inp(2, x))), sw, cw

    def step(self, x: torch.Tensor, cache: Cache, order: torch.Tensor | None,
             k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, *, group: int,
             cross_weights: bool, self_mask: torch.Tensor | None = None
             ) -> tuple[torch.Tensor, Cache, Weights]:
        """One position: x (B', 1, d) -> (B', 1, d), the cache one position longer (see
        `SelfAttention.step`), cross weights (B'/g, h, g, S). k/v (B'/g, h, S, dh) and mask
        hold a row per g rows of x (`Encoded.group`): a beam's hypotheses of one sentence
        query its source together, as the g queries of one row, reading it once, not g times
        (cross-attention took 10% of a beam's time tiled, half that grouped). self_mask:
        see `SelfAttention.step`."""
        y, cache = self.self_attn.step(self.inp(0, x), cache, order, self_mask)
        x = self.res(0, x, y)
        y, cw = self.cross_attn(self.inp(1, x).reshape(-1, group, x.size(-1)), k, v, mask,
                                need_weights=cross_weights, incremental=True)
        x = self.res(1, x, y.reshape(x.shape))
        return self.res(2, x, self.ffn(self.inp(2, x))), cache, cw


class Encoder(nn.Module):
    def __init__(self, layers: list[EncoderLayer], final_norm: nn.Module) -> None:
        super().__init__()
        self.layers = nn.ModuleList(layers)
        self.norm = final_norm  # LayerNorm for pre-norm stacks, Identity for post-norm

    def forward(self, x: torch.Tensor, mask: torch.Tensor, *, weights_layer: int | None = None
                ) -> tuple[torch.Tensor, Weights]:
        """x (B, S, d), mask (B, 1, 1, S) -> (B, S, d), self weights of weights_layer."""
        kept = None
        for i, layer in enumerate(self.layers):
            x, w = layer(x, mask, need_weights=i == weights_layer)
            kept = w if w is not None else kept
        return self.norm(x), kept


class Decoder(nn.Module):
    def __init__(self, layers: list[DecoderLayer], final_norm: nn.Module) -> None:
        super().__init__()
        self.layers = nn.ModuleList(layers)
        self.norm = final_norm

    def forward(self, x: torch.Tensor, enc: Encoded, *, self_layer: int | None = None,
                cross_layer: int | LayerMean | None = None
                ) -> tuple[torch.Tensor, Weights, Weights]:
        """x (B, T, d) -> (B, T, d), self weights (B, h, T, T) of self_layer, cross weights
        (B, h, T, S) of cross_layer (LAYER_MEAN: the mean over every layer's)."""
        mask = enc.src_mask[:, None, None, :]
        sw = cw = None
        every = cross_layer == LAYER_MEAN
        for i, layer in enumerate(self.layers):
            x, s, c = layer(x, enc.extras[f"cross_k{i}"], enc.extras[f"cross_v{i}"], mask,
                            self_weights=i == self_layer,
                            cross_weights=every or i == cross_layer)
            sw = s if s is not None else sw
            if c is not None:
                cw = c if cw is None or not every else cw + c
        if every and cw is not None:
            cw = cw / len(self.layers)
        return self.norm(x), sw, cw


def _generate(generator: nn.Linear, h: torch.Tensor, spare: torch.Tensor
              ) -> tuple[torch.Tensor, torch.Tensor]:
    """A step's logits generator(h) (B', V) from h (B', d), and the spare memory for the next
    step's. On CPU they are written into the spare: (B', V) floats are tens of MB for a
    beam, which glibc maps fresh for every allocation and the kernel then faults in and
    zeroes; with the bias copied into them first (how addmm adds it), the projection runs
    a quarter faster in reused memory (bench/RESULTS.md, "Figures behind the code's
    comments"). The logits are
    valid until the next step of the state they came with (`Translator.step`). An int8
    projection (`mtkit.models.quantize`) writes its own output."""
    # (out= is not differentiable)
    if h.device.type != "cpu" or torch.is_grad_enabled() or not is_float_linear(generator):
        return generator(h), spare
    out = kv_cache.into_spare(spare, h.size(0), generator.out_features, h)
    if generator.bias is None:
        torch.mm(h, generator.weight.t(), out=out)
    else:
        torch.addmm(generator.bias, h, generator.weight.t(), out=out)
    return out, kv_cache.spare_of(out, h.size(0))


def _joined_sources(enc: Encoded, new: Encoded) -> Encoded:
    """`enc`'s rows, then `new`'s, over the longest source either holds: memory (B, S, H),
    mask (B, S) and the cross keys/values (B, h, S, dh) padded (masked) or cut to it."""
    s = max(int(m.sum(1).max()) for m in (enc.src_mask, new.src_mask) if m.size(0))

    def fit(x: torch.Tensor, dim: int) -> torch.Tensor:
        if x.size(dim) >= s:
            return x.narrow(dim, 0, s)
        pad = list(x.shape)
        pad[dim] = s - x.size(dim)
        return torch.cat([x, x.new_zeros(pad)], dim)

    def both(a: torch.Tensor, b: torch.Tensor, dim: int) -> torch.Tensor:
        return torch.cat([fit(a, dim), fit(b, dim)]).contiguous()

    extras = {k: both(v, new.extras[k], 2) for k, v in enc.extras.items()}
    return Encoded(both(enc.memory, new.memory, 1), both(enc.src_mask, new.src_mask, 1),
                   extras, enc.group)


def _pick_head(weights: torch.Tensor, head: int | None) -> torch.Tensor:
    """(B, h, T, S) -> (B, T, S): one head, or the mean over heads (rows still sum to 1)."""
    return weights.mean(dim=1) if head is None else weights[:, head]


class Transformer(Translator):
    """Encoder-decoder Transformer. Cross-attention weights for alignment come from decoder
    layer `align_layer` (negative counts from the top), head `align_head` or the head mean;
    they are computed only when a caller asks (need_attn / return_attn)."""

    joins = True

    def __init__(self, src_embed: ScaledEmbedding, tgt_embed: ScaledEmbedding, encoder: Encoder,
                 decoder: Decoder, generator: nn.Linear, *, align_layer: int,
                 align_head: int | None) -> None:
        super().__init__()
        self.src_embed = src_embed
        self.tgt_embed = tgt_embed
        self.encoder = encoder
        self.decoder = decoder
        self.generator = generator
        self.heads = decoder.layers[0].self_attn.heads
        self.attention_grid = (len(decoder.layers), self.heads)
        self.align_layer = align_layer % len(decoder.layers)
        self.align_head = align_head
        # the cross-attention a caller gets by default, as the recipe names it (-1: the top)
        self.default_cross = (align_layer, "mean" if align_head is None else align_head)

    def restricted(self, rows: torch.Tensor) -> Transformer:
        return with_child(self, "generator", restricted_linear(self.generator, rows))

    def vocabulary_parts(self) -> dict[str, list[str]]:
        return {"src_embeddings": parameter_names("src_embed.tokens", self.src_embed.tokens),
                "tgt_embeddings": parameter_names("tgt_embed.tokens", self.tgt_embed.tokens),
                "output": parameter_names("generator", self.generator)}

    def encode(self, src: torch.Tensor, src_lens: torch.Tensor) -> Encoded:
        mask = source_mask(src, src_lens)
        memory, _ = self.encoder(self.src_embed(src), mask[:, None, None, :])
        extras: State = {}
        for i, layer in enumerate(self.decoder.layers):
            extras[f"cross_k{i}"], extras[f"cross_v{i}"] = layer.cross_attn.kv_heads(memory)
        return Encoded(memory, mask, extras)

    def init_state(self, enc: Encoded) -> State:
        b, h, _, dh = enc.extras["cross_k0"].shape
        b *= enc.group  # decoder rows
        state: State = {}
        for i in range(len(self.decoder.layers)):
            for kv in "kv":
                state[f"self_{kv}{i}"], state[f"spare_{kv}{i}"] = kv_cache.empty(
                    b, h, dh, like=enc.memory)
        state["spare_logits"] = enc.memory.new_empty(b, 0)
        return state

    def expand(self, enc: Encoded, k: int) -> Encoded:
        """Grouped, not tiled (see `DecoderLayer.step`)."""
        assert enc.group == 1, enc.group
        return Encoded(enc.memory, enc.src_mask, enc.extras, group=k)

    def join(self, state: State, enc: Encoded, new: Encoded) -> tuple[State, Encoded]:
        """A joining row's cache is left-padded to the others' t positions, masked out, and
        its positions count from its first step: state "start" (B,) the cache column of each
        row's position 0. Cache columns no row reads any more, and source columns beyond the
        longest source, are cut; the cross keys/values are padded to the longest source."""
        assert enc.group == new.group, (enc.group, new.group)
        t = state["self_k0"].size(2)
        old = state["self_k0"].size(0)
        device = new.src_mask.device
        start = torch.cat([state.get("start", torch.zeros(old, dtype=torch.long,
                                                          device=device)),
                           torch.full((new.src_mask.size(0) * new.group,), t,
                                      dtype=torch.long, device=device)])
        cut = int(start.min())
        joined: State = {"start": start - cut}
        for i in range(len(self.decoder.layers)):
            for kv in "kv":
                cache = state[f"self_{kv}{i}"]
                pad = cache.new_zeros(start.numel() - old, *cache.shape[1:])
                joined[f"self_{kv}{i}"] = torch.cat([cache, pad])[:, :, cut:].contiguous()
                joined[f"spare_{kv}{i}"] = cache.new_empty(start.numel(), 0)
        joined["spare_logits"] = enc.memory.new_empty(start.numel(), 0)
        return joined, _joined_sources(enc, new)

    def step(self, prev: torch.Tensor, state: State, enc: Encoded, *,
             need_attn: bool = True, order: torch.Tensor | None = None) -> Step:
        t = state["self_k0"].size(2)  # positions already decoded
        new: State = {}
        self_mask = None
        if "start" in state:  # rows that joined late (`join`): each at its own position
            start = state["start"] if order is None else state["start"].index_select(0, order)
            new["start"] = start
            x = self.tgt_embed.at(prev, t - start)
            self_mask = (torch.arange(t + 1, device=prev.device) >= start.unsqueeze(1)
                         )[:, None, None, :]
        else:
            x = self.tgt_embed(prev.unsqueeze(1), start=t)
        mask = enc.src_mask[:, None, None, :]
        attn = None
        for i, layer in enumerate(self.decoder.layers):
            names = (f"self_k{i}", f"self_v{i}", f"spare_k{i}", f"spare_v{i}")
            cached = (state[names[0]], state[names[1]], state[names[2]], state[names[3]])
            x, cache, cw = layer.step(
                x, cached, order,
                enc.extras[f"cross_k{i}"], enc.extras[f"cross_v{i}"], mask, group=enc.group,
                cross_weights=need_attn and i == self.align_layer, self_mask=self_mask)
            new.update(zip(names, cache, strict=True))
            if cw is not None:  # (B'/g, g, S) -> (B', S)
                attn = _pick_head(cw, self.align_head).reshape(x.size(0), -1)
        h = self.decoder.norm(x).squeeze(1)
        logits, new["spare_logits"] = _generate(self.generator, h, state["spare_logits"])
        return Step(logits, attn, new)

    def forward(self, src: torch.Tensor, src_lens: torch.Tensor, tgt_in: torch.Tensor,
                return_attn: bool = False) -> Output:
        enc = self.encode(src, src_lens)
        x, _, cw = self.decoder(self.tgt_embed(tgt_in), enc,
                                cross_layer=self.align_layer if return_attn else None)
        return Output(self.generator(x), None if cw is None else _pick_head(cw, self.align_head))

    def choose_attention(self, kind: str = "cross", layer: int | str | None = None,
                         head: int | str | None = None) -> AttentionChoice:
        """Default: for the cross-attention, the model's own `align_layer` and `align_head`
        (what its search returns, and what guided alignment trained); for self-attention, the
        top layer and the mean over heads. The top layer aligned best in every model trained
        on the synthetic reversal and permutation tasks of tests/system/test_align_learning.py
        (AER, d_model 64, seeds 1-4): 2 decoder layers, top 0.001-0.019 vs bottom 0.03-0.76;
        3 decoder layers (seeds 1-3), top 0.003-0.050 vs penultimate 0.022-0.080 vs bottom
        0.18-0.75. Garg et al. (2019) find the penultimate layer best on real language pairs;
        `layer` chooses; LAYER_MEAN, the cross-attention's mean over the decoder layers."""
        if problems := kind_problems(kind):
            raise OptionError(*problems)
        n = len(self.encoder.layers if kind == "encoder" else self.decoder.layers)
        if kind == "cross":
            layer = self.default_cross[0] if layer is None else layer
            head = self.default_cross[1] if head is None else head
        layer = -1 if layer is None else layer
        if layer == LAYER_MEAN and kind != "cross":
            raise OptionError.about("layer", "the mean over layers is read of the "
                                    "cross-attention only", value=layer)
        if layer != LAYER_MEAN and not (isinstance(layer, int) and -n <= layer < n):
            side = "encoder" if kind == "encoder" else "decoder"
            raise OptionError.about("layer", f"the model has {n} {side} layers; expected "
                                    f"0..{n - 1} or -{n}..-1 (from the top)", value=layer)
        head = "mean" if head is None else head
        if head != "mean" and not (isinstance(head, int) and 0 <= head < self.heads):
            raise OptionError.about("head", f"the model has {self.heads} heads; expected "
                                    f"0..{self.heads - 1} or mean", value=head)
        return AttentionChoice(choice("kind", kind, AttentionKind), layer, head)  # type: ignore[arg-type]

    def attention_maps(self, src: torch.Tensor, src_lens: torch.Tensor, tgt_in: torch.Tensor,
                       choice: AttentionChoice) -> torch.Tensor:
        """See `Translator.attention_maps`: one pass computes every head of the chosen layer
        (of every layer, for LAYER_MEAN)."""
        assert choice.layer is not None and choice.head is not None, choice
        n = len(self.encoder.layers if choice.kind == "encoder" else self.decoder.layers)
        layer = choice.layer if choice.layer == LAYER_MEAN else choice.layer % n
        if choice.kind == "encoder":
            mask = source_mask(src, src_lens)
            _, w = self.encoder(self.src_embed(src), mask[:, None, None, :], weights_layer=layer)
        else:
            _, sw, cw = self.decoder(self.tgt_embed(tgt_in), self.encode(src, src_lens),
                                     self_layer=layer if choice.kind == "decoder" else None,
                                     cross_layer=layer if choice.kind == "cross" else None)
            w = sw if choice.kind == "decoder" else cw
        assert w is not None
        return _pick_head(w, None if choice.head == "mean" else choice.head)
