"""`mtkit serve`'s web application: FastAPI over one loaded model (`TranslationModel`), with
cross-request batching (`batcher`), limits, bearer-token authentication, metrics, a request
log, and the page at `/` (`page/`).

Endpoints: `POST /v1/translate` (mtkit's own: n-best, scores, alignments, attention),
`POST /translate` and `GET /languages` (LibreTranslate's), `GET /v1/models`, `GET /health`,
`GET /ready`, `GET /metrics`. Every error is JSON, ``{"error": "..."}``, with its status.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from pydantic import ValidationError
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mtkit.api import Extras, TranslationModel
from mtkit.config import DecodeConfig
from mtkit.errors import MtkitError, OptionError
from mtkit.serve.batcher import Batcher, Closed, QueueFull
from mtkit.serve.metrics import ServerMetrics
from mtkit.serve.schema import (
    ErrorOut,
    LibreRequest,
    TranslateRequest,
    TranslateResponse,
)
from mtkit.serve.settings import LOG_FORMATS, LogFormat, ServeSettings

if TYPE_CHECKING:
    from mtkit.api.results import Translation
    from mtkit.translation.terms import Glossary

__all__ = ["LOG_FORMATS", "ApiError", "LogFormat", "ServeSettings", "create_app"]

PAGE = Path(__file__).parent / "page"
WARM_UP = "Hello."
# A line per request; `mtkit serve` sends it to stderr.
log = logging.getLogger("mtkit.serve")


class ApiError(Exception):
    """An error answered as JSON with its status (and headers)."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers


@dataclass
class Served:
    """What the routes read from the application (`app.state.served`): the model, the
    operator's settings, the metrics, and the batcher once the application has started."""

    model: TranslationModel
    settings: ServeSettings
    metrics: ServerMetrics
    batcher: Batcher | None = None
    ready: bool = False


def served(request: Request) -> Served:
    """The served model and its settings, of the application answering `request`."""
    return request.app.state.served


def create_app(model: TranslationModel, settings: ServeSettings) -> FastAPI:
    """The application over `model`: its batcher starts with it and decodes one sentence
    before `/ready` says so; on shutdown, requests in flight are finished first."""
    app = FastAPI(title="mtkit", version=_version(), lifespan=_lifespan,
                  description=f"Translation with {model.info.name} "
                  f"({model.info.src_lang} -> {model.info.tgt_lang}).",
                  responses={422: {"model": ErrorOut}})
    state = Served(model, settings, ServerMetrics(lambda: _queued(state)))
    app.state.served = state
    _errors(app)
    _middleware(app, settings, state.metrics)
    app.include_router(router)
    from mtkit.serve import documents  # its routes import this module's helpers

    documents.install(app)
    app.mount("/page", StaticFiles(directory=PAGE), name="page")
    return app


def _queued(state: Served) -> int:
    return state.batcher.queued if state.batcher is not None else 0


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    state: Served = app.state.served
    model, settings = state.model, state.settings
    batcher = Batcher(model, max_wait=settings.max_wait_ms / 1000,
                      max_queue=settings.queue_size, on_batch=state.metrics.batch)
    state.batcher = batcher
    # a model of several directions without a default one warms up with its first
    warm_tag = model.recipe.data.tag or (model.tags[0] if model.tags else None)
    job = batcher.submit([WARM_UP], model.defaults, Extras(), tag=warm_tag)
    await asyncio.wrap_future(job.future)
    state.ready = True
    try:
        yield
    finally:
        state.ready = False
        await asyncio.to_thread(batcher.close)


async def authorized(request: Request) -> None:
    """A dependency that refuses a request without `Authorization: Bearer TOKEN` where the
    server has a token."""
    check_token(request, served(request).settings.token)


def check_token(request: Request, token: str | None, api_key: str | None = None) -> None:
    """Refuse `request` unless it carries `token` (compared in constant time) as a bearer
    token, or as LibreTranslate's `api_key`; everything passes where `token` is None."""
    if token is None:
        return
    scheme, _, value = request.headers.get("authorization", "").partition(" ")
    offered = value.strip() if scheme.lower() == "bearer" else (api_key or "")
    if not hmac.compare_digest(offered.encode(), token.encode()):
        raise ApiError(401, "a valid token is needed: Authorization: Bearer TOKEN",
                       {"WWW-Authenticate": "Bearer"})


async def _translate(state: Served, lines: list[str], changes: dict[str, Any],
                     extras: Extras, prefix: str | list[str] | None = None,
                     terms: dict[str, str] | None = None, terms_method: str | None = None,
                     tag: str | None = None) -> list[Translation]:
    """The translations of `lines` with `changes` over the model's decoding defaults, within
    the server's limits; a problem of the request is a 422."""
    model, settings = state.model, state.settings
    _check_limits(lines, changes, settings)
    try:
        cfg = model.options(changes)
        extras = model.extras(**asdict(extras))
        prefixes = model.checked_prefixes(prefix, len(lines))
        if terms_method is not None and terms is None:
            raise OptionError.about("terms_method", "it places terms, which need terms")
        glossary = None if terms is None else model.glossary(terms, terms_method or "prefix")
        tag = model.checked_tag(tag)
    except MtkitError as e:
        raise ApiError(422, str(e)) from None
    assert state.batcher is not None, "requests are answered once the lifespan started"
    return await _decoded(state.batcher, lines, cfg, extras, settings.timeout, prefixes,
                          glossary, tag)


router = APIRouter()


@router.post("/v1/translate", response_model=TranslateResponse, tags=["translate"],
             dependencies=[Depends(authorized)])
async def v1_translate(req: TranslateRequest, request: Request) -> dict[str, Any]:
    """Translate one sentence or a list: n-best hypotheses with scores and tokens, and on
    request Pharaoh word links and attention matrices."""
    state = served(request)
    lines = req.lines()
    request.state.sentences = len(lines)
    extras = Extras(req.align, req.align_method, req.readout, req.attention, req.layer,
                    req.head)
    results = await _translate(state, lines, req.decode_changes(), extras, req.prefixes(),
                               req.terms, req.terms_method, req.tag)
    return {"model": state.model.info.name,
            "translations": [{**r.to_dict(), "text": r.text} for r in results]}


@router.post("/translate", tags=["LibreTranslate"],
             openapi_extra={"requestBody": {"content": {
                 "application/json": {"schema": LibreRequest.model_json_schema()},
                 "application/x-www-form-urlencoded": {
                     "schema": LibreRequest.model_json_schema()}}}})
async def libre_translate(request: Request) -> dict[str, Any]:
    """LibreTranslate's translate: `q` (a string or a list), `source`, `target`,
    `format` (text, or html: each `q` a document or fragment, its markup kept and placed by
    the word alignment), `alternatives`, `api_key` (or a bearer token)."""
    state = served(request)
    model = state.model
    req = await _libre_request(request)
    check_token(request, state.settings.token, req.api_key)
    lines = [req.q] if isinstance(req.q, str) else list(req.q)
    request.state.sentences = len(lines)
    tag = libre_tag(model, req)
    if req.format == "html":
        from mtkit.serve.documents import libre_html

        if req.alternatives:
            raise ApiError(400, "alternatives: not for format html")
        _check_limits(lines, {}, replace(state.settings, max_chars=state.settings.max_body))
        texts = await libre_html(state, lines, tag)
    else:
        changes = nbest_changes(model.defaults, req.alternatives + 1) if req.alternatives else {}
        results = await _translate(state, lines, changes, Extras(), tag=tag)
        texts = [r.text for r in results]
    out: dict[str, Any] = {"translatedText": texts[0] if isinstance(req.q, str) else texts}
    if req.alternatives:
        alts = [[c.text for c in r.candidates[1:]] for r in results]
        out["alternatives"] = alts[0] if isinstance(req.q, str) else alts
    if req.source == "auto":
        detected = {"language": model.info.src_lang, "confidence": 100}
        out["detectedLanguage"] = detected if isinstance(req.q, str) else (
            [detected] * len(lines))
    return out


def nbest_changes(defaults: DecodeConfig, nbest: int) -> dict[str, Any]:
    """The decoding changes that give `nbest` hypotheses over `defaults`: greedy search gives
    one, so it becomes a beam search, and a beam is widened to `nbest`; sampling draws as many
    as asked. (The page at / asks the same of /v1/translate: page.js.)"""
    changes: dict[str, Any] = {"nbest": nbest}
    if defaults.method == "greedy":
        changes["method"] = "beam"
    if defaults.method != "sample":
        changes["beam_size"] = max(defaults.beam_size, nbest)
    return changes


@router.get("/languages", tags=["LibreTranslate"])
async def languages(request: Request) -> list[dict[str, Any]]:
    """LibreTranslate's language list: the model's source language and its target; for
    a model with `<2xx>` tags, each source language (`data.src_lang` 'en+de') with the
    tags' targets."""
    model = served(request).model
    targets = _tag_targets(model)
    if model.tags and not targets:  # tags that name no language: none to list
        return []
    if not targets:
        info = model.info
        return [{"code": info.src_lang, "name": info.src_lang, "targets": [info.tgt_lang]}]
    sources = model.info.src_lang.split("+")
    return [{"code": s, "name": s, "targets": [t for t in targets if t != s]}
            for s in sources]


@router.get("/v1/models", tags=["service"], dependencies=[Depends(authorized)])
async def models(request: Request) -> dict[str, Any]:
    """What is loaded: name, languages, architecture, checkpoint(s), engine, decoding
    defaults, the attention layers and heads, and the server's limits."""
    state = served(request)
    limits = {k: v for k, v in asdict(state.settings).items()
              if k not in ("token", "log_format")}
    return {"models": [asdict(state.model.info)], "limits": limits}


@router.get("/health", tags=["service"])
async def health() -> dict[str, str]:
    """The process is up."""
    return {"status": "ok"}


@router.get("/ready", tags=["service"], responses={503: {"model": ErrorOut}},
            response_model=None)
async def ready(request: Request) -> dict[str, str] | JSONResponse:
    """The model is loaded and has decoded a warm-up sentence."""
    if not served(request).ready:
        return JSONResponse({"error": "not ready: warming up"}, status_code=503)
    return {"status": "ready"}


@router.get("/metrics", tags=["service"], dependencies=[Depends(authorized)])
async def prometheus(request: Request) -> Response:
    """Prometheus' text format."""
    body, content_type = served(request).metrics.text()
    return Response(body, media_type=content_type)


@router.get("/", include_in_schema=False)
async def page() -> FileResponse:
    return FileResponse(PAGE / "index.html")


async def _decoded(batcher: Batcher, lines: list[str], cfg: DecodeConfig, extras: Extras,
                   timeout: float, prefixes: list[str] | None = None,
                   terms: Glossary | None = None, tag: str | None = None
                   ) -> list[Translation]:
    """The job's results, or 503 (queue full, shutting down) or 504 (past `timeout`)."""
    try:
        job = batcher.submit(lines, cfg, extras, prefixes, terms, tag)
    except QueueFull:
        raise ApiError(503, "the translation queue is full; try again shortly",
                       {"Retry-After": "1"}) from None
    except Closed:
        raise ApiError(503, "the server is shutting down", {"Retry-After": "5"}) from None
    try:
        return await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(job.future)),
                                      timeout)
    except TimeoutError:
        batcher.cancel(job)
        raise ApiError(504, f"not translated within {timeout:g} s (the server's "
                       "--timeout)") from None
    except MtkitError as e:
        raise ApiError(422, str(e)) from None


def _check_limits(lines: list[str], changes: dict[str, Any], settings: ServeSettings) -> None:
    if len(lines) > settings.max_sentences:
        raise ApiError(413, f"{len(lines)} sentences; this server takes at most "
                       f"{settings.max_sentences} per request")
    for n, line in enumerate(lines):
        if len(line) > settings.max_chars:
            raise ApiError(413, f"sentence {n}: {len(line)} characters; this server takes at "
                           f"most {settings.max_chars} per sentence")
    for key in ("beam_size", "nbest"):
        if changes.get(key, 0) > settings.max_beam:
            raise ApiError(422, f"{key}: {changes[key]}; this server allows at most "
                           f"{settings.max_beam}")


def _tag_targets(model: TranslationModel) -> dict[str, str]:
    """A tagged model's target languages by LibreTranslate code: the tags written `<2xx>`
    (Johnson et al. 2017's form, the recipes'), xx being the code."""
    return {tag[2:-1]: tag for tag in model.tags
            if tag.startswith("<2") and tag.endswith(">") and len(tag) > 3}


def libre_tag(model: TranslationModel, req: LibreRequest) -> str | None:
    """The tag a LibreTranslate request's `target` picks (None for a model without tags);
    a 400 for a pair the model does not translate."""
    info = model.info
    if not model.tags:
        if req.source not in ("auto", info.src_lang) or req.target != info.tgt_lang:
            raise ApiError(400, f"{req.source} -> {req.target}: this server translates "
                           f"{info.src_lang} -> {info.tgt_lang}")
        return None
    targets = _tag_targets(model)
    sources = info.src_lang.split("+")
    if req.source == "auto" and len(sources) > 1:  # it would have to say which it detected
        raise ApiError(400, f"source: auto: this server detects no language; give one of "
                       f"{', '.join(sources)}")
    if req.target not in targets or req.source not in ("auto", *sources):
        offered = ", ".join(targets) or f"none (its tags, {', '.join(model.tags)}, are not <2xx>)"
        raise ApiError(400, f"{req.source} -> {req.target}: this server translates from "
                       f"{' or '.join(sources)} into {offered}, chosen by target")
    return targets[req.target]


async def _libre_request(request: Request) -> LibreRequest:
    """A LibreTranslate request from a JSON body or a form (its own clients send either)."""
    body = await request.body()
    try:
        if request.headers.get("content-type", "").startswith(
                "application/x-www-form-urlencoded"):
            fields = parse_qs(body.decode("utf-8", errors="strict"), keep_blank_values=True)
            data: object = {k: v if k == "q" and len(v) > 1 else v[0]
                            for k, v in fields.items()}
        else:
            data = json.loads(body)
    except (UnicodeDecodeError, ValueError) as e:
        raise ApiError(400, f"the body is not valid JSON or a form ({e})") from None
    if not isinstance(data, dict):
        raise ApiError(422, "expected a JSON object")
    try:
        return LibreRequest.model_validate(data)
    except ValidationError as e:
        raise ApiError(422, _validation_message(e.errors())) from None


def _validation_message(errors: Sequence[Mapping[str, Any]]) -> str:
    """pydantic's errors as one line: `field: what is wrong; ...`."""
    parts = []
    for err in errors:
        msg = str(err.get("msg", "")).removeprefix("Value error, ")
        if err.get("type") == "json_invalid":
            at = err.get("loc", ("", ""))[-1]
            msg = f"the body is not valid JSON (at character {at})"
            parts.append(msg)
            continue
        where = ".".join(str(p) for p in err.get("loc", ()) if p != "body")
        parts.append(f"{where}: {msg}" if where else msg)
    return "; ".join(parts)


def _errors(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError) -> JSONResponse:
        return JSONResponse({"error": exc.message}, status_code=exc.status,
                            headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        status = 400 if any(e.get("type") == "json_invalid" for e in errors) else 422
        return JSONResponse({"error": _validation_message(errors)}, status_code=status)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        # Starlette's own, e.g. a body that is not UTF-8 ('There was an error parsing the
        # body'), a path that is not there
        detail = str(exc.detail)
        if exc.status_code == 400 and "parsing the body" in detail:
            detail = "the body is not valid JSON text in UTF-8"
        return JSONResponse({"error": detail}, status_code=exc.status_code,
                            headers=getattr(exc, "headers", None))


def _middleware(app: FastAPI, settings: ServeSettings, metrics: ServerMetrics) -> None:
    @app.middleware("http")
    async def observe(request: Request,
                      call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        start = time.perf_counter()
        request.state.sentences = 0
        response = await call_next(request)
        seconds = time.perf_counter() - start
        path = request.url.path
        # the module's routes are listed apart: an included router is one entry of app.routes
        routes = (*app.routes, *router.routes)
        known = path if any(getattr(r, "path", None) == path for r in routes) else "other"
        metrics.requests.labels(known, str(response.status_code)).inc()
        if path in ("/v1/translate", "/translate"):
            metrics.latency.labels(path).observe(seconds)
        _log_request(settings.log_format, request.method, path, response.status_code,
                     request.state.sentences, seconds)
        return response

    app.add_middleware(BodyLimit, limit=settings.max_body)


class BodyLimit:
    """Refuse a request body over `limit` bytes with 413, before it reaches the app: by its
    Content-Length, or while a body without one is read."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = dict(scope.get("headers") or [])
        length = headers.get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.limit:
            return await self._too_large(send)
        if length is not None:
            return await self.app(scope, receive, send)
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            more = message.get("more_body", False)
            if size > self.limit:
                return await self._too_large(send)
        body = b"".join(chunks)
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if sent:
                return await receive()
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        return await self.app(scope, replay, send)

    async def _too_large(self, send: Send) -> None:
        body = json.dumps({"error": f"the request body is over {self.limit} bytes (the "
                                    "server's --max-body)"}).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})


def _log_request(fmt: LogFormat, method: str, path: str, status: int, sentences: int,
                 seconds: float) -> None:
    ms = round(seconds * 1000, 1)
    if fmt == "json":
        line = json.dumps({"time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "method": method,
                           "path": path, "status": status, "sentences": sentences, "ms": ms})
    else:
        line = (f"mtkit: {method} {path} {status} {sentences} "
                f"{'sentence' if sentences == 1 else 'sentences'} {ms} ms")
    log.info(line)


def _version() -> str:
    from mtkit import __version__

    return __version__
