"""Errors the advisor raises on purpose; the advisor's CLI maps every one of them to exit 2.

They name what was being read (a URL, a query, a file) and chain the cause, so that a user
can tell "Prometheus is down" from "my query is wrong" from "the data is odd".
"""

from __future__ import annotations

from toposcope.errors import ToposcopeError


class AdvisorError(ToposcopeError):
    """Base class of the advisor's own errors."""


class AdvisorConnectionError(AdvisorError):
    """A metrics backend or resource manager could not be reached, timed out, refused the
    credentials or answered with something that is not its API (the message has the URL).
    """


class AdvisorQueryError(AdvisorError):
    """The metrics backend rejected a query (bad PromQL, unknown function, execution error)."""
