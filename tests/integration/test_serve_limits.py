"""`mtkit serve` under requests that ask for too much: outputs bounded by the model's cap and
the operator's --max-output, a search stopped once its caller got its 504 or went away, and
inputs refused with one JSON line. A real process on a loopback port, called over HTTP."""

from __future__ import annotations

import dataclasses
import json
import shutil
import threading
import time
from pathlib import Path

import pytest

from mtkit.config import dump_recipe, recipe_from_yaml_text
from tests.helpers import serving

httpx = pytest.importorskip("httpx", reason="the serve tests need httpx (make install)")
pytest.importorskip("fastapi", reason="mtkit serve needs the serve extra (make install)")

pytestmark = pytest.mark.usefixtures("one_thread")

NORMAL = {"text": "sa gu mir"}


@pytest.fixture(scope="module")
def long_model(toy_model: Path, tmp_path_factory) -> Path:
    """The toy model with sinusoid positions said to cover 4,096 (the weights are the same):
    outputs of thousands of tokens are within its cap, so a search can run for minutes."""
    import torch

    run = tmp_path_factory.mktemp("long") / "run"
    shutil.copytree(toy_model, run)
    state = torch.load(run / "last.pt", weights_only=True)
    recipe = recipe_from_yaml_text(state["recipe"], source="last.pt")
    tf = dataclasses.replace(recipe.model.transformer, max_positions=4096)
    state["recipe"] = dump_recipe(dataclasses.replace(
        recipe, model=dataclasses.replace(recipe.model, transformer=tf)))
    for name in ("last.pt", "best.pt"):
        torch.save(state, run / name)
    return run


@pytest.fixture(scope="module")
def toy_export(toy_model: Path, tmp_path_factory) -> Path:
    pytest.importorskip("ctranslate2")
    from tests.helpers import run_cli

    out = tmp_path_factory.mktemp("export") / "ct2"
    assert run_cli("export", toy_model, "-o", out).exit_code == 0
    return out


def _longest(cap: int) -> dict:
    return {"text": "mu", "min_len": cap, "max_len_b": cap, "beam_size": 16}


def test_one_request_does_not_stall_the_others(long_model):
    """{"min_len": 3000, "max_len_b": 3001, "beam_size": 16} got its 504 and kept the decoder
    busy: a normal request a second later was answered after 127 s. Its search now stops once
    its caller has the 504, and the next request is answered within its own timeout."""
    with serving(long_model, "--timeout", "5", "--max-output", "4000") as server:
        got: dict[str, object] = {}

        def send_long() -> None:
            got["long"] = server.post("/v1/translate", _longest(4000))

        first = threading.Thread(target=send_long)
        first.start()
        time.sleep(1.0)
        start = time.monotonic()
        r = server.post("/v1/translate", NORMAL)
        waited = time.monotonic() - start
        first.join(60)
        assert r.status_code == 200, (r.text, waited)
        assert waited < 5.0, waited
        assert got["long"].status_code == 504, got["long"].text


def test_a_client_that_goes_away_frees_the_decoder(long_model):
    """A disconnected client's search ran on to its end."""
    with serving(long_model, "--timeout", "600", "--max-output", "4000") as server:
        def send_long() -> None:
            with pytest.raises(httpx.TimeoutException):
                httpx.post(server.url.rstrip("/") + "/v1/translate", json=_longest(4000),
                           timeout=1.0)

        first = threading.Thread(target=send_long)
        first.start()
        first.join(60)  # the client gave up after 1 s and closed its connection
        start = time.monotonic()
        r = server.post("/v1/translate", NORMAL)
        assert r.status_code == 200, r.text
        assert time.monotonic() - start < 2.0  # not the minutes the search would take
        assert any(" 499 " in line for line in server.log), server.log[-5:]


def test_outputs_are_bounded_by_the_model_and_the_operator(toy_model, long_model):
    """Nothing bounded the output length a request asked for: the toy's sinusoids decoded
    3,000 tokens if asked. Its outputs end by the positions an export writes (64), and the
    operator's --max-output bounds every model's."""
    with serving(toy_model, "--max-output", "40") as server:
        r = server.post("/v1/translate", {"text": "mu", "max_len_b": 3001})
        assert r.status_code == 422, r.text
        assert r.json()["error"] == ("max_len_b: 3001; this server's outputs end by 40 tokens "
                                     "(--max-output)")
        r = server.post("/v1/translate", {"text": "mu", "min_len": 50})
        assert r.status_code == 422 and "--max-output" in r.json()["error"], r.text
        r = server.post("/v1/translate", {"text": "mu " * 30, "max_len_a": 9, "min_len": 40,
                                          "max_len_b": 40})
        assert r.status_code == 200, r.text
        assert len(r.json()["translations"][0]["candidates"][0]["tokens"]) == 40
        assert server.client.get("/v1/models").json()["limits"]["max_output"] == 40
    import mtkit
    from mtkit.errors import ConfigError

    model = mtkit.load(toy_model, device="cpu", threads=1)
    with pytest.raises(ConfigError, match=r"min_len \(decode.min_len\): 3000 tokens before EOS, "
                       "but the model.s outputs end by 63 tokens"):
        model.translate("mu", min_len=3000, max_len_b=3001)
    [res] = model.translate_full(["mu"], min_len=63, max_len_b=63, method="greedy")
    assert len(res.candidates[0].tokens) == 63


def test_a_huge_output_limit_is_refused_on_every_face(toy_model, tmp_path):
    """max_len_b 10^30 was an OverflowError: a traceback from translate, a 500 from the server,
    the bare error from the API (DecodeConfig.max_len_b had no upper bound)."""
    import mtkit
    from mtkit.errors import ConfigError
    from tests.helpers import run_cli

    huge = 10 ** 30
    said = "out of range: expected a value <= 100000, got 1000000000000000000000000000000"
    src = tmp_path / "in.txt"
    src.write_text("sa gu\n")
    res = run_cli("translate", toy_model, "-i", src, "--max-len-b", str(huge))
    assert res.exit_code == 2 and said in res.stderr, res.output
    assert res.stderr.count("\n") == 1 and "Traceback" not in res.output
    res = run_cli("translate", toy_model, "-i", src, "--max-len-a", "1e300")
    assert res.exit_code == 2 and "expected a value <= 100" in res.stderr, res.output
    model = mtkit.load(toy_model, device="cpu", threads=1)
    with pytest.raises(ConfigError, match=said):
        model.translate("sa", max_len_b=huge)
    with serving(toy_model) as server:
        for body in ({"text": "sa", "max_len_b": huge}, {"text": "sa", "max_len_a": 1e300}):
            r = server.post("/v1/translate", body)
            assert r.status_code == 422 and "\n" not in r.json()["error"], r.text


def test_bad_inputs_are_one_json_line(toy_model, toy_export):
    """A lone surrogate in a glossary was a 500 in plain text with a 100-line traceback in the
    log, on a run and on an export; JSON sent without its content type was 'Input should be
    a valid dictionary or object'; an empty body 'Field required' without the field."""
    for run in (toy_model, toy_export):
        with serving(run, "--set", "decode.length_penalty=average") as server:
            for terms in ({"sa": "x\ud800"}, {"s\udc80": "x"}):
                r = server.client.post(  # escaped: httpx sends no surrogate itself
                    "/v1/translate", content=json.dumps({"text": "sa gu", "terms": terms}),
                    headers={"content-type": "application/json"})
                assert r.status_code == 422, r.text
                assert "not valid Unicode text (a lone surrogate" in r.json()["error"]
            assert not any("Traceback" in line for line in server.log)
            assert server.post("/v1/translate", NORMAL).status_code == 200
    with serving(toy_model) as server:
        for kind in ("application/x-www-form-urlencoded", "text/plain", None):
            headers = {"content-type": kind} if kind else {}
            r = server.client.post("/v1/translate", content=b'{"text": "sa"}', headers=headers)
            assert r.status_code == 415, (kind, r.text)
            assert r.json()["error"].startswith("the body must be JSON, sent with the header "
                                                "Content-Type: application/json"), r.text
        r = server.client.post("/v1/translate", content=b"",
                               headers={"content-type": "application/json"})
        assert r.status_code == 400 and r.json()["error"] == (
            "the body is empty; expected a JSON object with text"), r.text
        r = server.client.post("/v1/translate", content=b'{"text": "sa", "alpha": NaN}',
                               headers={"content-type": "application/json"})
        assert r.status_code in (400, 422) and "finite" in r.json()["error"], r.text
