"""`mtkit serve`: a model, or several routed by language, over HTTP (mtkit.serve), until
Ctrl-C or SIGTERM."""

from __future__ import annotations

import ipaddress
import logging
import signal
import socket
import stat
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from mtkit.cli.options import (
    HelpOpt,
    InferenceDeviceOpt,
    TranslateThreadsOpt,
    at_least,
    within,
)
from mtkit.errors import ConfigError, DataError, choice
from mtkit.process.startup import collector_paused
from mtkit.serve.settings import LOG_FORMATS, PORTS, LogFormat, ServeSettings

if TYPE_CHECKING:
    from mtkit.api import TranslationModel

SERVE_HINT = "pip install 'mtkit[serve]'"
_S = ServeSettings()  # the flags' defaults


def serve(
    models: Annotated[list[Path] | None, typer.Argument(
        metavar="RUN_OR_EXPORT", hidden=True, show_default=False)] = None,
    more: Annotated[list[str] | None, typer.Option(
        "--model", metavar="PATH[,PATH...]", show_default=False,
        help="A model to serve beside the others (a run, a checkpoint or an export; "
        "comma-separated checkpoints: an ensemble); repeatable. Requests choose one by source "
        "and target (or by its name).")] = None,
    max_loaded: Annotated[int | None, typer.Option(
        "--max-loaded", metavar="N", parser=at_least(1), show_default=False,
        help="The most models kept loaded at once; the least recently used is unloaded, and "
        "loaded again when asked for (default: all).")] = None,
    pivot: Annotated[bool, typer.Option(
        "--pivot/--no-pivot", show_default=False,
        help="Translate a pair no model translates through a language two models share, "
        "English where it would do (default: --pivot).")] = True,
    host: Annotated[str, typer.Option(
        "--host", metavar="ADDRESS", show_default=False,
        help="Address to listen on; 0.0.0.0 for every interface (default: 127.0.0.1, this "
        "machine only).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(
        "--port", metavar="N", parser=within(PORTS), show_default=False,
        help=f"Port, {PORTS.start}-{PORTS.stop - 1}; 0 takes a free one, printed at start "
        "(default: 8000).")] = 8000,
    token_file: Annotated[Path | None, typer.Option(
        "--token-file", metavar="FILE", help="A file holding a token that every API request "
        "must carry as 'Authorization: Bearer TOKEN' (LibreTranslate's api_key too); "
        "/health, /ready and the page are open.")] = None,
    sets: Annotated[list[str] | None, typer.Option(
        "--set", metavar="decode.KEY=VALUE", help="A decoding default over the recipe's "
        "decode section, e.g. --set decode.beam_size=4 (an export of a model with the gnmt "
        "penalty needs --set decode.length_penalty=average or none); repeatable; a request "
        "may change it within the limits.")] = None,
    device: InferenceDeviceOpt = "auto",
    threads: TranslateThreadsOpt = 0,
    precision: Annotated[str, typer.Option(
        "--precision", metavar="PRECISION", show_default=False,
        help="mtkit's own decoder: fp32, bf16 (autocast), int8 (on a CPU: 8-bit weights in the "
        "linear layers and the output projection), or auto: bf16 on a GPU that has it, "
        "else fp32; `mtkit translate` decodes in fp32 (an export: its own type, auto only) "
        "(default: auto).")] = "auto",
    shortlist: Annotated[bool, typer.Option(
        "--shortlist", help="mtkit's own decoder: score only the target pieces the run's "
        "vocabulary shortlist names for each batch's sources (see `mtkit translate --help`).")
    ] = False,
    max_sentences: Annotated[int, typer.Option(
        "--max-sentences", metavar="N", parser=at_least(1), show_default=False,
        help=f"Sentences per request; more is a 413 (default: {_S.max_sentences}).")]
    = _S.max_sentences,
    max_chars: Annotated[int, typer.Option(
        "--max-chars", metavar="N", parser=at_least(1), show_default=False,
        help=f"Characters per sentence; more is a 413 (default: {_S.max_chars}).")]
    = _S.max_chars,
    max_body: Annotated[int, typer.Option(
        "--max-body", metavar="BYTES", parser=at_least(1), show_default=False,
        help=f"Bytes of a request body; more is a 413 (default: {_S.max_body}).")]
    = _S.max_body,
    max_beam: Annotated[int, typer.Option(
        "--max-beam", metavar="N", parser=at_least(1), show_default=False,
        help="The largest beam_size and nbest a request may ask for (default: "
        f"{_S.max_beam}).")] = _S.max_beam,
    max_output: Annotated[int, typer.Option(
        "--max-output", metavar="TOKENS", parser=at_least(1), show_default=False,
        help="The most tokens an output may have: every search ends by then, and a request "
        "asking for more (max_len_b, min_len) gets 422; a model's positions may cap outputs "
        f"lower (default: {_S.max_output}).")] = _S.max_output,
    queue_size: Annotated[int, typer.Option(
        "--queue-size", metavar="N", parser=at_least(1), show_default=False,
        help="Sentences waiting to be decoded; a request that would overflow the queue gets "
        f"503 with Retry-After (default: {_S.queue_size}).")] = _S.queue_size,
    max_wait_ms: Annotated[int, typer.Option(
        "--max-wait-ms", metavar="MS", parser=at_least(0), show_default=False,
        help="The longest a request waits for others to be batched with it; decoding starts "
        f"sooner once no request has come for a fifth of it (default: {_S.max_wait_ms:g}).")]
    = int(_S.max_wait_ms),
    refill: Annotated[bool, typer.Option(
        "--refill/--no-refill", show_default=False,
        help="Whether a decoding pass takes waiting sentences while it runs (beam and greedy "
        "search of a Transformer, without prefixes or terms), answering each request once "
        "its sentences are done, with what it would get alone; --no-refill decodes in whole "
        f"passes (default: {'--refill' if _S.refill else '--no-refill'}).")] = _S.refill,
    timeout: Annotated[int, typer.Option(
        "--timeout", metavar="SECONDS", parser=at_least(1), show_default=False,
        help="A request not answered by then gets 504; also the longest wait for requests in "
        f"flight at shutdown (default: {_S.timeout:g}).")] = int(_S.timeout),
    read_timeout: Annotated[int, typer.Option(
        "--read-timeout", metavar="SECONDS", parser=at_least(1), show_default=False,
        help="The time a client has to send a request's headers, and then its body; past it "
        "the request gets 408 and its connection is closed (an idle connection kept alive "
        f"is closed after 5 s) (default: {_S.read_timeout:g}).")] = int(_S.read_timeout),
    max_connections: Annotated[int, typer.Option(
        "--max-connections", metavar="N", parser=at_least(1), show_default=False,
        help="Connections open at once; one more is answered 503 and closed (default: "
        f"{_S.max_connections}).")] = _S.max_connections,
    log_format: Annotated[str, typer.Option(
        "--log-format", metavar="FORMAT", show_default=False,
        help=f"The request log on stderr, a line per request: {' or '.join(LOG_FORMATS)} "
        f"(default: {_S.log_format}).")] = _S.log_format,
    _help: HelpOpt = False,
) -> None:
    """Serve a model, or several routed by language, over HTTP: POST /v1/translate (n-best,
    scores, alignments, attention), LibreTranslate's POST /translate, POST /detect and GET
    /languages, a page at / that shows attention, /health, /ready, /metrics (Prometheus) and
    /v1/models; the API is documented at /docs.

    RUN_OR_EXPORT is a run directory (its best.pt, else last.pt), a checkpoint, several
    checkpoints (an ensemble), or a directory written by mtkit export (decoded with
    CTranslate2); --model adds more, each with its own languages, queue and batching.
    Ctrl-C or SIGTERM stops taking requests, finishes those in flight, exits 0.

    Examples: mtkit serve runs/en-de-multi30k --port 8000;
    mtkit serve --model runs/en-de --model runs/de-en --max-loaded 1
    """
    token = _read_token(token_file)
    decode, origins = _decode_defaults(sets or [])
    uvicorn = _serve_extra()
    from mtkit.api.many import ModelSet
    from mtkit.api.model import open_model
    from mtkit.serve.app import create_app, log_pool_event
    from mtkit.serve.connections import uvicorn_config

    settings = ServeSettings(  # checked before a model is loaded
        max_sentences=max_sentences, max_chars=max_chars, max_body=max_body,
        max_beam=max_beam, max_output=max_output, queue_size=queue_size,
        max_wait_ms=max_wait_ms, refill=refill, timeout=timeout, read_timeout=read_timeout,
        max_connections=max_connections, token=token,
        log_format=choice("log_format", log_format, LogFormat))
    groups = model_groups(models or [], more or [])
    sock = _listen(host, port)

    def opener(paths: list[Path]) -> TranslationModel:
        return open_model(paths, device=device, threads=threads, decode=decode,
                          origins=origins, precision=precision, shortlist=shortlist)

    _log_requests_to_stderr()  # the models' loads are said there too
    with collector_paused():
        served = ModelSet(groups, opener, max_loaded=max_loaded, pivot=pivot,
                          on_event=log_pool_event(settings.log_format))
    app = create_app(served, settings)
    _say_serving(served, host, sock, token)
    server = uvicorn.Server(uvicorn_config(app, settings))
    # uvicorn handles SIGINT and SIGTERM itself (stop taking requests, finish those in flight)
    # and raises the signal again once done; with these handlers that ends in exit 0.
    before = {s: signal.signal(s, lambda *_: None) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        server.run(sockets=[sock])
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)
        sock.close()
    typer.echo("mtkit: server stopped", err=True)


def _say_serving(served: Any, host: str, sock: Any, token: str | None) -> None:
    """Which models are served at which address, and a warning for an open one."""
    bound_host, bound_port = sock.getsockname()[:2]
    if token is None and not _loopback(host):
        typer.echo(f"mtkit: warning: listening on {host} without --token-file: anyone who can "
                   "reach this port can use the model", err=True)
    shown = f"[{bound_host}]" if ":" in bound_host else bound_host
    what = ", ".join(f"{name} ({i.src_lang} -> {i.tgt_lang}, {i.engine} on {i.device}, "
                     f"{i.precision})" for name, i in served.infos.items())
    typer.echo(f"mtkit: serving {what} at http://{shown}:{bound_port}/ (Ctrl-C to stop)",
               err=True)


def model_groups(positional: list[Path], options: list[str]) -> list[list[Path]]:
    """The models to serve: the positional paths as one (a model or an ensemble, as
    `translate` takes them), then each --model's comma-separated paths."""
    groups = [list(positional)] if positional else []
    for option in options:
        parts = option.split(",")
        if any(not p.strip() for p in parts):
            raise ConfigError(f"--model {option}: an empty path; give PATH or PATH,PATH,...")
        groups.append([Path(p) for p in parts])
    if not groups:
        raise ConfigError("mtkit serve: give a model (RUN_OR_EXPORT, or --model PATH)")
    return groups


def _log_requests_to_stderr() -> None:
    """The server's request log (`mtkit.serve.app.log`), a line per request, on stderr."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    log = logging.getLogger("mtkit.serve")
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False


def _serve_extra():  # noqa: ANN202 - the uvicorn module
    """uvicorn, or one line saying how to install the extra."""
    try:
        import fastapi  # noqa: F401
        import fastapi_offline  # noqa: F401
        import prometheus_client  # noqa: F401
        import uvicorn
    except ModuleNotFoundError as e:
        raise ConfigError(f"mtkit serve needs {e.name}, which is not installed; install the "
                          f"serve extra: {SERVE_HINT}") from None
    return uvicorn


def _decode_defaults(assignments: list[str]) -> tuple[dict[str, Any], dict[str, str]]:
    """`--set decode.KEY=VALUE` as DecodeConfig fields, and the flag that set each."""
    from mtkit.config.overrides import apply_override

    raw: dict[str, Any] = {}
    for assignment in assignments:
        apply_override(raw, assignment)
        if set(raw) - {"decode"} or not isinstance(raw.get("decode"), dict):
            raise ConfigError(f"--set {assignment}: mtkit serve takes decode.KEY=VALUE, the "
                              "decoding defaults (the model's other settings are its own)")
    decode = raw.get("decode", {})
    return decode, {k: f"--set decode.{k}" for k in decode}


def _read_token(path: Path | None) -> str | None:
    if path is None:
        return None
    try:
        token = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        raise DataError(f"--token-file {path}: no such file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise DataError(f"--token-file {path}: cannot read it ({e})") from None
    if not token or any(c.isspace() for c in token):
        raise DataError(f"--token-file {path}: expected one token (no spaces), got "
                        f"{'nothing' if not token else 'several words'}")
    mode = path.stat().st_mode
    if mode & (stat.S_IRWXG | stat.S_IRWXO):  # as ssh says of a private key others can read
        typer.echo(f"mtkit: warning: --token-file {path}: permissions {mode & 0o777:04o} are "
                   f"too open, others can read the token; chmod 600 {path}", err=True)
    return token


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _listen(host: str, port: int) -> socket.socket:
    """A listening socket, bound before the model loads so that a port in use is said at
    once."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        raise ConfigError(f"--host {host}: not an address of this machine ({e.strerror})"
                          ) from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
        sock.listen(2048)
    except OSError as e:
        sock.close()
        raise ConfigError(f"--host {host} --port {port}: cannot listen there "
                          f"({e.strerror})") from None
    sock.set_inheritable(True)
    return sock
