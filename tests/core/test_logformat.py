"""The logging flags after the subcommand (``--log.level``, ``--log.format``) and their lines."""

from __future__ import annotations

import json
import logging
import subprocess
import sys

from toposcope.cli import build_parser
from toposcope.logformat import JsonFormatter, LogfmtFormatter


def record(message: str, level: int = logging.INFO) -> logging.LogRecord:
    return logging.LogRecord("toposcope.x", level, __file__, 1, message, None, None)


def test_logfmt_quotes_only_what_needs_it() -> None:
    line = LogfmtFormatter().format(record('scrape "a" took 3 ms'))
    assert line.startswith("ts=") and line.endswith('msg="scrape \\"a\\" took 3 ms"')
    assert " level=info logger=toposcope.x " in line
    assert LogfmtFormatter().format(record("ready")).endswith(" msg=ready")


def test_json_lines_have_the_same_fields() -> None:
    fields = json.loads(JsonFormatter().format(record("ready", logging.WARNING)))
    assert fields["level"] == "warning" and fields["msg"] == "ready"
    assert fields["logger"] == "toposcope.x" and fields["ts"].endswith("Z")


def test_the_flags_come_after_the_subcommand() -> None:
    parser, _ = build_parser(["exporter"])
    args = parser.parse_args(["exporter", "--log.level", "debug", "--log.format", "json"])
    assert (args.log_level_flag, args.log_format, args.log_level) == ("debug", "json", "info")
    plain = parser.parse_args(["--log-level", "error", "exporter"])
    assert plain.log_level == "error" and not hasattr(plain, "log_level_flag")


def test_a_command_logs_json_lines() -> None:
    command = [sys.executable, "-m", "toposcope.cli", "exporter", "--log.format", "json"]
    command += ["--log.level", "debug", "--listen", "nonsense"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2 and "listen address 'nonsense'" in done.stderr
    logged = [json.loads(line) for line in done.stderr.splitlines() if line.startswith("{")]
    assert logged and all({"ts", "level", "logger", "msg"} <= set(entry) for entry in logged)
