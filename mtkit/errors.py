"""User-facing errors: `mtkit.cli` turns each into one line on stderr and exit code 2, the
server into a JSON error, the Python API raises them as they are."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


class MtkitError(Exception):
    """An error the user can fix (bad recipe, missing file, bad data). Never a bug."""


class ConfigError(MtkitError):
    """A recipe or an override is invalid; the message lists every problem found."""


@dataclass(frozen=True)
class Problem:
    """What is wrong with the option named `option` (a field: the Python API's keyword, a
    request's attribute), and the value at fault when there is one. `why` may name other
    options as {0}, {1}, ... of `others`; such a `why` holds no user text (it is formatted)."""

    option: str | None
    why: str
    value: object = None
    others: tuple[str, ...] = ()

    def text(self, name: Callable[[str], str]) -> str:
        why = self.why.format(*map(name, self.others)) if self.others else self.why
        if self.option is None:
            return why
        head = name(self.option) if self.value is None else f"{name(self.option)} {self.value}"
        return f"{head}: {why}"


class OptionError(ConfigError):
    """Options of a call that cannot be honoured, each named by its field. The library speaks
    in fields; a front end that offers them under other names (`mtkit.cli`: flags) renders the
    message with `text(name)`."""

    def __init__(self, *problems: Problem) -> None:
        self.problems = problems
        super().__init__(self.text(str))

    @classmethod
    def one(cls, option: str | None, why: str, *, value: object = None,
            others: tuple[str, ...] = ()) -> OptionError:
        return cls(Problem(option, why, value, others))

    def text(self, name: Callable[[str], str]) -> str:
        return "; ".join(p.text(name) for p in self.problems)


class DataError(MtkitError):
    """Input text, a download or a prepared data directory is unusable."""


class CheckpointError(MtkitError):
    """A checkpoint or run directory cannot be loaded."""


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP (`mtkit.process.startup.handle_termination`): the command stops as on
    Ctrl-C, its unfinished outputs dropped, and exits with 128 + the signal's number."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum
