"""Clients that never finish their request (issue 47): N sockets each sending half of a
request's headers, against `mtkit serve RUN`: with a read deadline past the bench's end (as
uvicorn alone: nothing times them out), with `--read-timeout T`, and with no deadline but
`--max-connections CAP`, interleaved. Prints, for each, the server's open descriptors before
the clients, with them, and T + 2 s later, and the time a normal request takes while they are
held (under the cap it is refused: the cap holds for everyone).

    python bench/serve_slow_clients.py RUN [--clients 1000] [--read-timeout 2] [--cap 100]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path


def descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def start(run: Path, read_timeout: int, connections: int) -> tuple[subprocess.Popen, int]:
    proc = subprocess.Popen([sys.executable, "-m", "mtkit", "serve", str(run), "--port", "0",
                             "--threads", "1", "--read-timeout", str(read_timeout),
                             "--max-connections", str(connections)],
                            stderr=subprocess.PIPE, text=True)
    for line in proc.stderr:
        if m := re.search(r"at http://127\.0\.0\.1:(\d+)/", line):
            port = int(m.group(1))
            break
    else:
        raise SystemExit("the server did not start")
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/ready") as r:
                if r.status == 200:
                    return proc, port
        except OSError:
            time.sleep(0.1)


def normal_request_ms(port: int) -> float | str:
    body = json.dumps({"text": "a b c"}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/translate", data=body,
                                 headers={"Content-Type": "application/json"})
    t = time.perf_counter()
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            r.read()
    except urllib.error.HTTPError as e:
        return f"refused ({e.code})"
    return (time.perf_counter() - t) * 1000


def one(run: Path, read_timeout: int, cap: int, clients: int, wait: float
        ) -> dict[str, float | str]:
    proc, port = start(run, read_timeout, cap)
    try:
        base = descriptors(proc.pid)
        socks = []
        for _ in range(clients):
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall(b"POST /v1/translate HTTP/1.1\r\nHost: x\r\n")
            socks.append(s)
        time.sleep(1)
        held = descriptors(proc.pid)
        ms = normal_request_ms(port)
        time.sleep(wait)
        after = descriptors(proc.pid)
        for s in socks:
            s.close()
        return {"base": base, "held": held, "after": after, "request_ms": ms}
    finally:
        proc.terminate()
        proc.wait(60)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("run", type=Path)
    ap.add_argument("--clients", type=int, default=1000)
    ap.add_argument("--read-timeout", type=int, default=2)
    ap.add_argument("--cap", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    print(f"load average at start: {os.getloadavg()[0]:.2f}")
    never = 3600  # past the bench's end: what uvicorn alone does
    room = args.clients + 100
    configs = [("no deadline", never, room),
               (f"--read-timeout {args.read_timeout}", args.read_timeout, room),
               (f"--max-connections {args.cap}", never, args.cap)]
    for r in range(args.rounds):
        for label, timeout, cap in configs:
            got = one(args.run, timeout, cap, args.clients, args.read_timeout + 2)
            ms = got["request_ms"]
            shown = f"{ms:.0f} ms" if isinstance(ms, float) else ms
            print(f"round {r + 1} {label:>22}: descriptors {got['base']} before, "
                  f"{got['held']} with {args.clients} clients, {got['after']} "
                  f"{args.read_timeout + 2} s later; a normal request {shown}")
    print(f"load average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
