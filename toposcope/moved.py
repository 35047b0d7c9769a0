"""Old import paths of modules that moved into the core's subpackages, kept for one release.

Importing ``toposcope.recommendation``, ``toposcope.recommendation_decoder`` or
``toposcope.rmapi`` (the paths out-of-tree tools and resource-manager backends used) still
works, with a :class:`DeprecationWarning` naming the new path; nothing inside toposcope uses
them. They go in the release after next.
"""

from __future__ import annotations

import importlib
import warnings
from types import ModuleType

#: old module -> where it lives now
MOVED = {
    "toposcope.recommendation": "toposcope.report.recommendation",
    "toposcope.recommendation_decoder": "toposcope.report.decoder",
    "toposcope.rmapi": "toposcope.rm.api",
}


def forward(old: str) -> ModuleType:
    """Warn that ``old`` moved and return the module at its new path."""
    new = MOVED[old]
    warnings.warn(
        f"{old} moved to {new}; the old path goes in the release after next",
        DeprecationWarning,
        stacklevel=3,
    )
    return importlib.import_module(new)
