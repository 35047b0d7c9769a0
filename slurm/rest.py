"""A small client of slurmrestd's OpenAPI v0.0.38 (Slurm 22.05), authenticated with a JWT.

Every request carries ``X-SLURM-USER-NAME`` and ``X-SLURM-USER-TOKEN``. slurmrestd reports
failures in an ``errors`` array, sometimes under HTTP 200 (an update with an unknown field)
and sometimes under 400/500 (an unknown job): any non-empty array is an error here, whatever
the status, and becomes a :class:`~toposcope.slurm.errors.SlurmAnswerError` listing Slurm's
words. An expired token is refused before it is sent; a token slurmctld rejects comes back as
a bare "Unspecified error", which the message explains.

The client follows no redirects and uses no proxy (the token goes to the configured host
only), reads at most :data:`MAX_ANSWER` bytes, and never logs the token.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import Any

from toposcope.errors import ConfigError
from toposcope.slurm.errors import SlurmAnswerError, SlurmAuthError, SlurmUnavailableError
from toposcope.slurm.jwt import Jwt

#: The OpenAPI plugin toposcope speaks (``slurmrestd -s openapi/v0.0.38``).
API_VERSION = "v0.0.38"
#: The largest answer read, in bytes.
MAX_ANSWER = 64 * 1024 * 1024
#: Slurm's error number for "Unspecified error", which is what a refused JWT gives in 22.05.
_UNSPECIFIED = -1


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def check_url(url: str) -> str:
    """``url`` without a trailing slash when it is an http(s) base URL; else ConfigError."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"slurmrestd URL {url[:200]!r} is not an http:// or https:// URL")
    if parts.username or parts.password or parts.query or parts.fragment:
        raise ConfigError(
            f"slurmrestd URL {url[:200]!r} must not hold credentials, a query or a fragment"
        )
    return url.rstrip("/")


def _describe(error: dict[str, object]) -> str:
    """One entry of slurmrestd's ``errors`` array as a phrase."""
    words = [str(error.get(key)) for key in ("error", "description") if error.get(key)]
    number = error.get("error_number", error.get("errno"))
    source = error.get("source")
    tail = ", ".join(x for x in (str(source) if source else "", f"error {number}") if x)
    return f"{': '.join(words) or 'no description'} ({tail})"


class SlurmRestClient:
    """Requests to one slurmrestd as one user; answers are decoded JSON objects."""

    def __init__(
        self,
        url: str,
        jwt: Jwt,
        user: str | None = None,
        *,
        timeout_s: float = 10.0,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.url = check_url(url)
        self.jwt = jwt
        name = user or jwt.user
        if not name:
            raise ConfigError(
                "slurmrestd needs the user the JWT belongs to: give --slurm-user "
                "(the token names none)"
            )
        self.user = name
        self.timeout_s = timeout_s
        self._clock = clock
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoRedirect)

    def get(self, path: str) -> dict[str, Any]:
        """GET ``/slurm/v0.0.38/<path>`` and return the answer (errors raise)."""
        return self.request("GET", path)

    def request(self, method: str, path: str, body: object = None) -> dict[str, Any]:
        """Send one request to ``/slurm/v0.0.38/<path>``; the decoded answer, errors raised.

        Raises :class:`SlurmAuthError` for an expired token or refused credentials,
        :class:`SlurmUnavailableError` when slurmrestd cannot be reached, and
        :class:`SlurmAnswerError` for an ``errors`` array or an unexpected status.
        """
        self.jwt.check_fresh(self._clock() if self._clock else None)
        url = f"{self.url}/slurm/{API_VERSION}/{path.lstrip('/')}"
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(url, data=data, method=method)
        request.add_header("X-SLURM-USER-NAME", self.user)
        request.add_header("X-SLURM-USER-TOKEN", self.jwt.token)
        request.add_header("Accept", "application/json")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with self._opener.open(request, timeout=self.timeout_s) as response:
                status, raw = response.status, response.read(MAX_ANSWER + 1)
        except urllib.error.HTTPError as exc:
            status, raw = exc.code, exc.read(MAX_ANSWER + 1)
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise SlurmUnavailableError(
                f"cannot reach slurmrestd at {self.url}: {reason}"
            ) from None
        return self._answer(method, path, status, raw)

    def _answer(self, method: str, path: str, status: int, raw: bytes) -> dict[str, Any]:
        what = f"slurmrestd {method} {path}"
        if len(raw) > MAX_ANSWER:
            raise SlurmAnswerError(
                f"{what}: answer over {MAX_ANSWER} bytes", status=status, errors=()
            )
        try:
            answer = json.loads(raw) if raw.strip() else None
        except ValueError:
            answer = None
        if status == 401 or (answer is None and status == 403):
            raise SlurmAuthError(
                f"{what}: HTTP {status}, credentials refused for user {self.user!r} "
                f"({raw[:120].decode(errors='replace').strip()})"
            )
        if not isinstance(answer, dict):
            excerpt = raw[:120].decode(errors="replace").strip()
            raise SlurmAnswerError(
                f"{what}: HTTP {status}, not a JSON object: {excerpt!r}", status=status, errors=()
            )
        errors = answer.get("errors") or []
        if not isinstance(errors, list):
            raise SlurmAnswerError(f"{what}: errors is not a list", status=status, errors=())
        entries: tuple[dict[str, object], ...] = tuple(
            e if isinstance(e, dict) else {"error": str(e)} for e in errors
        )
        if entries:
            message = f"{what}: HTTP {status}, " + "; ".join(_describe(e) for e in entries)
            refused = status >= 400  # a refused JWT fails the request; parse errors say 200
            if refused and any(
                e.get("error_number", e.get("errno")) == _UNSPECIFIED for e in entries
            ):
                message += (
                    f" - Slurm answers this way when slurmctld refuses the JWT from "
                    f"{self.jwt.source} (expired, signed with another key, or not "
                    f"{self.user!r}'s)"
                )
            raise SlurmAnswerError(message, status=status, errors=entries)
        if not 200 <= status < 300:
            raise SlurmAnswerError(f"{what}: HTTP {status}", status=status, errors=())
        return answer
