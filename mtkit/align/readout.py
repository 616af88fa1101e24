"""Which decoding step's cross-attention aligns a target token: the read-out of an alignment.

A teacher-forced pass over the decoder input ``BOS y_1 .. y_T`` gives T + 1 attention rows;
row r is the step whose *input* is y_r (y_0 = BOS) and which *predicts* y_{r+1} (y_{T+1} =
EOS). Search gives the same rows: `Hypothesis.attn` row r is the step that produced token r,
whose input was token r - 1, and its last row is the step that produced EOS, whose input was
y_T. So both read-outs below need no extra decoding step, after a search as after forcing.

- ``current`` (mtkit's first read-out; the name guided alignment's
  ``train.guided_alignment.readout`` uses too): y_t gets row t - 1, the step that predicts
  it; the EOS-predicting row T is kept (`drop_eos` removes it).
- ``shift`` (Chen et al. 2020, "Accurate word alignment induction from neural machine
  translation", §3, Shift-Att): y_t gets row t, the step that reads it as input.

What the two rows have seen, per model (the reason to choose one or the other):

- Transformer (every layer, any head): position r's self-attention is causal and includes
  position r, so row r's queries know y_0..y_r. The current row of y_t has not seen y_t yet;
  Chen et al. find that in their models it often attends elsewhere, and that the shift row,
  which has read y_t, finds its source. In the mtkit models measured so far (tiny ones on
  tests/system/test_shift_align.py's tasks; the CPU demo's Multi30k model in bench/RESULTS.md)
  it is the other way round: the current row looks up the source of the word it predicts, and
  the shift row that of the next word.
- RNN with Luong placement (every score function: dot, general, concat, scaled_dot, cosine,
  location, local-m, local-p): the state s_r is computed from y_r before it attends (Luong et
  al. 2015, §3), so row r has seen y_0..y_r, as in a Transformer: same two read-outs.
- RNN with Bahdanau placement (every score function, additive by default): the attention is
  scored from the previous state s_{r-1} before y_r enters the recurrence (Bahdanau et al.
  2015, eq. 6), so row r has seen only y_0..y_{r-1}. The current row of y_t is the paper's own
  alignment alpha_t (its Fig. 3: the context c_t that generates y_t); the shift row has NOT
  seen y_t either (its weights are those whose context predicts y_{t+1}), so shift is
  current's alignment of the next word, one word late: use current.

Shapes: T target tokens (without EOS), S source tokens.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, TypeVar

# One choice with one set of names for training and reading: guided alignment supervises the
# rows of `train.guided_alignment.readout` (`mtkit.train.loss.alignment_ce`), align reads them.
from mtkit.config.guided import READOUTS, Readout
from mtkit.errors import MtkitError, choice

if TYPE_CHECKING:
    from mtkit.config import Recipe

DEFAULT_READOUT: Readout = "current"

class _Rows(Protocol):
    """A numpy array or a torch tensor: anything with a length and sliced by rows."""

    def __len__(self) -> int: ...

    def __getitem__(self, rows: Any, /) -> Any: ...


M = TypeVar("M", bound=_Rows)


def default_readout(recipe: Recipe) -> Readout:
    """The read-out of a run's cross-attention when none is asked for: the one its guided
    alignment supervised (`train.guided_alignment.readout`), else `current`."""
    guided = recipe.train.guided_alignment
    return guided.readout if guided.enabled else DEFAULT_READOUT


def check_readout(readout: str) -> Readout:
    """`readout` if it is one of READOUTS, else MtkitError listing them."""
    if readout not in READOUTS:
        raise MtkitError(f"unknown attention read-out {readout!r}; expected one of "
                         f"{', '.join(READOUTS)}")
    return choice("readout", readout, Readout)


def select_rows(attn: M, n_tgt: int, readout: Readout) -> M:
    """The rows of a cross-attention matrix that align the n_tgt target tokens.

    attn: (n_tgt + 1, S), row r the step whose input is y_r (see the module docstring);
    returns current: attn as it is (row t - 1 for y_t, then the EOS-predicting row, which
    `drop_eos` drops; a matrix without that row passes too, as before read-outs existed);
    shift: the n_tgt rows 1..n_tgt (row t for y_t). Raises ValueError when shift gets a matrix
    without n_tgt + 1 rows: without the step that reads y_T there is no shift read-out."""
    if readout == "current":
        return attn
    assert readout == "shift", readout
    rows = len(attn)
    if rows != n_tgt + 1:
        raise ValueError(f"attention with {rows} rows for {n_tgt} target tokens; the shift "
                         f"read-out needs {n_tgt + 1} (one per decoder input: BOS and every "
                         "token)")
    return attn[1:]
