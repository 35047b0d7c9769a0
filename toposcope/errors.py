"""Exception types shared by every part of toposcope.

The CLI maps them to exit codes: :class:`UsageError` and :class:`ConfigError` exit 2,
anything that means "the input could not be read" names the input and chains the cause.
"""

from __future__ import annotations


class ToposcopeError(Exception):
    """Base class of every error toposcope raises on purpose."""


class UsageError(ToposcopeError):
    """The command line or an argument is wrong (exit code 2)."""


class ConfigError(ToposcopeError):
    """A configuration or input file is missing or malformed (exit code 2)."""


class SourceError(ToposcopeError):
    """A source (sysfs, procfs, cgroups, NVML, a file) could not be read or parsed."""


class NoDataError(ToposcopeError):
    """The host lacks what a collector reads (no GPU, no resctrl): not worth a loud log line."""
