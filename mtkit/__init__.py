"""mtkit: neural machine translation from raw parallel text to BLEU and attention heatmaps."""

__version__ = "0.1.0"
