"""What the operator of `mtkit serve` sets: limits, batching, authentication, the request
log. Apart from the application (`app`) so that the command line takes its flags' defaults
from here without importing the web framework."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from mtkit.errors import choice

LogFormat = Literal["text", "json"]  # a request's log line: plain text, or a JSON object
LOG_FORMATS: tuple[LogFormat, ...] = get_args(LogFormat)
# The ports `--port` takes: TCP's 16 bits; 0 asks the system for a free one
PORTS = range(0, 65536)


@dataclass(frozen=True)
class ServeSettings:
    """What the operator sets (`mtkit serve --help`): limits, batching, authentication, log."""

    max_sentences: int = 64  # per request
    max_chars: int = 2000  # per sentence
    max_body: int = 1_000_000  # bytes of a request body
    max_beam: int = 16  # beam_size and nbest a request may ask for
    max_output: int = 512  # tokens an output may have (below the model's own cap)
    queue_size: int = 2048  # sentences waiting; more is a 503
    max_wait_ms: float = 50  # the longest a request waits for others to batch with
    timeout: float = 60  # seconds a request may take; then a 504
    # seconds a client has to send a request's headers, and then its body; then a 408 and the
    # connection is closed (a client that never finishes would hold its socket for ever)
    read_timeout: float = 30
    # connections open at once; one more is answered 503 and closed (each holds a descriptor)
    max_connections: int = 1000
    token: str | None = None  # a bearer token every API request must carry
    log_format: LogFormat = "text"

    def __post_init__(self) -> None:
        choice("log_format", self.log_format, LogFormat)
