"""`mtkit serve` against the Python API in the same run: throughput, latency, memory, and the
same outputs, on Multi30k test2016 with a trained run (make demo's by default).

    python bench/serve_speed.py runs/en-de-multi30k

1. Outputs: the first 200 test2016 sentences through the API, `mtkit translate`, POST
   /v1/translate and POST /translate (LibreTranslate's) must be the same text (and scores to
   1e-4 for the API and /v1).
2. Baseline: the API's in-process batch throughput over test2016 (beam 5), in sentences/s,
   and its time for one sentence alone (median over 50); measured before and after the HTTP
   phases (the host is shared: compare within one run).
3. HTTP: 1, 8 and 32 concurrent clients (threads with keep-alive connections), each sending
   one sentence per request, cycling through test2016 for `--seconds` each: throughput,
   p50/p95/p99 latency, failed requests. The 32-client phase is the load test.
4. Memory: the server's RSS after the first 1,000 requests and after 10,000 (32 clients).

With `--refill`, only the comparison of refilled passes (the server's default) with whole
passes (`--no-refill`): a server of each, alternating, twice each, 32 one-sentence clients for
`--seconds` each: sentences/s, p50 latency, and p50 of the sentences under 10 words
(issue 45: target >= 1.25x the whole passes' sentences/s, and a lower short-sentence p50).

With `--second RUN` (a model of another source language, e.g. de -> en beside en -> de) only
the several-model comparison runs, alternating, twice each: 32 clients on one server of
`run` alone, and 32 clients split 16/16 across two models in one process, in sentences/s.
The two are `run` twice (`--model run --model run`, chosen by name): two models of the same
cost, each with its own batcher, so that the difference is the split alone. Then the cost of
`source: auto` on a server of `run` and RUN: the detector's own time per call, and a lone
client's median latency on /translate with `source: auto` against the source given,
interleaved request by request.

Targets (issue 31): 32 clients >= 0.8x the batch baseline's sentences/s; a lone request's
p50 <= 1.3x the API's one-sentence time; RSS growth < 5% from 1,000 to 10,000 requests; no
failed request. The server and the clients share the machine's cores; the load average is
printed before and after.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import mtkit  # noqa: E402


def _args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path, nargs="?", default=REPO / "runs" / "en-de-multi30k")
    ap.add_argument("--mirror", type=Path, default=Path(os.environ.get(
        "MTKIT_DATA_MIRROR", REPO.parent / "shared" / "data" / "multi30k")))
    ap.add_argument("--seconds", type=float, default=20.0, help="per client count (default 20)")
    ap.add_argument("--load-seconds", type=float, default=60.0,
                    help="the 32-client load test (default 60)")
    ap.add_argument("--requests", type=int, default=10_000, help="for the memory check")
    ap.add_argument("--beam", type=int, default=5)
    ap.add_argument("--refill", action="store_true",
                    help="only the refilled against whole passes comparison")
    ap.add_argument("--second", type=Path, default=None,
                    help="a second run (another source language): the several-model run only")
    return ap.parse_args()


def _test2016(mirror: Path, lang: str = "en") -> list[str]:
    with gzip.open(mirror / f"test_2016_flickr.{lang}.gz", "rt", encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def _start(run: Path | list[str], beam: int, *flags: str) -> tuple[subprocess.Popen, str]:
    models = [str(run)] if isinstance(run, Path) else run
    proc = subprocess.Popen([sys.executable, "-m", "mtkit", "serve", *models, *flags,
                             "--port", "0",
                             "--set", f"decode.beam_size={beam}", "--log-format", "json",
                             "--queue-size", "100000", "--max-sentences", "1000"],
                            stderr=subprocess.PIPE, text=True)
    for line in proc.stderr:
        if m := re.search(r"at (http://\S+) \(Ctrl-C", line):
            url = m.group(1)
            break
    else:
        raise SystemExit("the server did not start")
    threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()
    while True:  # under a heavy load a first answer may take longer than httpx's 5 s
        try:
            if httpx.get(url + "ready", timeout=60).status_code == 200:
                break
        except httpx.TimeoutException:
            pass
        time.sleep(0.1)
    return proc, url


def _rss_mb(pid: int) -> float:
    text = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmRSS:\s+(\d+)", text).group(1)) / 1024


def _baseline(tr: mtkit.TranslationModel, lines: list[str]) -> tuple[float, float, float]:
    """The API's sentences/s over all `lines` in one call; its median time for one sentence;
    and its sentences/s in calls of 32 sentences: the most that 32 clients of one sentence
    each can have waiting, so the ceiling of any server's throughput for them."""
    start = time.perf_counter()
    tr.translate(lines)
    batch = len(lines) / (time.perf_counter() - start)
    times = []
    for line in lines[:50]:
        t = time.perf_counter()
        tr.translate([line])
        times.append(time.perf_counter() - t)
    start = time.perf_counter()
    for i in range(0, 320, 32):
        tr.translate(lines[i:i + 32])
    return batch, statistics.median(times), 320 / (time.perf_counter() - start)


def _clients(url: str, lines: list[str], clients: int, *, seconds: float | None = None,
             requests: int | None = None, on_count=None, ask=None) -> dict:
    """`clients` threads, each sending one sentence per request until `seconds` pass or
    `requests` are sent in all; `ask(client, line)`: the path and body of a request (default
    POST /v1/translate of the line)."""
    lock, latencies, failed, sent = threading.Lock(), [], [0], [0]
    short: list[float] = []  # latencies of sentences under 10 words
    stop_at = None if seconds is None else time.monotonic() + seconds

    def client(k: int) -> None:
        with httpx.Client(base_url=url, timeout=120) as c:
            i = k
            while True:
                with lock:
                    if requests is not None and sent[0] >= requests:
                        return
                    sent[0] += 1
                    n = sent[0]
                if stop_at is not None and time.monotonic() >= stop_at:
                    return
                t = time.perf_counter()
                try:
                    path, body = (("/v1/translate", {"text": lines[i % len(lines)]})
                                  if ask is None else ask(k, lines[i % len(lines)]))
                    ok = c.post(path, json=body).status_code == 200
                except httpx.HTTPError:
                    ok = False
                took = time.perf_counter() - t
                with lock:
                    latencies.append(took)
                    if len(lines[i % len(lines)].split()) < 10:
                        short.append(took)
                    failed[0] += not ok
                if on_count is not None:
                    on_count(n)
                i += clients

    start = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(client, range(clients)))
    wall = time.perf_counter() - start
    q = statistics.quantiles(latencies, n=100)
    return {"clients": clients, "requests": len(latencies), "failed": failed[0],
            "sent/s": len(latencies) / wall, "p50": statistics.median(latencies),
            "p95": q[94], "p99": q[98],
            "p50 short": statistics.median(short) if short else float("nan")}


def _check_outputs(tr: mtkit.TranslationModel, url: str, run: Path, lines: list[str]) -> None:
    api = tr.translate_full(lines)
    cli = subprocess.run([sys.executable, "-m", "mtkit", "translate", str(run), "--beam",
                          str(tr.defaults.beam_size), "--format", "jsonl"],
                         input="\n".join(lines) + "\n", capture_output=True, text=True,
                         check=True).stdout.splitlines()
    v1 = httpx.post(url + "v1/translate", json={"text": lines}, timeout=300).json()
    info = tr.info
    libre = httpx.post(url + "translate", json={"q": lines, "source": info.src_lang,
                                                "target": info.tgt_lang}, timeout=300).json()
    cli_recs = [json.loads(x) for x in cli]
    same_text = all(a.text == c["hypothesis"] == v["text"] == t for a, c, v, t in zip(
        api, cli_recs, v1["translations"], libre["translatedText"], strict=True))
    same_score = all(abs(a.candidates[0].score - c["score"]) < 1e-4
                     and abs(v["candidates"][0]["score"] - c["score"]) < 1e-4
                     for a, c, v in zip(api, cli_recs, v1["translations"], strict=True))
    print(f"outputs, first {len(lines)} test2016 sentences: API, mtkit translate, /v1/translate"
          f" and /translate the same text: {same_text}; scores within 1e-4: {same_score}")


def _two_models(a: argparse.Namespace, lines: list[str]) -> None:
    """32 clients on `a.run` alone against 32 split across it and `a.second` in one server,
    alternating; then what detection costs."""
    first, second = mtkit.load(a.run).info, mtkit.load(a.second).info
    other = _test2016(a.mirror, second.src_lang)
    names = (first.name, f"{first.name}-2")  # the same run served twice

    def split(k: int, line: str) -> tuple[str, dict]:
        return "/v1/translate", {"text": line, "model": names[k % 2]}

    rows = []
    for _ in range(2):
        for label, models in (("alone", [str(a.run)]),
                              ("two", ["--model", str(a.run), "--model", str(a.run)])):
            proc, url = _start(models, a.beam)
            try:
                r = _clients(url, lines, 32, seconds=a.seconds,
                             ask=None if label == "alone" else split)
            finally:
                proc.send_signal(signal.SIGTERM)
                proc.wait(120)
            rows.append((label, r))
            print(f"{label}: {r['sent/s']:.1f} sentences/s, p50 {r['p50'] * 1000:.0f} ms, "
                  f"{r['failed']} failed (load {os.getloadavg()[0]:.2f})", flush=True)
    alone = statistics.mean(r["sent/s"] for label, r in rows if label == "alone")
    two = statistics.mean(r["sent/s"] for label, r in rows if label == "two")
    print(f"32 clients: two models {two:.1f} sentences/s, one alone {alone:.1f}: "
          f"{two / alone:.2f}x")
    _detection_cost(a, lines, other, first, second)


def _detection_cost(a: argparse.Namespace, lines: list[str], other: list[str],
                    first: mtkit.api.ModelInfo, second: mtkit.api.ModelInfo) -> None:
    from mtkit.api.detect import Detector

    detector = Detector([first.src_lang, second.src_lang])
    texts = lines + other
    start = time.perf_counter()
    right = sum(detector.best(t).language == (first.src_lang if n < len(lines)
                                             else second.src_lang)
                for n, t in enumerate(texts))
    each = (time.perf_counter() - start) / len(texts)
    print(f"detector: {each * 1e6:.0f} us per sentence, {right}/{len(texts)} test2016 "
          f"sentences of both languages right")
    proc, url = _start(["--model", str(a.run), "--model", str(a.second)], a.beam)
    times: dict[str, list[float]] = {"auto": [], "given": []}
    try:
        with httpx.Client(base_url=url, timeout=120) as c:
            for line in lines[:100]:
                for source in ("auto", first.src_lang):
                    t = time.perf_counter()
                    c.post("/translate", json={"q": line, "source": source,
                                               "target": first.tgt_lang}).raise_for_status()
                    times["auto" if source == "auto" else "given"].append(
                        time.perf_counter() - t)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(120)
    auto, given = (statistics.median(times[k]) for k in ("auto", "given"))
    print(f"lone client, 100 requests each, interleaved: source auto {auto * 1000:.1f} ms, "
          f"given {given * 1000:.1f} ms (median): {(auto - given) * 1000:+.1f} ms")


def _refill(a: argparse.Namespace, lines: list[str]) -> None:
    """32 one-sentence clients on a refilling server against one of whole passes,
    alternating, twice each."""
    rows: dict[str, list[dict]] = {"refill": [], "whole": []}
    for _ in range(2):
        for label, flag in (("whole", "--no-refill"), ("refill", "--refill")):
            proc, url = _start(a.run, a.beam, flag)
            try:
                r = _clients(url, lines, 32, seconds=a.seconds)
            finally:
                proc.send_signal(signal.SIGTERM)
                proc.wait(120)
            rows[label].append(r)
            print(f"{label}: {r['requests']} requests, {r['failed']} failed, "
                  f"{r['sent/s']:.1f} sentences/s, p50 {r['p50'] * 1000:.0f} ms, p50 under 10 "
                  f"words {r['p50 short'] * 1000:.0f} ms, p95 {r['p95'] * 1000:.0f} ms "
                  f"(load {os.getloadavg()[0]:.2f})", flush=True)
    mean = {k: {m: statistics.mean(r[m] for r in v) for m in ("sent/s", "p50", "p50 short")}
            for k, v in rows.items()}
    w, r = mean["whole"], mean["refill"]
    print(f"32 clients, mean of 2: refill {r['sent/s']:.1f} sentences/s, whole passes "
          f"{w['sent/s']:.1f}: {r['sent/s'] / w['sent/s']:.2f}x; p50 {r['p50'] * 1000:.0f} "
          f"against {w['p50'] * 1000:.0f} ms; under 10 words {r['p50 short'] * 1000:.0f} "
          f"against {w['p50 short'] * 1000:.0f} ms")


def main() -> None:
    a = _args()
    lines = _test2016(a.mirror)
    print(f"# {time.strftime('%Y-%m-%d %H:%M %Z')}, {os.cpu_count()} cores, load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}; run {a.run}, beam {a.beam}")
    if a.refill:
        _refill(a, lines)
        print(f"# load average at the end {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        return
    if a.second is not None:
        _two_models(a, lines)
        print(f"# load average at the end {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        return
    tr = mtkit.load(a.run, beam_size=a.beam)
    proc, url = _start(a.run, a.beam)
    try:
        _check_outputs(tr, url, a.run, lines[:200])
        base1 = _baseline(tr, lines)
        print(f"API baseline (before): {base1[0]:.1f} sentences/s batch, "
              f"{base1[1] * 1000:.0f} ms for one sentence (median), {base1[2]:.1f} "
              "sentences/s in calls of 32")
        rows = [_clients(url, lines, n, seconds=a.seconds) for n in (1, 8)]
        rows.append(_clients(url, lines, 32, seconds=a.load_seconds))
        base2 = _baseline(tr, lines)
        print(f"API baseline (after): {base2[0]:.1f} sentences/s batch, "
              f"{base2[1] * 1000:.0f} ms for one sentence (median), {base2[2]:.1f} "
              "sentences/s in calls of 32")
        batch, one, of32 = ((x + y) / 2 for x, y in zip(base1, base2, strict=True))
        print("| clients | requests | failed | sentences/s | x batch | p50 ms | p95 ms | "
              "p99 ms |\n|---|---|---|---|---|---|---|---|")
        for r in rows:
            print(f"| {r['clients']} | {r['requests']} | {r['failed']} | {r['sent/s']:.1f} | "
                  f"{r['sent/s'] / batch:.2f} | {r['p50'] * 1000:.0f} | {r['p95'] * 1000:.0f} |"
                  f" {r['p99'] * 1000:.0f} |")
        print(f"lone request p50 / API one-sentence time: {rows[0]['p50'] / one:.2f}")
        print(f"32 clients / the API in calls of 32 (their ceiling): "
              f"{rows[2]['sent/s'] / of32:.2f}; that ceiling / batch: {of32 / batch:.2f}")
        rss: dict[str, float] = {}

        def note(n: int) -> None:
            if n == min(1000, a.requests // 2):
                rss["1k"] = _rss_mb(proc.pid)

        rss["start"] = _rss_mb(proc.pid)
        mem = _clients(url, lines, 32, requests=a.requests, on_count=note)
        rss["end"] = _rss_mb(proc.pid)
        print(f"RSS: {rss['start']:.0f} MB before, {rss['1k']:.0f} MB after 1,000 requests, "
              f"{rss['end']:.0f} MB after {mem['requests']:,} ({mem['failed']} failed): "
              f"{(rss['end'] / rss['1k'] - 1) * 100:+.1f}% from 1,000 to the last")
    finally:
        proc.send_signal(signal.SIGTERM)
        print(f"server exit status {proc.wait(120)}")
    print(f"# load average at the end {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
