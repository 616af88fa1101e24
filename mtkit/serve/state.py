"""What a route of `mtkit serve` reads from the application it answers: the served models and
settings (`Served`, `served`), the JSON error it raises (`ApiError`, from serve/errors.py),
the token check, and the one model a document goes through; shared by serve/app.py and
serve/documents.py."""

from __future__ import annotations

import hmac
from dataclasses import dataclass

from fastapi import Request

from mtkit.api import TranslationModel
from mtkit.api.many import AUTO
from mtkit.api.router import RouteError
from mtkit.serve.batcher import Batcher
from mtkit.serve.errors import ApiError
from mtkit.serve.metrics import ServerMetrics
from mtkit.serve.models import ServedModels
from mtkit.serve.settings import ServeSettings


@dataclass
class Served:
    """What the routes read from the application (`app.state.served`): the models (each
    loaded one with its batcher), the operator's settings, the metrics, and whether the
    models loaded at the start have warmed up."""

    models: ServedModels
    settings: ServeSettings
    metrics: ServerMetrics
    ready: bool = False


def served(request: Request) -> Served:
    """The served models and the settings, of the application answering `request`."""
    return request.app.state.served


def check_token(request: Request, token: str | None, api_key: object = None) -> None:
    """Refuse `request` unless it carries `token` (compared in constant time) as a bearer
    token, or as LibreTranslate's `api_key`; everything passes where `token` is None.
    Without either: 401; an `api_key` (without a bearer token) that is not the token: 403
    `Invalid API key`, LibreTranslate's answer (its access check takes an empty key for
    none)."""
    if token is None:
        return
    scheme, _, value = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" and api_key not in (None, ""):
        if not (isinstance(api_key, str) and _same(api_key, token)):
            raise ApiError(403, "Invalid API key")
        return
    if not _same(value.strip() if scheme.lower() == "bearer" else "", token):
        raise ApiError(401, "a valid token is needed: Authorization: Bearer TOKEN",
                       {"WWW-Authenticate": "Bearer"})


def _same(offered: str, token: str) -> bool:
    """In constant time; JSON's escapes can spell a lone surrogate, which UTF-8 cannot."""
    return hmac.compare_digest(offered.encode("utf-8", "surrogatepass"), token.encode())


async def document_model(state: Served, source: str, target: str
                         ) -> tuple[str, TranslationModel, Batcher, str | None]:
    """The one model a document goes through, held (release it with
    `state.models.release(name)`), its batcher and tag: a direct route (no pivot: the markup
    is placed by one model's alignment); `auto` only where the models translate from one
    language. A 400 otherwise."""
    many = state.models.models
    if source == AUTO:
        if len(many.router.sources) != 1:
            raise ApiError(400, "source: auto: a document's language is not detected; give "
                           f"one of {', '.join(many.router.sources)}")
        source = many.router.sources[0]
    try:
        route = many.router.route(source, target)
    except RouteError as e:
        raise ApiError(400, str(e)) from None
    if route.pivot is not None:
        raise ApiError(400, f"{source} -> {target}: a document is translated by one model, "
                       f"and this pair goes through {route.pivot}")
    leg = route.legs[0]
    model, batcher = await state.models.acquire(leg.model)
    return leg.model, model, batcher, leg.tag
