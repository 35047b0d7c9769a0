"""Applying recommendations: the only advisor code that acts, always through a resource manager.

:class:`~.applier.Applier` writes each intent to the audit log before the call and the answer
after it (:mod:`.ledger`), keeps to the per-run limits, and undoes applied recommendations
from their recorded before-state (:mod:`.revert`). The resource managers it talks to are in
:mod:`toposcope.advisor.rmclients`.
"""

from __future__ import annotations

from toposcope.advisor.applying.applier import (
    DEFAULT_WAIT_SECONDS,
    REVERT_DONE,
    Applier,
    Outcome,
    inverse_request,
)

__all__ = ["DEFAULT_WAIT_SECONDS", "REVERT_DONE", "Applier", "Outcome", "inverse_request"]
