"""The one error every resource manager raises for a request it refuses.

Servers answer it with its ``status`` (and ``field`` when one field of the request is at
fault); clients raise it with the status the server answered; in-process callers catch it.

One refusal is not final: :class:`RetryLaterError` (status :data:`RETRY_LATER`, 429) says
"not now, the same request may succeed later" (a PodDisruptionBudget that allows no
disruption now, a Slurm controller that is busy). It travels over HTTP as its status, so
:func:`is_retry_later` tells it apart on either side of the wire.
"""

from __future__ import annotations

#: the status of a refusal that may succeed when tried again later (HTTP 429)
RETRY_LATER = 429


class ResourceManagerError(Exception):
    """A request the resource manager refused (unknown workload, GPUs taken, bad CPUs...).

    ``status`` is the HTTP status a server answers with (400, 404, 409, 422, 429...);
    ``field`` names the request field at fault, ``None`` when no single field is.
    """

    def __init__(self, message: str, status: int = 400, field: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.field = field


class RetryLaterError(ResourceManagerError):
    """A refusal for now: nothing was done and the same request may succeed later (429).

    ``retry_after_s`` is how long the backend suggests waiting, when it knows (a server
    sends it as ``Retry-After``).
    """

    def __init__(
        self, message: str, field: str | None = None, retry_after_s: float | None = None
    ) -> None:
        super().__init__(message, RETRY_LATER, field)
        self.retry_after_s = retry_after_s


def is_retry_later(error: ResourceManagerError) -> bool:
    """Whether ``error`` refuses only for now (raised in process, or answered 429 over HTTP)."""
    return isinstance(error, RetryLaterError) or error.status == RETRY_LATER
