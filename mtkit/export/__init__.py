"""Exports of trained models to inference engines (`mtkit export`).

`ct2_export` exports a run's checkpoint (the request checked first); `ct2_spec` maps a
Transformer's weights onto CTranslate2's public spec API; `ct2_dir` writes
and reads the exported directory (model, vocabularies, sentencepiece models, README) and owns
its layout; `ct2_translate` decodes with an exported directory.
"""
