"""mtkit: neural machine translation from raw parallel text to BLEU scores and attention heatmaps."""

__version__ = "0.1.0"
