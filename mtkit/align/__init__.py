"""Word alignment from attention: subword-to-word merging, Pharaoh link extraction, AER, and
`mtkit align` itself.

Modules: `readout` (which decoding step's attention rows align the target tokens: `current`
or Chen et al.'s `shift`), `matrix` (attention as a word-level matrix), `links` (link
extraction, symmetrization, Pharaoh format), `gold` (gold links, AER), `records` (JSON), `viz`
(heatmaps, terminal tables), `heatmap_folder` (which files of --heatmap DIR mtkit wrote),
`files` (aligning files: pairs read, a model's attention for them, the outputs) and `reverse`
(the links of a model of the other direction). The first five work on a plain attention
matrix of shape (T, S), one row per target token and one column per source token, and need no
model; they are re-exported here.

Conventions (the ones of fast_align, GIZA++ and the Pharaoh/Moses tools):
- a link is a pair (i, j): 0-based source word i, 0-based target word j, written ``i-j``;
- gold files mark sure links ``i-j`` and possible links ``i?j`` or ``ipj``; the possible set P
  always includes the sure set S (Och & Ney 2003, §4).
"""

from mtkit.align.gold import (
    AlignScores,
    Gold,
    check_gold_bounds,
    parse_links,
    read_gold,
    score_corpus,
    score_links,
)
from mtkit.align.links import (
    DEFAULT_METHOD,
    DEFAULT_THRESHOLD,
    METHODS,
    SYMMETRIZATIONS,
    Symmetrization,
    argmax_src,
    argmax_tgt,
    extract_links,
    format_pharaoh,
    grow_diag_final,
    symmetrize,
)
from mtkit.align.matrix import (
    EOS_TOKEN,
    WORD_START,
    AlignMatrix,
    Level,
    Link,
    Words,
    as_array,
    drop_eos,
    from_attention,
    line_words,
    merge_subwords,
    piece_words,
    word_ids,
    words,
)
from mtkit.align.readout import (
    DEFAULT_READOUT,
    READOUTS,
    Readout,
    check_readout,
    default_readout,
    select_rows,
)
from mtkit.align.records import matrix_record, write_json

__all__ = ["DEFAULT_METHOD", "DEFAULT_READOUT", "DEFAULT_THRESHOLD", "EOS_TOKEN", "METHODS",
           "READOUTS", "SYMMETRIZATIONS", "WORD_START", "AlignMatrix", "AlignScores", "Gold",
           "Level", "Link", "Readout", "Symmetrization", "Words", "argmax_src", "argmax_tgt",
           "as_array", "check_gold_bounds", "check_readout", "default_readout", "drop_eos",
           "extract_links", "format_pharaoh", "from_attention", "grow_diag_final", "line_words",
           "matrix_record", "merge_subwords", "parse_links", "piece_words", "read_gold",
           "score_corpus", "score_links", "select_rows", "symmetrize", "word_ids", "words",
           "write_json"]
