"""What `TranslationModel.translate_full` returns: plain, typed, JSON-ready values (free of
torch and numpy, so a caller can keep, compare or send them as they are).

Attention matrices have one row per target token and one column per source token, as `mtkit
align` writes them: ``weights[j][i]`` is target token j's attention to source token i. The
rows are the search's own (row j: the decoding step that produced target token j), the last
row the step that produced EOS and the last column the source's EOS (both labelled
``</s>``), so each row sums to 1.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

# Decimals kept of an attention weight, as `mtkit align --json` keeps them.
WEIGHT_DECIMALS = 4


@dataclass(frozen=True)
class AttentionMatrix:
    """One attention matrix at one level: `source` labels the columns, `target` the rows;
    `weights`: (len(target), len(source))."""

    level: Literal["subword", "word"]
    source: list[str]
    target: list[str]
    weights: list[list[float]]


@dataclass(frozen=True)
class Attention:
    """A hypothesis's attention, what it is (e.g. 'cross-attention, layer -1, head mean')
    and at both levels: sentencepiece pieces, and the whitespace words they make up (a
    word's row is the mean of its pieces' rows, its column the sum of their columns)."""

    what: str
    subword: AttentionMatrix
    word: AttentionMatrix


@dataclass(frozen=True)
class Candidate:
    """One hypothesis of a sentence.

    score: the log-probability over the length penalty (what n-best lists are sorted by);
    logprob: the log-probability of the tokens and the final EOS; tokens: the target pieces
    (without EOS); token_logprobs: each token's log-probability and the EOS's last (empty for
    an exported model, whose engine does not report them); alignment: Pharaoh links between
    source and target words (0-based ``i-j``), when asked for; attention: when asked for."""

    text: str
    score: float
    logprob: float
    tokens: list[str]
    token_logprobs: list[float]
    alignment: str | None = None
    attention: Attention | None = None


@dataclass(frozen=True)
class Translation:
    """One input sentence and its hypotheses, best first (one empty hypothesis scoring 0 for
    an empty or blank line). source_tokens: its pieces as the model read them; truncated:
    whether it was cut to the model's longest source (`data.max_len`)."""

    source: str
    source_tokens: list[str]
    candidates: list[Candidate]
    truncated: bool = False

    @property
    def text(self) -> str:
        """The best hypothesis's text."""
        return self.candidates[0].text

    def to_dict(self) -> dict[str, Any]:
        """As JSON-ready dicts and lists (absent alignments and attention as None)."""
        return asdict(self)
