"""The bearer-token check of every toposcope HTTP API that changes state.

The resource-manager API (simulator, node agent) and the advisor service's API guard their
state-changing routes with this one rule:

- a server started without a token refuses every guarded request with 403, so an API left
  unconfigured cannot be steered by anyone;
- no ``Authorization`` header, another scheme (``Basic ...``) or ``Bearer`` without a token
  answers 401 with a ``WWW-Authenticate: Bearer realm="..."`` challenge;
- a token that is not the server's answers 403.

A server may hand the decision on the token to a :class:`TokenVerifier` instead of comparing
it with its own (:mod:`toposcope.kubeapi.tokenreview` asks the Kubernetes API server): a missing
token
is still 401 here, and the verifier's 401 gets the same challenge, with
``error="invalid_token"`` (RFC 6750).

The scheme name is case-insensitive (RFC 9110) and tokens are compared in constant time
(:func:`hmac.compare_digest` over their UTF-8 bytes), so how long an answer takes says nothing
about how much of a guess was right. :meth:`BearerAuth.required` raises its refusals as
:class:`apiflask.HTTPError` before the view runs, and so before the request's body is read or
validated: an unauthenticated client learns nothing about what a valid body looks like, and
each API answers the refusal in its own JSON error shape.
"""

from __future__ import annotations

import functools
import hmac
from collections.abc import Callable
from dataclasses import dataclass
from typing import ParamSpec, Protocol, TypeVar

from apiflask.exceptions import HTTPError
from flask import request

MISSING_MESSAGE = "missing Authorization: Bearer <token> header"
WRONG_MESSAGE = "the bearer token is not valid for this server"

P = ParamSpec("P")
R = TypeVar("R")


@dataclass(frozen=True)
class BearerRefusal:
    """Why a request may not pass: the HTTP status, the message and the headers to answer."""

    status: int
    message: str
    headers: dict[str, str]


class TokenVerifier(Protocol):
    """Decides on a bearer token a server does not hold itself (e.g. by asking Kubernetes)."""

    def verify(self, token: str) -> BearerRefusal | None:
        """Why ``token`` may not pass, or ``None`` when it may."""
        ...


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer TOKEN`` header value; ``None`` for no header,
    another scheme or an empty token.
    """
    scheme, _, token = (authorization or "").strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


class BearerAuth:
    """The check for one server: its token (``None``: refuse everything), the realm its
    challenges name and the message that says how to configure a token.
    """

    def __init__(
        self,
        token: str | None,
        *,
        realm: str,
        no_token_message: str,
        verifier: TokenVerifier | None = None,
    ) -> None:
        self._expected = token.encode() if token is not None else None
        self.realm = realm
        self.no_token_message = no_token_message
        self.verifier = verifier

    def refusal(self, authorization: str | None) -> BearerRefusal | None:
        """Why a request with this ``Authorization`` header value may not pass, or ``None``."""
        if self._expected is None and self.verifier is None:
            return BearerRefusal(403, self.no_token_message, {})
        given = bearer_token(authorization)
        if given is None:
            challenge = {"WWW-Authenticate": f'Bearer realm="{self.realm}"'}
            return BearerRefusal(401, MISSING_MESSAGE, challenge)
        if self.verifier is not None:
            refused = self.verifier.verify(given)
            if refused is not None and refused.status == 401:
                invalid = f'Bearer realm="{self.realm}", error="invalid_token"'
                return BearerRefusal(401, refused.message, {"WWW-Authenticate": invalid})
            return refused
        if self._expected is None or not hmac.compare_digest(given.encode(), self._expected):
            return BearerRefusal(403, WRONG_MESSAGE, {})
        return None

    def required(self, view: Callable[P, R]) -> Callable[P, R]:
        """Decorate a Flask view: run it only for a request that passes :meth:`refusal`.

        Put it below the route decorator and above ``@app.input``, so that the check comes
        before the body is parsed.
        """

        @functools.wraps(view)
        def guarded(*args: P.args, **kwargs: P.kwargs) -> R:
            refused = self.refusal(request.headers.get("Authorization"))
            if refused is not None:
                raise HTTPError(refused.status, refused.message, headers=refused.headers)
            return view(*args, **kwargs)

        return guarded
