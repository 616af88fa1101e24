"""Markup placed back by the word alignment, the relative-position fallback, and spacing."""

from __future__ import annotations

import re

from mtkit.documents.blocks import Splitting, translate_blocks
from mtkit.documents.inline import Tag, Text, balanced, take_out
from tests.unit.documents.fake import joined, monotone, reverse, unaligned


def o(name: str) -> Tag:
    return Tag("open", f"<{name}>", name)


def c(name: str) -> Tag:
    return Tag("close", f"</{name}>", name)


def one(block, translate=reverse, **kw) -> str:
    return joined(translate_blocks([block], translate, **kw)[0])


def test_tags_follow_the_aligned_words_through_a_reversal():
    block = [Text("a "), o("b"), Text("big "), o("i"), Text("dog"), c("i"), c("b"),
             Text(" runs")]
    # the reversal puts 'dog' before 'big': the pair moves with its words, nesting kept
    assert one(block) == "RUNS <b><i>DOG</i> BIG</b> A"
    assert one(block, monotone) == "A <b>BIG <i>DOG</i></b> RUNS"


def test_relative_position_is_the_fallback_and_can_be_chosen():
    block = [Text("a "), o("b"), Text("big"), c("b"), Text(" dog runs")]
    # no links at all: the span keeps its relative place (word 1 of 4)
    assert one(block, unaligned) == "A <b>BIG</b> DOG RUNS"
    # chosen, it ignores the links of the reversal
    assert one(block, placement="position") == "RUNS <b>DOG</b> BIG A"


def test_void_tags_keep_their_side_and_protected_spans_stay_byte_identical():
    code = Tag("void", "<code>x &amp; y()</code>", "code")
    block = [Text("call "), code, Text(" now"), Tag("void", "<br>", "br", space=True),
             Text("then stop")]
    out = one(block, monotone)
    assert out == "CALL <code>x &amp; y()</code> NOW<br>THEN STOP"
    assert "<code>x &amp; y()</code>" in one(block)


def test_text_between_markup_is_the_plain_translation():
    block = [Text("the "), o("a"), Text("red "), o("b"), Text("old"), c("b"), Text(" car"),
             c("a"), Text(" stops. "), o("i"), Text("It"), c("i"), Text(" waits.")]
    out = one(block)
    plain = re.sub(r"<[^>]+>", "", out)
    want = [t for t, _ in reverse(["the red old car stops.", "It waits."])]
    assert plain.split() == " ".join(want).split()
    assert sorted(re.findall(r"<[^>]+>", out)) == sorted(["<a>", "</a>", "<b>", "</b>",
                                                          "<i>", "</i>"])


def test_nesting_stays_valid_under_any_alignment():
    def scrambled(sentences):
        return [(s.upper(), [(i, (7 * i + 3) % len(s.split())) for i in range(len(s.split()))])
                for s in sentences]

    block = [o("x"), Text("one "), o("y"), Text("two three"), c("y"), Text(" four "),
             o("z"), Text("five"), c("z"), c("x"), Text(" six seven")]
    out = one(block, scrambled)
    stack = []
    for tag in re.findall(r"</?\w>", out):
        if tag.startswith("</"):
            assert stack and stack.pop() == tag[2], out
        else:
            stack.append(tag[1])
    assert not stack, out


def test_malformed_markup_turns_void_and_nothing_is_lost():
    block = [Text("a "), c("b"), Text("b "), o("i"), Text("c "), o("u"), Text("d"), c("i"),
             Text(" e")]
    fixed = balanced(block)
    assert [t.kind for t in fixed if isinstance(t, Tag)] == ["void", "open", "void", "close"]
    out = one(block, monotone)
    assert sorted(re.findall(r"</?\w>", out)) == sorted(["</b>", "<i>", "<u>", "</i>"])


def test_spacing_of_the_paragraph_is_kept():
    block = [Text("\n  one two.  Three four.\nFive six.\n")]
    assert one(block, monotone) == "\n  ONE TWO.  THREE FOUR.\nFIVE SIX.\n"


def test_an_empty_pair_and_a_tag_inside_a_word():
    block = [Text("un"), o("b"), Text("believ"), c("b"), Text("able "), o("a"), c("a"),
             Text("thing")]
    assert one(block, monotone) == "<b>UNBELIEVABLE</b> <a></a> THING"  # an empty pair stands alone
    source = take_out(block)
    assert [(n.start, n.end) for n in source.root.children] == [(0, 1), (1, 1)]


def test_over_long_sentences_are_split_at_punctuation_and_never_cut():
    seen = []

    def recording(sentences):
        seen.extend(sentences)
        return monotone(sentences)

    text = "one two three, four five six seven and eight nine ten eleven"
    out = one([Text(text)], recording,
              splitting=Splitting(too_long=lambda s: len(s.split()) > 5))
    assert out == text.upper()
    assert all(len(s.split()) <= 5 for s in seen)
    assert seen[0] == "one two three,"  # the comma nearest the middle of 12 words
    assert " ".join(seen) == text


def test_breaks_go_where_fewest_words_cross_them_and_stay_in_order():
    from mtkit.documents.inline import BREAK

    def inserting(sentences):  # 'a b c d' -> 'A X B C D', word x linked to nothing
        out = []
        for s in sentences:
            w = s.upper().split()
            out.append((" ".join([w[0], "X", *w[1:]]), [(0, 0)] + [(i, i + 1)
                                                                   for i in range(1, len(w))]))
        return out

    brk = Tag("void", "", BREAK)
    block = [Text("a b "), brk, Text(" c d "), Tag("void", "", BREAK), Text(" e")]
    items = translate_blocks([block], inserting)[0]
    cut = [n for n, it in enumerate(items) if isinstance(it, Tag)]
    texts = [joined(items[a + 1:b]) for a, b in zip([-1, *cut], [*cut, len(items)],
                                                     strict=True)]
    assert [t.split() for t in texts] == [["A", "X", "B"], ["C", "D"], ["E"]]
    # reversed, every unit still gets words, in order
    items = translate_blocks([block], reverse)[0]
    cut = [n for n, it in enumerate(items) if isinstance(it, Tag)]
    texts = [joined(items[a + 1:b]).split() for a, b in zip([-1, *cut], [*cut, len(items)],
                                                             strict=True)]
    assert all(texts) and sum(texts, []) == "E D C B A".split()
