"""Data: sources, cleaning, sentencepiece, binarized storage, batching (for training, and of
inference's lines: `batching`), what a search returns (`hypothesis`), and the `prep`
pipeline."""
