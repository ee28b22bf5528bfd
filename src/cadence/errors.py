"""Errors that mean "the user asked for something we cannot do".

The CLI prints a `UserError` as one line and exits with status 2; anything else is a bug
and keeps its traceback.
"""


class UserError(Exception):
    """Bad input or an unusable environment, explained in one line."""


class WorkerFailed(RuntimeError):
    """A training worker died; the message names the rank and the reason."""
