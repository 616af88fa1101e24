"""mtkit: neural machine translation from raw parallel text to BLEU and attention heatmaps.

    import mtkit
    tr = mtkit.load("runs/en-de-multi30k")
    tr.translate(["A dog runs."])

`load` and `TranslationModel` are mtkit.api's, imported on first use: `import mtkit` stays
cheap (torch is imported when a model is loaded)."""

from typing import Any

__version__ = "0.1.0"

_API = ("load", "load_many", "TranslationModel", "Translation", "Candidate")


def __getattr__(name: str) -> Any:
    if name in _API:
        from mtkit import api

        return getattr(api, name)
    raise AttributeError(f"module 'mtkit' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_API])
