"""`mtkit serve` fuzzed from its own OpenAPI schema: request bodies drawn (hypothesis, a
bounded number of examples) from the schema of `POST /v1/translate` and LibreTranslate's
`POST /translate`, values in range and out of it, hostile text among them. Whatever is sent:
no 5xx, every error one JSON line, and the server up and answering afterwards."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import serving

httpx = pytest.importorskip("httpx", reason="the serve tests need httpx (make install)")
pytest.importorskip("fastapi", reason="mtkit serve needs the serve extra (make install)")
hypothesis = pytest.importorskip("hypothesis", reason="the fuzz test needs hypothesis")
st = pytest.importorskip("hypothesis.strategies")

pytestmark = pytest.mark.usefixtures("one_thread")

EXAMPLES = 150  # per endpoint: a few seconds on the toy model

# text a user or an attacker may send: words of the toy, markup, control characters,
# lone surrogates (JSON's escapes spell them), long runs
TEXT = st.one_of(st.sampled_from(["sa gu mir", "", " ", "<rev>", "<x>", "\x00", "\ud800",
                                  "a\udcffb", "mu " * 40, "\u2028", "🙂"]), st.text(max_size=20))
NUMBER = st.one_of(st.integers(-10, 10 ** 6), st.sampled_from([10 ** 30, -1, 0, 2 ** 63]),
                   st.floats(allow_nan=True, allow_infinity=True))


def _resolve(schema: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        place, name = schema["$ref"].rsplit("/", 1)
        defs = spec.get("$defs", {}) if place == "#/$defs" else spec["components"]["schemas"]
        schema = defs[name]
    return schema


def _body_schema(spec: dict[str, Any], path: str) -> dict[str, Any]:
    """The JSON body's schema of `POST path` (its $defs, if it has any, beside it)."""
    schema = spec["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]
    return _resolve(schema, spec)


def _values(schema: dict[str, Any], spec: dict[str, Any]) -> st.SearchStrategy:
    """Values of `schema`, and beside them values of other kinds."""
    schema = _resolve(schema, spec)
    if "enum" in schema:
        own: st.SearchStrategy = st.sampled_from(schema["enum"])
    elif "const" in schema:
        own = st.just(schema["const"])
    elif "anyOf" in schema:
        own = st.one_of([_values(s, spec) for s in schema["anyOf"]])
    else:
        kind = schema.get("type")
        if kind == "string":
            own = TEXT
        elif kind in ("integer", "number"):
            lo, hi = schema.get("minimum", -5), schema.get("maximum", 50)
            own = (st.integers(int(lo), int(min(hi, 10 ** 6))) if kind == "integer"
                   else st.floats(lo, min(hi, 1e6)))
        elif kind == "boolean":
            own = st.booleans()
        elif kind == "array":
            own = st.lists(_values(schema.get("items", {}), spec), max_size=4)
        elif kind == "object" and "properties" not in schema:
            own = st.dictionaries(TEXT, TEXT, max_size=3)
        elif kind == "null":
            own = st.none()
        else:
            own = st.none()
    return st.one_of(own, own, own, NUMBER, TEXT, st.none())


def _bodies(schema: dict[str, Any], spec: dict[str, Any]) -> st.SearchStrategy:
    """Objects of `schema`: its required fields there, some of the others, now and then an
    unknown one."""
    fields = {k: _values(v, spec) for k, v in schema["properties"].items()}
    required = set(schema.get("required", []))
    optional = st.fixed_dictionaries(
        {}, optional={**fields, "unknown_field": TEXT})
    must = st.fixed_dictionaries({k: fields[k] for k in required})
    return st.builds(lambda a, b: {**b, **a}, must, optional)


@pytest.fixture(scope="module")
def server(toy_model: Path):
    with serving(toy_model, "--timeout", "30", "--max-output", "60") as s:
        yield s


def _check(server, path: str, body: Any) -> None:
    r = server.client.post(path, content=json.dumps(body), headers={
        "content-type": "application/json"})
    assert r.status_code < 500, (body, r.status_code, r.text)
    if r.status_code >= 400:
        error = r.json()["error"]
        assert isinstance(error, str) and error and "\n" not in error, (body, r.text)


@pytest.mark.parametrize("path", ["/v1/translate", "/translate"])
def test_requests_drawn_from_the_schema_never_break_the_server(server, path):
    spec = server.client.get("/openapi.json").json()
    schema = _body_schema(spec, path)
    spec = {**spec, "$defs": schema.get("$defs", {})}
    settings = hypothesis.settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
                                   database=None,
                                   suppress_health_check=list(hypothesis.HealthCheck))

    @settings
    @hypothesis.given(_bodies(schema, spec))
    def fuzz(body: dict[str, Any]) -> None:
        _check(server, path, body)

    fuzz()
    for other in ([], "text", 5, None, [{"text": "sa"}]):  # bodies that are no object
        _check(server, path, other)
    assert server.client.get("/ready").status_code == 200
    r = server.post("/v1/translate", {"text": "sa gu mir"})
    assert r.status_code == 200 and r.json()["translations"][0]["text"], r.text
