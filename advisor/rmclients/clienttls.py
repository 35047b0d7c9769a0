"""How the advisor's resource-manager clients connect: TLS towards agents and the simulator,
and where a bearer token may go in clear.

``--rm-tls-ca-file`` names the CA that signed the agents' certificates (the system's CAs
otherwise); ``--rm-tls-cert-file`` / ``--rm-tls-key-file`` the advisor's own certificate for
agents that require one (``client_auth_type: RequireAndVerifyClientCert`` in their
``--web.config.file``); ``--rm-tls-server-name`` the name to expect in every agent's
certificate instead of the host of its URL (as Prometheus' ``tls_config.server_name``). The
certificate's name is always checked.

A bearer token sent over plain ``http://`` can be read by anyone on the path, so the clients
refuse to send one to a host that is not a loopback address unless the operator says
``--rm-allow-plain-http-token`` (a lab network, or TLS ended by a sidecar on the node).
"""

from __future__ import annotations

import argparse
import ipaddress
import ssl
import urllib.parse
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from toposcope.errors import ConfigError

#: The option that lets a token travel over plain HTTP to another host.
ALLOW_PLAIN = "--rm-allow-plain-http-token"


class _NamedContext(ssl.SSLContext):
    """A client context that checks one fixed name in every server certificate."""

    server_name: str = ""

    def wrap_socket(self, *args: Any, **kwargs: Any) -> Any:
        """Wrap as usual, with :attr:`server_name` for SNI and the certificate check."""
        kwargs["server_hostname"] = self.server_name
        return super().wrap_socket(*args, **kwargs)


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (127.0.0.0/8, ``::1``)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class ClientTls:
    """The TLS settings of the resource-manager clients (see the module docstring)."""

    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None
    server_name: str | None = None
    allow_plain_token: bool = False

    def __post_init__(self) -> None:
        if (self.cert_file is None) != (self.key_file is None):
            raise ConfigError("--rm-tls-cert-file and --rm-tls-key-file go together")

    @cached_property
    def context(self) -> ssl.SSLContext:
        """The client context (built once; ``ConfigError`` naming a file that does not load)."""
        context: ssl.SSLContext
        if self.server_name:
            named = _NamedContext(ssl.PROTOCOL_TLS_CLIENT)
            named.server_name = self.server_name
            context = named
        else:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.check_hostname = True
        context.verify_mode = ssl.CERT_REQUIRED
        try:
            if self.ca_file is not None:
                context.load_verify_locations(cafile=self.ca_file)
            else:
                context.load_default_certs(ssl.Purpose.SERVER_AUTH)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"--rm-tls-ca-file {self.ca_file}: cannot load: {exc}") from None
        if self.cert_file is not None and self.key_file is not None:
            try:
                context.load_cert_chain(self.cert_file, self.key_file)
            except (OSError, ssl.SSLError) as exc:
                raise ConfigError(
                    f"--rm-tls-cert-file {self.cert_file} / --rm-tls-key-file {self.key_file}: "
                    f"cannot load: {exc}"
                ) from None
        return context

    def check(self, url: str, token: str | None) -> None:
        """Refuse (``ConfigError``) to send ``token`` over plain HTTP to another host."""
        parts = urllib.parse.urlsplit(url)
        if token is None or parts.scheme != "http" or self.allow_plain_token:
            return
        if not is_loopback(parts.hostname or ""):
            raise ConfigError(
                f"refusing to send the bearer token over plain http to {parts.hostname}: use an "
                f"https:// URL (see --rm-tls-ca-file), or allow it with {ALLOW_PLAIN}"
            )

    def opener_context(self, url: str) -> ssl.SSLContext | None:
        """The context for ``url`` (``None`` for plain HTTP)."""
        return self.context if url.startswith("https:") else None


def add_client_tls_arguments(parser: argparse.ArgumentParser, *, suppress: bool = False) -> None:
    """Declare ``--rm-tls-*`` and :data:`ALLOW_PLAIN` (absent by default with ``suppress``)."""
    default: Any = argparse.SUPPRESS if suppress else None
    for name, text in (
        ("ca-file", "CA that signed the agents' (or simulator's) certificates"),
        ("cert-file", "the advisor's client certificate, for agents that require one"),
        ("key-file", "the key of --rm-tls-cert-file"),
    ):
        parser.add_argument(
            f"--rm-tls-{name}", default=default, metavar="FILE", help=f"https: {text}"
        )
    parser.add_argument(
        "--rm-tls-server-name",
        default=default,
        metavar="NAME",
        help="https: the name every agent's certificate must carry (default: its URL's host)",
    )
    parser.add_argument(
        ALLOW_PLAIN,
        action="store_true",
        default=argparse.SUPPRESS if suppress else False,
        help="send the bearer token over plain http:// to hosts other than loopback",
    )


def client_tls_from_args(args: argparse.Namespace) -> ClientTls:
    """The :class:`ClientTls` the options describe."""

    def path(name: str) -> Path | None:
        value = getattr(args, name, None)
        return Path(value) if value else None

    tls = ClientTls(
        ca_file=path("rm_tls_ca_file"),
        cert_file=path("rm_tls_cert_file"),
        key_file=path("rm_tls_key_file"),
        server_name=getattr(args, "rm_tls_server_name", None) or None,
        allow_plain_token=bool(getattr(args, "rm_allow_plain_http_token", False)),
    )
    if tls.ca_file or tls.cert_file:
        tls.context  # noqa: B018 (a file that does not load fails at start, not at the first call)
    return tls
