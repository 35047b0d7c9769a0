"""Bearer tokens checked by the Kubernetes API server (TokenReview), for a server in a pod.

Inside Kubernetes a server need not share a secret with its callers: each caller sends its
own projected ServiceAccount token, bound to an audience (``toposcope-agent``) and rotated by
the kubelet, and the server asks the API server who that is with a TokenReview
(``POST /apis/authentication.k8s.io/v1/tokenreviews``, ``spec.token`` and
``spec.audiences``). A request passes only when the review says:

* ``status.authenticated`` is true (else 401: the token is unknown, expired, revoked, or
  not valid for our audience);
* ``status.audiences`` holds our audience. The API documents that an audience-aware
  authenticator returns the intersection of the token's and the review's audiences, and that
  an empty list means "valid for the API server's own audience": such a token (a pod's
  default token, say) is refused with 403, so a token minted for the API server is never
  accepted as one for us;
* ``status.user.username`` is ``system:serviceaccount:NAMESPACE:NAME`` of an allowed
  account (else 403).

Accepted tokens are remembered for a short time (``ttl``) in a bounded cache keyed by the
SHA-256 of the token, never the token itself, so a burst of actions costs one review; refusals
are not cached. When the API server cannot be asked (unreachable, an error status such as a
missing ``tokenreviews create`` permission, or an answer that is not a TokenReview) the check
fails closed: 503 with a JSON error, and the guarded view never runs. Tokens never appear in
logs or error messages.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from toposcope.auth.bearer import BearerRefusal
from toposcope.errors import ConfigError
from toposcope.identity.names import is_node_name
from toposcope.kubeapi.client import KubeApiError, KubeApiStatusError

LOG = logging.getLogger("toposcope.kubeapi.tokenreview")

TOKENREVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
#: the audience the advisor's projected token is minted for, by default
DEFAULT_AUDIENCE = "toposcope-agent"
#: how long an accepted token is remembered, by default (seconds)
DEFAULT_TTL = 30.0
#: how many accepted tokens are remembered at most
MAX_CACHED = 256
#: a bearer token longer than this is refused without asking the API server
MAX_TOKEN_LENGTH = 16 * 1024
SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"

NOT_AUTHENTICATED = "the Kubernetes API server did not authenticate this bearer token"
UNAVAILABLE = (
    "cannot check the bearer token: the Kubernetes API server did not answer the TokenReview; "
    "nothing was done, retry later"
)


class Poster(Protocol):
    """What the check needs of an API-server client (:class:`toposcope.kubeapi.client.KubeApi`)."""

    def request(self, method: str, path: str, body: Any = None) -> Any:
        """Send ``method`` to ``path`` with a JSON ``body``; the decoded JSON answer."""
        ...


def parse_service_account(text: str) -> str:
    """The username of ``NAMESPACE:NAME`` (``system:serviceaccount:NAMESPACE:NAME``).

    :class:`ConfigError` unless both parts are DNS labels, as Kubernetes names them.
    """
    namespace, sep, name = text.partition(":")
    if not sep or not is_node_name(namespace) or not is_node_name(name) or "." in namespace:
        raise ConfigError(
            f"service account {text[:80]!r} is not NAMESPACE:NAME "
            "(e.g. toposcope:toposcope-advisor)"
        )
    return f"{SERVICE_ACCOUNT_PREFIX}{namespace}:{name}"


def token_key(token: str) -> str:
    """The cache key of ``token``: its SHA-256, so the token itself is never kept or logged."""
    return hashlib.sha256(token.encode()).hexdigest()


class TokenReviewVerifier:
    """Check bearer tokens with TokenReview (see the module docstring).

    ``allowed`` are ``NAMESPACE:NAME`` service accounts; ``clock`` is what the cache's ``ttl``
    is measured with (monotonic seconds), given explicitly by tests.
    """

    def __init__(
        self,
        api: Poster,
        allowed: Iterable[str],
        *,
        audience: str = DEFAULT_AUDIENCE,
        ttl: float = DEFAULT_TTL,
        max_cached: int = MAX_CACHED,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.api = api
        self.allowed = frozenset(parse_service_account(a) for a in allowed)
        if not self.allowed:
            raise ConfigError("TokenReview authentication needs at least one allowed account")
        if not audience or len(audience) > 253 or not audience.isprintable():
            raise ConfigError(f"audience {audience[:80]!r} is empty, too long or not printable")
        if not 0 <= ttl <= 600:
            raise ConfigError(f"the TokenReview cache TTL must be 0 to 600 seconds, not {ttl}")
        self.audience = audience
        self.ttl = ttl
        self.max_cached = max(1, max_cached)
        self.clock = clock
        self._lock = threading.Lock()
        self._accepted: OrderedDict[str, float] = OrderedDict()

    def verify(self, token: str) -> BearerRefusal | None:
        """Why ``token`` may not pass (401, 403 or 503), or ``None`` when it may."""
        if len(token) > MAX_TOKEN_LENGTH:
            return _unauthenticated()
        key = token_key(token)
        if self._cached(key):
            return None
        try:
            answer = self.api.request("POST", TOKENREVIEWS, self._review(token))
        except KubeApiStatusError as exc:
            LOG.error("TokenReview refused by the API server (HTTP %d): %s", exc.code, exc)
            return BearerRefusal(503, UNAVAILABLE, {"Retry-After": "10"})
        except KubeApiError as exc:
            LOG.error("TokenReview failed: %s", exc)
            return BearerRefusal(503, UNAVAILABLE, {"Retry-After": "10"})
        refusal = self._judge(answer, key)
        if refusal is None:
            self._remember(key)
        return refusal

    def _review(self, token: str) -> dict[str, Any]:
        return {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": token, "audiences": [self.audience]},
        }

    def _judge(self, answer: object, key: str) -> BearerRefusal | None:
        """The refusal the review ``answer`` calls for (``key`` names the token in logs)."""
        status = answer.get("status") if isinstance(answer, Mapping) else None
        if not isinstance(status, Mapping):
            LOG.error("TokenReview answer has no status object: not a TokenReview")
            return BearerRefusal(503, UNAVAILABLE, {"Retry-After": "10"})
        if status.get("authenticated") is not True:
            LOG.info("token %.12s not authenticated by the API server", key)
            return _unauthenticated()
        user = status.get("user")
        username = user.get("username") if isinstance(user, Mapping) else None
        shown = username if isinstance(username, str) and username.isprintable() else "?"
        audiences = status.get("audiences")
        if not isinstance(audiences, list) or self.audience not in audiences:
            LOG.warning("token %.12s of %s is not for audience %s", key, shown, self.audience)
            return BearerRefusal(403, f"the token is not for audience {self.audience}", {})
        if username not in self.allowed:
            LOG.warning("token %.12s of %s: not an allowed service account", key, shown)
            return BearerRefusal(403, f"{shown[:120]} may not change this server's state", {})
        return None

    def _cached(self, key: str) -> bool:
        with self._lock:
            until = self._accepted.get(key)
            if until is None:
                return False
            if self.clock() >= until:
                del self._accepted[key]
                return False
            return True

    def _remember(self, key: str) -> None:
        if self.ttl <= 0:
            return
        with self._lock:
            self._accepted[key] = self.clock() + self.ttl
            self._accepted.move_to_end(key)
            while len(self._accepted) > self.max_cached:
                self._accepted.popitem(last=False)

    def cached(self) -> int:
        """How many accepted tokens are remembered now (expired ones included until asked)."""
        with self._lock:
            return len(self._accepted)


def _unauthenticated() -> BearerRefusal:
    """401 for a token the API server does not vouch for (the caller adds the challenge)."""
    return BearerRefusal(401, NOT_AUTHENTICATED, {})
