"""Documents translated by the trained toy model (it reverses its made-up words): tags land
on the reversed words, the text between markup is the model's translation of the plain
sentence, and every format's structure survives."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
import torch

import mtkit
from mtkit.data.store import text_path
from mtkit.documents.formats import translate_document
from mtkit.errors import ConfigError
from mtkit.run import data_dir

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def model(toy_model: Path) -> mtkit.TranslationModel:
    return mtkit.load(toy_model, device="cpu", threads=1)


@pytest.fixture(scope="module")
def reversed_exactly(toy_model, model) -> list[str]:
    """Test sentences the model reverses with exactly the reversal's links."""
    src = text_path(data_dir(toy_model), "test", "src").read_text().splitlines()
    out = []
    for t in model.translate_full(src, align=True):
        n = len(t.source.split())
        want = " ".join(f"{i}-{n - 1 - i}" for i in range(n))
        if n >= 3 and t.text.split() == t.source.split()[::-1] and (
                " ".join(sorted(t.candidates[0].alignment.split(), key=lambda p: int(
                    p.split("-")[0]))) == want):
            out.append(t.source)
    assert len(out) >= 5, out
    return out[:8]


def _html(sentences: list[str], k: int) -> str:
    paras = []
    for s in sentences:
        words = s.split()
        words[k] = f'<b class="x">{words[k]}</b>'
        paras.append(f"<p>{' '.join(words)} <code>a &lt; b</code></p>")
    return "<html><body>\n" + "\n".join(paras) + "\n</body></html>\n"


def test_html_tags_land_on_the_aligned_words(model, reversed_exactly):
    page = _html(reversed_exactly, 1)
    out = translate_document(model, page.encode(), "html").data.decode()
    plain = [t.text for t in model.translate_full(reversed_exactly)]
    got = re.findall(r"<p>(.*?)</p>", out)
    assert len(got) == len(reversed_exactly)
    for para, src, text in zip(got, reversed_exactly, plain, strict=True):
        words = src.split()
        # the tag moves with its word: word 1 of n is word n - 2 of the reversal
        assert f'<b class="x">{words[1]}</b>' in para, para
        assert "<code>a &lt; b</code>" in para
        assert re.sub(r"<code>.*?</code>|<[^>]+>", "", para).split() == text.split()


def test_the_fallback_is_worse_than_the_alignment(model, reversed_exactly):
    page = _html(reversed_exactly, 0)
    aligned = translate_document(model, page.encode(), "html").data.decode()
    relative = translate_document(model, page.encode(), "html",
                                  placement="position").data.decode()

    def bold_at(out):  # where the bold word sits among each paragraph's words
        paras = re.findall(r"<p>(.*?)</p>", re.sub(r"<code>.*?</code>", "", out))
        return [[n for n, w in enumerate(p.split()) if w.startswith("<b")] for p in paras]

    n = [len(s.split()) for s in reversed_exactly]
    # source word 0 is the reversal's last word; its relative position is the first
    assert bold_at(aligned) == [[k - 1] for k in n]
    assert bold_at(relative) == [[0] for _ in n]


def test_srt_cues_keep_their_timings_and_share_the_translation(model, reversed_exactly):
    sentence = max(reversed_exactly, key=lambda s: len(s.split()))
    words = sentence.split()
    srt = (f"1\n00:00:01,000 --> 00:00:02,500\n{' '.join(words[:2])}\n\n"
           f"2\n00:00:02,500 --> 00:00:04,000\n{' '.join(words[2:])}\n")
    result = translate_document(model, srt.encode(), "srt")
    out_lines = result.data.decode().splitlines()
    assert result.problems == [] and result.sentences == 1  # one sentence over two cues
    src_lines = srt.splitlines()
    assert len(out_lines) == len(src_lines)
    for k in (0, 1, 3, 4, 5):
        assert out_lines[k] == src_lines[k]
    # translated whole and shared out in order, each cue keeping words
    assert out_lines[2].split() + out_lines[6].split() == model.translate(sentence).split()
    assert out_lines[2] and out_lines[6]


def test_markdown_po_and_docx_through_the_model(model, reversed_exactly):
    s0, s1 = reversed_exactly[:2]
    w = s0.split()
    md = f"# {s1}\n\n{w[0]} **{w[1]}** {' '.join(w[2:])} `keep me`\n"
    out = translate_document(model, md.encode(), "markdown").data.decode()
    assert out.startswith("# " + model.translate(s1) + "\n\n")
    assert f"**{w[1]}**" in out and "`keep me`" in out

    import polib

    po = f'msgid ""\nmsgstr ""\n\nmsgid "{s0} %s"\nmsgid_plural "{s1} %d"\n' \
         'msgstr[0] ""\nmsgstr[1] ""\n'
    entry = polib.pofile(translate_document(model, po.encode(), "po").data.decode())[0]
    # %d goes after the target word linked to the source word before it (the last one,
    # which the reversal puts first)
    assert entry.msgstr_plural[1].split().index("%d") == 1
    assert "fuzzy" in entry.flags

    docx = pytest.importorskip("docx")
    doc = docx.Document()
    p = doc.add_paragraph(" ".join(w[:1]) + " ")
    p.add_run(" ".join(w[1:])).bold = True
    doc.add_table(rows=1, cols=1).cell(0, 0).text = s1
    buf = io.BytesIO()
    doc.save(buf)
    out = docx.Document(io.BytesIO(translate_document(model, buf.getvalue(), "docx").data))
    assert out.paragraphs[0].text.split() == model.translate(s0).split()
    assert out.tables[0].cell(0, 0).text == model.translate(s1)


def test_a_line_past_the_models_length_is_split_not_cut(model, reversed_exactly, monkeypatch):
    # the toy reads at most 32 tokens (data.max_len)
    long = " ".join(reversed_exactly[:4] * 3)
    assert model.translate_full([long])[0].truncated  # as one segment it would be cut
    seen = []
    decode = model.decode

    def recording(lines, *args, **kwargs):
        seen.extend(lines)
        return decode(lines, *args, **kwargs)

    monkeypatch.setattr(model, "decode", recording)
    result = translate_document(model, (long + "\n").encode(), "lines")
    assert result.sentences == len(seen) >= 2
    assert " ".join(seen) == long  # every word sent, none cut
    assert not any(t.truncated for t in model.translate_full(seen))
    out = result.data.decode()
    assert out.endswith("\n") and "\n" not in out[:-1]


def test_mtkit_translate_writes_the_document_by_its_extension(toy_model, model, tmp_path):
    from tests.helpers import run_cli

    page = tmp_path / "page.html"
    page.write_text(PAGE_HTML)
    out = tmp_path / "page.de.html"
    res = run_cli("translate", toy_model, "--threads", "1", "-i", page, "-o", out)
    assert res.exit_code == 0, res.output
    assert out.read_text() == model.translate_document(PAGE_HTML, "html").text
    assert "translated 2 sentences of" in res.stderr
    # the same text as paragraphs on stdin, and the fallback chosen
    res = run_cli("translate", toy_model, "--threads", "1", "--input-format", "paragraphs",
                  input="pel nel dar\n\nvin lem ba\n")
    assert res.stdout == model.translate_document("pel nel dar\n\nvin lem ba\n",
                                                  "paragraphs").text
    res = run_cli("translate", toy_model, "--threads", "1", "-i", page,
                  "--placement", "position")
    assert res.exit_code == 0 and res.stdout == model.translate_document(
        PAGE_HTML, "html", placement="position").text


def test_a_document_follows_a_glossary(toy_model, model, tmp_path):
    """--terms for a document: each sentence translated as the line would be with the
    glossary, the markup placed over that translation."""
    from tests.helpers import run_cli

    terms = {"nel": "ba"}
    want = [t.text for t in model.translate_full(["pel nel dar", "vin lem ba"], terms=terms)]
    assert want != [t.text for t in model.translate_full(["pel nel dar", "vin lem ba"])]
    out = model.translate_document(PAGE_HTML, "html", terms=terms).text
    paras = re.findall(r"<p>(.*?)</p>", out)
    assert [re.sub(r"<[^>]+>", "", p).split() for p in paras] == [w.split() for w in want]
    assert out.count("<b>") == out.count("</b>") == 1
    page, glossary = tmp_path / "page.html", tmp_path / "terms.tsv"
    page.write_text(PAGE_HTML)
    glossary.write_text("nel\tba\n")
    res = run_cli("translate", toy_model, "--threads", "1", "-i", page, "--terms", glossary)
    assert res.exit_code == 0, res.output
    assert res.stdout == out


@pytest.mark.parametrize("args, message", [
    (("--align",), "--align: a document's markup is placed by the alignment"),
    (("--format", "jsonl"), "--format jsonl: a document is written in its own format"),
    (("--nbest", "2"), "--nbest: a document gets its best translation"),
    (("--input-format", "pdf"), "--input-format: invalid choice 'pdf'; expected one of lines"),
    (("--placement", "middle"), "--placement: invalid choice 'middle'; expected align or"),
])
def test_mtkit_translate_refuses_what_a_document_cannot_honour(toy_model, tmp_path, args,
                                                              message):
    from tests.helpers import run_cli

    page = tmp_path / "page.html"
    page.write_text(PAGE_HTML)
    res = run_cli("translate", toy_model, "-i", page, *args)
    assert res.exit_code == 2 and message in res.stderr and "Traceback" not in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


def test_mtkit_translate_names_a_broken_file_in_one_line(toy_model, tmp_path):
    from tests.helpers import run_cli

    bad = tmp_path / "app.po"
    bad.write_text('msgid "x\nbroken')
    res = run_cli("translate", toy_model, "-i", bad, "-o", tmp_path / "out.po")
    assert res.exit_code == 2 and f"{bad}: not a PO catalogue" in res.stderr
    assert not (tmp_path / "out.po").exists()
    res = run_cli("translate", toy_model, "--placement", "align", input="pel nel dar\n")
    assert res.exit_code == 2 and "--placement is for a document" in res.stderr


PAGE_HTML = "<html><body><p>pel <b>nel</b> dar</p>\n<p>vin lem ba</p></body></html>\n"


def test_documents_link_by_the_layers_mean_in_a_forced_pass(toy_model, model):
    """The links markup is placed by: argmax-src over the mean of the decoder layers'
    cross-attention of a forced pass over the translation, not the search's own layer."""
    from mtkit.align.pairs import Pair, pair_attention
    from mtkit.documents.formats import LINKS, link_extras
    from mtkit.translation.lines import pharaoh_aligner

    extras = link_extras(model, "align")
    assert (extras.align, extras.align_method, extras.align_layer) == (True, LINKS, "mean")
    assert link_extras(model, "position").align is False
    src = text_path(data_dir(toy_model), "test", "src").read_text().splitlines()
    cfg = model.options({"method": "greedy"})
    out = model.decode(src, cfg, extras)
    net, tok = model._model, model.translator(cfg).tok
    pairs = [Pair(0, tok.encode_src(t.source), tok.encode_tgt(t.text)) for t in out]
    maps = pair_attention(net, pairs, net.choose_attention("cross", "mean", "mean"),
                          device=torch.device("cpu"), batch_tokens=4000)
    align = pharaoh_aligner(LINKS)
    for t, p, m in zip(out, pairs, maps, strict=True):
        want = align(tok.src_pieces(p.src), tok.tgt_pieces(p.tgt), torch.from_numpy(m), None)
        assert t.candidates[0].alignment == want
    # where the layers' mean and the search's own layer link differently, the mean's are given
    own = model.decode(src, cfg, model.extras(align=True, align_method=LINKS))
    assert [o.text for o in own] == [t.text for t in out]
    assert any(o.candidates[0].alignment != t.candidates[0].alignment
               for o, t in zip(own, out, strict=True))
    with pytest.raises(ConfigError, match="^align_layer: it chooses the attention"):
        model.extras(align_layer="mean")
