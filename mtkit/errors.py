"""User-facing errors: `mtkit.cli` turns each into one line on stderr and exit code 2, the
server into a JSON error, the Python API raises them as they are."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar, get_args


@dataclass(frozen=True)
class Problem:
    """What is wrong with the option named `option` (a field: the Python API's keyword, a
    request's attribute), and the value at fault when there is one. `why` may name other
    options as {0}, {1}, ... of `others` (replaced, not formatted: other braces are kept)."""

    option: str | None
    why: str
    value: object = None
    others: tuple[str, ...] = ()

    def text(self, name: Callable[[str], str]) -> str:
        why = self.why
        for i, other in enumerate(self.others):
            why = why.replace(f"{{{i}}}", name(other))
        if self.option is None:
            return why
        head = name(self.option) if self.value is None else f"{name(self.option)} {self.value}"
        return f"{head}: {why}"


_E = TypeVar("_E", bound="MtkitError")


class MtkitError(Exception):
    """An error the user can fix (bad recipe, missing file, bad data). Never a bug.

    One made by `about` (or an `OptionError`) names the option at fault by its field (the
    Python API's keyword, a request's attribute); a front end that offers the options under
    other names (`mtkit.cli`: flags) says the message with `text(name)`."""

    problems: tuple[Problem, ...] = ()

    @classmethod
    def about(cls: type[_E], option: str | None, why: str, *, value: object = None,
              others: tuple[str, ...] = ()) -> _E:
        problem = Problem(option, why, value, others)
        error = cls.__new__(cls)  # OptionError's constructor takes problems, not a message
        Exception.__init__(error, problem.text(str))
        error.problems = (problem,)
        return error

    def with_note(self: _E, note: str) -> _E:
        """This error with `note` after its message, its options still named as fields."""
        error = type(self).__new__(type(self))
        Exception.__init__(error, f"{self}; {note}")
        error.problems = (*self.problems, Problem(None, note)) if self.problems else ()
        return error

    def text(self, name: Callable[[str], str]) -> str:
        if not self.problems:
            return str(self)
        return "; ".join(p.text(name) for p in self.problems)


class ConfigError(MtkitError):
    """A recipe or an override is invalid; the message lists every problem found."""


class OptionError(ConfigError):
    """Options of a call that cannot be honoured, every problem at once."""

    def __init__(self, *problems: Problem) -> None:
        super().__init__("; ".join(p.text(str) for p in problems))
        self.problems = problems


def choice(option: str, value: object, choices: Any) -> Any:
    """`value` as one of the `Literal` `choices` (a value typed `str` narrowed to the
    `Literal` its owner declares), else an `OptionError` about `option`: ``invalid choice
    'x'; expected a or b``."""
    allowed = get_args(choices)
    if value in allowed:
        return value
    listed = " or ".join(allowed) if len(allowed) == 2 else "one of " + ", ".join(allowed)
    raise OptionError.about(option, f"invalid choice {value!r}; expected {listed}")


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
