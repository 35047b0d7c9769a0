"""Who may use the Dash app, from where, and who may apply: checked on every request.

* **Host allow-list.** A request whose ``Host`` header is not an allowed host gets 421. A
  page on another site that points its own DNS name at 127.0.0.1 (DNS rebinding) reaches a
  loopback-bound app, but with its own name in ``Host``.
* **The user.** With basic-auth users (``--web.config.file``) every request must carry one:
  401 and a ``WWW-Authenticate`` challenge otherwise, so the browser asks once (a ``GET`` of a
  file of Dash's own JavaScript bundles, as :mod:`.bundles` decides, excepted: they hold no
  data). The users
  and headers are those of the file as it is now: a changed file (or SIGHUP) takes effect
  from the next request, as for the exporter and the agent. With
  ``--auth.trusted-user-header NAME`` the user is that header's value, believed only on
  requests from a trusted proxy's address (``--auth.trusted-proxy``, the connection's
  address, never a forwarded one). Without either, the pages are open and read-only: keep the
  app on loopback.
* **Actions.** A callback that applies or reverts runs only with a user (401 or 403), an
  ``Origin`` (or ``Referer``) among the allowed hosts when the browser sends one (403) and the
  CSRF token of :mod:`.csrf` issued to that same user (403). :func:`action_user` is the user
  it runs as; the advisor records that user as the actor.

Refusals and errors answer JSON (:mod:`.error_answers`), as every toposcope daemon does.
"""

from __future__ import annotations

import ipaddress
import logging
import re
import socket
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field

from flask import Flask, Response, has_request_context, request

from toposcope.dashboards.app import csrf
from toposcope.dashboards.app.error_answers import clipped, install_error_answers, json_answer
from toposcope.errors import UsageError
from toposcope.identity.names import USER_NAME_RULE, is_user_name
from toposcope.serving.httpserver import parse_listen
from toposcope.serving.livewebconfig import LiveWebConfig
from toposcope.serving.webconfig import WebConfig

LOG = logging.getLogger("toposcope.dashboards.app")

Network = ipaddress.IPv4Network | ipaddress.IPv6Network

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
DEFAULT_PROXIES = "127.0.0.1,::1"
REALM = "toposcope dash"
WILDCARDS = ("", "0.0.0.0", "::")

_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_HOST_NAME = re.compile(r"[a-z0-9_]([a-z0-9._-]*[a-z0-9_])?")
_USER = "toposcope.user"
_ACTION_USER = "toposcope.action_user"
_MISDIRECTED = "toposcope.misdirected"


def split_host(value: str) -> tuple[str, int | None] | None:
    """``(host, port)`` of a ``Host`` header or allow-list entry, lowercased, IPv6 in
    brackets, port ``None`` when absent; ``None`` when ``value`` is not a host.
    """
    text = value.strip().lower()
    if text.count(":") > 1 and not text.startswith("["):
        text = f"[{text}]"
    if text.startswith("["):
        end = text.find("]")
        host, rest = text[: end + 1], text[end + 1 :]
        try:
            ipaddress.IPv6Address(host[1:-1])
        except ValueError:
            return None
    else:
        host, colon, port_text = text.partition(":")
        rest = colon + port_text
        host = host.rstrip(".")
        if not _HOST_NAME.fullmatch(host):
            return None
    if not rest:
        return host, None
    digits = rest[1:]
    if not rest.startswith(":") or not (digits.isascii() and digits.isdigit()):
        return None
    port = int(digits)
    return (host, port) if port <= 65535 else None


def _entry(host: str, port: int | None) -> str:
    return f"{host}:{port}" if port else host


def parse_hosts(text: str) -> tuple[str, ...]:
    """The ``--web.allowed-hosts`` list (``HOST[:PORT][,...]``; no port: any port)."""
    entries = []
    for item in text.split(","):
        parsed = split_host(item)
        if not item.strip() or parsed is None:
            raise UsageError(f"--web.allowed-hosts: {item.strip()!r} is not HOST or HOST:PORT")
        entries.append(_entry(*parsed))
    return tuple(dict.fromkeys(entries))


def default_hosts(listen: str) -> tuple[str, ...]:
    """The hosts the app answers for when ``--web.allowed-hosts`` is not given: the listen
    address's host (this machine's names for a wildcard address) and the loopback names,
    each with the listen port.
    """
    host, port = parse_listen(listen)
    names = [socket.gethostname(), socket.getfqdn()] if host in WILDCARDS else [host]
    entries = []
    for name in (*names, *LOOPBACK_NAMES):
        parsed = split_host(name)
        if parsed is not None:
            entries.append(_entry(parsed[0], port or None))
    return tuple(dict.fromkeys(entries))


def parse_proxies(text: str) -> tuple[Network, ...]:
    """The ``--auth.trusted-proxy`` list: addresses or CIDR networks, comma-separated."""
    networks = []
    for item in text.split(","):
        try:
            networks.append(ipaddress.ip_network(item.strip(), strict=False))
        except ValueError:
            raise UsageError(
                f"--auth.trusted-proxy: {item.strip()!r} is not an IP address or network"
            ) from None
    return tuple(networks)


def check_header_name(name: str) -> str:
    """``name`` when it is an HTTP header name (:class:`UsageError` otherwise)."""
    if not _HEADER_NAME.fullmatch(name) or name.lower() in ("authorization", "cookie", "host"):
        raise UsageError(f"--auth.trusted-user-header: {name!r} is not a usable header name")
    return name


def _user_name(value: str | None) -> str | None:
    name = (value or "").strip()
    if not name:
        return None
    if not is_user_name(name):
        LOG.warning("ignoring a trusted user header whose value is not %s", USER_NAME_RULE)
        return None
    return name


@dataclass(frozen=True)
class Access:
    """How the app knows who is asking and which hosts it answers for.

    ``web_config`` holds basic-auth users and headers (a :class:`LiveWebConfig` follows its
    file's changes, a :class:`WebConfig` stays as given); ``user_header`` names the header a
    trusted proxy puts the authenticated user in, believed only from ``trusted_proxies``;
    ``allowed_hosts`` are ``HOST`` (any port) or ``HOST:PORT`` entries.
    """

    web_config: WebConfig | LiveWebConfig | None = None
    user_header: str | None = None
    trusted_proxies: tuple[Network, ...] = field(
        default_factory=lambda: parse_proxies(DEFAULT_PROXIES)
    )
    allowed_hosts: tuple[str, ...] = LOOPBACK_NAMES

    def __post_init__(self) -> None:
        if self.user_header is not None:
            check_header_name(self.user_header)
        object.__setattr__(self, "allowed_hosts", parse_hosts(",".join(self.allowed_hosts)))

    def web(self) -> WebConfig | None:
        """The web configuration in force now (its file read again first if it changed)."""
        if isinstance(self.web_config, LiveWebConfig):
            return self.web_config.current()
        return self.web_config

    @property
    def basic_auth(self) -> bool:
        """Whether every request must carry basic-auth credentials."""
        web = self.web()
        return web is not None and web.basic_auth

    @property
    def authenticates(self) -> bool:
        """Whether the app can tell who a user is (else nobody may apply or revert)."""
        return self.basic_auth or self.user_header is not None

    def host_allowed(self, value: str | None) -> bool:
        """Whether a ``Host`` header (or an origin's ``host:port``) is one the app serves."""
        parsed = split_host(value) if value else None
        if parsed is None:
            return False
        host, port = parsed
        for entry in self.allowed_hosts:
            allowed = split_host(entry)
            if allowed is not None and allowed[0] == host and allowed[1] in (None, port):
                return True
        return False

    def trusted(self, remote: str | None) -> bool:
        """Whether a connection from ``remote`` comes from a trusted proxy."""
        try:
            address = ipaddress.ip_address((remote or "").split("%")[0])
        except ValueError:
            return False
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        return any(address in network for network in self.trusted_proxies)

    def identify(self, header: Callable[[str], str | None], remote: str | None) -> str | None:
        """The user a request proves (``header`` reads its headers), or ``None``."""
        if self.user_header is not None and self.trusted(remote):
            named = _user_name(header(self.user_header))
            if named is not None:
                return named
        web = self.web()
        return web.check_basic_auth(header("Authorization")) if web is not None else None

    def sign_in_hint(self) -> str:
        """What a user who may not apply needs, for the page and the refusal."""
        if not self.authenticates:
            return (
                "apply and revert are off: they need a signed-in user; start the app with "
                "--web.config.file (basic-auth users) or, behind an authenticating proxy, "
                "--auth.trusted-user-header"
            )
        return (
            "apply and revert need a signed-in user: this request did not come from a "
            f"trusted proxy with the {self.user_header} header"
        )


def current_user() -> str | None:
    """The user the current request proved, if any (``None`` outside a request)."""
    return request.environ.get(_USER) if has_request_context() else None


def action_user() -> str | None:
    """The user an apply or revert request passed every check as, else ``None``."""
    return request.environ.get(_ACTION_USER) if has_request_context() else None


def _refuse(status: int, message: str) -> Response:
    LOG.warning(
        "refused %s %s from %s: %s",
        request.method,
        clipped(request.path),
        request.remote_addr,
        message,
    )
    return json_answer(message, status)


def _challenge() -> Response:
    response = json_answer("this app needs a user name and password", 401)
    response.headers["WWW-Authenticate"] = f'Basic realm="{REALM}", charset="UTF-8"'
    return response


def _origin_allowed(access: Access) -> tuple[bool, str]:
    origin = request.headers.get("Origin") or request.headers.get("Referer")
    if origin is None:
        return True, ""
    try:
        netloc = urllib.parse.urlsplit(origin).netloc.rpartition("@")[2]
    except ValueError:
        return False, origin
    return access.host_allowed(netloc), origin


#: methods that may fetch a bundle file without a user
LIBRARY_METHODS = frozenset({"GET", "HEAD"})


def install(
    server: Flask,
    access: Access,
    actions: frozenset[str],
    update_path: str,
    library: Callable[[str], bool],
) -> None:
    """Check every request of ``server`` as the module says, and answer its errors as JSON.

    ``actions`` are the Dash callback ids that change state; ``update_path`` is the route of
    Dash's callback endpoint; ``library`` says whether a request path (as routed) is a file
    of Dash's component bundles, served without a user.
    """
    tokens = csrf.CsrfTokens()
    install_error_answers(server)

    def is_library() -> bool:
        path = request.environ.get("PATH_INFO")
        return request.method in LIBRARY_METHODS and isinstance(path, str) and library(path)

    def is_action() -> bool:
        rule = request.url_rule
        if rule is None or rule.rule != update_path:
            return False
        body = request.get_json(silent=True)
        output = body.get("output") if isinstance(body, dict) else None
        return isinstance(output, str) and output in actions

    @server.before_request
    def guard() -> Response | None:
        host = request.headers.get("Host")
        if not access.host_allowed(host):
            request.environ[_MISDIRECTED] = True
            return _refuse(
                421,
                f"this app does not answer for host {host!r}; if that is its address, start it "
                "with --web.allowed-hosts naming it",
            )
        user = access.identify(request.headers.get, request.remote_addr)
        request.environ[_USER] = user
        if user is None and access.basic_auth and not is_library():
            return _challenge()
        if not is_action():
            return None
        if user is None:
            return _refuse(403, access.sign_in_hint())
        allowed, origin = _origin_allowed(access)
        if not allowed:
            return _refuse(403, f"a request from the page at {origin!r} may not apply or revert")
        if not tokens.matches(
            request.cookies.get(csrf.COOKIE), request.headers.get(csrf.HEADER), user
        ):
            return _refuse(
                403, "missing, stale or another user's CSRF token: reload the page and try again"
            )
        request.environ[_ACTION_USER] = user
        return None

    @server.after_request
    def finish(response: Response) -> Response:
        if request.environ.get(_MISDIRECTED):
            return response
        user = current_user()
        if user is not None and not tokens.valid(request.cookies.get(csrf.COOKIE), user):
            response.set_cookie(
                csrf.COOKIE, tokens.issue(user), samesite="Strict", secure=request.is_secure
            )
        web = access.web()
        if web is not None:
            response.headers.update(web.headers)
        return response
