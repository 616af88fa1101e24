"""`mtkit serve --model ... --model ...` as a process on a loopback port: two toy runs
labelled en -> de and de -> fr (the second served as a CTranslate2 export), routed by source
and target on both endpoints, listed, pivoted through de, detected, within a limit of one
loaded model, batched per model; a LibreTranslate client (libretranslatepy) against it."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.helpers import Server, run_cli, serving

pytest.importorskip("httpx", reason="the serve tests need httpx (make install)")
pytest.importorskip("fastapi", reason="mtkit serve needs the serve extra (make install)")
pytest.importorskip("ctranslate2", reason="the export needs the ctranslate2 extra")
pytest.importorskip("py3langid", reason="detection needs the detect extra (make install)")

pytestmark = pytest.mark.usefixtures("one_thread")

LINES = ["sa gu mir", "pel nel dar", "mir wi mu lop ke", "fos ke so"]
EN = "The dog runs through the snow."
DE = "Der Hund läuft durch den Schnee."
NONE = ("--set", "decode.length_penalty=none")  # what the export's engine has too


@pytest.fixture(scope="module")
def models(lang_runs: dict[str, Path], tmp_path_factory) -> dict[str, Path]:
    """en -> de as a run, de -> fr as an export."""
    export = tmp_path_factory.mktemp("de-fr-export") / "ct2"
    res = run_cli("export", lang_runs["de-fr"], "-o", export)
    assert res.exit_code == 0, res.output
    return {"en-de": lang_runs["en-de"], "de-fr": export}


def _translate(path: Path, lines: list[str]) -> list[str]:
    """`mtkit translate`'s output."""
    res = run_cli("translate", path, "--threads", "1", "--format", "jsonl",
                  "--length-penalty", "none", input="\n".join(lines) + "\n")
    assert res.exit_code == 0, res.output
    return [json.loads(line)["hypothesis"] for line in res.stdout.splitlines()]


@pytest.fixture(scope="module")
def want(models) -> dict[str, list[str]]:
    en_de = _translate(models["en-de"], LINES)
    return {"en-de": en_de, "de-fr": _translate(models["de-fr"], LINES),
            "en-fr": _translate(models["de-fr"], en_de)}


@pytest.fixture(scope="module")
def server(models) -> Iterator[Server]:
    # a pass waits 100 ms for company (a fifth of --max-wait-ms): on a loaded machine the
    # concurrent clients' requests still arrive within it, so they are batched
    with serving("--model", models["en-de"], "--model", models["de-fr"], *NONE,
                 "--max-wait-ms", "500") as s:
        yield s


def test_routes_on_both_endpoints_give_each_models_output(server, want):
    assert want["en-de"] != want["de-fr"]  # so a wrong route shows
    for pair in ("en-de", "de-fr"):
        source, target = pair.split("-")
        res = server.post("/v1/translate", {"text": LINES, "source": source, "target": target})
        assert res.status_code == 200, res.text
        body = res.json()
        assert [t["text"] for t in body["translations"]] == want[pair]
        assert body["model"] == f"toy-{pair}"
        assert {(t["source_lang"], t["target_lang"], t["pivot"]) for t in
                body["translations"]} == {(source, target, None)}
        libre = server.post("/translate", {"q": LINES, "source": source, "target": target})
        assert libre.json() == {"translatedText": want[pair]}
        by_name = server.post("/v1/translate", {"text": LINES, "model": f"toy-{pair}"})
        assert [t["text"] for t in by_name.json()["translations"]] == want[pair]


def test_every_direction_is_listed(server, models):
    assert server.client.get("/languages").json() == [
        {"code": "de", "name": "de", "targets": ["fr"]},
        {"code": "en", "name": "en", "targets": ["de", "fr"]}]
    listed = server.client.get("/v1/models").json()
    assert [(m["name"], m["src_lang"], m["tgt_lang"], m["engine"], m["loaded"])
            for m in listed["models"]] == [("toy-en-de", "en", "de", "mtkit", True),
                                           ("toy-de-fr", "de", "fr", "ctranslate2", True)]
    assert listed["directions"] == [
        {"source": "de", "target": "fr", "models": ["toy-de-fr"], "pivot": None},
        {"source": "en", "target": "de", "models": ["toy-en-de"], "pivot": None},
        {"source": "en", "target": "fr", "models": ["toy-en-de", "toy-de-fr"], "pivot": "de"}]
    assert listed["limits"]["max_loaded"] is None and listed["limits"]["pivot"] is True
    ready = server.client.get("/ready").json()
    assert ready == {"status": "ready", "loaded": ["toy-en-de", "toy-de-fr"]}


def test_an_unknown_pair_is_a_400_naming_the_known_ones(server):
    known = ("the pairs translated: de -> fr, en -> de; through a pivot: en -> fr "
             "(through de)")
    for path, body in [("/translate", {"q": "x", "source": "fr", "target": "en"}),
                       ("/v1/translate", {"text": "x", "source": "fr", "target": "en"})]:
        res = server.post(path, body)
        assert res.status_code == 400, res.text
        assert res.json() == {"error": f"fr -> en: no model translates it; {known}"}
    res = server.post("/v1/translate", {"text": "x", "model": "nope"})
    assert res.status_code == 400 and "the models: toy-en-de, toy-de-fr" in res.json()["error"]
    res = server.post("/v1/translate", {"text": "x"})
    assert res.status_code == 422 and "target" in res.json()["error"]


def test_a_pivot_equals_translating_twice(server, want):
    res = server.post("/v1/translate", {"text": LINES, "source": "en", "target": "fr",
                                        "attention": True})
    assert res.status_code == 200, res.text
    got = res.json()["translations"]
    assert [t["text"] for t in got] == want["en-fr"]
    assert {t["pivot"] for t in got} == {"de"}
    legs = got[0]["legs"]
    assert [(leg["model"], leg["source_lang"], leg["target_lang"]) for leg in legs] == [
        ("toy-en-de", "en", "de"), ("toy-de-fr", "de", "fr")]
    assert legs[0]["text"] == want["en-de"][0] and legs[1]["text"] == want["en-fr"][0]
    for leg, source in zip(legs, (LINES[0], want["en-de"][0]), strict=True):  # each attends
        att = leg["candidates"][0]["attention"]["word"]  # (an export's has no EOS column)
        assert att["source"][:len(source.split())] == source.split()
    libre = server.post("/translate", {"q": LINES[0], "source": "en", "target": "fr"})
    assert libre.json() == {"translatedText": want["en-fr"][0], "pivot": "de"}
    res = server.post("/v1/translate", {"text": "sa", "source": "en", "target": "fr",
                                        "prefix": "ba"})
    assert res.status_code == 422 and "through a pivot (en -> de is one leg)" in (
        res.json()["error"])


def test_detection(server, want):
    res = server.post("/detect", {"q": DE})
    assert res.status_code == 200
    found = res.json()
    assert [d["language"] for d in found] == ["de", "en"] and found[0]["confidence"] > 90
    assert set(found[0]) == {"language", "confidence"}
    form = server.post("/detect", data={"q": EN})
    assert form.json()[0]["language"] == "en"
    libre = server.post("/translate", {"q": DE, "source": "auto", "target": "fr"}).json()
    assert libre["detectedLanguage"]["language"] == "de"
    assert libre["translatedText"] == _one(server, DE, "de", "fr")
    v1 = server.post("/v1/translate", {"text": [EN, DE], "source": "auto", "target": "fr"})
    got = v1.json()["translations"]
    assert [(t["detected"]["language"], t["pivot"]) for t in got] == [("en", "de"),
                                                                      ("de", None)]
    assert server.post("/detect", {"q": 3}).status_code == 422


def _one(server: Server, text: str, source: str, target: str) -> str:
    res = server.post("/v1/translate", {"text": text, "source": source, "target": target})
    return res.json()["translations"][0]["text"]


def test_libretranslatepy_client(server, want):
    from libretranslatepy import LibreTranslateAPI

    lt = LibreTranslateAPI(server.url)
    assert lt.detect(EN)[0]["language"] == "en"
    assert {lang["code"] for lang in lt.languages()} == {"en", "de"}
    assert lt.translate(LINES[0], source="en", target="de") == want["en-de"][0]
    assert lt.translate(DE, source="auto", target="fr") == _one(server, DE, "de", "fr")


def _metric(text: str, name: str, model: str) -> float:
    found = re.search(rf'^{name}\{{model="{model}"\}} (\S+)$', text, re.M)
    assert found, (name, model)
    return float(found.group(1))


def test_concurrent_requests_are_batched_per_model(server, want):
    before = server.client.get("/metrics").text

    def ask(i: int) -> tuple[int, list[str]]:
        pair = ("en-de", "de-fr")[i % 2]
        source, target = pair.split("-")
        res = server.post("/translate", {"q": [LINES[i % 4]], "source": source,
                                         "target": target})
        assert res.status_code == 200, res.text
        return i, res.json()["translatedText"]

    with ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(ask, range(48)))
    for i, got in answers:
        assert got == [want[("en-de", "de-fr")[i % 2]][i % 4]]
    after = server.client.get("/metrics").text
    for model in ("toy-en-de", "toy-de-fr"):
        jobs = (_metric(after, "mtkit_model_requests_total", model)
                - _metric(before, "mtkit_model_requests_total", model))
        passes = (_metric(after, "mtkit_model_batches_total", model)
                  - _metric(before, "mtkit_model_batches_total", model))
        assert (jobs, passes < jobs) == (24, True), (model, jobs, passes)  # fewer passes


def test_one_loaded_model_at_a_time(models, want):
    with serving("--model", models["en-de"], "--model", models["de-fr"], *NONE,
                 "--max-loaded", "1") as s:
        assert s.client.get("/ready").json()["loaded"] == ["toy-de-fr"]
        for _ in range(2):
            for pair in ("en-de", "de-fr"):
                source, target = pair.split("-")
                res = s.post("/translate", {"q": LINES, "source": source, "target": target})
                assert res.json()["translatedText"] == want[pair]
                assert s.client.get("/ready").json()["loaded"] == [f"toy-{pair}"]
        text = s.client.get("/metrics").text
        # the start loads both in turn, then each request's model replaces the other
        assert _metric(text, "mtkit_model_loads_total", "toy-en-de") == 3
        assert _metric(text, "mtkit_model_unloads_total", "toy-en-de") == 3
        assert _metric(text, "mtkit_model_loads_total", "toy-de-fr") == 3
        assert _metric(text, "mtkit_model_unloads_total", "toy-de-fr") == 2
        assert re.search(r"^mtkit_models_loaded 1\.0$", text, re.M)
        # both legs of a pivot, one model at a time
        res = s.post("/translate", {"q": LINES, "source": "en", "target": "fr"})
        assert res.json()["translatedText"] == want["en-fr"]
    log = "".join(s.log)
    assert "mtkit: unloaded toy-de-fr" in log and "mtkit: loaded toy-en-de" in log


def test_a_model_whose_files_broke_after_the_start_is_a_503_not_the_requests_fault(models,
                                                                                  tmp_path):
    """Under --max-loaded a model unloaded is read again when asked for; its checkpoint
    broken in between was answered 422, as if the request were wrong."""
    run = tmp_path / "en-de"
    shutil.copytree(models["en-de"], run)
    with serving("--model", run, "--model", models["de-fr"], *NONE, "--max-loaded", "1") as s:
        assert s.client.get("/ready").json()["loaded"] == ["toy-de-fr"]  # en-de unloaded
        for pt in run.glob("*.pt"):
            pt.write_bytes(b"not a checkpoint")
        res = s.post("/translate", {"q": "sa gu", "source": "en", "target": "de"})
        assert res.status_code == 503, res.text
        error = res.json()["error"]
        assert error.startswith("model toy-en-de could not be loaded: ") and "\n" not in error
        res = s.post("/translate", {"q": LINES, "source": "de", "target": "fr"})
        assert res.status_code == 200, res.text  # the others are still served


def test_no_pivot_and_bad_starts(models, tmp_path):
    with serving("--model", models["en-de"], "--model", models["de-fr"], *NONE,
                 "--no-pivot") as s:
        res = s.post("/translate", {"q": "x", "source": "en", "target": "fr"})
        assert res.status_code == 400 and "through a pivot" not in res.json()["error"]
        assert s.client.get("/languages").json()[1]["targets"] == ["de"]
    import subprocess
    import sys

    for args, message in [([], "give a model"),
                          (["--model", models["en-de"], "--max-loaded", "0"],
                           "--max-loaded"),
                          (["--model", f"{models['en-de']},{tmp_path / 'none'}"],
                           str(tmp_path / "none"))]:
        proc = subprocess.run([sys.executable, "-m", "mtkit", "serve", *map(str, args)],
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2 and message in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr
