"""RNN encoder-decoders: Sutskever et al. 2014, Bahdanau et al. 2015, Luong et al. 2015.

Shapes: B batch (times beam), S source length, T target length, E embedding size,
H encoder hidden size per direction, Hm = H or 2H encoder output (memory) size, Hd decoder
hidden size, L decoder layers, D readout size (E when the output layer is tied to the
target embedding, else Hd), V target vocabulary.

Modules are composed by `mtkit.models.build.build_model`; this file only defines them.

Decoder state (every tensor batch-first, see `base.State`):
  "h"    (B, L, Hd)  hidden state of every decoder layer
  "c"    (B, L, Hd)  LSTM cell state (LSTM only)
  "feed" (B, D)      previous attentional hidden state (Luong placement with input feeding)
  "t"    (B,)        decoder step index, long (local-m attention only)
With hard attention (`mtkit.models.hard`) the context of a step is one encoder state, and the
weights a step returns are that position's one-hot row.
Encoded.extras:
  "final"   (B, Hm)    top encoder layer's final states, both directions concatenated (for the
                       bridge, and the fixed context of attention `none`)
  "final_c" (B, Hm)    the same for the LSTM cell state (LSTM with a bridge only)
  "keys"    (B, S, K)  attention keys precomputed once per sentence (see attention.py)
The RNN modules take (L, B, Hd); we transpose only at that call.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import invert_permutation, pack_padded_sequence, pad_packed_sequence

from mtkit.errors import MtkitError, OptionError
from mtkit.models.attention import Attention
from mtkit.models.base import (
    AttentionChoice,
    Encoded,
    Output,
    State,
    Step,
    Translator,
    host_to_device,
    kind_problems,
    parameter_names,
    reorder,
    source_mask,
    with_child,
)
from mtkit.models.hard import Draw, HardAttention, safe_log
from mtkit.models.quantize import restricted_linear
from mtkit.models.vocab import EOS_ID, PAD_ID

Hidden = torch.Tensor | tuple[torch.Tensor, torch.Tensor]  # (L, B, Hd), or (h, c) for LSTM
# A teacher-forced pass of a decoder: logits (B, T, V), attention (B, T, S) or None, and with
# hard attention the draw of every step (None without).
Teacher = tuple[torch.Tensor, torch.Tensor | None, Draw | None]
# The exact marginal's per-position logits are computed for this many (B * T * S * V) elements
# at once, recomputed in the backward pass rather than kept: 64 MB of float32.
POSITION_BLOCK = 1 << 24


def _top(hidden: Hidden) -> torch.Tensor:
    """The top layer's hidden state: (B, Hd)."""
    return (hidden[0] if isinstance(hidden, tuple) else hidden)[-1]


_CELLS = {"GRU": torch.gru_cell, "LSTM": torch.lstm_cell, "RNN_TANH": torch.rnn_tanh_cell,
          "RNN_RELU": torch.rnn_relu_cell}


def rnn_step(rnn: nn.RNNBase, x: torch.Tensor, hidden: Hidden) -> tuple[torch.Tensor, Hidden]:
    """One time step of the unidirectional stack `rnn`: x (B, 1, In), hidden (L, B, Hd) (or
    (h, c)) -> out (B, 1, Hd), new hidden; the same function as ``rnn(x, hidden)``.

    Decoders that attend step by step call the recurrence once per target token. Through
    the cell functions on the module's own weights (so checkpoints are unchanged) one step is
    a few fused kernels; a one-step ``nn.GRU`` call goes through cuDNN, whose per-call
    set-up cost the host ~0.4 ms per step in the backward pass alone (bench/RESULTS.md).
    Under autocast the cells run in autocast's dtype (bf16 with `precision: bf16`), as
    PyTorch's autocast policy lists them; cuDNN's RNN ran in fp16 whatever that dtype was."""
    assert rnn.batch_first and not rnn.bidirectional and not getattr(rnn, "proj_size", 0), (
        "rnn_step steps a batch-first, unidirectional stack without projections")
    cell = _CELLS[rnn.mode]
    lstm = isinstance(hidden, tuple)
    inp = x.squeeze(1)
    hs, cs = [], []
    for k, weights in enumerate(rnn.all_weights):  # per layer: w_ih, w_hh[, b_ih, b_hh]
        if lstm:
            h, c = cell(inp, (hidden[0][k], hidden[1][k]), *weights)
            cs.append(c)
        else:
            h = cell(inp, hidden[k], *weights)
        hs.append(h)
        last = k == rnn.num_layers - 1
        # nn.RNNBase's dropout: on every layer's output but the last, in training.
        inp = h if last or rnn.dropout == 0 else F.dropout(h, rnn.dropout, rnn.training)
    new_h = torch.stack(hs)
    return inp.unsqueeze(1), ((new_h, torch.stack(cs)) if lstm else new_h)


class RNNEncoder(nn.Module):
    """Embedding, dropout, then a (bi)directional multi-layer RNN over packed sequences, so
    padding never enters the recurrence and a backward direction starts at the real last
    token. nn.LSTM/GRU/RNN apply `dropout` between layers themselves."""

    def __init__(self, embed: nn.Embedding, rnn: nn.RNNBase, dropout: float) -> None:
        super().__init__()
        self.embed = embed
        self.rnn = rnn
        self.dropout = nn.Dropout(dropout)

    def forward(self, src: torch.Tensor, src_lens: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """src (B, S), src_lens (B,) -> memory (B, S, Hm) (zeros on padding), final h (B, Hm),
        final c (B, Hm) or None (not LSTM)."""
        x = self.dropout(self.embed(src))
        # Packing wants the rows sorted by length. We sort on the host and queue the
        # permutations to the device ourselves: pack_padded_sequence(enforce_sorted=False) and
        # pad_packed_sequence would each copy an index between host and device and wait for
        # the GPU. Lengths already on the host (`Batch.to` keeps them there) cost nothing.
        lens, order = src_lens.cpu().sort(descending=True)
        unorder = invert_permutation(order)
        order, unorder = host_to_device(order, src.device), host_to_device(unorder, src.device)
        packed = pack_padded_sequence(x.index_select(0, order), lens, batch_first=True)
        out, hidden = self.rnn(packed)
        memory, _ = pad_packed_sequence(out, batch_first=True, total_length=src.size(1))
        memory = memory.index_select(0, unorder)
        if isinstance(hidden, tuple):
            return (memory, self._final(hidden[0].index_select(1, unorder)),
                    self._final(hidden[1].index_select(1, unorder)))
        return memory, self._final(hidden.index_select(1, unorder)), None

    def _final(self, h: torch.Tensor) -> torch.Tensor:
        """(layers * dirs, B, H) -> (B, dirs * H): the top layer, forward then backward, the
        same order as the memory's features."""
        dirs = 2 if self.rnn.bidirectional else 1
        return h[-dirs:].transpose(0, 1).reshape(h.size(1), -1)


class Bridge(nn.Module):
    """Decoder initial state s_0 = tanh(W h_enc + b) for every decoder layer (Bahdanau et al.
    2015, App. A.2.2, which uses the backward encoder's first state; h_enc here is both
    directions' final states). The LSTM cell state gets its own map."""

    def __init__(self, memory_dim: int, layers: int, hidden: int, *, lstm: bool) -> None:
        super().__init__()
        self.layers, self.hidden = layers, hidden
        self.h = nn.Linear(memory_dim, layers * hidden)
        self.c = nn.Linear(memory_dim, layers * hidden) if lstm else None

    def forward(self, final: torch.Tensor, final_c: torch.Tensor | None
                ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """final, final_c (B, Hm) -> h, c (B, L, Hd) (c None unless LSTM)."""
        shape = (final.size(0), self.layers, self.hidden)
        h = torch.tanh(self.h(final)).view(shape)
        if self.c is None:
            return h, None
        assert final_c is not None, "an LSTM bridge needs the encoder's final cell state"
        return h, torch.tanh(self.c(final_c)).view(shape)


class RNNDecoder(nn.Module):
    """What both placements share: target embedding, the recurrent stack, attention (None for
    the fixed-context baseline), a readout layer (D) and the output layer (V)."""

    def __init__(self, embed: nn.Embedding, rnn: nn.RNNBase, attention: Attention | None,
                 readout: nn.Linear, generator: nn.Linear, dropout: float, *,
                 hard: HardAttention | None = None) -> None:
        super().__init__()
        self.embed = embed
        self.rnn = rnn
        self.attention = attention
        self.hard = hard
        self.readout = readout
        self.generator = generator
        self.dropout = nn.Dropout(dropout)
        self.lstm = rnn.mode == "LSTM"

    @property
    def uses_positions(self) -> bool:
        return self.attention is not None and self.attention.uses_positions

    @property
    def scores_positions(self) -> bool:
        """True when each step's output can be scored for every position's context: hard
        attention whose context feeds no later step (the exact marginal, the posterior)."""
        return False

    def posterior(self, tgt_in: torch.Tensor, state: State, enc: Encoded) -> torch.Tensor:
        """p(z_t | x, y_<=t) (B, T, S) of hard attention over teacher-forced steps; only for
        a decoder that `scores_positions`."""
        raise AssertionError("this decoder cannot score every position's context")

    def initial_state(self, h: torch.Tensor, c: torch.Tensor | None) -> State:
        """h, c (B, L, Hd) -> the state before the first target token."""
        state = {"h": h}
        if self.lstm:
            state["c"] = torch.zeros_like(h) if c is None else c
        if self.uses_positions:
            state["t"] = torch.zeros(h.size(0), dtype=torch.long, device=h.device)
        return state

    def _hidden(self, state: State) -> Hidden:
        h = state["h"].transpose(0, 1).contiguous()
        return (h, state["c"].transpose(0, 1).contiguous()) if self.lstm else h

    def _state(self, hidden: Hidden, old: State) -> State:
        """The new state's recurrent part, plus the step counter when local-m needs it."""
        if isinstance(hidden, tuple):
            state = {"h": hidden[0].transpose(0, 1), "c": hidden[1].transpose(0, 1)}
        else:
            state = {"h": hidden.transpose(0, 1)}
        if "t" in old:
            state["t"] = old["t"] + 1
        return state

    def _positions(self, state: State, steps: int) -> torch.Tensor | None:
        """(B, steps) decoder step indices starting at the state's step, or None."""
        if not self.uses_positions:
            return None
        return state["t"].unsqueeze(1) + torch.arange(steps, device=state["t"].device)

    def _attend(self, query: torch.Tensor, enc: Encoded, positions: torch.Tensor | None
                ) -> tuple[torch.Tensor, torch.Tensor | None, Draw | None]:
        """query (B, T, Hd) -> context (B, T, Hm), weights (B, T, S) or None, the draw of
        hard attention or None.

        Attention `none`: the encoder's final state is the one fixed context vector for every
        step (Sutskever et al. 2014; Cho et al. 2014, the bottleneck Bahdanau et al. remove).
        Hard attention: the context is the state at the drawn (or most probable) position,
        the weights its one-hot row (`mtkit.models.hard`)."""
        if self.attention is None:
            return enc.extras["final"].unsqueeze(1).expand(-1, query.size(1), -1), None, None
        keys = enc.extras.get("keys", enc.memory)
        weights = self.attention(query, keys, enc.src_mask, positions)
        if self.hard is None:
            return torch.bmm(weights, enc.memory), weights, None
        ctx, draw = self.hard.context(weights, enc.memory)
        return ctx, draw.shown(), draw

    def _logits(self, out: torch.Tensor) -> torch.Tensor:
        """(B, T, D) readout -> (B, T, V) logits."""
        return self.generator(self.dropout(out))

    def step(self, prev: torch.Tensor, state: State, enc: Encoded, need_attn: bool) -> Step:
        raise NotImplementedError

    def teacher(self, tgt_in: torch.Tensor, state: State, enc: Encoded, need_attn: bool
                ) -> Teacher:
        """tgt_in (B, T) from `state` -> logits (B, T, V), attention (B, T, S) or None (also
        when not `need_attn`: training does not collect the T steps' weights), the draws."""
        raise NotImplementedError


class BahdanauDecoder(RNNDecoder):
    """Bahdanau et al. 2015, App. A.2.2: the attention is scored from the previous state
    s_{t-1} (eq. 6), the context c_t is an input to the recurrence with y_{t-1} (eq. 4), and
    a deep output t = tanh(W [s_t; c_t; E y_{t-1}]) feeds the softmax (one tanh layer
    standing in for the paper's maxout)."""

    def _cell(self, emb: torch.Tensor, hidden: Hidden, enc: Encoded,
              positions: torch.Tensor | None) -> tuple[torch.Tensor, ...]:
        """One step: emb (B, 1, E) -> out (B, 1, Hd), context (B, 1, Hm), weights, draw,
        hidden."""
        ctx, weights, draw = self._attend(_top(hidden).unsqueeze(1), enc, positions)
        out, hidden = rnn_step(self.rnn, torch.cat([emb, ctx], dim=-1), hidden)
        return out, ctx, weights, draw, hidden

    def _readout(self, out: torch.Tensor, ctx: torch.Tensor, emb: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.readout(torch.cat([out, ctx, emb], dim=-1)))

    def step(self, prev: torch.Tensor, state: State, enc: Encoded, need_attn: bool) -> Step:
        emb = self.dropout(self.embed(prev.unsqueeze(1)))
        out, ctx, weights, _, hidden = self._cell(emb, self._hidden(state), enc,
                                                  self._positions(state, 1))
        logits = self._logits(self._readout(out, ctx, emb)).squeeze(1)
        attn = weights.squeeze(1) if need_attn and weights is not None else None
        return Step(logits, attn, self._state(hidden, state))

    def teacher(self, tgt_in, state, enc, need_attn):
        emb = self.dropout(self.embed(tgt_in))  # (B, T, E)
        hidden = self._hidden(state)
        steps = tgt_in.size(1)
        if self.attention is None:
            # The context is fixed, so no input depends on an earlier output: one call.
            ctx = enc.extras["final"].unsqueeze(1).expand(-1, steps, -1)
            out, _ = self.rnn(torch.cat([emb, ctx], dim=-1), hidden)
            return self._logits(self._readout(out, ctx, emb)), None, None
        positions = self._positions(state, steps)
        outs, ctxs, attns, draws = [], [], [], []
        # split, not emb[:, t:t+1]: one backward concatenation instead of T full-size
        # zero-filled gradients.
        for t, emb_t in enumerate(emb.split(1, dim=1)):  # scores need s_{t-1}: sequential
            pos = None if positions is None else positions[:, t : t + 1]
            out, ctx, weights, draw, hidden = self._cell(emb_t, hidden, enc, pos)
            outs.append(out)
            ctxs.append(ctx)
            if need_attn:
                attns.append(weights)
            if draw is not None:
                draws.append(draw)
        out, ctx = torch.cat(outs, dim=1), torch.cat(ctxs, dim=1)
        attn = torch.cat(attns, dim=1) if need_attn else None
        return (self._logits(self._readout(out, ctx, emb)), attn,
                Draw.cat(draws) if draws else None)


class LuongDecoder(RNNDecoder):
    """Luong et al. 2015: the attention is scored from the current state s_t (§3), the
    attentional hidden state h~_t = tanh(W_c [c_t; s_t]) (eq. 5) feeds the softmax, and with
    input feeding (§3.3) h~_{t-1} is concatenated to the next input."""

    def __init__(self, embed: nn.Embedding, rnn: nn.RNNBase, attention: Attention | None,
                 readout: nn.Linear, generator: nn.Linear, dropout: float, *,
                 input_feeding: bool, hard: HardAttention | None = None) -> None:
        super().__init__(embed, rnn, attention, readout, generator, dropout, hard=hard)
        self.input_feeding = input_feeding

    @property
    def scores_positions(self) -> bool:
        return self.hard is not None and not self.input_feeding

    def initial_state(self, h: torch.Tensor, c: torch.Tensor | None) -> State:
        state = super().initial_state(h, c)
        if self.input_feeding:
            state["feed"] = h.new_zeros(h.size(0), self.readout.out_features)
        return state

    def _attentional(self, out: torch.Tensor, enc: Encoded, positions: torch.Tensor | None
                     ) -> tuple[torch.Tensor, torch.Tensor | None, Draw | None]:
        """out (B, T, Hd) -> h~ (B, T, D), weights (B, T, S) or None, the draw."""
        ctx, weights, draw = self._attend(out, enc, positions)
        return torch.tanh(self.readout(torch.cat([ctx, out], dim=-1))), weights, draw

    def step(self, prev: torch.Tensor, state: State, enc: Encoded, need_attn: bool) -> Step:
        x = self.dropout(self.embed(prev.unsqueeze(1)))
        if self.input_feeding:
            x = torch.cat([x, state["feed"].unsqueeze(1)], dim=-1)
        out, hidden = rnn_step(self.rnn, x, self._hidden(state))
        h_att, weights, _ = self._attentional(out, enc, self._positions(state, 1))
        new = self._state(hidden, state)
        if self.input_feeding:
            new["feed"] = h_att.squeeze(1)
        attn = weights.squeeze(1) if need_attn and weights is not None else None
        return Step(self._logits(h_att).squeeze(1), attn, new)

    def teacher(self, tgt_in, state, enc, need_attn):
        emb = self.dropout(self.embed(tgt_in))
        hidden = self._hidden(state)
        positions = self._positions(state, tgt_in.size(1))
        if not self.input_feeding:
            # No input depends on an earlier output: run the recurrence over the whole target
            # at once, then attend for all steps in one batched op.
            out, _ = self.rnn(emb, hidden)
            if self.hard is not None and self.hard.training and self.hard.estimator == "exact":
                prior = self.attention(out, enc.extras.get("keys", enc.memory), enc.src_mask,
                                       positions)
                return self.marginal(out, enc, prior), prior if need_attn else None, None
            h_att, attn, draw = self._attentional(out, enc, positions)
            return self._logits(h_att), attn if need_attn else None, draw
        feed = state["feed"].unsqueeze(1)
        h_atts, attns, draws = [], [], []
        for t, emb_t in enumerate(emb.split(1, dim=1)):  # see BahdanauDecoder.teacher
            out, hidden = rnn_step(self.rnn, torch.cat([emb_t, feed], dim=-1), hidden)
            pos = None if positions is None else positions[:, t : t + 1]
            feed, weights, draw = self._attentional(out, enc, pos)
            h_atts.append(feed)
            if need_attn:
                attns.append(weights)
            if draw is not None:
                draws.append(draw)
        attn = torch.cat(attns, dim=1) if need_attn and self.attention is not None else None
        return (self._logits(torch.cat(h_atts, dim=1)), attn,
                Draw.cat(draws) if draws else None)

    def _position_states(self, out: torch.Tensor, enc: Encoded) -> torch.Tensor:
        """out (B, T, Hd) -> the attentional states h~ (B, T, S, D) with each source
        position's state as the context, as the output layer takes them. The readout
        W_c [c; s] + b is split into W_c' c, once per position, and W_c'' s + b, once per step
        (Luong et al. 2015, eq. 5)."""
        hm = enc.memory.size(-1)
        w = self.readout.weight
        keys = enc.memory @ w[:, :hm].T  # (B, S, D)
        queries = out @ w[:, hm:].T + self.readout.bias  # (B, T, D)
        return self.dropout(torch.tanh(keys.unsqueeze(1) + queries.unsqueeze(2)))

    def _steps_at_once(self, enc: Encoded) -> int:
        b, s = enc.src_mask.shape
        return max(1, POSITION_BLOCK // (b * s * self.generator.out_features))

    def marginal(self, out: torch.Tensor, enc: Encoded, prior: torch.Tensor) -> torch.Tensor:
        """The exact marginal over positions (Deng et al. 2018): out (B, T, Hd), prior
        (B, T, S) -> log sum_z prior[z] p(y | context z) (B, T, V), log-probabilities that
        serve as logits (`PositionMarginal`: no (B, T, S, V) tensor is kept)."""
        return PositionMarginal.apply(self._position_states(out, enc), self.generator.weight,
                                      self.generator.bias,
                                      safe_log(prior.float(), float("-inf")),
                                      self._steps_at_once(enc))

    def posterior(self, tgt_in: torch.Tensor, state: State, enc: Encoded) -> torch.Tensor:
        """p(z_t | x, y_<=t) (B, T, S) for the teacher-forced steps over tgt_in (B, T): the
        prior times the probability of the word step t predicts (tgt_in's next token, EOS
        after the last), renormalised over the positions."""
        assert self.scores_positions, "the posterior needs hard attention without feeding"
        out, _ = self.rnn(self.dropout(self.embed(tgt_in)), self._hidden(state))
        prior = self.attention(out, enc.extras.get("keys", enc.memory), enc.src_mask,
                               self._positions(state, tgt_in.size(1)))
        target = next_tokens(tgt_in)
        h, n, parts = self._position_states(out, enc), self._steps_at_once(enc), []
        for t0 in range(0, tgt_in.size(1), n):
            lp = self.generator(h[:, t0 : t0 + n]).float().log_softmax(-1)  # (B, t, S, V)
            index = target[:, t0 : t0 + n, None, None].expand(-1, -1, lp.size(2), 1)
            parts.append(lp.gather(-1, index).squeeze(-1))
        log_post = safe_log(prior.float(), float("-inf")) + torch.cat(parts, dim=1)
        return log_post.softmax(dim=-1)


class PositionMarginal(torch.autograd.Function):
    """m = log sum_s prior[s] softmax(h[s] W^T + b) (B, T, V) from the states h (B, T, S, D),
    the output layer W (V, D), b (V,) and the log-prior lp (B, T, S) (-inf off its support),
    `steps` target steps at a time (`POSITION_BLOCK`). The logits L (B, t, S, V) are the one
    big tensor; rather than keeping it (with its log-softmax and the sum's intermediates, as
    autograd would) the backward pass recomputes L once per block and applies the
    closed-form gradient: with lse[s] = logsumexp_v L[s, v], the posterior
    q[s, v] = exp(lp[s] + L[s, v] - lse[s] - m[v]) and gq[s] = sum_v g[v] q[s, v],
        dL[s, v] = g[v] q[s, v] - gq[s] softmax(L[s])[v],    dlp[s] = gq[s].
    The output layer's matmul runs four times per position and step (forward, recomputed,
    the two of the backward): the floor without keeping L is that, three with it kept."""

    @staticmethod
    def forward(ctx, h, weight, bias, lp, steps):
        ms, lses = [], []
        for t0 in range(0, h.size(1), steps):
            logits = F.linear(h[:, t0 : t0 + steps], weight, bias).to(lp.dtype)  # (B,t,S,V)
            lse = logits.logsumexp(-1)
            lses.append(lse)
            ms.append(logits.add_((lp[:, t0 : t0 + steps] - lse).unsqueeze(-1)).logsumexp(2))
        m = torch.cat(ms, dim=1)
        ctx.save_for_backward(h, weight, bias, lp, torch.cat(lses, dim=1), m)
        ctx.steps = steps
        return m

    @staticmethod
    def backward(ctx, g):
        h, weight, bias, lp, lse, m = ctx.saved_tensors
        dh, dlp = torch.empty_like(h), torch.empty_like(lp)
        # lp is float32 at least (`marginal`): the precision the sums are made in
        dw = torch.zeros(weight.shape, dtype=lp.dtype, device=weight.device)
        db = None if bias is None else torch.zeros(bias.shape, dtype=lp.dtype,
                                                   device=bias.device)
        for t0 in range(0, h.size(1), ctx.steps):
            blk = slice(t0, t0 + ctx.steps)
            logits = F.linear(h[:, blk], weight, bias).to(lp.dtype)
            lse_b = lse[:, blk].unsqueeze(-1)
            # g[v] q[s, v]; where lp is -inf (no prior mass) q is exactly 0
            gq = (logits + (lp[:, blk].unsqueeze(-1) - lse_b)).sub_(m[:, blk].unsqueeze(2))
            gq = gq.exp_().mul_(g[:, blk].to(lp.dtype).unsqueeze(2))
            gq_s = gq.sum(-1, keepdim=True)
            dlogits = gq.sub_(logits.sub_(lse_b).exp_().mul_(gq_s))  # (B, t, S, V)
            dlp[:, blk] = gq_s.squeeze(-1)
            d = dlogits.to(h.dtype)
            dh[:, blk] = d @ weight
            dw += (d.flatten(0, 2).T @ h[:, blk].flatten(0, 2)).to(lp.dtype)
            if db is not None:
                db += dlogits.sum((0, 1, 2))
        return (dh, dw.to(weight.dtype), None if db is None else db.to(bias.dtype), dlp,
                None)


def next_tokens(tgt_in: torch.Tensor) -> torch.Tensor:
    """tgt_in (B, T), BOS then the target, PAD after -> (B, T) the token each position
    predicts: the next one, EOS after the last, PAD after that."""
    lens = (tgt_in != PAD_ID).sum(dim=1, keepdim=True)
    target = torch.cat([tgt_in[:, 1:], torch.full_like(tgt_in[:, :1], PAD_ID)], dim=1)
    return target.scatter(1, lens - 1, EOS_ID)


class RNNTranslator(Translator):
    """Encoder, optional bridge (None: the decoder starts from zeros) and one decoder."""

    def __init__(self, encoder: RNNEncoder, bridge: Bridge | None, decoder: RNNDecoder) -> None:
        super().__init__()
        self.encoder = encoder
        self.bridge = bridge
        self.decoder = decoder
        self.has_attention = decoder.attention is not None
        if decoder.scores_positions:
            self.views = ("chosen", "prior", "posterior")

    def drawing_positions(self, generator: torch.Generator) -> AbstractContextManager:
        hard = self.decoder.hard
        return nullcontext() if hard is None else hard.drawing(generator)

    def restricted(self, rows: torch.Tensor) -> RNNTranslator:
        decoder = with_child(self.decoder, "generator",
                             restricted_linear(self.decoder.generator, rows))
        return with_child(self, "decoder", decoder)

    def vocabulary_parts(self) -> dict[str, list[str]]:
        return {"src_embeddings": parameter_names("encoder.embed", self.encoder.embed),
                "tgt_embeddings": parameter_names("decoder.embed", self.decoder.embed),
                "output": parameter_names("decoder.generator", self.decoder.generator)}

    def encode(self, src: torch.Tensor, src_lens: torch.Tensor) -> Encoded:
        memory, final, final_c = self.encoder(src, src_lens)
        mask = source_mask(src, src_lens)
        extras: State = {}
        if self.bridge is not None or self.decoder.attention is None:
            extras["final"] = final
        if self.bridge is not None and final_c is not None:
            extras["final_c"] = final_c
        if self.decoder.attention is not None:
            keys = self.decoder.attention.prepare(memory)
            if keys is not None:
                extras["keys"] = keys
        return Encoded(memory, mask, extras)

    def init_state(self, enc: Encoded) -> State:
        if self.bridge is not None:
            h, c = self.bridge(enc.extras["final"], enc.extras.get("final_c"))
        else:
            rnn = self.decoder.rnn
            h = enc.memory.new_zeros(enc.memory.size(0), rnn.num_layers, rnn.hidden_size)
            c = None
        return self.decoder.initial_state(h, c)

    def step(self, prev: torch.Tensor, state: State, enc: Encoded, *,
             need_attn: bool = True, order: torch.Tensor | None = None) -> Step:
        # The state is a few (B, ...) tensors: reordering them first costs next to nothing.
        if order is not None:
            state = reorder(state, order)
        return self.decoder.step(prev, state, enc, need_attn)

    def forward(self, src: torch.Tensor, src_lens: torch.Tensor, tgt_in: torch.Tensor,
                return_attn: bool = False) -> Output:
        enc = self.encode(src, src_lens)
        logits, attn, draw = self.decoder.teacher(tgt_in, self.init_state(enc), enc,
                                                  return_attn)
        hard = self.decoder.hard
        if hard is not None and hard.samples and draw is not None:
            return Output(logits, attn, hard.reinforce(logits, draw))
        return Output(logits, attn)

    def choose_attention(self, kind: str = "cross", layer: int | None = None,
                         head: int | str | None = None) -> AttentionChoice:
        """An RNN has one cross-attention, without layers or heads."""
        if not self.has_attention:
            raise MtkitError("this model has no attention (model.rnn.attention: none; one "
                             "fixed context vector), so there is nothing to align")
        if problems := kind_problems(kind):
            raise OptionError(*problems)
        if kind != "cross":
            raise OptionError.about("kind", "an RNN model has no self-attention", value=kind)
        if layer is not None or head is not None:
            raise OptionError.about(None, "{0} and {1} apply to Transformer models; this RNN "
                                    "model has one attention without layers or heads",
                                    others=("layer", "head"))
        return AttentionChoice("cross")

    def attention_maps(self, src: torch.Tensor, src_lens: torch.Tensor, tgt_in: torch.Tensor,
                       choice: AttentionChoice) -> torch.Tensor:
        """Cross attention (B, T, S), from teacher forcing: the weights each step used, the
        prior of hard attention, or its posterior (`choice.view`)."""
        assert choice.kind == "cross" and choice.layer is None, choice
        enc = self.encode(src, src_lens)
        if choice.view == "posterior":
            return self.decoder.posterior(tgt_in, self.init_state(enc), enc)
        _, attn, draw = self.decoder.teacher(tgt_in, self.init_state(enc), enc, True)
        if choice.view == "prior" and draw is not None:
            return draw.prior
        assert attn is not None
        return attn
