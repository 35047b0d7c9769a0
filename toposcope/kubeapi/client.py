"""Talking to the Kubernetes API server: where it is, how to authenticate, bounded requests.

Parts that read a few objects from the API server (the exporter's pod owners, the advisor's
agent endpoints) or write one (the exporter's NodeResourceTopology) share this instead of a
client library: one JSON request with a bearer token or a client certificate, a CA bundle, a
timeout, and an answer-size bound that is checked (an answer over it is an error, never
silently cut). Two ways to find the server:

* :func:`in_cluster`: as a pod's service account (``KUBERNETES_SERVICE_HOST``/``PORT``, the
  token and ``ca.crt`` mounted under :data:`SERVICE_ACCOUNT_DIR`), as client-go does;
* :func:`from_kubeconfig`: a kubeconfig file's current context (server, CA file or data,
  ``insecure-skip-tls-verify``, a token, token file or client certificate files). Exec and
  auth-provider plugins are refused with a clear message: the exporter does not run
  programs named by a file.

Every failure is a :class:`KubeApiError` (a :class:`~toposcope.errors.ConfigError`, exit 2
on the command line) that says what was asked and what went wrong.
"""

from __future__ import annotations

import base64
import ipaddress
import json
import os
import ssl
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toposcope.auth.tokens import Token, TokenFile, token_text
from toposcope.boundedread import load_yaml_mapping
from toposcope.errors import ConfigError
from toposcope.identity.names import is_node_name
from toposcope.jsonrequest import json_request

#: the largest answer read (a list of thousands of objects stays far below)
MAX_API_ANSWER = 16 * 1024 * 1024
#: where Kubernetes mounts a pod's service-account token, CA bundle and namespace
SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
#: the largest error answer read for its ``Status`` message, and the longest message kept
MAX_ERROR_ANSWER = 64 * 1024
MAX_ERROR_MESSAGE = 300
#: the largest kubeconfig file read
MAX_KUBECONFIG = 1024 * 1024


class KubeApiError(ConfigError):
    """The API server could not be found, reached or understood."""


@dataclass(frozen=True)
class KubeApi:
    """One API server and the credentials to read from it (see the module docstring).

    ``token`` may be a :class:`~toposcope.auth.tokens.TokenFile`: a service-account token the
    kubelet rotates is then read again when it changes, as client-go does.
    """

    url: str
    token: Token | None = None
    context: ssl.SSLContext | None = None
    timeout: float = 10.0
    max_answer: int = MAX_API_ANSWER

    def get(self, path: str) -> Any:
        """GET ``path`` (``/api/v1/...`` with its query) and decode the JSON answer.

        Raises :class:`KubeApiError` on an HTTP error status (:class:`KubeApiStatusError`),
        an unreachable server, an answer over ``max_answer`` bytes, or an answer that is not
        JSON.
        """
        return self.request("GET", path)

    def request(self, method: str, path: str, body: Any = None) -> Any:
        """Send ``method`` to ``path`` with ``body`` (JSON, when not ``None``); the JSON answer.

        The writes of the exporter's NodeResourceTopology publishing (``POST``, ``PUT`` with
        ``metadata.resourceVersion``) go through here. An error status raises
        :class:`KubeApiStatusError` carrying the code and the ``Status`` message the server
        gave (cut to :data:`MAX_ERROR_MESSAGE` characters); other failures as :meth:`get`.
        """
        request = json_request(f"{self.url}{path}", method, body, token=token_text(self.token))
        try:
            with urllib.request.urlopen(
                request, timeout=self.timeout, context=self.context
            ) as response:
                raw = response.read(self.max_answer + 1)
        except urllib.error.HTTPError as exc:
            raise KubeApiStatusError(method, path, exc.code, str(exc.reason), exc) from None
        except (urllib.error.URLError, OSError) as exc:
            raise KubeApiError(f"Kubernetes API {self.url} unreachable: {exc}") from None
        if len(raw) > self.max_answer:
            raise KubeApiError(f"Kubernetes API {path}: answer over {self.max_answer} bytes")
        try:
            return json.loads(raw)
        except ValueError as exc:
            raise KubeApiError(f"Kubernetes API {path}: answer is not JSON: {exc}") from None


class KubeApiStatusError(KubeApiError):
    """The API server answered an error status: ``code`` (404, 409...) and its message."""

    def __init__(
        self, method: str, path: str, code: int, reason: str, answer: urllib.error.HTTPError
    ) -> None:
        self.code = code
        self.message = _status_message(answer)
        detail = f": {self.message}" if self.message else ""
        where = path if method == "GET" else f"{method} {path}"
        super().__init__(f"Kubernetes API {where}: HTTP {code} {reason}{detail}")


def continue_token(answer: object, path: str) -> str:
    """The ``metadata.continue`` of a list ``answer`` from ``path``: where the next page
    starts, empty on the last page; a token that is not a string is refused.
    """
    meta = answer.get("metadata") if isinstance(answer, Mapping) else None
    token = (meta.get("continue") or "") if isinstance(meta, Mapping) else ""
    if not isinstance(token, str):
        raise KubeApiError(f"Kubernetes API {path}: metadata.continue is not a string")
    return token


def _status_message(answer: urllib.error.HTTPError) -> str:
    """The ``message`` of the ``Status`` object an error answer carries; empty when none."""
    try:
        status = json.loads(answer.read(MAX_ERROR_ANSWER))
    except (OSError, ValueError, AttributeError):
        return ""
    message = status.get("message") if isinstance(status, Mapping) else None
    if not isinstance(message, str):
        return ""
    printable = "".join(c if c.isprintable() else "?" for c in message)
    return printable[:MAX_ERROR_MESSAGE]


def url_host(host: str) -> str:
    """``host`` as a URL host (IPv6 in brackets); :class:`KubeApiError` unless a host name or
    an IP address.
    """
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        if not is_node_name(host):
            raise KubeApiError(f"{host!r} is neither a host name nor an IP address") from None
        return host
    return f"[{address}]" if address.version == 6 else str(address)


def check_api_url(url: str, where: str) -> str:
    """``url`` when it is a plain ``http(s)://host[:port][/path]`` (no credentials, query or
    fragment); else :class:`KubeApiError` naming ``where``.
    """
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 (raises on a bad port)
    except ValueError as exc:
        raise KubeApiError(f"{where}: bad URL {url!r}: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise KubeApiError(f"{where}: {url!r} is not an http:// or https:// URL with a host")
    if parts.username or parts.password or parts.query or parts.fragment:
        raise KubeApiError(f"{where}: {url!r} must not carry credentials, a query or a fragment")
    url_host(parts.hostname)
    return url


def in_cluster(
    account_dir: Path = SERVICE_ACCOUNT_DIR,
    api_url: str | None = None,
    timeout: float = 10.0,
    environ: Mapping[str, str] | None = None,
) -> KubeApi:
    """The API server as this pod's service account sees it.

    ``api_url`` defaults to ``https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT``;
    the token is ``account_dir/token`` (read again whenever the kubelet rotates it) and the CA
    bundle ``account_dir/ca.crt`` (when there).
    """
    env = os.environ if environ is None else environ
    if api_url is None:
        host = env.get("KUBERNETES_SERVICE_HOST")
        port = env.get("KUBERNETES_SERVICE_PORT", "443")
        if not host:
            raise KubeApiError("not running in a pod: KUBERNETES_SERVICE_HOST is unset")
        if not port.isdigit() or not 0 < int(port) < 65536:
            raise KubeApiError(f"KUBERNETES_SERVICE_PORT {port[:20]!r} is not a port number")
        api_url = f"https://{url_host(host)}:{int(port)}"
    url = check_api_url(api_url, "Kubernetes API URL").rstrip("/")
    token = TokenFile(account_dir / "token", allow_insecure=True)
    ca_file = account_dir / "ca.crt"
    context = ssl.create_default_context(cafile=str(ca_file)) if ca_file.exists() else None
    return KubeApi(url, token, context, timeout)


def connect(kubeconfig: str | Path | None, timeout: float = 10.0) -> KubeApi:
    """The API server of ``kubeconfig`` when given, else as this pod's service account."""
    return from_kubeconfig(kubeconfig, timeout) if kubeconfig else in_cluster(timeout=timeout)


def from_kubeconfig(path: str | Path, timeout: float = 10.0) -> KubeApi:
    """The API server of a kubeconfig file's current context (see the module docstring)."""
    where = f"kubeconfig {path}"
    config = load_yaml_mapping(path, MAX_KUBECONFIG, where, "a kubeconfig", error=KubeApiError)
    current = config.get("current-context")
    context = _named(config, "contexts", current, where).get("context")
    if not isinstance(context, Mapping):
        raise KubeApiError(f"{where}: context {current!r} has no 'context' mapping")
    cluster = _named(config, "clusters", context.get("cluster"), where).get("cluster")
    user_entry = _named(config, "users", context.get("user"), where) if context.get("user") else {}
    user = user_entry.get("user") or {}
    if not isinstance(cluster, Mapping) or not isinstance(user, Mapping):
        raise KubeApiError(f"{where}: cluster or user of {current!r} is not a mapping")
    server = cluster.get("server")
    if not isinstance(server, str):
        raise KubeApiError(f"{where}: cluster of {current!r} has no server")
    url = check_api_url(server, f"{where}: server").rstrip("/")
    base = Path(path).parent
    ssl_context = _tls_context(cluster, user, base, where) if url.startswith("https:") else None
    return KubeApi(url, _token(user, base, where), ssl_context, timeout)


def _named(config: Mapping[str, Any], section: str, name: object, where: str) -> Mapping[str, Any]:
    """The entry called ``name`` in a kubeconfig list (``contexts``, ``clusters``, ``users``)."""
    for entry in config.get(section) or []:
        if isinstance(entry, Mapping) and entry.get("name") == name:
            return entry
    raise KubeApiError(f"{where}: no {section[:-1]} named {name!r}")


def _file(value: object, base: Path) -> str:
    """A kubeconfig file reference: relative paths are relative to the kubeconfig's folder."""
    path = Path(str(value))
    return str(path if path.is_absolute() else base / path)


def _token(user: Mapping[str, Any], base: Path, where: str) -> Token | None:
    for plugin in ("exec", "auth-provider"):
        if plugin in user:
            raise KubeApiError(
                f"{where}: user {plugin!r} plugins are not supported; give a token, a "
                "tokenFile or client-certificate/client-key files"
            )
    token = user.get("token")
    if isinstance(token, str) and token:
        return token
    token_file = user.get("tokenFile")
    if token_file:
        return TokenFile(_file(token_file, base), allow_insecure=True)
    return None


def _tls_context(
    cluster: Mapping[str, Any], user: Mapping[str, Any], base: Path, where: str
) -> ssl.SSLContext:
    try:
        if cluster.get("insecure-skip-tls-verify") is True:
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        elif cluster.get("certificate-authority-data"):
            pem = _base64(cluster["certificate-authority-data"], where)
            context = ssl.create_default_context(cadata=pem)
        elif cluster.get("certificate-authority"):
            context = ssl.create_default_context(
                cafile=_file(cluster["certificate-authority"], base)
            )
        else:
            context = ssl.create_default_context()
        _client_certificate(context, user, base, where)
    except (OSError, ssl.SSLError) as exc:
        raise KubeApiError(f"{where}: TLS settings unusable: {exc}") from None
    return context


def _client_certificate(
    context: ssl.SSLContext, user: Mapping[str, Any], base: Path, where: str
) -> None:
    """Load the user's client certificate and key (files, or ``-data`` through a private
    temporary folder, since :mod:`ssl` reads them from files only).
    """
    if user.get("client-certificate") and user.get("client-key"):
        context.load_cert_chain(
            _file(user["client-certificate"], base), _file(user["client-key"], base)
        )
        return
    if user.get("client-certificate-data") and user.get("client-key-data"):
        with tempfile.TemporaryDirectory() as folder:
            cert, key = Path(folder) / "cert.pem", Path(folder) / "key.pem"
            cert.write_text(_base64(user["client-certificate-data"], where))
            key.touch(mode=0o600)
            key.write_text(_base64(user["client-key-data"], where))
            context.load_cert_chain(str(cert), str(key))


def _base64(value: object, where: str) -> str:
    try:
        return base64.b64decode(str(value), validate=True).decode("ascii")
    except (ValueError, UnicodeDecodeError):
        raise KubeApiError(f"{where}: inline certificate data is not base64 PEM") from None
