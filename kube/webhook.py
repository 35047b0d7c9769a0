"""The placement-gate webhook as a WSGI application, and the TLS server that serves it.

``POST /mutate`` takes an AdmissionReview and answers one (:mod:`.admission`); a body that
is not JSON or not an AdmissionReview is a 400 whose message names what is wrong (the API
server logs it; with ``failurePolicy: Ignore`` the pod is created ungated). ``GET
/-/healthy`` and ``/-/ready`` answer 200 for the kubelet's probes. Every other path is 404
(``/metrics`` is answered before this application, by
:func:`toposcope.serving.selfmetrics.with_self_metrics`).

The server is the core's (:class:`~toposcope.serving.httpserver.HttpServer`): its request limits
(methods, the body bound of :data:`MAX_BODY`, headers, timeouts) apply before the application
runs. It must speak TLS, since the API server calls webhooks over https only:
:func:`require_tls` refuses a web configuration without ``tls_server_config``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable
from typing import Any

from toposcope.errors import ConfigError
from toposcope.kube.admission import AdmissionError, review_answer
from toposcope.serving.httplimits import Refusal, json_error
from toposcope.serving.jsonbody import JsonBodyError, parse_json_body
from toposcope.serving.livewebconfig import LiveWebConfig

LOG = logging.getLogger("toposcope.kube.webhook")

#: where the API server posts reviews (the MutatingWebhookConfiguration's ``service.path``)
MUTATE_PATH = "/mutate"
#: the largest review accepted: a pod object is at most about 1.5 MiB (etcd's request limit)
MAX_BODY = 3 * 1024 * 1024
#: the listen address unless told otherwise (loopback; the Deployment listens on every one)
DEFAULT_LISTEN = "127.0.0.1:9443"


def _answer(start_response: Callable[..., Any], status: int, body: bytes) -> list[bytes]:
    refusal = Refusal(status, "")
    start_response(refusal.status_line, refusal.header_list(body))
    return [body]


def _read_body(environ: dict[str, Any]) -> bytes:
    """The request body (the server has already checked its declared length)."""
    length = int(environ.get("CONTENT_LENGTH") or 0)
    stream = environ["wsgi.input"]
    data: bytes = stream.read(length) if length > 0 else b""
    return data


def webhook_app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    """Answer one request to the webhook (see the module docstring)."""
    path = environ.get("PATH_INFO", "")
    method = environ.get("REQUEST_METHOD", "")
    if path in ("/-/healthy", "/-/ready") and method in ("GET", "HEAD"):
        return _answer(start_response, 200, b'{"status": "ok"}')
    if path != MUTATE_PATH:
        message = f"no such path; reviews go to {MUTATE_PATH}"
        return _answer(start_response, 404, json_error(message))
    if method != "POST":
        return _answer(start_response, 405, json_error(f"{MUTATE_PATH} takes POST only"))
    content_type = str(environ.get("CONTENT_TYPE", "")).split(";")[0].strip().lower()
    if content_type != "application/json":
        message = f"the body must be application/json, not {content_type[:60] or 'untyped'}"
        return _answer(start_response, 415, json_error(message))
    try:
        answer = review_answer(parse_json_body(_read_body(environ)))
    except (JsonBodyError, AdmissionError) as exc:
        LOG.warning("refused a review: %s", exc)
        return _answer(start_response, 400, json_error(str(exc)))
    response = answer["response"]
    LOG.debug("review %s: %s", response["uid"], "gated" if "patch" in response else "unchanged")
    return _answer(start_response, 200, json.dumps(answer).encode())


def require_tls(web: LiveWebConfig | None) -> LiveWebConfig:
    """``web`` when it configures TLS (:class:`ConfigError` otherwise: see the module doc)."""
    if web is None or not web.tls:
        where = f" ({web.path} has no tls_server_config)" if web is not None else ""
        raise ConfigError(
            "the webhook serves TLS only (the API server calls webhooks over https): give "
            f"--web.config.file with tls_server_config{where}"
        )
    return web


__all__ = ["DEFAULT_LISTEN", "MAX_BODY", "MUTATE_PATH", "require_tls", "webhook_app"]
