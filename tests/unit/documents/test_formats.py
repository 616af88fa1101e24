"""Each format read and written back on made-up documents with a model-free translator: the
output parses, every tag, block, cue or unit is there in order with the same attributes and
timings, protected spans are byte-identical, and malformed input gives a useful result."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest

from mtkit.documents.blocks import translate_blocks
from mtkit.documents.formats import format_for
from mtkit.documents.html import TEXT_ATTRIBUTES, HtmlDocument
from mtkit.documents.markdown import MarkdownDocument
from mtkit.documents.po import PoDocument
from mtkit.documents.subtitles import SubtitleDocument
from mtkit.documents.text import TextDocument
from mtkit.errors import ConfigError, DataError
from tests.unit.documents.fake import monotone, reverse

PAGE = """<!DOCTYPE html>
<html lang="en"><head><title>My page</title>
<style>p { color: red } /* <b>not text</b> */</style></head>
<body>
<h1 id="top">Hello <em>world</em></h1>
<p class="intro">Tom &amp; <b>Jerry</b> are <a href="https://x.org/?a=1&amp;b=2" title="T">good
 friends</a>. Run <code>make&nbsp;all</code> now.<br/>See https://example.org/page too.</p>
<pre>keep   this <b>as is</b></pre>
<div translate="no">Do not <b>touch</b> this.</div>
<p>A <span class="notranslate">BrandName</span> sells <img src="a.png" alt="x"> cars.</p>
<ul><li>one item</li><li>two <i>items</i></li></ul>
<script>if (a < b) { document.write("<p>x</p>"); }</script>
</body></html>
"""


class _Tags(HTMLParser):
    def __init__(self, text):
        super().__init__()
        self.tags = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, attrs))

    def handle_endtag(self, tag):
        self.tags.append(("/" + tag, None))


def _translated(doc, translate=reverse):
    return doc.render(translate_blocks(doc.blocks(), translate))


def _but_text(tags):
    """Tags with the values of their text attributes (alt, title, ...) left out."""
    return sorted(str((t, a and [(k, None if k in TEXT_ATTRIBUTES else v) for k, v in a]))
                  for t, a in tags)


def test_html_keeps_every_tag_attribute_and_untouched_part():
    out = _translated(HtmlDocument(PAGE))
    assert _but_text(_Tags(out).tags) == _but_text(_Tags(PAGE).tags)
    assert '<img src="a.png" alt="X">' in out  # text for people: translated
    for kept in ("<style>p { color: red } /* <b>not text</b> */</style>",
                 "<pre>keep   this <b>as is</b></pre>",
                 "<div translate=\"no\">Do not <b>touch</b> this.</div>",
                 "<span class=\"notranslate\">BrandName</span>", "<code>make&nbsp;all</code>",
                 "https://example.org/page", "<script>if (a < b) { document.write(\"<p>x</p>\"); }"
                 "</script>", '<a href="https://x.org/?a=1&amp;b=2" title="T">',
                 "<!DOCTYPE html>\n<html lang=\"en\"><head><title>"):
        assert kept in out
    # the text of block elements is translated, entities undone and redone
    assert "<title>PAGE MY</title>" in out
    assert "<h1 id=\"top\"><em>WORLD</em> HELLO</h1>" in out
    assert "JERRY</b> &amp; TOM" in out
    assert "<li>ITEM ONE</li>" in out


def test_html_text_attributes_are_translated_in_their_own_quotes():
    page = ("<p data-x=' title=no' title=Hello>An <img alt=\"a red car\" src=car.png/> and "
            "<a href=\"u\" TITLE='the &quot;link&quot; it&#39;s'>a link</a>.</p>"
            "<div aria-label=\"main menu\" class=menu>text</div>"
            "<code title=\"kept\">x</code><p translate=no title=\"kept too\">y</p>"
            "<input placeholder=\"your name\" value=\"not text\"><img alt=\"\">")
    out = _translated(HtmlDocument(page))
    for want in ("<p data-x=' title=no' title=\"HELLO\">", '<img alt="CAR RED A" src=car.png/>',
                 "<a href=\"u\" TITLE='IT&#39;S \"LINK\" THE'>", '<div aria-label="MENU MAIN" '
                 'class=menu>', '<code title="kept">x</code>', '<p translate=no title="kept '
                 'too">y</p>', '<input placeholder="NAME YOUR" value="not text">',
                 '<img alt="">'):
        assert want in out, out
    assert _Tags(out).tags[0][1] == [("data-x", " title=no"), ("title", "HELLO")]


def test_html_text_between_tags_is_the_translation_of_the_plain_sentences():
    doc = HtmlDocument(PAGE)
    out = _translated(doc, monotone)
    para = re.search(r'<p class="intro">(.*?)</p>', out, re.S).group(1)
    plain = re.sub(r"<[^>]+>|https://example.org/page|make&nbsp;all", " ", para)
    want = "TOM &amp; JERRY ARE GOOD FRIENDS. RUN NOW. SEE TOO."
    assert plain.split() == want.split()


def test_html_untranslated_document_is_byte_identical():
    doc = HtmlDocument(PAGE)
    plain = PAGE.replace("&amp;", "&").replace("&nbsp;", " ")
    assert doc.render(doc.blocks()).replace("&amp;", "&").replace("&nbsp;", " ") == plain


@pytest.mark.parametrize("page", [
    "<p>unclosed <i>italic\n<p>stray </b> close</p><div>a<b>b</div>c</b> d",
    "<p>x &amp", "<p", "<<>>", "<p>a <b c='", "text only, no markup at all",
])
def test_malformed_html_gives_a_result_with_every_tag(page):
    out = _translated(HtmlDocument(page), monotone)
    assert [t for t, _ in _Tags(out).tags] == [t for t, _ in _Tags(page).tags]


MD = """# Title *here* #

A **bold** and _it_ text with `co de` and [a link](https://x.org "T") and ![img](a.png).
Second line \\* escaped <b>html</b> &amp; more.\\
Hard broken line.

> quoted *text*
> more

- item one
- item **two**
  continued

| a | b |
|---|---|
| cell *x* | y |

```py
code *not* text
```

Ref [link][r] and <https://auto.org>. Unclosed **bold here.

[r]: https://ref.org
"""


def _md_blocks(text):
    from markdown_it import MarkdownIt

    tokens = MarkdownIt("commonmark").enable("table").parse(text)
    return [t.type for t in tokens], [(c.type, c.attrs) for t in tokens if t.children
                                      for c in t.children if c.type not in ("text", "softbreak")]


def test_markdown_keeps_its_block_structure_and_inline_markup():
    doc = MarkdownDocument(MD)
    out = _translated(doc)
    assert doc.kept == 0
    blocks, inline = _md_blocks(out)
    want_blocks, want_inline = _md_blocks(MD)
    assert blocks == want_blocks
    assert sorted(map(str, inline)) == sorted(map(str, want_inline))
    for kept in ("`co de`", "![img](a.png)", "<https://auto.org>", "```py\ncode *not* text\n```",
                 "[r]: https://ref.org", '](https://x.org "T")'):
        assert kept in out
    assert out.startswith("# *HERE* TITLE #\n")
    assert "| *X* CELL | Y |" in out
    assert "- CONTINUED **TWO** ITEM\n" in out
    assert "\\*\\*BOLD UNCLOSED" in out  # unclosed emphasis is text, escaped as such


def test_markdown_front_matter_kept_and_html_blocks_translated_as_html():
    front = "---\ntitle: Hello world\ntags: [a, b]\n---\n"
    body = ("\n# Head line\n\n<div class=\"box\">\n<p>Some <b>html</b> text.</p>\n"
            "<img alt=\"a cat\" src=\"c.png\">\n<script>x < y</script>\n</div>\n\n"
            "Para *one* two.\n")
    out = _translated(MarkdownDocument(front + body))
    assert out == (front + "\n# LINE HEAD\n\n<div class=\"box\">\n<p>TEXT. <b>HTML</b> "
                   "SOME</p>\n<img alt=\"CAT A\" src=\"c.png\">\n<script>x < y</script>\n"
                   "</div>\n\nTWO. *ONE* PARA\n")
    toml = "+++\ntitle = 'x'\n+++\nText here.\n"
    assert _translated(MarkdownDocument(toml)) == "+++\ntitle = 'x'\n+++\nHERE. TEXT\n"
    # an unclosed opening rule is no front matter: CommonMark's rule, then the text
    assert _translated(MarkdownDocument("---\nSome text\n")) == "---\nTEXT SOME\n"


def test_markdown_text_is_escaped_where_it_would_read_as_markup():
    def starred(sentences):
        return [("- 1. *" + s, []) for s in sentences]

    out = _translated(MarkdownDocument("plain words\n"), starred)
    assert out == "\\- 1. \\*plain words\n"


SRT = """1
00:00:01,000 --> 00:00:03,000
The quick brown fox
jumps over the

2
00:00:03,500 --> 00:00:05,000
<i>lazy dog.</i> Then it

3
00:00:05,000 --> 00:00:0x,000
slept {\\an8}well.

4
no timing here

5
00:00:07,000 --> 00:00:08,000
"""


def test_srt_keeps_numbers_timings_and_lines_and_shares_sentences_out():
    doc = SubtitleDocument(SRT, vtt=False)
    out = _translated(doc, monotone)
    assert doc.problems == [
        "line 11: timing '00:00:05,000 --> 00:00:0x,000' is not well formed; kept as it was",
        "line 14: no timing line ('-->'); kept as it was"]
    src_lines, out_lines = SRT.splitlines(), out.splitlines()
    for k, line in enumerate(src_lines):
        if "-->" in line or re.fullmatch(r"\d+", line) or not line or "timing" in line:
            assert out_lines[k] == line
    assert out_lines[2:4] == ["THE QUICK BROWN", "FOX JUMPS OVER THE"]
    assert "<i>LAZY DOG.</i> THEN IT" in out and "SLEPT {\\an8}WELL." in out


def test_a_sentence_spanning_cues_is_translated_whole():
    seen = []

    def recording(sentences):
        seen.extend(sentences)
        return reverse(sentences)

    doc = SubtitleDocument(SRT, vtt=False)
    _translated(doc, recording)
    assert seen[0] == "The quick brown fox jumps over the lazy dog."


VTT = """WEBVTT - title

NOTE a note
here

STYLE
::cue { color: red }

intro
00:00.000 --> 00:02.000 align:start line:0
<v Bob>Hello &amp; welcome to
the show.

00:02.000 --> 00:04.000
<c.loud>Goodbye</c> now.
"""


def test_webvtt_keeps_header_notes_styles_and_settings():
    out = _translated(SubtitleDocument(VTT, vtt=True), monotone)
    head = VTT.split("intro")[0]
    assert out.startswith(head + "intro\n00:00.000 --> 00:02.000 align:start line:0\n")
    assert "<v Bob>HELLO &amp;" in out and "<c.loud>GOODBYE</c> NOW." in out


PO = r'''msgid ""
msgstr ""
"Content-Type: text/plain; charset=UTF-8\n"
"Plural-Forms: nplurals=3; plural=(n==1 ? 0 : n<5 ? 1 : 2);\n"

#: a.py:1
msgid "Hello %(name)s, you have <b>new</b> mail."
msgstr ""

msgid "Already done"
msgstr "Schon fertig"

msgid "One file"
msgid_plural "%d files were deleted.\nReally {count}."
msgstr[0] ""
msgstr[1] ""
msgstr[2] ""

#~ msgid "old"
#~ msgstr ""
'''


def test_po_fills_untranslated_units_flags_them_and_keeps_placeholders():
    import polib

    out = polib.pofile(_translated(PoDocument(PO), monotone))
    by_id = {e.msgid: e for e in out}
    hello = by_id["Hello %(name)s, you have <b>new</b> mail."]
    assert hello.msgstr == "HELLO %(name)s, YOU HAVE <b>NEW</b> MAIL." and "fuzzy" in hello.flags
    assert by_id["Already done"].msgstr == "Schon fertig"
    assert "fuzzy" not in by_id["Already done"].flags
    plural = by_id["One file"]
    assert plural.msgstr_plural[0] == "ONE FILE"
    assert plural.msgstr_plural[1] == plural.msgstr_plural[2] == (
        "%d FILES WERE DELETED.\nREALLY {count}.")
    assert [e.msgid for e in out.obsolete_entries()] == ["old"]


def test_a_broken_catalogue_is_one_line():
    with pytest.raises(DataError, match="not a PO catalogue"):
        PoDocument('msgid "x\nbroken')


def test_paragraphs_keep_blank_lines_and_lines_keep_line_breaks():
    text = "One two. Three four.\n\n\nFive six\nseven.\n"
    out = _translated(TextDocument(text, paragraphs=True), monotone)
    assert out == "ONE TWO. THREE FOUR.\n\n\nFIVE SIX SEVEN.\n"
    out = _translated(TextDocument(text, paragraphs=False), monotone)
    assert out == "ONE TWO. THREE FOUR.\n\n\nFIVE SIX\nSEVEN.\n"


def test_formats_by_extension_or_choice():
    assert format_for("page.HTML", None) == "html" and format_for("x.srt", "vtt") == "vtt"
    with pytest.raises(ConfigError, match="input_format: cannot tell the format of x.pdf"):
        format_for("x.pdf", None)
    with pytest.raises(ConfigError, match="invalid choice 'pdf'; expected one of lines"):
        format_for("x.txt", "pdf")
