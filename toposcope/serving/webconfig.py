"""Web configuration files in the Prometheus exporter-toolkit format (``--web.config.file``).

One reader for every toposcope HTTP server, so that an operator writes the same file they
write for Prometheus and its exporters::

    basic_auth_users:
      alice: $2y$10$...          # bcrypt hash (htpasswd -nBC 10 "" | tr -d ':\\n')
    http_server_config:
      headers:
        X-Frame-Options: deny

``basic_auth_users`` maps user names (:func:`toposcope.identity.names.is_user_name`: they are
recorded as who changed something) to bcrypt hashes; ``http_server_config.headers`` lists
security headers to add to every answer (``http2`` is accepted and has no effect: toposcope
serves HTTP/1.1). ``tls_server_config`` (:mod:`toposcope.serving.tlsconfig`) makes the server speak
TLS only; its relative file paths are read from the configuration file's folder, as the
toolkit does. Validation is strict like the toolkit's: an unknown key, a value of the wrong
type or a hash that is not bcrypt is a :class:`ConfigError` naming the file, the line and the
key.

:meth:`WebConfig.check_basic_auth` checks an ``Authorization`` header. An unknown user costs
the same bcrypt work as a known one (a dummy hash), and successful checks are remembered
(keyed by a keyed hash of the credentials, never the password) so that a page that sends a
dozen requests pays bcrypt's cost once.

PyYAML and bcrypt (1.5 MB resident together) are imported where a file is read or a user
is checked, so a daemon started without ``--web.config.file`` never holds them.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import secrets
import threading
from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from toposcope.errors import ConfigError
from toposcope.identity.names import USER_NAME_RULE, is_user_name
from toposcope.serving.tlsconfig import CLIENT_AUTH_TYPES, TLS_KEYS, TLS_VERSIONS, TlsSettings
from toposcope.yamlnodes import YamlNodes, compose_config, refuse_in

if TYPE_CHECKING:
    import yaml

TOP_KEYS = ("basic_auth_users", "http_server_config", "tls_server_config")
HTTP_SERVER_KEYS = ("headers", "http2")
#: headers the toolkit lets a file set, with the values it accepts (None: any text)
SECURITY_HEADERS: dict[str, tuple[str, ...] | None] = {
    "Content-Security-Policy": None,
    "X-Frame-Options": ("deny", "sameorigin"),
    "X-Content-Type-Options": ("nosniff",),
    "X-XSS-Protection": None,
    "Strict-Transport-Security": None,
}
BCRYPT_HASH = re.compile(r"\$2[aby]\$(0[4-9]|[12][0-9]|3[01])\$[./A-Za-z0-9]{53}")
#: bcrypt reads at most this many bytes of a password; longer ones are refused
MAX_PASSWORD_BYTES = 72
CACHE_SIZE = 256


class WebConfig:
    """A checked web configuration: basic-auth users, extra response headers and TLS.

    ``users`` maps names to bcrypt hashes; ``source`` names the file in messages; ``tls`` is
    ``None`` for plain HTTP.
    """

    def __init__(
        self,
        source: str,
        users: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
        tls: TlsSettings | None = None,
    ) -> None:
        self.source = source
        self.tls = tls
        self._users = {name: digest.encode("ascii") for name, digest in (users or {}).items()}
        self.headers: dict[str, str] = dict(headers or {})
        self._key = secrets.token_bytes(32)
        self._cache: OrderedDict[bytes, str] = OrderedDict()
        self._lock = threading.Lock()
        self._dummy = b""
        if self._users:
            # bcrypt is needed only with basic-auth users (see the module docstring)
            import bcrypt  # noqa: PLC0415

            cost = max(int(h[4:6]) for h in self._users.values())
            self._dummy = bcrypt.hashpw(b"", bcrypt.gensalt(rounds=cost))

    def __repr__(self) -> str:
        return f"WebConfig({self.source!r}, users={sorted(self._users)})"

    @property
    def users(self) -> tuple[str, ...]:
        """The basic-auth user names, sorted."""
        return tuple(sorted(self._users))

    @property
    def basic_auth(self) -> bool:
        """Whether the file lists basic-auth users (then every request must carry one)."""
        return bool(self._users)

    def check_basic_auth(self, header: str | None) -> str | None:
        """The user an ``Authorization: Basic ...`` header proves, or ``None``.

        A missing or malformed header, an unknown user and a wrong password all answer
        ``None``; the last two take the same time (one bcrypt check either way).
        """
        if not self._users or not header:
            return None
        scheme, _, encoded = header.strip().partition(" ")
        if scheme.lower() != "basic":
            return None
        try:
            credentials = base64.b64decode(encoded.strip(), validate=True)
        except (binascii.Error, ValueError):
            return None
        key = hmac.new(self._key, credentials, hashlib.sha256).digest()
        with self._lock:
            known = self._cache.get(key)
            if known is not None:
                self._cache.move_to_end(key)
                return known
        name_bytes, colon, password = credentials.partition(b":")
        try:
            name = name_bytes.decode("utf-8")
        except UnicodeDecodeError:
            name = ""
        stored = self._users.get(name) if colon else None
        fits = len(password) <= MAX_PASSWORD_BYTES
        import bcrypt  # noqa: PLC0415  (loaded already by __init__ when there are users)

        matched = bcrypt.checkpw(password[:MAX_PASSWORD_BYTES], stored or self._dummy)
        if not (stored and fits and matched):
            return None
        with self._lock:
            self._cache[key] = name
            while len(self._cache) > CACHE_SIZE:
                self._cache.popitem(last=False)
        return name


def load_web_config(path: str | Path) -> WebConfig:
    """Read and check the web configuration file at ``path`` (:class:`ConfigError` if bad)."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"reading web config file {file}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"reading web config file {file}: not UTF-8 text") from exc
    return parse_web_config(text, str(file), file.parent)


def parse_web_config(text: str, source: str, folder: Path | None = None) -> WebConfig:
    """Check web configuration YAML ``text``; ``source`` names it in errors and ``folder``
    is where relative TLS file paths are (the working directory without one).
    """
    root = compose_config(text, source)
    reader = YamlNodes(refuse_in(source), null_mapping_is_empty=True)
    if root is None:
        return WebConfig(source)
    top = reader.mapping(root, "(top level)", TOP_KEYS)
    tls = top.get("tls_server_config")
    settings = None if tls is None or reader.empty(tls) else _tls(reader, tls, folder or Path())
    users: dict[str, str] = {}
    if "basic_auth_users" in top:
        for name, value in reader.mapping(top["basic_auth_users"], "basic_auth_users").items():
            field = f"basic_auth_users.{name}"
            if not is_user_name(name):
                raise reader.error(value, field, f"a user name must be {USER_NAME_RULE}")
            digest = reader.text(value, field)
            if not BCRYPT_HASH.fullmatch(digest):
                raise reader.error(
                    value, field, "not a bcrypt hash ($2a$, $2b$ or $2y$, cost 04-31, 60 chars)"
                )
            users[name] = digest
    headers: dict[str, str] = {}
    if "http_server_config" in top:
        server = reader.mapping(top["http_server_config"], "http_server_config", HTTP_SERVER_KEYS)
        if "http2" in server:
            reader.boolean(server["http2"], "http_server_config.http2")
        if "headers" in server:
            wanted = reader.mapping(
                server["headers"], "http_server_config.headers", tuple(SECURITY_HEADERS)
            )
            for header, value in wanted.items():
                field = f"http_server_config.headers.{header}"
                shown = reader.text(value, field)
                allowed = SECURITY_HEADERS[header]
                if allowed is not None and shown.lower() not in allowed:
                    raise reader.error(value, field, f"must be one of {', '.join(allowed)}")
                if shown:
                    headers[header] = shown
    return WebConfig(source, users, headers, settings)


def _tls(reader: YamlNodes, node: yaml.Node, folder: Path) -> TlsSettings:
    """The ``tls_server_config`` mapping, checked like exporter-toolkit checks it."""
    entries = reader.mapping(node, "tls_server_config", TLS_KEYS)
    values: dict[str, str] = {}
    for key, value in entries.items():
        values[key] = reader.text(value, f"tls_server_config.{key}")
    for key in ("cert_file", "key_file"):
        if not values.get(key):
            raise reader.error(node, f"tls_server_config.{key}", "missing (TLS needs both files)")
    choices: dict[str, Mapping[str, object]] = {
        "client_auth_type": CLIENT_AUTH_TYPES,
        "min_version": TLS_VERSIONS,
        "max_version": TLS_VERSIONS,
    }
    for key, known in choices.items():
        if key in values and values[key] not in known:
            field = f"tls_server_config.{key}"
            raise reader.error(entries[key], field, f"must be one of {', '.join(known)}")
    ca = values.get("client_ca_file")
    try:
        return TlsSettings(
            cert_file=folder / values["cert_file"],
            key_file=folder / values["key_file"],
            client_ca_file=folder / ca if ca else None,
            client_auth_type=values.get("client_auth_type", "NoClientCert"),
            min_version=values.get("min_version", "TLS12"),
            max_version=values.get("max_version", "TLS13"),
        )
    except ValueError as exc:
        raise reader.error(node, "tls_server_config", str(exc)) from exc
