"""The page at / in a real headless browser (Debian's chromium and chromedriver, driven by
selenium) over `mtkit serve` of the toy model: type, Enter, the translation, a heatmap of as
many rows and columns as the tokens shown, the highlight under the pointer, errors in the
page. `.ci/run` installs the browser where it is missing."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import serving

pytest.importorskip("fastapi", reason="mtkit serve needs the serve extra (make install)")
webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed "
                                "(make install)")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
pytestmark = [
    pytest.mark.skipif(CHROMIUM is None or DRIVER is None, reason="no headless browser: "
                       "apt-get install chromium chromium-driver (.ci/run does)"),
    pytest.mark.usefixtures("one_thread"),
]


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1280,900"):
        options.add_argument(arg)
    options.binary_location = CHROMIUM
    driver = webdriver.Chrome(options=options, service=Service(DRIVER))
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


def _wait(driver, condition, timeout: float = 30):
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    # an element read while the page renders it again is stale: look again
    return WebDriverWait(driver, timeout, ignored_exceptions=(
        StaleElementReferenceException,)).until(condition)


def test_translate_and_look_at_attention(browser, toy_model: Path):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    with serving(toy_model) as server:
        want = server.post("/v1/translate", {"text": "sa sa gu mir", "nbest": 3,
                                             "attention": True}).json()
        browser.get(server.url)
        _wait(browser, lambda d: "toy" in d.find_element(By.ID, "model").text)
        box = browser.find_element(By.ID, "source")
        box.send_keys("sa sa gu mir")
        box.send_keys(Keys.ENTER)
        _wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#nbest-list li"))
        shown = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "#nbest-list .text")]
        best = want["translations"][0]["candidates"]
        assert shown == [c["text"] for c in best]
        # the heatmap: a row per target word (and EOS), a column per source word (and EOS)
        rows = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "#heatmap th.row")]
        cols = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "#heatmap th.col")]
        assert rows == [*shown[0].split(), "</s>"]
        assert cols == ["sa", "sa", "gu", "mir", "</s>"]
        cells = browser.find_elements(By.CSS_SELECTOR, "#heatmap td.cell")
        assert len(cells) == len(rows) * len(cols)
        assert browser.find_elements(By.CSS_SELECTOR, "#heatmap td.cell.link")  # the links
        ActionChains(browser).move_to_element(cells[len(cols) + 2]).perform()  # row 1, col 2
        hot = browser.find_elements(By.CSS_SELECTOR, "#heatmap th.hot")
        assert sorted(e.text for e in hot) == sorted([rows[1], cols[2]])
        # hovering a target word marks the source words it attends to
        ActionChains(browser).move_to_element(
            browser.find_elements(By.CSS_SELECTOR, "#heatmap th.row")[0]).perform()
        assert "mir" in [e.text for e in browser.find_elements(By.CSS_SELECTOR,
                                                                "#heatmap th.col.hot")]
        # subwords, and another hypothesis
        browser.find_element(By.CSS_SELECTOR, "#level option[value=subword]").click()
        pieces = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "#heatmap th.col")]
        assert pieces == [*want["translations"][0]["source_tokens"], "</s>"]
        browser.find_elements(By.CSS_SELECTOR, "#nbest-list li")[1].click()
        rows = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "#heatmap th.row")]
        assert rows == [*best[1]["tokens"], "</s>"]
        # an error is shown in the page
        box.clear()
        box.send_keys("a" * 2100)
        box.send_keys(Keys.ENTER)
        _wait(browser, lambda d: d.find_element(By.ID, "error").is_displayed())
        assert "2100 characters" in browser.find_element(By.ID, "error").text


def test_a_tagged_model_offers_its_directions(browser, two_way: Path):
    """A model of several directions: the page lists its tags and translates the one chosen."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    with serving(two_way) as server:
        want = {tag: server.post("/v1/translate", {"text": "sa gu mir", "tag": tag}).json()[
            "translations"][0]["text"] for tag in ("<rev>", "<copy>")}
        assert want["<rev>"] != want["<copy>"]
        browser.get(server.url)
        _wait(browser, lambda d: d.find_element(By.ID, "tag-box").is_displayed())
        options = browser.find_elements(By.CSS_SELECTOR, "#tag option")
        assert [o.text for o in options] == ["<rev>", "<copy>"]
        box = browser.find_element(By.ID, "source")
        box.send_keys("sa gu mir")
        for tag in ("<copy>", "<rev>"):
            browser.find_element(By.CSS_SELECTOR, f"#tag option[value='{tag}']").click()
            box.send_keys(Keys.ENTER)
            _wait(browser, lambda d, tag=tag: [e.text for e in d.find_elements(
                By.CSS_SELECTOR, "#nbest-list .text")][:1] == [want[tag]])


def test_several_models_source_target_auto_and_pivot(browser, lang_runs: dict[str, Path]):
    """Two models (en -> de, de -> fr): the page offers auto and the sources, the targets of
    the source chosen, shows the detected language, the pivot, and each leg's attention."""
    pytest.importorskip("py3langid", reason="detection needs the detect extra (make install)")
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import Select

    german, english = "Der Hund läuft durch den Schnee.", "The dog runs."
    with serving("--model", lang_runs["en-de"], "--model", lang_runs["de-fr"]) as server:
        def best(text: str) -> dict:
            return server.post("/v1/translate", {"text": text, "source": "auto",
                                                 "target": "fr"}).json()["translations"][0]

        want_de, want_en = best(german), best(english)
        assert want_en["pivot"] == "de" and want_de["pivot"] is None
        browser.get(server.url)
        _wait(browser, lambda d: d.find_element(By.ID, "from-box").is_displayed())
        source = Select(browser.find_element(By.ID, "from"))
        assert [o.text for o in source.options] == ["auto (detect)", "de", "en"]
        assert source.first_selected_option.get_attribute("value") == "auto"
        source.select_by_value("de")
        target = Select(browser.find_element(By.ID, "to"))
        assert [o.text for o in target.options] == ["fr"]  # what de reaches
        source.select_by_value("auto")
        assert [o.text for o in target.options] == ["de", "fr"]
        target.select_by_value("fr")
        box = browser.find_element(By.ID, "source")
        box.send_keys(german, Keys.ENTER)
        _wait(browser, lambda d: d.find_element(By.ID, "detected").text.startswith(
            "detected: de"))
        assert browser.find_elements(By.CSS_SELECTOR, "#nbest-list .text")[0].text == (
            want_de["text"])
        assert not browser.find_element(By.ID, "leg-box").is_displayed()
        box.clear()
        box.send_keys(english, Keys.ENTER)
        _wait(browser, lambda d: d.find_element(By.ID, "detected").text.startswith(
            "detected: en"))
        assert "through de: en → de (toy-en-de), then de → fr (toy-de-fr)" in (
            browser.find_element(By.ID, "pivot").text)
        assert browser.find_elements(By.CSS_SELECTOR, "#nbest-list .text")[0].text == (
            want_en["text"])
        legs = browser.find_elements(By.CSS_SELECTOR, "#legs button")
        assert [b.text for b in legs] == ["en → de", "de → fr"]
        cols = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "#heatmap th.col")]
        assert cols == [*want_en["legs"][0]["text"].split(), "</s>"]  # the second leg's source
        legs[0].click()
        cols = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "#heatmap th.col")]
        assert cols == [*english.split(), "</s>"]


def _translate_in_page(browser, text: str, *, lines: tuple[str, ...] = ()) -> None:
    """Type `text` (and each of `lines` after a Shift+Enter) into the page, then Enter."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    box = browser.find_element(By.ID, "source")
    box.clear()
    box.send_keys(text)
    for line in lines:
        ActionChains(browser).key_down(Keys.SHIFT).send_keys(Keys.ENTER).key_up(
            Keys.SHIFT).perform()
        box.send_keys(line)
    browser.execute_script("window.shown = document.getElementById('heatmap').rows.length"
                           " ? document.getElementById('heatmap').rows[0] : null")
    box.send_keys(Keys.ENTER)
    # drawn anew: the heatmap's first row is another element than before
    _wait(browser, lambda d: d.execute_script(
        "const t = document.getElementById('heatmap');"
        "return t.rows.length > 0 && t.rows[0] !== window.shown"))


def test_lines_and_a_paragraph_are_sentences(browser, toy_model: Path):
    """Two lines typed apart (Shift+Enter) are two sentences, each listed with its
    translation; choosing one shows its hypotheses and its attention."""
    from selenium.webdriver.common.by import By

    first, second = "sa sa gu mir", "gu mir"
    with serving(toy_model) as server:
        want = server.post("/v1/translate", {"text": [first, second], "nbest": 3}).json()[
            "translations"]
        browser.get(server.url)
        _wait(browser, lambda d: "toy" in d.find_element(By.ID, "model").text)
        _translate_in_page(browser, first, lines=(second,))
        listed = browser.find_elements(By.CSS_SELECTOR, "#sentences li")
        assert [e.find_element(By.CSS_SELECTOR, ".source").text for e in listed] == [
            first, second]
        assert [e.find_element(By.CSS_SELECTOR, ".text").text for e in listed] == [
            w["text"] for w in want]
        cols = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "#heatmap th.col")]
        assert cols == [*first.split(), "</s>"]
        listed[1].click()
        cols = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "#heatmap th.col")]
        assert cols == [*second.split(), "</s>"]
        shown = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "#nbest-list .text")]
        assert shown == [c["text"] for c in want[1]["candidates"]]
        # one sentence: no list of sentences
        _translate_in_page(browser, first)
        assert not browser.find_element(By.ID, "sentences-box").is_displayed()


def test_the_heatmap_in_view(browser, toy_model: Path):
    """On a laptop-height window (1280 x 720) the heatmap's first row shows without
    scrolling; at 800 px a subword heatmap wider than the window scrolls inside a box no
    taller than the window (its scrollbar in view), says it does, and shows its last column
    once scrolled."""
    from selenium.webdriver.common.by import By

    geometry = """
        const wrap = document.getElementById('heatmap-wrap'), r = wrap.getBoundingClientRect();
        const cell = document.querySelector('#heatmap td.cell').getBoundingClientRect();
        const list = document.getElementById('nbest-list').getBoundingClientRect();
        return {cell: cell.bottom, inner: innerHeight, height: r.height, scroll: wrap.scrollWidth,
                client: wrap.clientWidth, right: r.right, top: r.top, list: list.bottom};"""
    with serving(toy_model) as server:
        try:
            browser.set_window_size(1280, 720)
            browser.get(server.url)
            _wait(browser, lambda d: "toy" in d.find_element(By.ID, "model").text)
            _translate_in_page(browser, "sa sa gu mir")
            g = browser.execute_script(geometry)
            assert g["cell"] <= g["inner"], g
            assert g["top"] < g["list"], g  # beside the hypotheses, not below them
            assert not browser.find_element(By.ID, "more-columns").is_displayed()
            browser.set_window_size(800, 720)
            browser.find_element(By.CSS_SELECTOR, "#level option[value=subword]").click()
            _translate_in_page(browser, " ".join(["sa gu mir pel"] * 12))
            g = browser.execute_script(geometry)
            assert g["scroll"] > g["client"] and g["height"] <= g["inner"], g
            assert browser.find_element(By.ID, "more-columns").is_displayed()
            last = browser.execute_script(
                "const wrap = document.getElementById('heatmap-wrap');"
                "wrap.scrollLeft = wrap.scrollWidth;"
                "const cols = document.querySelectorAll('#heatmap th.col');"
                "return cols[cols.length - 1].getBoundingClientRect().right;")
            assert last <= g["right"] + 1
        finally:
            browser.set_window_size(1280, 900)
