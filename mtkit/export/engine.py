"""The one place that imports CTranslate2, an optional extra (``pip install
'mtkit[ctranslate2]'``): a missing install becomes one user error that says how to add it."""

from __future__ import annotations

from types import ModuleType

from mtkit.errors import MtkitError

INSTALL_HINT = "pip install 'mtkit[ctranslate2]'"


class MissingEngineError(MtkitError):
    """CTranslate2 is needed but not installed."""


def ctranslate2() -> ModuleType:
    """The `ctranslate2` module, imported on first use (it loads a large native library)."""
    try:
        import ctranslate2 as ct2
    except ImportError:
        raise MissingEngineError(f"CTranslate2 is not installed; install it with "
                                 f"`{INSTALL_HINT}`") from None
    return ct2
