"""Documents made at random from each format's pieces (seeded): every one gives a result or
one MtkitError, never another exception; HTML keeps every tag with its attributes, subtitles
every timing line."""

from __future__ import annotations

import random
from html.parser import HTMLParser

import pytest

from mtkit.documents.blocks import translate_blocks
from mtkit.documents.formats import open_document
from mtkit.documents.subtitles import _blocks
from mtkit.errors import MtkitError
from tests.unit.documents.fake import reverse

PIECES = {
    "html": ["<p>", "</p>", "<b>", "</b>", "<i>", "</i>", "<br>", "<a href='x'>", "</a>",
             "<code>", "</code>", "&amp;", "&", "<", ">", "<!--", "-->", "<script>",
             "</script>", " dog ", "runs. ", "The ", "\n", "<div translate=no>", "</div>",
             "<img src=x>", "http://x.org/a ", "<pre>", "</pre>", "<<", "</",
             "<p class=\"notranslate\">"],
    "markdown": ["# ", "**", "*", "_", "`", "```", "\n", "\n\n", "[", "](", ")", "![", "> ",
                 "- ", "1. ", "|", "---", "\\", "&amp;", "<b>", "</b>", " dog ", "runs. ",
                 "The ", "<http://x>", "  \n", "\t", "[r]: x\n"],
    "srt": ["1\n", "00:00:01,000 --> 00:00:02,000\n", "00:00:0x,000 --> 1\n", "\n", "-->",
            "dog runs. ", "<i>", "</i>", "{\\an8}", "The cat\n", "2\n", "\r\n"],
    "vtt": ["WEBVTT\n", "\n", "00:01.000 --> 00:02.000 align:start\n", "NOTE x\n", "STYLE\n",
            "<v Bob>", "<c.x>", "</c>", "&amp;", "dog runs. ", "The cat\n", "-->",
            "<00:01.500>"],
    "po": ['msgid ""\nmsgstr ""\n\n', 'msgid "The dog %s runs."\nmsgstr ""\n\n',
           'msgid "a"\nmsgid_plural "b {x}"\nmsgstr[0] ""\nmsgstr[1] ""\n\n', "#, fuzzy\n",
           'msgid "x\\ny <b>z</b>"\nmsgstr ""\n\n', '"', "\n", "msgstr", '#~ msgid "o"\n'],
    "xliff": ['<xliff version="1.2"><file><body>', '<trans-unit id="1"><source>',
              'The <g id="1">dog</g> runs', '<x id="2"/>', "</source>", "<target>",
              "</target>", "</trans-unit>", "</body></file></xliff>", "<", "&amp;", "&bad;"],
    "paragraphs": ["The dog. ", "\n", "\n\n", " ", "runs", "\r\n"],
}


class _Tags(HTMLParser):
    def __init__(self, text: str) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.feed(text)
        self.close()

    def handle_starttag(self, tag, attrs):
        self.tags.append(f"{tag} {attrs}")

    def handle_endtag(self, tag):
        self.tags.append("/" + tag)


def _timings(text: str) -> list[str]:
    lines = text.splitlines(keepends=True)
    return [next((lines[k] for k in (a, a + 1) if k < b and "-->" in lines[k]), "")
            for a, b in _blocks(lines)]


@pytest.mark.parametrize("fmt", sorted(PIECES))
def test_random_documents_give_a_result_or_one_line(fmt):
    rng = random.Random(fmt)
    for _ in range(150):
        text = "".join(rng.choice(PIECES[fmt]) for _ in range(rng.randint(0, 30)))
        try:
            doc = open_document(text.encode(), fmt)  # type: ignore[arg-type]
        except MtkitError as e:
            assert "\n" not in str(e)
            continue
        out = doc.render(translate_blocks(doc.blocks(), reverse))
        if fmt == "html":
            assert sorted(_Tags(out).tags) == sorted(_Tags(text).tags), text
        if fmt == "srt":
            assert [t for t in _timings(out) if t] == [t for t in _timings(text) if t], text
