"""Translation of line streams, shared by `mtkit translate`, the Python API (`mtkit.api`) and
the server (`mtkit.serve`): the ordered, bounded-memory decoding of a stream (`lines`), the
records it writes (`formats`) and glossaries (`terms`, which asks of a translator only its
`TermSearch`). Below it, in `mtkit.data`, what `decode/` and `align/` share with it:
batches of whole lines sorted by length (`data.batching`) and what every search returns
(`data.hypothesis`).

Free of torch at import: a model exported for CTranslate2 is translated without it, and
importing torch takes seconds."""
