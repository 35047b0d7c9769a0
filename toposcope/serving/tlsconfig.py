"""The ``tls_server_config`` of a web configuration file, as exporter-toolkit reads it, and
the :class:`ssl.SSLContext` it stands for.

``client_auth_type`` takes Go's names. Python's TLS stack verifies every client certificate
it asks for, so the two types that Go leaves unverified (``RequestClientCert``,
``RequireAnyClientCert``) verify against ``client_ca_file`` too and need one: they behave as
``VerifyClientCertIfGiven`` and ``RequireAndVerifyClientCert``, never looser.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path

from toposcope.errors import ConfigError

#: client_auth_type -> how the server asks for a client certificate
CLIENT_AUTH_TYPES: dict[str, ssl.VerifyMode] = {
    "NoClientCert": ssl.CERT_NONE,
    "RequestClientCert": ssl.CERT_OPTIONAL,
    "RequireAnyClientCert": ssl.CERT_REQUIRED,
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}
TLS_VERSIONS: dict[str, ssl.TLSVersion] = {
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}
TLS_KEYS = (
    "cert_file",
    "key_file",
    "client_ca_file",
    "client_auth_type",
    "min_version",
    "max_version",
)


@dataclass(frozen=True)
class TlsSettings:
    """A checked ``tls_server_config``: file paths (absolute) and the handshake's rules."""

    cert_file: Path
    key_file: Path
    client_ca_file: Path | None = None
    client_auth_type: str = "NoClientCert"
    min_version: str = "TLS12"
    max_version: str = "TLS13"

    def __post_init__(self) -> None:
        verify = CLIENT_AUTH_TYPES[self.client_auth_type]
        if verify is ssl.CERT_NONE and self.client_ca_file is not None:
            raise ValueError("client_ca_file is set but client_auth_type is NoClientCert")
        if verify is not ssl.CERT_NONE and self.client_ca_file is None:
            raise ValueError(f"client_auth_type {self.client_auth_type} needs client_ca_file")
        if TLS_VERSIONS[self.min_version] > TLS_VERSIONS[self.max_version]:
            raise ValueError(f"min_version {self.min_version} is above {self.max_version}")

    @property
    def files(self) -> tuple[Path, ...]:
        """The files the context is built from (watched for changes)."""
        ca = (self.client_ca_file,) if self.client_ca_file else ()
        return (self.cert_file, self.key_file, *ca)

    def context(self) -> ssl.SSLContext:
        """A server context with these certificates and rules (:class:`ConfigError` if a file
        cannot be read or does not hold what it should).
        """
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = TLS_VERSIONS[self.min_version]
        context.maximum_version = TLS_VERSIONS[self.max_version]
        try:
            context.load_cert_chain(self.cert_file, self.key_file)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(
                f"tls_server_config: cannot load cert_file {self.cert_file} with key_file "
                f"{self.key_file}: {_reason(exc)}"
            ) from exc
        if self.client_ca_file is not None:
            try:
                context.load_verify_locations(cafile=self.client_ca_file)
            except (OSError, ssl.SSLError) as exc:
                raise ConfigError(
                    f"tls_server_config: cannot load client_ca_file {self.client_ca_file}: "
                    f"{_reason(exc)}"
                ) from exc
        context.verify_mode = CLIENT_AUTH_TYPES[self.client_auth_type]
        return context


def _reason(exc: OSError | ssl.SSLError) -> str:
    if isinstance(exc, ssl.SSLError):
        return str(exc.reason or exc)
    return str(exc.strerror or exc)
