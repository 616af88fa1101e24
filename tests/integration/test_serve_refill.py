"""`mtkit serve` refilling its passes (the default), as a process over HTTP: concurrent
requests of mixed lengths each get what the API gives that sentence alone, and a short
request that comes while long ones decode is answered before them."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import mtkit
from mtkit.data.store import text_path
from mtkit.run import data_dir
from tests.helpers import Server, serving

httpx = pytest.importorskip("httpx", reason="the serve tests need httpx (make install)")
pytest.importorskip("fastapi", reason="mtkit serve needs the serve extra (make install)")

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def lines(toy_model: Path) -> list[str]:
    return text_path(data_dir(toy_model), "test", "src").read_text().splitlines()[:32]


@pytest.fixture(scope="module")
def server(toy_model: Path) -> Iterator[Server]:
    with serving(toy_model, "--max-wait-ms", "20") as s:
        yield s


def _mixed(lines: list[str]) -> list[str]:
    """64 sentences of 1 to 4 test lines each: outputs of very different lengths."""
    return [" ".join(lines[(i + j) % len(lines)] for j in range(1 + i % 4)) for i in range(64)]


def test_64_concurrent_requests_each_get_what_the_api_gives_alone(server, toy_model, lines):
    texts = _mixed(lines)
    api = mtkit.load(toy_model, threads=1)
    want = [api.translate_full([t], nbest=2, align=True)[0] for t in texts]

    def ask(text: str) -> dict:
        res = server.post("/v1/translate", {"text": text, "nbest": 2, "align": True})
        assert res.status_code == 200, res.text
        return res.json()["translations"][0]

    with ThreadPoolExecutor(64) as pool:
        got = list(pool.map(ask, texts))
    for w, g in zip(want, got, strict=True):
        assert g["text"] == w.candidates[0].text
        for cw, cg in zip(w.candidates, g["candidates"], strict=True):
            assert (cg["text"], cg["tokens"], cg["alignment"]) == (cw.text, cw.tokens,
                                                                   cw.alignment)
            # float32 products round differently with the batch's shape (as in any batched
            # pass): the server's tests allow scores 1e-5; a token's log-prob, undivided by
            # the length penalty, a few times that
            assert cg["score"] == pytest.approx(cw.score, abs=1e-5)
            assert cg["token_logprobs"] == pytest.approx(cw.token_logprobs, abs=5e-5)


def _decoding(server: Server) -> float:
    text = server.client.get("/metrics").text
    return float(re.search(r"^mtkit_decoding_sentences (\S+)", text, re.M).group(1))


def test_a_short_request_behind_a_long_one_returns_first(server, lines):
    long = [" ".join(lines[(i + j) % len(lines)] for j in range(6)) for i in range(48)]
    order: list[str] = []
    lock = threading.Lock()

    def ask(name: str, text: list[str]) -> None:
        res = server.post("/v1/translate", {"text": text})
        assert res.status_code == 200, res.text
        with lock:
            order.append(name)

    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(ask, "long", long)
        while _decoding(server) < len(long):  # until the long request is decoding
            time.sleep(0.005)
        short = pool.submit(ask, "short", [lines[0].split()[0]])
        short.result()
        first.result()
    assert order == ["short", "long"]
