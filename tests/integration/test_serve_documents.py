"""The server's documents: LibreTranslate's `format: "html"` and `POST /translate_file`
(upload, download, limits and type errors as JSON), on the trained toy model."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import pytest

import mtkit
from tests.helpers import Server, serving

httpx = pytest.importorskip("httpx", reason="the serve tests need httpx (make install)")
pytest.importorskip("fastapi", reason="mtkit serve needs the serve extra (make install)")

pytestmark = pytest.mark.usefixtures("one_thread")

PAGE = ("<html><body><p>pel <b>nel</b> dar <code>x &lt; y</code></p>\n<p>vin lem ba</p>"
        "</body></html>\n")


@pytest.fixture(scope="module")
def server(toy_model: Path) -> Iterator[Server]:
    with serving(toy_model, "--max-body", "100000") as s:  # a docx is about 37 kB
        yield s


@pytest.fixture(scope="module")
def model(toy_model: Path) -> mtkit.TranslationModel:
    return mtkit.load(toy_model, device="cpu", threads=1)


def test_format_html_equals_the_api_document_call(server, model):
    want = model.translate_document(PAGE, "html").text
    res = server.post("/translate", {"q": PAGE, "source": "src", "target": "tgt",
                                     "format": "html"})
    assert res.status_code == 200, res.text
    assert res.json() == {"translatedText": want}
    assert "<code>x &lt; y</code>" in want and "<b>" in want
    form = server.post("/translate", data={"q": [PAGE, "<p>wi ke</p>"], "source": "src",
                                           "target": "tgt", "format": "html"})
    assert form.json()["translatedText"] == [want, model.translate_document(
        "<p>wi ke</p>", "html").text]


def test_translate_file_upload_and_download(server, model):
    srt = ("1\n00:00:01,000 --> 00:00:02,000\npel nel dar\n\n"
           "2\n00:00:03,000 --> 00:00:04,000\nvin lem ba\n")
    for name, data, fmt in (("page.html", PAGE.encode(), "html"),
                            ("talk.srt", srt.encode(), "srt")):
        res = server.client.post("/translate_file", files={"file": (name, data)},
                                 data={"source": "src", "target": "tgt"})
        assert res.status_code == 200, res.text
        url = res.json()["translatedFileUrl"]
        assert url.startswith(server.url) and url.endswith("/" + name)
        got = httpx.get(url)
        assert got.status_code == 200
        assert got.content == model.translate_document(data, fmt).data
        assert name in got.headers["content-disposition"]


def test_translate_file_docx(server, model):
    docx = pytest.importorskip("docx")
    doc = docx.Document()
    doc.add_paragraph("pel nel dar")
    buf = io.BytesIO()
    doc.save(buf)
    res = server.client.post("/translate_file", files={"file": ("r.docx", buf.getvalue())},
                             data={"source": "src", "target": "tgt"})
    out = docx.Document(io.BytesIO(httpx.get(res.json()["translatedFileUrl"]).content))
    assert out.paragraphs[0].text == model.translate("pel nel dar")


@pytest.mark.parametrize("files, data, status, message", [
    ({"file": ("notes.pdf", b"%PDF")}, {"target": "tgt"}, 415,
     "file notes.pdf: cannot tell the format of notes.pdf by its extension"),
    ({"file": ("a.po", b"msgid \"x\nbroken")}, {"target": "tgt"}, 400,
     "not a PO catalogue"),
    ({"file": ("a.html", b"   ")}, {"target": "tgt"}, 400, "file a.html: it is empty"),
    ({"other": ("a.html", b"<p>x</p>")}, {"target": "tgt"}, 422, "file: a file is needed"),
    ({"file": ("a.html", b"<p>x</p>")}, {"target": "de"}, 400,
     "auto -> de: this server translates src -> tgt"),
    ({"file": ("a.html", b"<p>" + b"x " * 50000 + b"</p>")}, {"target": "tgt"}, 413,
     "the request body is over 100000 bytes"),
])
def test_translate_file_errors_are_json(server, files, data, status, message):
    res = server.client.post("/translate_file", files=files, data=data)
    assert res.status_code == status, res.text
    assert message in res.json()["error"]


def test_translate_file_needs_an_upload_and_unknown_downloads_are_404(server):
    res = server.post("/translate_file", {"file": "x"})
    assert res.status_code == 400 and "multipart/form-data" in res.json()["error"]
    res = server.client.get("/download_file/nothing/page.html")
    assert res.status_code == 404 and "no such translated file" in res.json()["error"]
