"""The error a route of `mtkit serve` answers as JSON with its status: raised by the routes
(serve/app.py, serve/documents.py, through serve/state.py) and by the served models' loading
(serve/models.py), which the routes' state builds on, so it lives below both."""

from __future__ import annotations


class ApiError(Exception):
    """An error answered as JSON with its status (and headers)."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers
