"""What a change has done so far, and how to take it back when it fails half way."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field

from toposcope.host.processes import VANISHED

LOG = logging.getLogger("toposcope.agent.local")


@dataclass
class Changes:
    """Every thread's mask and every cgroup file's text before a change touched it."""

    masks: dict[int, frozenset[int]] = field(default_factory=dict)
    files: list[tuple[str, str]] = field(default_factory=list)


def roll_back(changes: Changes) -> None:
    """Restore the files (last written first), then the threads' masks; log what cannot be."""
    for path, old in reversed(changes.files):
        try:
            with open(path, "w", encoding="ascii") as handle:
                handle.write(old.strip() + "\n")
        except OSError as exc:
            LOG.error("roll-back: cannot restore %s to %r: %s", path, old.strip(), exc)
    for tid, mask in changes.masks.items():
        try:
            os.sched_setaffinity(tid, mask)
        except VANISHED:
            continue
        except OSError as exc:
            LOG.error("roll-back: cannot restore the affinity of thread %d: %s", tid, exc)
