"""The JWT toposcope shows slurmrestd, read from configuration and checked before use.

slurmrestd's ``rest_auth/jwt`` takes the user name and an HS256 token that slurmctld signed
(``scontrol token username=NAME lifespan=SECONDS``). The token comes from a file (mode 0600,
read by :func:`toposcope.auth.tokens.load_token`) or an environment variable, never from metrics or
any answer. Its claims are decoded (not verified: only slurmctld holds the key) to say clearly
when it has expired and whose it is; Slurm 22.05 itself answers an expired or foreign token with
a bare "Unspecified error".
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import time
from dataclasses import dataclass
from pathlib import Path

from toposcope.auth.tokens import load_token
from toposcope.errors import ConfigError
from toposcope.slurm.errors import SlurmAuthError

#: The environment variable Slurm's own tools read a JWT from.
JWT_ENV = "SLURM_JWT"
#: The longest token accepted, in characters.
MAX_JWT = 8192
_SEGMENT_RE = re.compile(r"[A-Za-z0-9_-]+")


@dataclass(frozen=True)
class Jwt:
    """A token and what its unverified claims say: the user (``sun``) and when it expires."""

    token: str
    source: str
    user: str | None
    expires_at: float | None

    def check_fresh(self, now: float | None = None) -> None:
        """Raise :class:`SlurmAuthError` when the token's ``exp`` lies in the past."""
        if self.expires_at is None:
            return
        now = time.time() if now is None else now
        if self.expires_at <= now:
            when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.expires_at))
            raise SlurmAuthError(
                f"the Slurm JWT from {self.source} expired at {when} "
                f"({now - self.expires_at:.0f} s ago): get a new one with "
                f"`scontrol token username={self.user or 'USER'} lifespan=SECONDS`"
            )


def _claims(token: str, source: str) -> dict[str, object]:
    parts = token.split(".")
    if len(parts) != 3 or not all(_SEGMENT_RE.fullmatch(p) for p in parts):
        raise SlurmAuthError(f"the Slurm JWT from {source} is not a JWT (three base64url parts)")
    try:
        payload = base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4))
        claims = json.loads(payload)
    except (binascii.Error, ValueError):
        raise SlurmAuthError(f"the Slurm JWT from {source} has no readable claims") from None
    if not isinstance(claims, dict):
        raise SlurmAuthError(f"the Slurm JWT from {source} has no readable claims")
    return claims


def parse_jwt(token: str, source: str) -> Jwt:
    """The token with its claims; :class:`SlurmAuthError` naming ``source`` when malformed.

    A leading ``SLURM_JWT=`` (how ``scontrol token`` prints it) is dropped.
    """
    token = token.strip().removeprefix(f"{JWT_ENV}=")
    if not token:
        raise SlurmAuthError(f"the Slurm JWT from {source} is empty")
    if len(token) > MAX_JWT:
        raise SlurmAuthError(f"the Slurm JWT from {source} is over {MAX_JWT} characters")
    claims = _claims(token, source)
    user = claims.get("sun")
    expires = claims.get("exp")
    return Jwt(
        token=token,
        source=source,
        user=user if isinstance(user, str) and user else None,
        expires_at=float(expires) if isinstance(expires, int | float) else None,
    )


def load_jwt(
    token_file: str | Path | None,
    environ: dict[str, str],
    *,
    env_name: str = JWT_ENV,
    allow_insecure: bool = False,
) -> Jwt:
    """The JWT from ``token_file`` if given, else from the ``env_name`` environment variable.

    Raises :class:`ConfigError` when neither holds one, and :class:`SlurmAuthError` when the
    token is malformed.
    """
    if token_file is not None:
        text = load_token(token_file, allow_insecure=allow_insecure)
        return parse_jwt(text, f"file {token_file}")
    if environ.get(env_name, "").strip():
        return parse_jwt(environ[env_name], f"${env_name}")
    raise ConfigError(
        f"slurmrestd needs a JWT: give --slurm-token-file FILE or set ${env_name} "
        "(`scontrol token username=USER lifespan=SECONDS` makes one)"
    )
