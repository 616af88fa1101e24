"""`mtkit serve`'s rough edges from the feature audit (issue 47, items 9 and 10): the API docs
without network, connections that never finish their request, 413s and 500s in the log and
/metrics, a world-readable token file, LibreTranslate's key checked before its body, ports out
of range, and the messages of NaN and of an empty body. A real process on a loopback port,
called over HTTP (and raw sockets)."""

from __future__ import annotations

import json
import re
import select
import shutil
import socket
import subprocess
import sys
import time
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.helpers import Server, headless_chromium, serving

httpx = pytest.importorskip("httpx", reason="the serve tests need httpx (make install)")
pytest.importorskip("fastapi", reason="mtkit serve needs the serve extra (make install)")

pytestmark = pytest.mark.usefixtures("one_thread")

# The longest the tests wait for the server to close a connection it should close after a
# second (--read-timeout 1): a bound for a stalled server, not a measure of speed.
CLOSED_WITHIN = 30


class _Assets(HTMLParser):
    """Every URL a page loads: script and img sources, stylesheet and icon links, and the
    URLs its inline scripts name in quotes."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag in ("script", "img") and a.get("src"):
            self.urls.append(a["src"])
        if tag == "link" and a.get("href"):
            self.urls.append(a["href"])
        self._in_script = tag == "script"

    def handle_endtag(self, tag: str) -> None:
        self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_script:
            self.urls += re.findall(r"""['"]((?:https?:)?//[^'"]+|/[^'"\s]+\.(?:js|css|png))['"]""",
                                    data)


def _assets(server: Server, path: str) -> list[str]:
    page = server.client.get(path)
    assert page.status_code == 200, page.text
    parser = _Assets()
    parser.feed(page.text)
    return parser.urls


@pytest.fixture(scope="module")
def server(toy_model: Path):
    with serving(toy_model, "--max-body", "5000") as s:
        yield s


def test_the_api_docs_load_nothing_from_elsewhere(server):
    """/docs loaded Swagger UI from a CDN: blank without network. Every asset of /docs and
    /redoc is now the server's own, and is there."""
    for page in ("/docs", "/redoc"):
        urls = _assets(server, page)
        assert any(u.endswith(".js") for u in urls), (page, urls)
        for url in urls:
            parts = urlsplit(url)
            assert not parts.netloc and url.startswith("/"), (page, url)
            asset = server.client.get(url)
            assert asset.status_code == 200 and asset.content, (page, url)
    openapi = server.client.get("/openapi.json").json()
    assert "/v1/translate" in openapi["paths"]


@pytest.mark.skipif(not ((shutil.which("chromium") or shutil.which("chromium-browser"))
                         and shutil.which("chromedriver")),
                    reason="no headless browser: apt-get install chromium chromium-driver")
def test_the_api_docs_render_in_a_browser_without_network(server):
    """Swagger UI and ReDoc draw the API in headless chromium, which reaches nothing but
    the server here (ReDoc's footer logo, from its own CDN, is the one thing that fails): the
    operations of /openapi.json are on both pages."""
    pytest.importorskip("selenium", reason="selenium is not installed (make install)")
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    def shown(driver) -> str:  # Swagger UI breaks a path with zero-width spaces
        return driver.find_element(By.TAG_NAME, "body").text.replace("\u200b", "")

    with headless_chromium() as driver:
        # Swagger UI lists the paths, ReDoc the operations' names
        for page, first, last in (("/docs", "/v1/translate", "/metrics"),
                                  ("/redoc", "V1 Translate", "Prometheus")):
            driver.get(server.url.rstrip("/") + page)
            WebDriverWait(driver, 30).until(lambda d, first=first: first in shown(d))
            assert last in shown(driver), page


def _raw(server: Server) -> socket.socket:
    host, port = urlsplit(server.url).hostname, urlsplit(server.url).port
    sock = socket.create_connection((host, port))
    sock.settimeout(CLOSED_WITHIN)
    return sock


def _until_closed(sock: socket.socket) -> bytes:
    """What the server sends until it closes the connection (a socket timeout if it does not
    within CLOSED_WITHIN seconds)."""
    got = b""
    while chunk := sock.recv(4096):
        got += chunk
    return got


def test_requests_never_finished_are_timed_out(toy_model):
    """Connections that never finished their headers or body were held for ever (1,000 such
    sockets, 1,007 descriptors). With --read-timeout 1 the server closes each, a request
    whose headers came with a 408, and answers others meanwhile and afterwards."""
    with serving(toy_model, "--read-timeout", "1") as s:
        silent = _raw(s)
        half_headers = _raw(s)
        half_headers.sendall(b"POST /v1/translate HTTP/1.1\r\nHost: x\r\n")
        half_body = _raw(s)
        half_body.sendall(b"POST /v1/translate HTTP/1.1\r\nHost: x\r\nContent-Type: "
                          b"application/json\r\nContent-Length: 100\r\n\r\n{\"text\": ")
        assert s.client.get("/health").status_code == 200
        assert _until_closed(silent) == b""
        assert _until_closed(half_headers).startswith(b"HTTP/1.1 408 ")
        answer = _until_closed(half_body)
        assert answer.startswith(b"HTTP/1.1 408 "), answer
        assert b"--read-timeout" in answer.partition(b"\r\n\r\n")[2], answer
        assert s.post("/v1/translate", {"text": "sa gu"}).status_code == 200
    log = "".join(s.log)
    assert "POST /v1/translate 408" in log and "Traceback" not in log, log


def test_connections_past_the_cap_are_refused(toy_model):
    """--max-connections 4: of 10 connections open at once, at least 6 get a 503 and are
    closed at once; once they are gone the server answers again. (The read deadline is past
    the test's end, so that only the cap closes a connection.)"""
    with serving(toy_model, "--max-connections", "4", "--read-timeout", "600") as s:
        socks = [_raw(s) for _ in range(10)]
        refused: dict[socket.socket, bytes] = {}
        deadline = time.monotonic() + CLOSED_WITHIN
        while len(refused) < 6 and time.monotonic() < deadline:
            readable, _, _ = select.select([x for x in socks if x not in refused], [], [], 1)
            for sock in readable:
                refused[sock] = _until_closed(sock)
        assert len(refused) >= 6, len(refused)
        assert all(r.startswith(b"HTTP/1.1 503 ") for r in refused.values()), refused
        for sock in socks:
            sock.close()
        deadline = time.monotonic() + CLOSED_WITHIN
        while True:  # the server hears of the closed sockets in its own time
            try:
                if s.client.get("/health").status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline
            time.sleep(0.1)


def _metric(server: Server, path: str, status: int) -> float:
    text = server.client.get("/metrics").text
    m = re.search(rf'mtkit_requests_total\{{path="{re.escape(path)}",status="{status}"\}} (\S+)',
                  text)
    return float(m.group(1)) if m else 0.0


def test_a_413_is_logged_and_counted(server):
    before = _metric(server, "/v1/translate", 413)
    big = server.post("/v1/translate", {"text": "a " * 4000})
    assert big.status_code == 413, big.text
    assert _metric(server, "/v1/translate", 413) == before + 1
    assert server.logged(r"mtkit: POST /v1/translate 413 0 sentences \S+ ms"), server.log[-5:]


# `mtkit serve` with one more route, whose bug (an exception no handler takes) is what a
# 500 answers: the real server and its middleware, a fault put where no request can put one.
WITH_A_BUG = """
import mtkit.serve.app as served_app

made = served_app.create_app


def create_app(models, settings):
    app = made(models, settings)

    @app.get("/v1/bug")
    async def bug():
        raise RuntimeError("a bug\\nin two lines")

    return app


served_app.create_app = create_app
from mtkit.cli import main

main()
"""


def test_a_500_is_one_json_line_logged_and_counted(toy_model):
    """An exception no route handled was a plain-text 500, a traceback in the log and no
    request line or count. Now: JSON, one line in the log, a count in /metrics."""
    with serving(toy_model, launch=("-c", WITH_A_BUG)) as s:
        res = s.client.get("/v1/bug")
        assert res.status_code == 500, res.text
        assert res.json() == {"error": "internal error; the server's log says which"}
        assert _metric(s, "/v1/bug", 500) == 1
        assert s.client.get("/health").status_code == 200
    log = "".join(s.log)
    assert re.search(r"mtkit: GET /v1/bug 500 0 sentences \S+ ms \(RuntimeError: a bug in "
                     r"two lines\)\n", log), log
    assert "Traceback" not in log, log


def _start(*args: object, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mtkit", "serve", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout)


def test_a_world_readable_token_file_is_warned_about(toy_model, tmp_path):
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    token.chmod(0o644)
    with serving(toy_model, "--token-file", token) as s:
        pass
    warned = [line for line in s.log if "--token-file" in line]
    assert len(warned) == 1 and "0644 are too open" in warned[0], s.log
    token.chmod(0o600)
    with serving(toy_model, "--token-file", token) as s:
        pass
    assert not any("--token-file" in line for line in s.log), s.log


def test_libretranslate_checks_the_key_before_the_body(toy_model, tmp_path):
    """LibreTranslate's access check runs before its route reads the fields: a wrong api_key
    is 403 `Invalid API key` whatever else the body holds; the right one with a bad body is
    the body's own error."""
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    token.chmod(0o600)
    with serving(toy_model, "--token-file", token) as s:
        for path, body in [("/translate", {"q": 3, "api_key": "wrong"}),
                           ("/translate", {"api_key": "wrong"}),
                           ("/detect", {"q": ["a"], "api_key": "wrong"}),
                           ("/translate", {"q": "sa", "target": "tgt", "api_key": 5})]:
            res = s.post(path, body)
            assert (res.status_code, res.json()) == (403, {"error": "Invalid API key"}), (
                path, body, res.text)
        form = s.post("/translate", data={"q": "sa", "alternatives": "x", "api_key": "no"})
        assert form.status_code == 403, form.text
        right = s.post("/translate", {"q": 3, "api_key": "s3cret"})
        assert right.status_code == 422 and "q" in right.json()["error"], right.text
        for body in ({"q": 3}, {"q": 3, "api_key": ""}):
            none = s.post("/translate", body)
            assert none.status_code == 401, (body, none.text)
        bearer = s.post("/translate", {"q": 3}, headers={"Authorization": "Bearer s3cret"})
        assert bearer.status_code == 422, bearer.text


@pytest.mark.parametrize("port", ["70000", "65536", "-1"])
def test_a_port_out_of_range_is_refused(toy_model, port):
    proc = _start(toy_model, "--port", port)
    assert proc.returncode == 2, proc.stderr
    assert "--port" in proc.stderr and "65535" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and "serving" not in proc.stderr, proc.stderr


def test_nan_and_an_empty_body_name_the_problem(server):
    """NaN was refused as 'less than or equal to 10', an empty body as 'Field required'
    without the field."""
    for path, raw, status, message in [
            ("/v1/translate", b'{"text": "a", "alpha": NaN}', 422,
             "alpha: Input should be a finite number"),
            ("/v1/translate", b'{"text": "a", "top_p": Infinity}', 422,
             "top_p: Input should be a finite number"),
            ("/translate", b'{"q": "a", "target": "tgt", "alternatives": NaN}', 422,
             "alternatives: Input should be a finite number"),
            ("/v1/translate", b"", 400, "the body is empty; expected a JSON object with text"),
            ("/v1/translate", b"{}", 422, "text: Field required"),
            ("/translate", b"", 400, "the body is empty; expected a JSON object with q"),
            ("/translate", b"{}", 422, "q: Field required; target: Field required"),
            ("/detect", b"", 400, "the body is empty; expected a JSON object with q"),
            ("/detect", b"{}", 422, "q: Field required")]:
        res = server.client.post(path, content=raw, headers={"content-type": "application/json"})
        assert res.status_code == status, (path, raw, res.text)
        assert res.json() == {"error": message}, (path, raw, res.text)
        assert json.dumps(res.json()).count("\\n") == 0
