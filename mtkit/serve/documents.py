"""Documents on the server, as LibreTranslate serves them: `format: "html"` on `POST
/translate`, and `POST /translate_file` (a multipart upload: `file`, `source`, `target`,
`api_key`) answered with `{"translatedFileUrl": ...}`, the translated file then fetched from
`GET /download_file/{id}/{name}`.

A document's sentences go through the server's batcher like any request's (in chunks the
queue holds, each within the server's --timeout); the body limit (--max-body) bounds an
upload, and its format is told by its file name's extension. Translated files are kept in
memory for download, the newest `KEEP_FILES` (and at most `KEEP_BYTES` in all), never on
disk.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import PurePath
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import Response

from mtkit.api import Extras
from mtkit.errors import MtkitError
from mtkit.serve.state import ApiError, Served, check_token, document_model, served

if TYPE_CHECKING:
    from mtkit.config import DecodeConfig
    from mtkit.documents.formats import DocumentFormat, DocumentResult
    from mtkit.serve.batcher import Batcher
    from mtkit.translation.terms import Glossary

KEEP_FILES = 32
KEEP_BYTES = 64_000_000
CHUNK = 256  # sentences per batcher job: a document never fills the queue on its own

router = APIRouter()


@dataclass(frozen=True)
class _File:
    name: str
    media_type: str
    data: bytes
    made: float


class TranslatedFiles:
    """The translated files waiting to be downloaded, newest last (the event loop's alone)."""

    def __init__(self) -> None:
        self.files: OrderedDict[str, _File] = OrderedDict()

    def add(self, name: str, media_type: str, data: bytes) -> str:
        token = secrets.token_urlsafe(16)
        self.files[token] = _File(name, media_type, data, time.time())
        while len(self.files) > KEEP_FILES or (
                len(self.files) > 1 and sum(len(f.data) for f in self.files.values())
                > KEEP_BYTES):
            self.files.popitem(last=False)
        return token


def install(app: FastAPI) -> None:
    """Add the document routes and their store to `app`."""
    app.state.translated_files = TranslatedFiles()
    app.include_router(router)


def _batched(state: Served, batcher: Batcher):
    """`TranslationModel.decode` through the model's batcher, for a worker thread."""
    from mtkit.serve.batcher import Closed, QueueFull

    def decode(lines: list[str], cfg: DecodeConfig, extras: Extras, *,
               terms: Glossary | None = None, tag: str | None = None) -> list[Any]:
        out: list[Any] = []
        for at in range(0, len(lines), CHUNK):
            try:
                job = batcher.submit(lines[at:at + CHUNK], cfg, extras, None, terms, tag)
            except QueueFull:
                raise ApiError(503, "the translation queue is full; try again shortly",
                               {"Retry-After": "1"}) from None
            except Closed:
                raise ApiError(503, "the server is shutting down", {"Retry-After": "5"}
                               ) from None
            try:
                out.extend(job.future.result(timeout=state.settings.timeout))
            except TimeoutError:
                batcher.cancel(job)
                raise ApiError(504, f"not translated within {state.settings.timeout:g} s "
                               "(the server's --timeout)") from None
        return out

    return decode


async def translated(state: Served, data: bytes, fmt: DocumentFormat, source: str,
                     target: str) -> DocumentResult:
    """`data` translated as a `fmt` document by the model of `source` -> `target`; a problem
    of the document is a 400."""
    from mtkit.documents.formats import translate_document

    name, model, batcher, tag = await document_model(state, source, target)
    try:
        return await asyncio.to_thread(translate_document, model, data, fmt, tag=tag,
                                       decode=_batched(state, batcher))
    except MtkitError as e:
        raise ApiError(400, str(e)) from None
    finally:
        state.models.release(name)


async def libre_html(state: Served, texts: list[str], source: str, target: str
                     ) -> list[str]:
    """LibreTranslate's `format: "html"`: each text an HTML document or fragment."""
    return [(await translated(state, text.encode("utf-8"), "html", source, target)).text
            for text in texts]


@router.post("/translate_file", tags=["LibreTranslate"])
async def translate_file(request: Request) -> dict[str, Any]:
    """LibreTranslate's file translation: a multipart form with `file` (HTML, Markdown,
    SRT, WebVTT, PO, XLIFF or docx, told by its extension), `source`, `target` and
    `api_key` -> `{"translatedFileUrl": ...}`."""
    from mtkit.documents.formats import MEDIA_TYPES, format_for
    from mtkit.serve.schema import LibreRequest

    state = served(request)
    if not request.headers.get("content-type", "").startswith("multipart/form-data"):
        raise ApiError(400, "expected a multipart/form-data upload with a `file` field")
    try:
        form = await request.form()
    except Exception as e:  # python-multipart's parse errors have no common base
        raise ApiError(400, f"the upload cannot be read ({e})") from None
    check_token(request, state.settings.token, _field(form, "api_key"))
    upload = form.get("file")
    if upload is None or isinstance(upload, str):
        raise ApiError(422, "file: a file is needed (a multipart field named file)")
    name = PurePath(upload.filename or "document").name  # a client may send a path
    try:
        fmt = format_for(name, None)
    except MtkitError as e:
        raise ApiError(415, f"file {name}: {str(e).partition(': ')[2]}") from None
    req = LibreRequest.model_validate({"q": "-", "source": _field(form, "source") or "auto",
                                       "target": _field(form, "target") or ""})
    data = await upload.read()
    if not data.strip():
        raise ApiError(400, f"file {name}: it is empty")
    result = await translated(state, data, fmt, req.source, req.target)
    request.state.sentences = result.sentences
    token = request.app.state.translated_files.add(name, MEDIA_TYPES[fmt], result.data)
    url = str(request.url_for("download_file", token=token, name=name))
    return {"translatedFileUrl": url, "problems": result.problems}


@router.get("/download_file/{token}/{name}", tags=["LibreTranslate"])
async def download_file(token: str, name: str, request: Request) -> Response:
    """A file `/translate_file` translated (kept while it is among the newest)."""

    found = request.app.state.translated_files.files.get(token)
    if found is None or found.name != name:
        raise ApiError(404, "no such translated file (files are kept a while, the newest "
                       f"{KEEP_FILES})")
    return Response(found.data, media_type=found.media_type,
                    headers={"Content-Disposition":
                             f"attachment; filename*=UTF-8''{quote(name)}"})


def _field(form: Any, key: str) -> str | None:
    value = form.get(key)
    return value if isinstance(value, str) else None
