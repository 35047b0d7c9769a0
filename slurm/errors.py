"""What can go wrong when toposcope talks to Slurm, as exception types callers can tell apart.

Every one is a :class:`~toposcope.errors.SourceError`, so the command line turns it into a
one-line message and exit code 2; the message names the endpoint or command and what Slurm
said. :class:`SlurmFormatError` is also raised by the parsers of Slurm's compact notations
(host lists, GRES strings) on malformed text.
"""

from __future__ import annotations

from toposcope.errors import SourceError


class SlurmError(SourceError):
    """Slurm could not be asked, or answered with an error."""


class SlurmUnavailableError(SlurmError):
    """slurmrestd or a Slurm command could not be reached or run at all."""


class SlurmAuthError(SlurmError):
    """The credentials were refused: an expired, malformed or foreign JWT, or none."""


class SlurmFormatError(SlurmError, ValueError):
    """Text or JSON from Slurm that does not have the expected shape."""


class SlurmAnswerError(SlurmError):
    """slurmrestd answered, with errors: its ``errors`` array (even under HTTP 200) or a status.

    ``errors`` holds the array's entries as Slurm wrote them; ``status`` the HTTP status.
    """

    def __init__(self, message: str, *, status: int, errors: tuple[dict[str, object], ...]) -> None:
        super().__init__(message)
        self.status = status
        self.errors = errors
