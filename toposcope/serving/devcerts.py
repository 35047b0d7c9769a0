"""Throwaway certificates for a stack on one machine (``make up TLS=1``) and for tests: a CA
and, for each name, a certificate it signed for the loopback addresses.

:func:`make_certificates` writes ``ca.crt`` (and ``ca.key``) and ``NAME.crt`` / ``NAME.key``
for every name: an ECDSA P-256 key each, the leaf's subject alternative names
``127.0.0.1``, ``::1`` and ``localhost`` (Go's TLS, hence Prometheus, reads only those, never
the common name), valid for both server and client authentication so that one certificate
serves a daemon's listener and its calls to other daemons. It uses the ``cryptography``
package when installed and the ``openssl`` command otherwise. Keys are written readable by
their owner only. These certificates are for loopback stacks; production ones come from
the operator's own CA.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from toposcope.errors import ConfigError

#: The subject alternative names of every leaf certificate.
LOOPBACK_IPS = ("127.0.0.1", "::1")
LOOPBACK_NAMES = ("localhost",)
#: How long the certificates are valid.
VALID_DAYS = 30


def _write_key(path: Path, data: bytes) -> None:
    path.unlink(missing_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "wb") as handle:
        handle.write(data)


def _with_cryptography(folder: Path, names: Sequence[str]) -> None:
    # an optional package: openssl does the same when it is absent
    from cryptography import x509  # noqa: PLC0415
    from cryptography.hazmat.primitives import hashes, serialization  # noqa: PLC0415
    from cryptography.hazmat.primitives.asymmetric import ec  # noqa: PLC0415
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID  # noqa: PLC0415

    now = datetime.datetime.now(datetime.UTC)

    def key_bytes(key: ec.EllipticCurvePrivateKey) -> bytes:
        return key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )

    def builder(subject: x509.Name, issuer: x509.Name, key: ec.EllipticCurvePrivateKey) -> Any:
        return (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(issuer)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
        )

    def usage(*, ca: bool) -> x509.KeyUsage:
        return x509.KeyUsage(
            digital_signature=True, content_commitment=False, key_encipherment=not ca,
            data_encipherment=False, key_agreement=False, key_cert_sign=ca, crl_sign=ca,
            encipher_only=False, decipher_only=False,
        )  # fmt: skip

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "toposcope local CA")])
    ca = (
        builder(ca_name, ca_name, ca_key)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), True)
        .add_extension(usage(ca=True), True)
        .sign(ca_key, hashes.SHA256())
    )
    (folder / "ca.crt").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    _write_key(folder / "ca.key", key_bytes(ca_key))
    san = x509.SubjectAlternativeName(
        [x509.IPAddress(ipaddress.ip_address(ip)) for ip in LOOPBACK_IPS]
        + [x509.DNSName(name) for name in LOOPBACK_NAMES]
    )
    purposes = x509.ExtendedKeyUsage(
        [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
    )
    authority = x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key())
    for name in names:
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        cert = (
            builder(subject, ca_name, key)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), True)
            .add_extension(usage(ca=False), True)
            .add_extension(purposes, False)
            .add_extension(san, False)
            .add_extension(authority, False)
            .sign(ca_key, hashes.SHA256())
        )
        (folder / f"{name}.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_key(folder / f"{name}.key", key_bytes(key))


def _with_openssl(folder: Path, names: Sequence[str]) -> None:
    def run(*args: str) -> None:
        try:
            subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=folder)
        except subprocess.CalledProcessError as exc:
            message = exc.stderr.decode(errors="replace").strip()
            raise ConfigError(f"openssl {args[0]} failed: {message}") from None

    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    days = str(VALID_DAYS)
    run(
        "req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", days,
        "-subj", "/CN=toposcope local CA",
        "-addext", "basicConstraints=critical,CA:TRUE,pathlen:0",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
    )  # fmt: skip
    alt = ",".join([f"IP:{ip}" for ip in LOOPBACK_IPS] + [f"DNS:{n}" for n in LOOPBACK_NAMES])
    (folder / "leaf.ext").write_text(
        f"subjectAltName={alt}\n"
        "basicConstraints=critical,CA:FALSE\n"
        "keyUsage=critical,digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=serverAuth,clientAuth\n"
    )
    for name in names:
        run("req", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}")
        run(
            "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
            "-CAcreateserial", "-days", days, "-extfile", "leaf.ext", "-out", f"{name}.crt",
        )  # fmt: skip
        (folder / f"{name}.csr").unlink()
    for key in folder.glob("*.key"):
        key.chmod(0o600)


def make_certificates(folder: Path, names: Sequence[str]) -> Path:
    """Write a CA and one certificate per name under ``folder`` (see the module docstring).

    Raises :class:`ConfigError` when neither the ``cryptography`` package nor the ``openssl``
    command is available, or when ``openssl`` fails.
    """
    for name in names:
        if not name or not all(c.isalnum() or c in "-_" for c in name):
            raise ConfigError(f"certificate name {name!r} must be letters, digits, - or _")
    folder.mkdir(parents=True, exist_ok=True)
    try:
        _with_cryptography(folder, names)
    except ImportError:
        if shutil.which("openssl") is None:
            raise ConfigError(
                "making certificates needs the cryptography package or the openssl command"
            ) from None
        _with_openssl(folder, names)
    return folder
