"""XLIFF 1.2 and 2.x: untranslated units get targets with their inline codes, marked as
machine translations; translated and translate="no" units are left alone."""

from __future__ import annotations

import pytest

from mtkit.documents.blocks import translate_blocks
from mtkit.errors import DataError
from tests.unit.documents.fake import monotone, reverse

etree = pytest.importorskip("lxml.etree")

from mtkit.documents.xliff import XliffDocument  # noqa: E402

V12 = b"""<?xml version="1.0" encoding="UTF-8"?>
<xliff version="1.2" xmlns="urn:oasis:names:tc:xliff:document:1.2">
  <file source-language="en" target-language="de" datatype="plaintext" original="a.txt">
    <body>
      <trans-unit id="1">
        <source>Click <g id="1">the red</g> button<x id="2"/> now</source>
      </trans-unit>
      <trans-unit id="2">
        <source>Done</source>
        <target>Fertig</target>
      </trans-unit>
      <trans-unit id="3" translate="no">
        <source>Brand</source>
      </trans-unit>
      <trans-unit id="4">
        <source>Save <ph id="1">%s</ph> file</source>
        <target state="new"></target>
      </trans-unit>
    </body>
  </file>
</xliff>
"""

V2 = b"""<?xml version="1.0" encoding="UTF-8"?>
<xliff xmlns="urn:oasis:names:tc:xliff:document:2.0" version="2.0" srcLang="en" trgLang="de">
  <file id="f1">
    <unit id="u1">
      <segment>
        <source>Open <pc id="1">the big file</pc> <ph id="2"/> today</source>
      </segment>
    </unit>
  </file>
</xliff>
"""


def _translated(data, translate):
    doc = XliffDocument(data)
    return etree.fromstring(doc.render(translate_blocks(doc.blocks(), translate)))


def _text(el) -> str:
    return etree.tostring(el, encoding="unicode", with_tail=False)


def test_xliff12_targets_with_inline_codes_and_states():
    root = _translated(V12, monotone)
    ns = {"x": "urn:oasis:names:tc:xliff:document:1.2"}
    units = root.findall(".//x:trans-unit", ns)
    assert [u.get("id") for u in units] == ["1", "2", "3", "4"]
    t1 = units[0].find("x:target", ns)
    assert _text(t1).split(">", 1)[1] == ('CLICK <g id="1">THE RED</g> BUTTON<x id="2"/> NOW'
                                          '</target>')
    assert t1.get("state") == "needs-review-translation"
    assert units[1].find("x:target", ns).text == "Fertig"
    assert units[2].find("x:target", ns) is None
    t4 = units[3].find("x:target", ns)
    assert "".join(t4.itertext()) == "SAVE %s FILE" and t4.find("x:ph", ns).get("id") == "1"


def test_xliff2_pairs_follow_the_alignment():
    root = _translated(V2, reverse)
    ns = {"x": "urn:oasis:names:tc:xliff:document:2.0"}
    segment = root.find(".//x:segment", ns)
    target = segment.find("x:target", ns)
    assert segment.get("state") == "translated"
    assert target.find("x:pc", ns).get("id") == "1"
    assert "".join(target.find("x:pc", ns).itertext()) == "FILE BIG THE"
    assert target.find("x:ph", ns).get("id") == "2"


def test_not_xliff_is_one_line():
    with pytest.raises(DataError, match="not an XLIFF catalogue"):
        XliffDocument(b"<html/>")
    with pytest.raises(DataError, match="not an XLIFF catalogue"):
        XliffDocument(b"<xliff")
