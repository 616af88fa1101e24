"""Translation of line streams, shared by `mtkit translate`, the Python API (`mtkit.api`) and
the server (`mtkit.serve`): batches of whole lines sorted by length (`batching`), the ordered,
bounded-memory decoding of a stream (`lines`), and what every search returns (`hypothesis`).

Free of torch at import: a model exported for CTranslate2 is translated without it, and
importing torch takes seconds."""
