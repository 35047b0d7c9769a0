"""Fair-share figures from Slurm's accounting, where the cluster has it.

``sshare`` reports each account's normalised shares, effective usage and fair-share factor,
but only when slurmctld stores accounting in slurmdbd (``AccountingStorageType=
accounting_storage/slurmdbd``) and computes priorities with the multifactor plugin
(``PriorityType=priority/multifactor``); without them it has nothing to say.
:func:`accounting_gap` reads ``scontrol show config`` and names what is missing, so the
exporter can skip the figures with one logged reason instead of failing every scrape. sprio's
priority factors (:mod:`toposcope.slurm.queue_priority`) need the multifactor plugin only.
"""

from __future__ import annotations

from collections.abc import Mapping

from toposcope.slurm.commands import SlurmCommands
from toposcope.slurm.errors import SlurmFormatError

#: what ``scontrol show config`` must say for sshare's figures to mean something
REQUIRED = {
    "AccountingStorageType": "accounting_storage/slurmdbd",
    "PriorityType": "priority/multifactor",
}
#: what ``scontrol show config`` must say for sprio's factors (no accounting needed)
PRIORITY_REQUIRED = {"PriorityType": "priority/multifactor"}
#: the sshare columns read, in order
SSHARE_FIELDS = ("Account", "User", "NormShares", "EffectvUsage", "FairShare")
#: the most accounts read from sshare
MAX_ACCOUNTS = 1000


def parse_config(text: str) -> dict[str, str]:
    """``scontrol show config``'s ``Key = value`` lines as a mapping."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() and " " not in key.strip():
            found[key.strip()] = value.strip()
    return found


def accounting_gap(config: Mapping[str, str], required: Mapping[str, str] = REQUIRED) -> str | None:
    """Why figures that need ``required`` (default: sshare's) are unavailable under
    ``config``, or ``None`` when they are (:data:`PRIORITY_REQUIRED` for sprio's)."""
    missing = [
        f"{key}={wanted} (this cluster: {config.get(key) or 'unset'})"
        for key, wanted in required.items()
        if config.get(key) != wanted
    ]
    return "needs " + " and ".join(missing) if missing else None


def _ratio(text: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise SlurmFormatError(f"sshare: {what} {text[:40]!r} is not a number") from None
    if not 0.0 <= value <= 1.0:
        raise SlurmFormatError(f"sshare: {what} {value} is outside 0-1")
    return value


def parse_sshare(text: str) -> dict[str, tuple[float, float, float]]:
    """Accounts' ``(fairshare, norm shares, effective usage)`` from ``sshare -P -n -o ...``.

    Rows that name a user are the users' own figures and are skipped; the account tree's
    indentation is dropped; the root account is kept as ``root``. Accounts keep Slurm's own
    names (the queue's fair shares are weighted by them); the families bound the labels.
    """
    figures: dict[str, tuple[float, float, float]] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        cells = line.split("|")
        if len(cells) != len(SSHARE_FIELDS):
            raise SlurmFormatError(f"sshare printed {line[:80]!r}, not {len(SSHARE_FIELDS)} cells")
        account, user, shares, usage, fairshare = (c.strip() for c in cells)
        if user or not account:
            continue
        if len(figures) >= MAX_ACCOUNTS:
            break
        figures[account] = (
            _ratio(fairshare, f"{account[:40]!r} FairShare") if fairshare else 0.0,
            _ratio(shares, f"{account[:40]!r} NormShares") if shares else 0.0,
            _ratio(usage, f"{account[:40]!r} EffectvUsage") if usage else 0.0,
        )
    return figures


def read_config(commands: SlurmCommands) -> dict[str, str]:
    """slurmctld's running configuration (``scontrol show config``)."""
    return parse_config(commands.run("scontrol", "show", "config"))


def read_fairshare(commands: SlurmCommands) -> dict[str, tuple[float, float, float]]:
    """Every account's fair-share figures from ``sshare``."""
    return parse_sshare(commands.run("sshare", "-a", "-P", "-n", "-o", ",".join(SSHARE_FIELDS)))
