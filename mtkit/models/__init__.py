"""Translation models behind one decoding interface (see `base.py`); built by `build.py`."""
