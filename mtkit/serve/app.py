"""`mtkit serve`'s web application: FastAPI over the loaded models (`ModelSet`: one, or
several routed by language, `routing`), each with its own cross-request batching (`batcher`,
`models`), limits, bearer-token authentication, metrics, a request log, and the page at `/`
(`page/`).

Endpoints: `POST /v1/translate` (mtkit's own: n-best, scores, alignments, attention),
`POST /v1/split` (a paragraph's sentences), `POST /translate`, `POST /detect` and `GET
/languages` (LibreTranslate's), `GET /v1/models`, `GET /health`, `GET /ready`, `GET
/metrics`. Every error is JSON, ``{"error": "..."}``, with
its status.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import parse_qs

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from fastapi_offline import FastAPIOffline
from pydantic import ValidationError
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mtkit.api import Extras
from mtkit.api.detect import DetectError
from mtkit.api.many import AUTO, ModelSet, Routed
from mtkit.api.pool import PoolEvent
from mtkit.api.router import RouteError
from mtkit.config import DecodeConfig
from mtkit.errors import MtkitError
from mtkit.serve import documents, routing
from mtkit.serve.batcher import Batcher, Closed, QueueFull
from mtkit.serve.metrics import ServerMetrics
from mtkit.serve.models import ModelMetrics, ServedModels
from mtkit.serve.routing import nbest_changes
from mtkit.serve.schema import (
    DetectRequest,
    ErrorOut,
    LibreRequest,
    SplitRequest,
    SplitResponse,
    TranslateRequest,
    TranslateResponse,
)
from mtkit.serve.settings import LOG_FORMATS, LogFormat, ServeSettings
from mtkit.serve.state import ApiError, Served, check_token, served

if TYPE_CHECKING:
    from mtkit.api.results import Translation
    from mtkit.translation.terms import Glossary

__all__ = ["LOG_FORMATS", "ApiError", "LogFormat", "ServeSettings", "create_app",
           "log_pool_event", "nbest_changes"]

PAGE = Path(__file__).parent / "page"
WARM_UP = "Hello."
# A line per request; `mtkit serve` sends it to stderr.
log = logging.getLogger("mtkit.serve")
Libre = TypeVar("Libre", LibreRequest, DetectRequest)


def create_app(models: ModelSet, settings: ServeSettings) -> FastAPI:
    """The application over `models`: a batcher per loaded model; each model loaded at the
    start decodes one sentence before `/ready` says so; on shutdown, requests in flight are
    finished first."""
    description = ", ".join(f"{name} ({i.src_lang} -> {i.tgt_lang})"
                            for name, i in models.infos.items())
    # FastAPI's /docs and /redoc load their scripts from a CDN (blank without network);
    # fastapi-offline's are the same pages, their assets served by the app
    app = FastAPIOffline(title="mtkit", version=_version(), lifespan=_lifespan,
                         description=f"Translation with {description}.",
                         responses={422: {"model": ErrorOut}})
    metrics = ServerMetrics(lambda: state.models.queued, lambda: state.models.decoding)
    state = Served(ServedModels(models, lambda model, on_batch: Batcher(
        model, max_wait=settings.max_wait_ms / 1000, max_queue=settings.queue_size,
        max_output=settings.max_output, refill=settings.refill, on_batch=on_batch),
        on_batch=metrics.batch),
        settings, metrics)
    metrics.registry.register(ModelMetrics(state.models))
    app.state.served = state
    _errors(app)
    _middleware(app, settings, state.metrics)
    app.include_router(router)
    documents.install(app)
    app.mount("/page", StaticFiles(directory=PAGE), name="page")
    return app


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    state: Served = app.state.served
    for name in state.models.models.pool.loaded:
        await _warm_up(state.models, name)
    state.ready = True
    try:
        yield
    finally:
        state.ready = False
        await asyncio.to_thread(state.models.close)


async def _warm_up(models: ServedModels, name: str) -> None:
    """One sentence through a model's batcher (a model of several directions without a
    default one warms up with its first)."""
    model, batcher = await models.acquire(name)
    try:
        warm_tag = model.recipe.data.tag or (model.tags[0] if model.tags else None)
        job = batcher.submit([WARM_UP], model.defaults, Extras(), tag=warm_tag)
        await asyncio.wrap_future(job.future)
    finally:
        models.release(name)


async def authorized(request: Request) -> None:
    """A dependency that refuses a request without `Authorization: Bearer TOKEN` where the
    server has a token."""
    check_token(request, served(request).settings.token)


async def _translate(request: Request, ask: routing.Ask) -> list[Routed]:
    """`ask`'s sentences along their routes within the server's limits; a pair no model
    translates (or a language that cannot be detected) is a 400, another problem of the
    request a 422."""
    state = served(request)
    settings = state.settings
    _check_limits(ask.lines, {"nbest": ask.alternatives + 1, **(ask.changes or {})},
                  settings)

    async def decode(batcher: Batcher, lines: list[str], cfg: DecodeConfig, extras: Extras,
                     prefixes: list[str] | None, terms: Glossary | None, tag: str | None
                     ) -> list[Translation]:
        return await _decoded(request, batcher, lines, cfg, extras, settings.timeout, prefixes,
                              terms, tag)

    try:
        return await routing.translate(state.models, ask, decode)
    except (RouteError, DetectError) as e:
        raise ApiError(400, str(e)) from None
    except MtkitError as e:
        raise ApiError(422, str(e)) from None


router = APIRouter()


@router.post("/v1/translate", response_model=TranslateResponse, tags=["translate"],
             dependencies=[Depends(authorized)])
async def v1_translate(req: TranslateRequest, request: Request) -> dict[str, Any]:
    """Translate one sentence or a list: n-best hypotheses with scores and tokens, and on
    request Pharaoh word links and attention matrices; by source and target (source auto:
    detected), or by a model's name, through a pivot language where no model translates the
    pair (each leg given)."""
    lines = req.lines()
    request.state.sentences = len(lines)
    extras = Extras(req.align, req.align_method, req.readout, req.attention, req.layer,
                    req.head)
    return routing.v1_json(await _translate(request, routing.Ask(
        lines, req.source, req.target, req.model, req.tag, req.decode_changes(), extras,
        req.prefixes(), req.terms, req.terms_method, req.alternatives())))


@router.post("/v1/split", response_model=SplitResponse, tags=["translate"],
             dependencies=[Depends(authorized)])
async def v1_split(req: SplitRequest) -> dict[str, Any]:
    """A paragraph's sentences, as documents split them (`mtkit.documents.sentences`: each
    line break ends a sentence), to translate as a list: what the page at / does."""
    from mtkit.documents.sentences import text_sentences

    try:
        return {"sentences": text_sentences(req.text)}
    except MtkitError as e:  # the documents extra missing
        raise ApiError(422, str(e)) from None


@router.post("/translate", tags=["LibreTranslate"],
             openapi_extra={"requestBody": {"content": {
                 "application/json": {"schema": LibreRequest.model_json_schema()},
                 "application/x-www-form-urlencoded": {
                     "schema": LibreRequest.model_json_schema()}}}})
async def libre_translate(request: Request) -> dict[str, Any]:
    """LibreTranslate's translate: `q` (a string or a list), `source` (or auto), `target`,
    `format` (text, or html: each `q` a document or fragment, its markup kept and placed by
    the word alignment), `alternatives`, `api_key` (or a bearer token)."""
    state = served(request)
    req = await _libre_request(request, LibreRequest, state.settings.token)
    lines = [req.q] if isinstance(req.q, str) else list(req.q)
    request.state.sentences = len(lines)
    if req.format == "html":
        if req.alternatives:
            raise ApiError(400, "alternatives: not for format html")
        _check_limits(lines, {}, replace(state.settings, max_chars=state.settings.max_body))
        texts = await documents.libre_html(state, lines, req.source, req.target)
        return {"translatedText": texts[0] if isinstance(req.q, str) else texts}
    results = await _translate(request, routing.Ask(lines, req.source, req.target,
                                                  alternatives=req.alternatives))
    return routing.libre_json(results, one=isinstance(req.q, str),
                              alternatives=req.alternatives, auto=req.source == AUTO)


@router.post("/detect", tags=["LibreTranslate"],
             openapi_extra={"requestBody": {"content": {
                 "application/json": {"schema": DetectRequest.model_json_schema()},
                 "application/x-www-form-urlencoded": {
                     "schema": DetectRequest.model_json_schema()}}}})
async def detect(request: Request) -> list[dict[str, Any]]:
    """LibreTranslate's detect: `q`'s language among those the models translate from,
    `[{"language", "confidence"}]`, most likely first (confidence 0-100)."""
    state = served(request)
    req = await _libre_request(request, DetectRequest, state.settings.token)
    try:
        return [asdict(d) for d in state.models.models.detect(req.q)]
    except DetectError as e:
        raise ApiError(400, str(e)) from None


@router.get("/languages", tags=["LibreTranslate"])
async def languages(request: Request) -> list[dict[str, Any]]:
    """LibreTranslate's language list: each source language with every target a model (or
    a pivot) reaches from it; a model with `<2xx>` tags serves each of its source languages
    (`data.src_lang` 'en+de') into the tags' targets."""
    return served(request).models.models.router.languages()


@router.get("/v1/models", tags=["service"], dependencies=[Depends(authorized)])
async def models(request: Request) -> dict[str, Any]:
    """Every model (name, languages, architecture, checkpoint(s), engine, decoding
    defaults, the attention layers and heads, whether it is loaded now), every direction (a
    pivot's with its two models), and the server's limits."""
    state = served(request)
    many = state.models.models
    limits = {k: v for k, v in asdict(state.settings).items()
              if k not in ("token", "log_format")}
    loaded = set(many.pool.loaded)
    return {"models": [{**asdict(info), "name": name, "loaded": name in loaded}
                       for name, info in many.infos.items()],
            "directions": routing.directions_json(state.models),
            "limits": {**limits, "max_loaded": many.pool.limit, "pivot": many.router.pivot}}


@router.get("/health", tags=["service"])
async def health() -> dict[str, str]:
    """The process is up."""
    return {"status": "ok"}


@router.get("/ready", tags=["service"], responses={503: {"model": ErrorOut}},
            response_model=None)
async def ready(request: Request) -> dict[str, Any] | JSONResponse:
    """The models loaded at the start have decoded a warm-up sentence; `loaded`: the models
    loaded now, least recently used first."""
    state = served(request)
    if not state.ready:
        return JSONResponse({"error": "not ready: warming up"}, status_code=503)
    return {"status": "ready", "loaded": state.models.models.pool.loaded}


@router.get("/metrics", tags=["service"], dependencies=[Depends(authorized)])
async def prometheus(request: Request) -> Response:
    """Prometheus' text format."""
    body, content_type = served(request).metrics.text()
    return Response(body, media_type=content_type)


@router.get("/", include_in_schema=False)
async def page() -> FileResponse:
    return FileResponse(PAGE / "index.html")


async def _decoded(request: Request, batcher: Batcher, lines: list[str], cfg: DecodeConfig,
                   extras: Extras, timeout: float, prefixes: list[str] | None = None,
                   terms: Glossary | None = None, tag: str | None = None
                   ) -> list[Translation]:
    """The job's results, or 503 (queue full, shutting down), 504 (past `timeout`) or 499
    (the client went away: nobody reads it, but the log and the metrics count it). A job
    given up is cancelled: its search stops rather than hold the decoder for others."""
    try:
        job = batcher.submit(lines, cfg, extras, prefixes, terms, tag)
    except QueueFull:
        raise ApiError(503, "the translation queue is full; try again shortly",
                       {"Retry-After": "1"}) from None
    except Closed:
        raise ApiError(503, "the server is shutting down", {"Retry-After": "5"}) from None
    result = asyncio.wrap_future(job.future)
    gone = asyncio.ensure_future(_disconnect(request))
    try:
        await asyncio.wait([result, gone], timeout=timeout,
                           return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
    if not result.done():
        batcher.cancel(job)
        if gone.done() and not gone.cancelled():
            raise ApiError(499, "the client closed the connection before the answer")
        raise ApiError(504, f"not translated within {timeout:g} s (the server's --timeout)")
    try:
        return result.result()
    except MtkitError as e:
        raise ApiError(422, str(e)) from None


async def _disconnect(request: Request) -> None:
    """Returns once the client of `request` (whose body has been read) has gone away."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


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
    for key in ("max_len_b", "min_len"):
        if isinstance(changes.get(key), int) and changes[key] > settings.max_output:
            raise ApiError(422, f"{key}: {changes[key]}; this server's outputs end by "
                           f"{settings.max_output} tokens (--max-output)")


async def _libre_request(request: Request, kind: type[Libre], token: str | None) -> Libre:
    """A LibreTranslate request from a JSON body or a form (its own clients send either),
    its `api_key` checked before its fields, as LibreTranslate's access check does."""
    body = await request.body()
    is_form = request.headers.get("content-type", "").startswith(
        "application/x-www-form-urlencoded")
    if not body.strip() and not is_form:
        check_token(request, token)
        raise ApiError(400, "the body is empty; expected a JSON object with q")
    try:
        if is_form:
            fields = parse_qs(body.decode("utf-8", errors="strict"), keep_blank_values=True)
            data: object = {k: v if k == "q" and len(v) > 1 else v[0]
                            for k, v in fields.items()}
        else:
            data = json.loads(body)
    except (UnicodeDecodeError, ValueError) as e:
        raise ApiError(400, f"the body is not valid JSON or a form ({e})") from None
    check_token(request, token, data.get("api_key") if isinstance(data, dict) else None)
    if not isinstance(data, dict):
        raise ApiError(422, "expected a JSON object")
    try:
        return kind.model_validate(data)
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
        return JSONResponse({"error": _writable(exc.message)}, status_code=exc.status,
                            headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if kind != "application/json" and not kind.endswith("+json"):
            # FastAPI reads such a body as no JSON at all, and said only that the body was
            # not an object ('curl -d' sends a form's type)
            return JSONResponse({"error": "the body must be JSON, sent with the header "
                                 f"Content-Type: application/json (got {kind or 'none'})"},
                                status_code=415)
        if any(e.get("type") == "missing" and tuple(e.get("loc", ())) == ("body",)
               for e in errors):
            return JSONResponse({"error": "the body is empty; expected a JSON object with "
                                 "text"}, status_code=400)
        status = 400 if any(e.get("type") == "json_invalid" for e in errors) else 422
        return JSONResponse({"error": _writable(_validation_message(errors))},
                            status_code=status)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        # Starlette's own, e.g. a body that is not UTF-8 ('There was an error parsing the
        # body'), a path that is not there
        detail = str(exc.detail)
        if exc.status_code == 400 and "parsing the body" in detail:
            detail = "the body is not valid JSON text in UTF-8"
        return JSONResponse({"error": _writable(detail)}, status_code=exc.status_code,
                            headers=getattr(exc, "headers", None))


def _writable(message: str) -> str:
    """`message` as UTF-8 can carry it: a value quoted from a request may hold a lone
    surrogate (JSON's escapes spell one), which the response's encoding fails on (a 500)."""
    return message.encode("utf-8", "backslashreplace").decode("utf-8")


def _middleware(app: FastAPI, settings: ServeSettings, metrics: ServerMetrics) -> None:
    # added last, so outermost: a 413 or 408 of BodyLimit, and a 500, are logged and counted
    app.add_middleware(BodyLimit, limit=settings.max_body, timeout=settings.read_timeout)
    app.add_middleware(Observe, settings=settings, metrics=metrics,
                       routes=lambda: (*app.routes, *router.routes))


class Observe:
    """A line in the request log and a count in /metrics for every request, whatever
    answered it; an exception no route handled becomes a JSON 500, one line in the log, not
    a traceback. A request whose client went away before any answer is logged as 499."""

    def __init__(self, app: ASGIApp, settings: ServeSettings, metrics: ServerMetrics,
                 routes: Callable[[], Sequence[Any]]) -> None:
        self.app, self.settings, self.metrics, self.routes = app, settings, metrics, routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        start = time.perf_counter()
        status = 499
        state = scope.setdefault("state", {})
        state["sentences"] = 0

        async def sent(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        error = None
        try:
            await self.app(scope, receive, sent)
        except Exception as e:  # noqa: BLE001 - a bug of ours: said in one line, answered 500
            error = _writable(f"{type(e).__name__}: {e}".replace("\n", " "))
            if status == 499:  # nothing sent yet
                status = 500
                # the exception stays in the log: its text may name the server's files
                await _send_json(send, 500, {"error": "internal error; the server's log says "
                                             "which"})
        seconds = time.perf_counter() - start
        path = scope["path"]
        known = path if any(getattr(r, "path", None) == path for r in self.routes()) else "other"
        self.metrics.requests.labels(known, str(status)).inc()
        if path in ("/v1/translate", "/translate"):
            self.metrics.latency.labels(path).observe(seconds)
        _log_request(self.settings.log_format, scope["method"], path, status,
                     state.get("sentences", 0), seconds, error)


async def _send_json(send: Send, status: int, content: object,
                     headers: Sequence[tuple[bytes, bytes]] = ()) -> None:
    body = json.dumps(content).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode()), *headers]})
    await send({"type": "http.response.body", "body": body})


class BodyLimit:
    """Read a request's whole body before the app sees it: over `limit` bytes (by its
    Content-Length, or as it comes) a 413; not all there within `timeout` seconds of its
    headers, a 408 that closes the connection (a client that never finishes its body would
    hold it for ever); the client gone, nothing."""

    def __init__(self, app: ASGIApp, limit: int, timeout: float) -> None:
        self.app, self.limit, self.timeout = app, limit, timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length = dict(scope.get("headers") or []).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.limit:
            return await self._too_large(send)
        chunks, size, more = [], 0, True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout
        try:
            while more:
                message = await asyncio.wait_for(receive(), deadline - loop.time())
                if message["type"] != "http.request":
                    return  # the client went away
                chunks.append(message.get("body", b""))
                size += len(chunks[-1])
                more = message.get("more_body", False)
                if size > self.limit:
                    return await self._too_large(send)
        except asyncio.TimeoutError:  # TimeoutError's alias from Python 3.11
            return await _send_json(send, 408, {
                "error": f"the request's body did not arrive within {self.timeout:g} s (the "
                "server's --read-timeout)"}, [(b"connection", b"close")])
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
        await _send_json(send, 413, {"error": f"the request body is over {self.limit} bytes "
                                     "(the server's --max-body)"})


def log_pool_event(fmt: LogFormat) -> Callable[[PoolEvent, str, float], None]:
    """What the server says of a model loaded or unloaded: a line of the request log, in
    its format."""
    def said(kind: PoolEvent, name: str, seconds: float) -> None:
        if fmt == "json":
            log.info(json.dumps({"time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "event": kind,
                                 "model": name, "seconds": round(seconds, 3)}))
            return
        why = " (the least recently used, for --max-loaded)" if kind == "unload" else ""
        log.info(f"mtkit: {kind}ed {name}{why} in {seconds:.1f} s")

    return said


def _log_request(fmt: LogFormat, method: str, path: str, status: int, sentences: int,
                 seconds: float, error: str | None = None) -> None:
    ms = round(seconds * 1000, 1)
    if fmt == "json":
        record = {"time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "method": method,
                  "path": path, "status": status, "sentences": sentences, "ms": ms}
        line = json.dumps(record if error is None else {**record, "error": error})
    else:
        line = (f"mtkit: {method} {path} {status} {sentences} "
                f"{'sentence' if sentences == 1 else 'sentences'} {ms} ms"
                f"{'' if error is None else f' ({error})'}")
    log.info(line)


def _version() -> str:
    from mtkit import __version__

    return __version__
