"""The naming rules every part applies to names that arrive from outside.

Node names come from scraped metric labels, scenario files, resource-manager answers and
API bodies; job and workload names from scenario YAML, trace CSV rows and API bodies. They
end up in URLs (a node's agent endpoint), file names (the simulator's cgroup trees) and
labels, so they are checked here, once, against a strict grammar before anything uses them:

- a **node name** is an RFC 1123 host name (what Kubernetes, Slurm and DNS accept):
  dot-separated labels of letters, digits and ``-``, each 1-63 characters, not starting or
  ending with ``-``, 253 characters at most;
- an **object name** (job, workload, scenario node declaration) is one path component:
  a letter or digit, then up to 62 letters, digits, ``.``, ``_`` or ``-``; never ``.`` or
  ``..``, never a ``/``;
- a **workload name** (what a resource manager calls a workload: a unit, a cgroup path, a
  container id, a Slurm job) is 1-4096 characters without control characters;
- a **user name** (who asked for a change, recorded in the advisor's audit log) is 1-128
  letters, digits, ``.``, ``_``, ``@``, ``+`` or ``-`` (an account or an e-mail address).
"""

from __future__ import annotations

import re

MAX_NODE_NAME = 253
MAX_OBJECT_NAME = 63
MAX_USER_NAME = 128
MAX_WORKLOAD_NAME = 4096

_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
#: a node name as a regular expression (JSON Schema ``pattern``); length is checked apart
NODE_NAME_PATTERN = rf"^{_LABEL}(?:\.{_LABEL})*$"
_NODE_NAME_RE = re.compile(NODE_NAME_PATTERN)
_OBJECT_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
_USER_NAME_RE = re.compile(r"[A-Za-z0-9._@+-]{1,128}")
#: a workload name as a regular expression (JSON Schema ``pattern``); length is checked apart
WORKLOAD_NAME_PATTERN = r"^[^\u0000-\u001f\u007f]+$"
_WORKLOAD_NAME_RE = re.compile(WORKLOAD_NAME_PATTERN)

NODE_NAME_RULE = "a host name: letters, digits and '-' in dot-separated labels of 1-63"
OBJECT_NAME_RULE = "1-63 letters, digits, '.', '_' and '-', starting with a letter or digit"
USER_NAME_RULE = "1-128 letters, digits, '.', '_', '@', '+' and '-'"
WORKLOAD_NAME_RULE = f"1-{MAX_WORKLOAD_NAME} characters without control characters"


class InvalidNameError(ValueError):
    """A name that breaks its rule; the message names the value and the rule."""


def is_node_name(name: object) -> bool:
    """Whether ``name`` is a valid node (host) name."""
    return (
        isinstance(name, str)
        and len(name) <= MAX_NODE_NAME
        and _NODE_NAME_RE.fullmatch(name) is not None
    )


def is_object_name(name: object) -> bool:
    """Whether ``name`` is a valid job/workload name (safe as one path component)."""
    return isinstance(name, str) and _OBJECT_NAME_RE.fullmatch(name) is not None


def check_node_name(name: object) -> str:
    """``name`` when it is a valid node name, else :class:`InvalidNameError` saying why."""
    if not is_node_name(name):
        raise InvalidNameError(f"node name {_shown(name)} is not {NODE_NAME_RULE}")
    assert isinstance(name, str)
    return name


def check_object_name(name: object, what: str = "name") -> str:
    """``name`` when it is a valid object name, else :class:`InvalidNameError` naming ``what``."""
    if not is_object_name(name):
        raise InvalidNameError(f"{what} {_shown(name)} is not {OBJECT_NAME_RULE}")
    assert isinstance(name, str)
    return name


def is_workload_name(name: object) -> bool:
    """Whether ``name`` is a valid workload name (what the resource-manager API accepts)."""
    return (
        isinstance(name, str)
        and len(name) <= MAX_WORKLOAD_NAME
        and _WORKLOAD_NAME_RE.fullmatch(name) is not None
    )


def check_workload_name(name: object) -> str:
    """``name`` when it is a valid workload name, else :class:`InvalidNameError` saying why."""
    if not is_workload_name(name):
        raise InvalidNameError(f"workload name {_shown(name)} is not {WORKLOAD_NAME_RULE}")
    assert isinstance(name, str)
    return name


def is_user_name(name: object) -> bool:
    """Whether ``name`` is a valid user name (who asked for a change)."""
    return isinstance(name, str) and _USER_NAME_RE.fullmatch(name) is not None


def check_user_name(name: object, what: str = "user") -> str:
    """``name`` when it is a valid user name, else :class:`InvalidNameError` naming ``what``."""
    if not is_user_name(name):
        raise InvalidNameError(f"{what} {_shown(name)} is not {USER_NAME_RULE}")
    assert isinstance(name, str)
    return name


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:77]}..."
