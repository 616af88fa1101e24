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
    except ModuleNotFoundError as e:
        if e.name != "ctranslate2":  # a module it needs: installed, but broken
            raise MissingEngineError(f"CTranslate2 is installed but cannot be loaded ({e})"
                                     ) from None
        raise MissingEngineError(f"CTranslate2 is not installed; install it with "
                                 f"`{INSTALL_HINT}`") from None
    except (ImportError, OSError) as e:  # its native library or one it links to
        raise MissingEngineError(f"CTranslate2 is installed but cannot be loaded ({e}); "
                                 f"reinstalling it may help: `{INSTALL_HINT}`") from None
    return ct2
