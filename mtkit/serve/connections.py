"""How `mtkit serve` holds its connections: uvicorn's h11 protocol with a deadline for a
request's headers and a cap on connections open at once, and the uvicorn configuration that
uses it.

uvicorn (0.55) times out only an idle keep-alive connection, and only once a response has
been sent: a client that connects and never finishes its headers holds its socket for ever
(1,000 of them held 1,007 descriptors), and `limit_concurrency` answers 503 only to a request
whose headers have arrived. The headers' deadline and the cap are kept here, at the
connection; the body's deadline is the application's (`mtkit.serve.app.BodyLimit`), which can
answer it with a JSON 408.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from mtkit.serve.settings import ServeSettings


def refusal(status: int, reason: str, error: str) -> bytes:
    """A whole HTTP/1.1 response, JSON `{"error": ...}`, that closes the connection: for a
    connection refused before any request of it is parsed (h11 sends no response then)."""
    body = json.dumps({"error": error}).encode()
    return (f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\n\r\n").encode() + body


class BoundedH11(H11Protocol):
    """uvicorn's h11 protocol, plus: a connection's request headers must have arrived within
    `read_timeout` seconds of its opening (or of its previous response), else a 408 (or,
    when nothing at all came, a plain close); past `max_connections` open at once, a new
    connection is answered 503 and closed."""

    read_timeout: float = ServeSettings.read_timeout
    max_connections: int = ServeSettings.max_connections

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.max_connections:
            transport.write(refusal(503, "Service Unavailable", "too many connections open "
                                    f"(the server's --max-connections {self.max_connections});"
                                    " try again shortly"))
            transport.close()
            return
        self._arm()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:  # the headers are in: the app has it now
            self._disarm()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
            self._arm()  # the next request's headers, on a connection kept alive

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(self.read_timeout, self._expired)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expired(self) -> None:
        self._deadline = None
        if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
            return
        if self.conn.trailing_data[0]:  # part of a request came
            self.transport.write(refusal(408, "Request Timeout", "the request's headers did "
                                         f"not arrive within {self.read_timeout:g} s (the "
                                         "server's --read-timeout)"))
        self.transport.close()


def uvicorn_config(app: Any, settings: ServeSettings) -> uvicorn.Config:
    """uvicorn's configuration for `app` under `settings`: the bounded h11 protocol (named,
    not `auto`, so that installing httptools changes nothing), no access log (the app logs
    each request), requests in flight given `settings.timeout` at shutdown."""
    protocol = type("BoundedH11", (BoundedH11,), {
        "read_timeout": settings.read_timeout, "max_connections": settings.max_connections})
    return uvicorn.Config(app, http=protocol, log_level="warning", access_log=False,
                          timeout_graceful_shutdown=settings.timeout, lifespan="on")
