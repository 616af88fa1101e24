"""`mtkit serve` as a server: started as a process on a free loopback port and called over
HTTP (httpx): every endpoint, every error status, authentication, concurrent callers, the
same outputs as `mtkit translate`, and a graceful SIGTERM."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from mtkit.data.store import text_path
from mtkit.run import data_dir
from tests.helpers import Server, run_cli, serving

httpx = pytest.importorskip("httpx", reason="the serve tests need httpx (make install)")
pytest.importorskip("fastapi", reason="mtkit serve needs the serve extra (make install)")

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def lines(toy_model: Path) -> list[str]:
    return text_path(data_dir(toy_model), "test", "src").read_text().splitlines()[:24]


@pytest.fixture(scope="module")
def server(toy_model: Path) -> Iterator[Server]:
    with serving(toy_model, "--max-sentences", "30", "--max-chars", "200",
                 "--max-body", "20000", "--max-beam", "8") as s:
        yield s


def _cli_jsonl(toy_model: Path, lines: list[str], *args: str) -> list[dict]:
    res = run_cli("translate", toy_model, "--threads", "1", "--format", "jsonl", *args,
                  input="\n".join(lines) + "\n")
    assert res.exit_code == 0, res.output
    return [json.loads(line) for line in res.stdout.splitlines()]


def test_v1_translate_equals_mtkit_translate(server, toy_model, lines):
    want = _cli_jsonl(toy_model, lines, "--nbest", "3", "--align")
    res = server.post("/v1/translate", {"text": lines, "nbest": 3, "align": True})
    assert res.status_code == 200, res.text
    got = res.json()["translations"]
    assert res.json()["model"] == "toy" and len(got) == len(lines)
    for w, g in zip(want, got, strict=True):
        assert (g["source"], g["text"]) == (w["source"], w["hypothesis"])
        for entry, cand in zip(w["nbest"], g["candidates"], strict=True):
            assert (cand["text"], cand["alignment"]) == (entry["hypothesis"],
                                                         entry["alignment"])
            assert cand["score"] == pytest.approx(entry["score"], abs=1e-5)
            assert len(cand["tokens"]) == entry["tokens"]
            assert len(cand["token_logprobs"]) == entry["tokens"] + 1
    one = server.post("/v1/translate", {"text": lines[0], "method": "greedy"}).json()
    assert one["translations"][0]["text"] == _cli_jsonl(toy_model, lines[:1],
                                                       "--greedy")[0]["hypothesis"]


def test_attention_over_http(server, lines):
    body = {"text": lines[0], "attention": True, "layer": 0, "head": 1}
    cand = server.post("/v1/translate", body).json()["translations"][0]["candidates"][0]
    att = cand["attention"]
    assert att["what"] == "cross-attention, layer 0, head 1"
    assert att["word"]["source"] == [*lines[0].split(), "</s>"]
    assert len(att["subword"]["weights"]) == len(cand["tokens"]) + 1


def test_libretranslate_endpoint(server, toy_model, lines):
    want = [w["hypothesis"] for w in _cli_jsonl(toy_model, lines[:3])]
    res = server.post("/translate", {"q": lines[0], "source": "src", "target": "tgt"})
    assert res.status_code == 200 and res.json() == {"translatedText": want[0]}
    res = server.post("/translate", {"q": lines[:3], "source": "auto", "target": "tgt",
                                     "format": "text"})
    assert res.json()["translatedText"] == want
    assert res.json()["detectedLanguage"][0]["language"] == "src"
    # LibreTranslate's own clients send forms
    form = server.post("/translate", data={"q": lines[0], "source": "src", "target": "tgt",
                                           "alternatives": "2"})
    assert form.status_code == 200, form.text
    assert form.json()["translatedText"] == want[0] and len(form.json()["alternatives"]) == 2
    wrong = server.post("/translate", {"q": "x", "source": "en", "target": "de"})
    assert wrong.status_code == 400
    assert wrong.json() == {"error": "en -> de: no model translates it; the pairs translated: "
                                     "src -> tgt"}
    assert server.client.get("/languages").json() == [
        {"code": "src", "name": "src", "targets": ["tgt"]}]


def test_widen_gives_the_hypotheses_asked_for(server, lines):
    """`widen`: the server's rule (LibreTranslate's alternatives') makes the search give
    nbest hypotheses over the request's own options; without it, a beam narrower than nbest
    is refused."""
    def texts(body: dict) -> list[str]:
        res = server.post("/v1/translate", {"text": lines[0], **body})
        assert res.status_code == 200, res.text
        return [c["text"] for c in res.json()["translations"][0]["candidates"]]

    narrow = server.post("/v1/translate", {"text": lines[0], "nbest": 6})
    assert narrow.status_code == 422  # the toy's beam holds 4
    assert texts({"nbest": 6, "widen": True}) == texts({"nbest": 6, "beam_size": 6})
    # greedy asked for: a beam of the model's width instead
    assert texts({"method": "greedy", "nbest": 3, "widen": True}) == texts({"nbest": 3})
    assert len(texts({"nbest": 6, "widen": True})) == 6


def test_split_into_sentences(server):
    pytest.importorskip("blingfire", reason="splitting needs the documents extra")
    res = server.post("/v1/split", {"text": "A man runs.  A dog  barks! Is it?\nsa gu\n\n"
                                            "gu mir"})
    assert res.status_code == 200, res.text
    assert res.json() == {"sentences": ["A man runs.", "A dog  barks!", "Is it?", "sa gu",
                                        "gu mir"]}
    bad = server.post("/v1/split", {"text": 3})
    assert bad.status_code == 422 and "text" in bad.json()["error"]


def test_service_endpoints(server, toy_model):
    assert server.client.get("/health").json() == {"status": "ok"}
    assert server.client.get("/ready").json() == {"status": "ready", "loaded": ["toy"]}
    models = server.client.get("/v1/models").json()
    m = models["models"][0]
    assert (m["name"], m["src_lang"], m["tgt_lang"], m["arch"], m["engine"]) == (
        "toy", "src", "tgt", "transformer", "mtkit")
    assert m["paths"] == [str(toy_model / "best.pt")] and m["decode"]["beam_size"] == 4
    assert models["limits"]["max_sentences"] == 30
    server.post("/v1/translate", {"text": ["sa gu", "mir"]})
    metrics = server.client.get("/metrics")
    assert metrics.headers["content-type"].startswith("text/plain")
    text = metrics.text
    for name in ("mtkit_requests_total", "mtkit_sentences_total", "mtkit_target_tokens_total",
                 "mtkit_queue_sentences", "mtkit_batch_sentences_bucket",
                 "mtkit_request_seconds_bucket"):
        assert name in text, name
    assert re.search(r'mtkit_requests_total\{path="/v1/translate",status="200"\} [1-9]', text)
    assert server.client.get("/openapi.json").json()["paths"]["/v1/translate"]
    page = server.client.get("/")
    assert page.status_code == 200 and "<title>mtkit</title>" in page.text
    assert server.client.get("/page/page.js").status_code == 200


@pytest.mark.parametrize("body, status, message", [
    ({"text": []}, 422, "text: an empty list"),
    ({"text": 3}, 422, "text"),
    ({"text": "a", "beam_size": "wide"}, 422, "beam_size"),
    ({"text": "a", "beams": 2}, 422, "beams: Extra inputs are not permitted"),
    ({"text": "a", "beam_size": 2, "nbest": 3}, 422,
     "nbest (decode.nbest): cannot exceed beam_size (2)"),
    ({"text": "a", "beam_size": 9}, 422, "beam_size: 9; this server allows at most 8"),
    ({"text": "a", "attention": True, "layer": 7}, 422, "layer 7: the model has 2"),
    ({"text": ["a"] * 31}, 413, "31 sentences; this server takes at most 30"),
    ({"text": "a" * 201}, 413, "sentence 0: 201 characters"),
    ({"text": "a " * 12000}, 413, "the request body is over 20000 bytes"),
])
def test_bad_requests_are_json_errors(server, body, status, message):
    res = server.post("/v1/translate", body)
    assert res.status_code == status, res.text
    assert message in res.json()["error"]


def test_bad_bodies(server):
    for raw, status, message in [(b'{"text": "a",', 400, "not valid JSON"),
                                 (b'{"text": "\xff"}', 400, "UTF-8"),
                                 (b'{"text": ["a", "\\ud800"]}', 422, "lone surrogate"),
                                 (b"", 400, "the body is empty; expected a JSON object")]:
        res = server.client.post("/v1/translate", content=raw,
                                 headers={"content-type": "application/json"})
        assert res.status_code == status and message in res.json()["error"], res.text
    chunked = server.client.post("/v1/translate", content=iter([b'{"text": "', b"a" * 30000,
                                                                b'"}']),
                                 headers={"content-type": "application/json"})
    assert chunked.status_code == 413
    assert server.proc.poll() is None


def test_concurrent_requests_reach_their_callers(server, toy_model, lines):
    want = [w["hypothesis"] for w in _cli_jsonl(toy_model, lines)]

    def ask(i: int) -> tuple[int, list[str]]:
        texts = [lines[(i + k) % len(lines)] for k in range(1 + i % 3)]
        res = server.post("/v1/translate", {"text": texts})
        assert res.status_code == 200, res.text
        return i, [t["text"] for t in res.json()["translations"]]

    with ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(ask, range(48)))
    for i, got in answers:
        assert got == [want[(i + k) % len(lines)] for k in range(1 + i % 3)]
    # they were decoded together: some pass held several requests
    buckets = re.findall(r'mtkit_batch_requests_bucket\{le="1.0"\} (\S+)',
                         server.client.get("/metrics").text)
    count = re.findall(r"mtkit_batch_requests_count (\S+)", server.client.get("/metrics").text)
    assert float(buckets[0]) < float(count[0])


def test_auth_queue_and_deadline(toy_model, tmp_path, lines):
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    with serving(toy_model, "--token-file", token, "--queue-size", "2", "--timeout", "1",
                 "--max-wait-ms", "10000", "--log-format", "json") as s:
        assert s.client.get("/health").status_code == 200  # open
        for path, call in [("/v1/translate", lambda **h: s.post("/v1/translate",
                                                                  {"text": "sa"}, **h)),
                           ("/v1/models", lambda **h: s.client.get("/v1/models", **h)),
                           ("/metrics", lambda **h: s.client.get("/metrics", **h))]:
            for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret"}):
                res = call(headers=headers)
                assert res.status_code == 401, (path, headers)
                assert res.headers["www-authenticate"] == "Bearer"
                assert "token" in res.json()["error"]
        auth = {"Authorization": "Bearer s3cret"}
        assert s.client.get("/v1/models", headers=auth).status_code == 200
        # waits 2 s (a fifth of --max-wait-ms) for company, past its 1 s deadline
        late = s.post("/v1/translate", {"text": "sa gu"}, headers=auth)
        assert late.status_code == 504 and "within 1 s" in late.json()["error"]
        full = s.post("/v1/translate", {"text": ["sa", "gu", "mir"]}, headers=auth)
        assert full.status_code == 503 and full.headers["retry-after"] == "1"
        lt = s.post("/translate", {"q": "sa", "source": "src", "target": "tgt",
                                   "api_key": "s3cret"})
        assert lt.status_code == 504  # authorized by api_key, then past the deadline
        assert s.post("/translate", {"q": "sa", "source": "src", "target": "tgt"}
                      ).status_code == 401
    records = [r for r in map(json.loads, (line for line in s.log if line.startswith("{")))
               if "path" in r]  # requests, not the model's load
    assert {"method": "POST", "path": "/v1/translate", "status": 503, "sentences": 3} in [
        {k: r[k] for k in ("method", "path", "status", "sentences")} for r in records]


def test_sigterm_finishes_requests_in_flight(toy_model):
    with serving(toy_model, "--max-wait-ms", "5000") as s:
        results: list[httpx.Response] = []
        asking = threading.Thread(target=lambda: results.append(
            s.post("/v1/translate", {"text": ["sa gu mir", "pel nel dar"]})))
        asking.start()
        time.sleep(0.3)  # the request waits 1 s in the batcher for company
        s.proc.send_signal(signal.SIGTERM)
        asking.join(30)
        assert s.proc.wait(30) == 0
        assert results and results[0].status_code == 200, results
        assert [t["text"] for t in results[0].json()["translations"]] == ["mir gu sa",
                                                                          "dar nel pel"]
    assert "mtkit: server stopped" in "".join(s.log)


def test_an_export_is_served_with_the_engine(toy_model, tmp_path, lines):
    pytest.importorskip("ctranslate2")
    export = tmp_path / "export"
    assert run_cli("export", toy_model, "-o", export).exit_code == 0
    want = [w["hypothesis"] for w in _cli_jsonl(export, lines, "--length-penalty", "none")]
    with serving(export, "--set", "decode.length_penalty=none") as s:
        m = s.client.get("/v1/models").json()["models"][0]
        assert m["engine"] == "ctranslate2" and m["layers"] is None
        res = s.post("/v1/translate", {"text": lines, "length_penalty": "none"})
        assert [t["text"] for t in res.json()["translations"]] == want
        gnmt = s.post("/v1/translate", {"text": "sa", "length_penalty": "gnmt"})
        assert gnmt.status_code == 422 and "CTranslate2 has no GNMT" in gnmt.json()["error"]


def test_bad_start_is_one_line(toy_model, tmp_path):
    cases = [(["--token-file", tmp_path / "none"], "--token-file"),
             (["--log-format", "xml"], "--log-format: invalid choice"),
             (["--host", "no.such.host.invalid"], "--host no.such.host.invalid"),
             (["--set", "train.lr=1"], "--set train.lr=1: mtkit serve takes decode.KEY"),
             (["--set", "decode.beam_size=0"],
              "--set decode.beam_size (decode.beam_size): out of range")]
    for args, message in cases:
        proc = subprocess.run([sys.executable, "-m", "mtkit", "serve", str(toy_model),
                               *map(str, args)], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2 and message in proc.stderr, proc.stderr
        assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
