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
    return ap.parse_args()


def _test2016(mirror: Path) -> list[str]:
    with gzip.open(mirror / "test_2016_flickr.en.gz", "rt", encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def _start(run: Path, beam: int) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-m", "mtkit", "serve", str(run), "--port", "0",
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
    while httpx.get(url + "ready").status_code != 200:
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
             requests: int | None = None, on_count=None) -> dict:
    """`clients` threads, each sending one sentence per request until `seconds` pass or
    `requests` are sent in all."""
    lock, latencies, failed, sent = threading.Lock(), [], [0], [0]
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
                    ok = c.post("/v1/translate", json={"text": lines[i % len(lines)]}
                                ).status_code == 200
                except httpx.HTTPError:
                    ok = False
                took = time.perf_counter() - t
                with lock:
                    latencies.append(took)
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
            "p95": q[94], "p99": q[98]}


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


def main() -> None:
    a = _args()
    lines = _test2016(a.mirror)
    print(f"# {time.strftime('%Y-%m-%d %H:%M %Z')}, {os.cpu_count()} cores, load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}; run {a.run}, beam {a.beam}")
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
