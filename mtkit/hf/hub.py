"""A Hub id (``Helsinki-NLP/opus-mt-en-de``) as a local folder: huggingface_hub's snapshot
download into its cache (the `hf` extra), of the files an import reads and no others: the
weights once (model.safetensors, and pytorch_model.bin only where a repository lacks it: a
repository may hold both, 300 MB each for an OPUS-MT model)."""

from __future__ import annotations

import re
from pathlib import Path

from mtkit.hf.folder import FILES, HF_EXTRA, SAFETENSORS, TORCH_BIN
from mtkit.hf.marian import ModelFolderError

# owner/name, optionally @revision (a branch, tag or commit)
HUB_ID = re.compile(r"(?P<repo>[A-Za-z0-9][\w.-]*/[\w.-]+)(?:@(?P<revision>[\w./-]+))?")


def is_hub_id(source: str) -> bool:
    return HUB_ID.fullmatch(source) is not None


def download(source: str) -> tuple[Path, str, str]:
    """The snapshot folder of Hub id `source`, its repository and its commit."""
    m = HUB_ID.fullmatch(source)
    assert m is not None, source
    alternative = ("; without network access, import a local folder that holds the model's "
                   "files (config.json, model.safetensors, source.spm, target.spm, vocab.json)")
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise ModelFolderError(f"{source}: no such folder, and downloading it from the "
                               f"Hugging Face Hub needs huggingface_hub ({HF_EXTRA}); or "
                               "import a local folder that holds the model's files "
                               "(config.json, model.safetensors, source.spm, target.spm, "
                               "vocab.json)") from None
    try:
        path = Path(snapshot_download(m["repo"], revision=m["revision"],
                                      allow_patterns=[f for f in FILES if f != TORCH_BIN]))
        if not (path / SAFETENSORS).is_file():  # at the same commit (the snapshot's name)
            path = Path(snapshot_download(m["repo"], revision=path.name,
                                          allow_patterns=[TORCH_BIN]))
    except Exception as e:  # network, authorization, a missing repository: many types
        why = str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__
        raise ModelFolderError(f"{source}: no such folder, and as a Hub id it cannot be "
                               f"downloaded from the Hugging Face Hub ({why}){alternative}"
                               ) from None
    return path, m["repo"], path.name  # the cache's snapshots/<commit> folder
