"""What training shows: the progress line at a terminal's width, validations on a terminal and
in a log, TensorBoard as `train.tensorboard` asks."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from rich.console import Console

from mtkit.errors import ConfigError
from mtkit.train import report
from mtkit.train.report import Reporter, fit_line

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _terminal(width: int) -> tuple[Console, io.StringIO]:
    buf = io.StringIO()
    return Console(file=buf, width=width, force_terminal=True, color_system=None), buf


def _progress_line(width: int, tmp_path: Path) -> str:
    """The last progress line a terminal `width` columns wide shows, as the issue's run had it."""
    console, buf = _terminal(width)
    with Reporter(tmp_path / "run", console, enabled=True, resumed_at=None) as rep:
        rep.bar(update=168, total=1000, epoch=16, loss=0.246, lr=1.64e-3, tok_s=34169.0,
                eta=75.0)
    lines = re.split(r"[\r\n]", ANSI.sub("", buf.getvalue()))
    return [line for line in lines if line.startswith("update ")][-1].rstrip()


@pytest.mark.parametrize("width", [80, 100, 120])
def test_the_progress_line_fits_the_terminal_and_keeps_progress_and_eta(
        width: int, tmp_path: Path) -> None:
    line = _progress_line(width, tmp_path)
    assert len(line) <= width, line
    assert line.startswith("update 168/1,000 ━") and line.endswith("| ETA 0:01:15"), line
    assert "loss 0.246" in line and "epoch 16" in line
    # the least useful field goes first: lr only where there is room for it
    assert ("lr 1.64e-03" in line) == (width >= 100), line
    assert ("34,169 tgt tok/s" in line) == (width >= 100), line


def test_fit_line_drops_fields_least_useful_first_and_never_the_eta() -> None:
    fields = {"epoch": "epoch 3", "loss": "loss 1.000", "lr": "lr 1.00e-03",
              "tok_s": "9,999 tgt tok/s"}
    bar, tail = fit_line("update 5/10", fields, "ETA 0:00:09", 200)
    assert bar == report.BAR_WIDTH and tail.count(" | ") == 4
    bar, tail = fit_line("update 5/10", fields, "ETA 0:00:09", 60)
    assert tail == "epoch 3 | loss 1.000 | ETA 0:00:09" and bar >= report.BAR_MIN
    assert fit_line("update 5/10", fields, "ETA 0:00:09", 20) == (0, "ETA 0:00:09")


def _validations(rep: Reporter, n: int) -> None:
    for i in range(1, n + 1):
        rep.valid_table({"update": 100 * i, "loss": 2.0 / i, "ppl": 7.0, "bleu": 10.0 * i,
                         "chrf": 30.0, "seconds": 1.5}, metric="bleu", best=True)


def test_a_log_gets_one_row_per_validation(tmp_path: Path) -> None:
    buf = io.StringIO()
    with Reporter(tmp_path / "run", Console(file=buf, width=100), enabled=True,
                  resumed_at=None) as rep:
        _validations(rep, 3)
    out = buf.getvalue()
    for text in (out, (tmp_path / "run" / report.LOG).read_text()):
        rows = [line for line in text.splitlines() if "validation at update" in line]
        assert len(rows) == 3 and "update 300: loss 0.667" in rows[-1], text
    assert out.count("100") == 1, out  # no table printing the earlier rows again


def test_a_terminal_shows_the_last_validations_in_one_live_table(tmp_path: Path) -> None:
    console, buf = _terminal(100)
    with Reporter(tmp_path / "run", console, enabled=True, resumed_at=None) as rep:
        _validations(rep, 3)
    final = ANSI.sub("", buf.getvalue()).rsplit("validation (best by bleu)", 1)[1]
    assert [r.split("│")[1].strip() for r in final.splitlines() if r.startswith("│")] == [
        "100", "200", "300"]
    log = (tmp_path / "run" / report.LOG).read_text()
    assert log.count("validation at update") == 3 and "━" not in log


def test_tensorboard_on_without_the_package_is_refused_before_any_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    real_import = builtins.__import__

    def no_tensorboard(name: str, *args: object, **kwargs: object) -> object:
        if name.startswith("torch.utils.tensorboard"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_tensorboard)
    run = tmp_path / "run"
    rep = Reporter(run, Console(file=io.StringIO()), enabled=True, resumed_at=None,
                   tensorboard="on")
    with pytest.raises(ConfigError, match=r"mtkit\[tensorboard\]"):
        rep.__enter__()
    assert not run.exists()
    for mode in ("auto", "off"):
        with Reporter(run, Console(file=io.StringIO()), enabled=True, resumed_at=None,
                      tensorboard=mode):
            pass
        assert not (run / "tensorboard").exists()


def test_tensorboard_off_writes_no_events_even_when_installed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys
    import types

    made: list[str] = []
    fake = types.ModuleType("torch.utils.tensorboard")

    class SummaryWriter:
        def __init__(self, logdir: str) -> None:
            made.append(logdir)

        def close(self) -> None:
            pass

    fake.SummaryWriter = SummaryWriter  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", fake)
    for mode, expected in (("off", 0), ("auto", 1), ("on", 2)):
        buf = io.StringIO()
        with Reporter(tmp_path / "run", Console(file=buf), enabled=True, resumed_at=None,
                      tensorboard=mode):
            pass
        assert len(made) == expected
        assert ("TensorBoard event files in" in buf.getvalue()) == (mode != "off")
