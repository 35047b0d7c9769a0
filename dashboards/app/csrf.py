"""CSRF tokens for the Dash app's state-changing callbacks (signed double submit, bound to the
user).

The server sets a token in a ``SameSite=Strict`` cookie; Dash's renderer copies that cookie
into an ``X-CSRFToken`` header on every callback request (its built-in behaviour), and the
server accepts an apply or revert only when header and cookie carry the same token, signed
by this process *for the user the request proves*. A cross-site page can neither read the
cookie nor add the header (a custom header makes the browser ask first, and the app answers
no cross-origin request); the signature keeps a token planted in the cookie by someone else
(a sibling host) from passing, and binding it to the user keeps a token handed out to nobody
(an unauthenticated request) or to another user from passing: tokens are issued only to a
request that proved a user, and checked against the user of the apply.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets

#: the cookie and header names Dash's renderer uses by default
COOKIE = "_csrf_token"
HEADER = "X-CSRFToken"


class CsrfTokens:
    """Issues and checks tokens signed with a key that lives only in this process."""

    def __init__(self, key: bytes | None = None) -> None:
        self._key = key or secrets.token_bytes(32)

    def _sign(self, user: str, nonce: str) -> str:
        message = json.dumps([user, nonce]).encode()
        return hmac.new(self._key, message, hashlib.sha256).hexdigest()

    def issue(self, user: str) -> str:
        """A fresh token for ``user``: ``NONCE.HMAC(key, [user, NONCE])``."""
        nonce = secrets.token_urlsafe(24)
        return f"{nonce}.{self._sign(user, nonce)}"

    def valid(self, token: str | None, user: str | None) -> bool:
        """Whether ``token`` was issued by this process to ``user`` (never for no user)."""
        if user is None or not token or not token.isascii():
            return False
        nonce, dot, signature = token.partition(".")
        return bool(dot) and hmac.compare_digest(signature, self._sign(user, nonce))

    def matches(self, cookie: str | None, header: str | None, user: str | None) -> bool:
        """Whether a request's cookie and header carry the same token, issued to ``user``."""
        if not cookie or not header or not header.isascii() or not self.valid(cookie, user):
            return False
        return hmac.compare_digest(cookie, header)
