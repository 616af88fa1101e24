"""Reading a `MarianMTModel` folder in the Hugging Face layout, without transformers: every file
checked before anything is written (a missing file, another architecture, weights that are not
plain tensors: one `ModelFolderError` line).

A folder holds config.json; model.safetensors, or pytorch_model.bin (read by torch's weights-only
loader, which refuses a pickle that would run code); source.spm and target.spm; vocab.json, and
target_vocab.json for separate vocabularies; generation_config.json, tokenizer_config.json and a
model card (README.md) when present.
"""

from __future__ import annotations

import hashlib
import json
import pickle
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from mtkit.data.spm import spm
from mtkit.hf.marian import ModelFolderError

CONFIG, GENERATION, TOKENIZER = "config.json", "generation_config.json", "tokenizer_config.json"
SAFETENSORS, TORCH_BIN = "model.safetensors", "pytorch_model.bin"
SOURCE_SPM, TARGET_SPM, VOCAB, TARGET_VOCAB = ("source.spm", "target.spm", "vocab.json",
                                               "target_vocab.json")
CARD = "README.md"
# What a Hub download fetches (`mtkit.hf.hub`): every file the import reads, and no other.
FILES = (CONFIG, GENERATION, TOKENIZER, SAFETENSORS, TORCH_BIN, SOURCE_SPM, TARGET_SPM, VOCAB,
         TARGET_VOCAB, CARD)
HF_EXTRA = "pip install 'mtkit[hf]'"


@dataclass(frozen=True)
class MarianFiles:
    """What a folder holds, read and checked; digests: each file read -> its sha256."""

    root: Path
    config: dict[str, Any]
    generation: dict[str, Any]
    tokenizer: dict[str, Any]
    weights: dict[str, torch.Tensor]
    source_spm: bytes
    target_spm: bytes
    vocab: dict[str, int]
    target_vocab: dict[str, int] | None
    digests: dict[str, str]
    license: str | None


class _Reader:
    """Reads files of one folder, keeping each one's sha256."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.digests: dict[str, str] = {}

    def bytes(self, name: str) -> bytes:
        data = (self.root / name).read_bytes()
        self.digests[name] = hashlib.sha256(data).hexdigest()
        return data

    def json(self, name: str) -> Any:
        try:
            return json.loads(self.bytes(name).decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as e:
            raise ModelFolderError(f"{self.root / name}: not JSON ({e})") from None

    def has(self, name: str) -> bool:
        return (self.root / name).is_file()


def read_folder(root: Path) -> MarianFiles:
    """Every file of a Marian folder, checked (`ModelFolderError` on the first problem)."""
    if not root.is_dir():
        raise ModelFolderError(f"{root}: not a folder")
    r = _Reader(root)
    if not r.has(CONFIG):
        raise ModelFolderError(f"{root}: no {CONFIG}; expected a Hugging Face MarianMTModel "
                               f"folder ({CONFIG}, {SAFETENSORS} or {TORCH_BIN}, {SOURCE_SPM}, "
                               f"{TARGET_SPM}, {VOCAB})")
    config = r.json(CONFIG)
    _check_architecture(root, config)
    tokenizer = r.json(TOKENIZER) if r.has(TOKENIZER) else {}
    separate = bool(tokenizer.get("separate_vocabs")) or not config.get(
        "share_encoder_decoder_embeddings", True) and r.has(TARGET_VOCAB)
    needed = [SOURCE_SPM, TARGET_SPM, VOCAB] + ([TARGET_VOCAB] if separate else [])
    missing = [n for n in needed if not r.has(n)]
    if not (r.has(SAFETENSORS) or r.has(TORCH_BIN)):
        missing.insert(0, f"{SAFETENSORS} (or {TORCH_BIN})")
    if missing:
        raise ModelFolderError(f"{root}: missing {', '.join(missing)}")
    protos = [r.bytes(n) for n in (SOURCE_SPM, TARGET_SPM)]
    for name, proto in zip((SOURCE_SPM, TARGET_SPM), protos, strict=True):
        _check_spm(root / name, proto)
    vocabs = [_vocab(r, n) for n in needed[2:]]
    return MarianFiles(
        root=root, config=config, generation=r.json(GENERATION) if r.has(GENERATION) else {},
        tokenizer=tokenizer, weights=_weights(r), source_spm=protos[0], target_spm=protos[1],
        vocab=vocabs[0], target_vocab=vocabs[1] if separate else None, digests=r.digests,
        license=_license(r) if r.has(CARD) else None)


def _check_architecture(root: Path, config: Any) -> None:
    if not isinstance(config, dict):
        raise ModelFolderError(f"{root / CONFIG}: expected a JSON object")
    kind, archs = config.get("model_type"), config.get("architectures") or []
    if kind != "marian" or (archs and "MarianMTModel" not in archs):
        what = ", ".join(map(str, archs)) or "no architectures listed"
        raise ModelFolderError(f"{root / CONFIG}: a {kind!r} model ({what}); mtkit imports "
                               "MarianMTModel (model_type marian), such as the OPUS-MT models")


def _check_spm(path: Path, proto: bytes) -> None:
    try:
        spm.SentencePieceProcessor(model_proto=proto)
    except RuntimeError:
        raise ModelFolderError(f"{path}: not a sentencepiece model") from None
    if not proto:
        raise ModelFolderError(f"{path}: empty; not a sentencepiece model")


def _vocab(r: _Reader, name: str) -> dict[str, int]:
    vocab = r.json(name)
    if not isinstance(vocab, dict) or not all(isinstance(v, int) for v in vocab.values()):
        raise ModelFolderError(f"{r.root / name}: expected a JSON object of pieces and ids")
    return vocab


def _weights(r: _Reader) -> dict[str, torch.Tensor]:
    """The weights: safetensors when there, else torch's weights-only loader (a pickle that
    names anything but tensors and plain containers is refused, never run)."""
    if r.has(SAFETENSORS):
        try:
            from safetensors.torch import load as load_safetensors
        except ImportError:
            raise ModelFolderError(f"{r.root / SAFETENSORS}: reading it needs safetensors: "
                                   f"{HF_EXTRA}") from None
        try:
            weights = load_safetensors(r.bytes(SAFETENSORS))
        except Exception as e:  # safetensors raises its own error types for a damaged file
            raise ModelFolderError(f"{r.root / SAFETENSORS}: not a safetensors file "
                                   f"({str(e).splitlines()[0][:120] if str(e) else e!r})"
                                   ) from None
    else:
        weights = _torch_weights(r)
    bad = next((k for k, v in weights.items() if not isinstance(v, torch.Tensor)), None)
    if bad is not None or not weights:
        raise ModelFolderError(f"{r.root}: the weights file holds no tensors"
                               + (f" ({bad!r} is not one)" if bad else ""))
    return weights


def _torch_weights(r: _Reader) -> dict[str, torch.Tensor]:
    import io

    data = r.bytes(TORCH_BIN)
    try:
        weights = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        raise ModelFolderError(f"{r.root / TORCH_BIN}: refused: it is a pickle that would run "
                               f"code or build objects other than tensors ({_refusal(str(e))}); "
                               f"nothing was run. Use the model's {SAFETENSORS} if it has one"
                               ) from None
    except Exception as e:  # a damaged or foreign file: torch raises many types
        raise ModelFolderError(f"{r.root / TORCH_BIN}: not a PyTorch weights file "
                               f"({type(e).__name__})") from None
    if not isinstance(weights, dict):
        raise ModelFolderError(f"{r.root / TORCH_BIN}: expected a mapping of names to tensors")
    return weights


def _refusal(message: str) -> str:
    """What torch's weights-only loader refused, from its error message: the global the pickle
    names, else its unpickler's own reason. The message's first lines are advice on loading
    the file anyway, which an import must not pass on."""
    if m := re.search(r"Unsupported global: GLOBAL (\S+)", message):
        return f"it names {m.group(1)}"
    if m := re.search(r"WeightsUnpickler error:\s*(\S[^\n]*)", message):
        return f"torch's weights-only loader: {m.group(1).strip()[:160]}"
    return "torch's weights-only loader refused it"


def _license(r: _Reader) -> str | None:
    """The `license:` of the model card's YAML front matter, if it has one."""
    text = r.bytes(CARD).decode("utf-8", errors="replace")
    m = re.match(r"---\s*\n(.*?)\n---", text, re.S)
    if m is None:
        return None
    found = re.search(r"^license:\s*(\S.*?)\s*$", m.group(1), re.M)
    return found.group(1).strip("'\"") if found else None


def spm_model_type(proto: bytes) -> int | None:
    """TrainerSpec.model_type of a serialized sentencepiece ModelProto (1 unigram, 2 bpe,
    3 word, 4 char), read from the protobuf wire format (field 2 of ModelProto, field 3 of
    TrainerSpec) so that no protobuf package is needed; None when absent."""
    spec = _field(proto, 2)
    if spec is None:
        return None
    value = _field(spec, 3, varint=True)
    return value if isinstance(value, int) else None


def _varint(data: bytes, i: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        b = data[i]
        i += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, i
        shift += 7


def _field(data: bytes, number: int, *, varint: bool = False) -> bytes | int | None:
    """The last occurrence of a field in a protobuf message (length-delimited, or a varint)."""
    i, found = 0, None
    try:
        while i < len(data):
            key, i = _varint(data, i)
            num, wire = key >> 3, key & 7
            if wire == 0:
                value, i = _varint(data, i)
                if num == number and varint:
                    found = value
            elif wire == 2:
                n, i = _varint(data, i)
                if num == number and not varint:
                    found = data[i:i + n]
                i += n
            elif wire == 1:
                i += 8
            elif wire == 5:
                i += 4
            else:
                return found
    except IndexError:
        return found
    return found
