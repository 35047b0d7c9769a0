"""The alert rules' configuration: the packaged defaults, a user's overrides, their checks.

The defaults (``defaults.yaml`` beside this module) hold every key there is; a user's file
holds only the keys it changes. Each value is checked against the kind of its default before
it can reach a rule: PromQL label matchers for ``selectors``, a label name for
``cluster_label``, an http(s) URL for ``runbook_url``, Prometheus durations where the default
is one, finite numbers where it is a number, lists of integers where it is such a list. An
unknown key is an error naming its dotted path, so a misspelt threshold cannot be ignored.
"""

from __future__ import annotations

import math
import re
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from toposcope.errors import ConfigError

#: A Prometheus duration such as ``5m``, ``1h30m`` or ``1d``.
DURATION = re.compile(r"^(?:\d+(?:ms|s|m|h|d|w|y))+$")
#: A Prometheus label name.
LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_MATCHER = r'\s*[a-zA-Z_][a-zA-Z0-9_]*\s*(?:=~|!~|!=|=)\s*"(?:[^"\\\n]|\\.)*"\s*'
#: Label matchers as written between a selector's braces: ``job=~"a|b", job!="c"``.
MATCHERS = re.compile(rf"^{_MATCHER}(?:,{_MATCHER})*$")
#: A runbook base address: http(s), no spaces, quotes or fragment.
URL = re.compile(r"^https?://[^\s\"'#<>{}|\\^`]+$")

Config = dict[str, Any]


def default_config() -> Config:
    """The packaged default configuration (every key, every default)."""
    text = (
        resources.files(__package__ or "toposcope.rules")
        .joinpath("defaults.yaml")
        .read_text(encoding="utf-8")
    )
    data = yaml.safe_load(text)
    if not isinstance(data, dict):
        raise ConfigError("the packaged rules defaults are not a mapping")
    return data


def load_config(path: Path | None) -> Config:
    """The defaults with the overrides of the YAML file ``path`` (None: the defaults).

    Raises :class:`ConfigError` naming the file and the key for an unreadable file, an unknown
    key or a value of the wrong kind.
    """
    config = default_config()
    if path is None:
        return config
    try:
        overrides = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the rules configuration ({exc.strerror})") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML ({exc})") from exc
    if overrides is None:
        return config
    return merge(config, overrides, source=str(path))


def merge(defaults: Config, overrides: object, source: str = "configuration") -> Config:
    """``defaults`` with ``overrides`` applied key by key, each value checked (a new dict)."""
    if not isinstance(overrides, dict):
        raise ConfigError(f"{source}: the rules configuration must be a mapping")
    return _merge(defaults, overrides, source, ())


def _merge(
    defaults: Config, overrides: dict[Any, Any], source: str, path: tuple[str, ...]
) -> Config:
    merged = dict(defaults)
    for key, value in overrides.items():
        where = ".".join((*path, str(key)))
        if not isinstance(key, str) or key not in defaults:
            known = ", ".join(sorted(defaults))
            raise ConfigError(f"{source}: unknown key {where!r} (known here: {known})")
        default = defaults[key]
        if isinstance(default, dict):
            if not isinstance(value, dict):
                raise ConfigError(f"{source}: {where} must be a mapping")
            merged[key] = _merge(default, value, source, (*path, key))
        else:
            merged[key] = check_value((*path, key), default, value, source)
    return merged


def check_value(path: tuple[str, ...], default: object, value: object, source: str) -> object:
    """``value`` if it is of the kind of ``default`` at ``path``; else :class:`ConfigError`."""
    where = ".".join(path)

    def fail(expected: str) -> ConfigError:
        return ConfigError(f"{source}: {where} must be {expected}, not {value!r}")

    if path[0] == "selectors":
        if not isinstance(value, str) or not MATCHERS.fullmatch(value):
            raise fail('PromQL label matchers such as job=~"toposcope.*"')
        return value
    if path == ("cluster_label",):
        if not isinstance(value, str) or not LABEL_NAME.fullmatch(value):
            raise fail("a Prometheus label name")
        return value
    if path == ("runbook_url",):
        if not isinstance(value, str) or not URL.fullmatch(value):
            raise fail("an http(s) URL without spaces, quotes or #fragment")
        return value
    if isinstance(default, list):
        if (
            not isinstance(value, list)
            or not value
            or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value)
        ):
            raise fail("a non-empty list of non-negative integers")
        return list(value)
    if isinstance(default, str):
        if not isinstance(value, str) or not DURATION.fullmatch(value):
            raise fail("a Prometheus duration such as 5m, 1h or 1d")
        return value
    if isinstance(default, int | float):
        if (
            not isinstance(value, int | float)
            or isinstance(value, bool)
            or not math.isfinite(value)
            or value < 0
        ):
            raise fail("a finite non-negative number")
        return value
    raise ConfigError(f"{source}: {where} has no known kind")  # pragma: no cover
