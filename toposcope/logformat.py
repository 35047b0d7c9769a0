"""Logging flags after the subcommand, as Prometheus and its exporters spell them:
``--log.level`` (debug, info, warn, error) and ``--log.format`` (logfmt or json).

Without them a command logs as before: the top-level ``--log-level`` and a plain line.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from datetime import UTC, datetime

LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warn": logging.WARNING}
LEVELS |= {"warning": logging.WARNING, "error": logging.ERROR}
FORMATS = ("logfmt", "json")
PLAIN_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"


def add_log_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare ``--log.level`` and ``--log.format`` (absent from ``args`` when not given, so
    a nested parser's default never hides its parent's value).
    """
    parser.add_argument(
        "--log.level",
        dest="log_level_flag",
        choices=list(LEVELS),
        default=argparse.SUPPRESS,
        help="only log messages at this level or above (default: --log-level, info)",
    )
    parser.add_argument(
        "--log.format",
        dest="log_format",
        choices=FORMATS,
        default=argparse.SUPPRESS,
        help="log lines as logfmt or JSON (default: a plain line)",
    )


def _fields(record: logging.LogRecord) -> dict[str, str]:
    stamp = datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds")
    fields = {
        "ts": stamp.replace("+00:00", "Z"),
        "level": record.levelname.lower(),
        "logger": record.name,
        "msg": record.getMessage(),
    }
    if record.exc_info:
        fields["err"] = logging.Formatter().formatException(record.exc_info)
    return fields


class LogfmtFormatter(logging.Formatter):
    """``ts=... level=info logger=... msg="..."``: go-kit's logfmt, as Prometheus writes it."""

    def format(self, record: logging.LogRecord) -> str:
        """One logfmt line."""
        return " ".join(f"{k}={_logfmt_value(v)}" for k, v in _fields(record).items())


class JsonFormatter(logging.Formatter):
    """One JSON object per line with the same fields as :class:`LogfmtFormatter`."""

    def format(self, record: logging.LogRecord) -> str:
        """One JSON line."""
        return json.dumps(_fields(record))


def _logfmt_value(value: str) -> str:
    if value and not any(c in value for c in ' ="\\\n\t'):
        return value
    return json.dumps(value)


def configure_logging(args: argparse.Namespace) -> None:
    """Set up the root logger from ``--log.level``/``--log.format`` or ``--log-level``."""
    level = str(getattr(args, "log_level_flag", None) or getattr(args, "log_level", "info"))
    fmt = getattr(args, "log_format", None)
    formatter: logging.Formatter
    if fmt == "json":
        formatter = JsonFormatter()
    elif fmt == "logfmt":
        formatter = LogfmtFormatter()
    else:
        formatter = logging.Formatter(PLAIN_FORMAT)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter)
    logging.basicConfig(level=LEVELS[level], handlers=[handler])
