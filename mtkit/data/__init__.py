"""Data: sources, cleaning, sentencepiece, binarized storage, batching, and the `prep` pipeline."""
