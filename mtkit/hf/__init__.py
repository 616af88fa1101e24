"""Models in the Hugging Face layout: Marian's (`MarianMTModel`, the OPUS-MT models) mapped to
mtkit's Transformer (`marian`), and `mtkit import` (`importer`)."""
