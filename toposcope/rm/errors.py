"""The one error every resource manager raises for a request it refuses.

Servers answer it with its ``status`` (and ``field`` when one field of the request is at
fault); clients raise it with the status the server answered; in-process callers catch it.
"""

from __future__ import annotations


class ResourceManagerError(Exception):
    """A request the resource manager refused (unknown workload, GPUs taken, bad CPUs...).

    ``status`` is the HTTP status a server answers with (400, 404, 409, 422...); ``field``
    names the request field at fault, ``None`` when no single field is.
    """

    def __init__(self, message: str, status: int = 400, field: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.field = field
