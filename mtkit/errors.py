"""User-facing errors: `mtkit.cli` turns each into one line on stderr and exit code 2."""


class MtkitError(Exception):
    """An error the user can fix (bad recipe, missing file, bad data). Never a bug."""


class ConfigError(MtkitError):
    """A recipe or an override is invalid; the message lists every problem found."""


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
