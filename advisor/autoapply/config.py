"""The automatic loop's policy: what it may apply, where, how often, and when not at all.

:class:`AutoApplyPolicy` holds the limits; :func:`load_policy` reads them from a YAML file
(``--auto-apply-config``), checked strictly: an unknown or duplicate key, a wrong type, a
kind that cannot be applied automatically or a bad window is refused as
``file:line: field: problem`` (a :class:`~toposcope.errors.ConfigError`), so that a typo
never widens what the loop may do. The file::

    kinds: [pin, migrate-memory]     # pin, migrate-memory, place (never the others)
    min_confidence: 0.8              # 0..1
    min_gain: 0.10                   # the calibrated estimated gain, 0..10
    max_risk: medium                 # low, medium or high
    include:                         # each list, when given, must name the workload's
      namespaces: [train]            #   Kubernetes namespace
      partitions: [gpu]              #   Slurm partition
      accounts: [ml]                 #   Slurm account
      labels: "container=trainer"    #   a label selector over its metric labels
    exclude:                         # the same keys; a match is never applied
      namespaces: [kube-system]
      labels: "canary"
    limits:
      per_node: 1                    # actions per node per hour
      per_namespace: 2               # per namespace (or Slurm account) per hour
      per_hour: 5                    # in all, per hour
      cooldown: 6h                   # between two actions on one workload
    blackouts:                       # see toposcope.advisor.autoapply.blackout
      - {days: [mon, tue, wed, thu, fri], from: "08:00", to: "18:00", timezone: Europe/Berlin}
      - {cron: "0 22 * * fri", duration: 60h, timezone: UTC}
    dry_run_first: true              # rehearse each recommendation once before applying it
    dry_run_only: false              # only record what would be applied
    kill_switch_file: /run/toposcope/auto-apply.stop

Every key is optional; the defaults are the cautious values of :class:`AutoApplyPolicy`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from toposcope.advisor.autoapply.blackout import (
    MAX_CRON_DURATION,
    Blackout,
    parse_clock,
    parse_cron,
    parse_day,
)
from toposcope.advisor.label_selector import LabelSelector, SelectorError, parse_selector
from toposcope.advisor.loaders.base import parse_duration
from toposcope.advisor.outcomes import VERIFIED_KINDS
from toposcope.boundedread import read_bounded
from toposcope.errors import ConfigError
from toposcope.report.recommendation import RecommendationKind, Risk
from toposcope.rm import ActionKind
from toposcope.yamlnodes import YamlNodes, compose_config, refuse_in

if TYPE_CHECKING:
    import yaml

#: the largest policy file read, in bytes
MAX_BYTES = 1 << 20
#: kinds never applied automatically, and why
NEVER_AUTOMATIC: dict[str, str] = {
    str(RecommendationKind.RELEASE_IDLE): "a release cannot be undone",
    str(RecommendationKind.MIGRATE_JOB): "moving a running job restarts it (a requeue or an "
    "eviction), which no revert takes back",
    str(RecommendationKind.CONFIG): "it is a change for a person to make",
}
#: resource-manager actions that cannot be undone, on every backend (``*``) and on some: a
#: ``migrate`` restarts the job, a ``release`` gives the GPUs away, and Kubernetes cannot
#: put a scheduling gate back on a placed pod
IRREVERSIBLE_ACTIONS: dict[str, frozenset[ActionKind]] = {
    "*": frozenset({ActionKind.MIGRATE, ActionKind.RELEASE}),
    "kubernetes": frozenset({ActionKind.PLACE}),
}
#: the kinds the loop may apply: verified after the fact and undoable
AUTOMATIC_KINDS = frozenset(str(k) for k in VERIFIED_KINDS) - set(NEVER_AUTOMATIC)
_RISKS = tuple(str(r) for r in Risk)
_TOP = (
    "kinds",
    "min_confidence",
    "min_gain",
    "max_risk",
    "include",
    "exclude",
    "limits",
    "blackouts",
    "dry_run_first",
    "dry_run_only",
    "kill_switch_file",
)
_SCOPE = ("namespaces", "partitions", "accounts", "labels")
_LIMITS = ("per_node", "per_namespace", "per_hour", "cooldown")
_WINDOW = ("name", "days", "from", "to", "cron", "duration", "timezone")


@dataclass(frozen=True)
class Scope:
    """Which workloads a rule names: namespaces, Slurm partitions and accounts, labels.

    An empty set (or an empty selector) names nothing in particular.
    """

    namespaces: frozenset[str] = frozenset()
    partitions: frozenset[str] = frozenset()
    accounts: frozenset[str] = frozenset()
    labels: LabelSelector | None = None


@dataclass(frozen=True)
class AutoApplyPolicy:
    """The limits of the automatic loop (see the module docstring for each one).

    ``per_node``, ``per_namespace`` and ``per_hour`` count actions over the last hour;
    ``cooldown`` is seconds between two automatic actions on one workload.
    """

    kinds: frozenset[str] = frozenset({"pin", "migrate-memory"})
    min_confidence: float = 0.8
    min_gain: float = 0.10
    max_risk: str = "medium"
    include: Scope = field(default_factory=Scope)
    exclude: Scope = field(default_factory=Scope)
    per_node: int = 1
    per_namespace: int = 2
    per_hour: int = 5
    cooldown: float = 6 * 3600.0
    blackouts: tuple[Blackout, ...] = ()
    dry_run_first: bool = True
    dry_run_only: bool = False
    kill_switch_file: Path | None = None
    source: str = "defaults"

    def __post_init__(self) -> None:
        check_kinds(self.kinds)
        check_range("min_confidence", self.min_confidence, 0.0, 1.0)
        check_range("min_gain", self.min_gain, 0.0, 10.0)
        if self.max_risk not in _RISKS:
            raise ConfigError(f"max_risk must be one of {', '.join(_RISKS)}")
        for name in ("per_node", "per_namespace", "per_hour"):
            if getattr(self, name) < 0:
                raise ConfigError(f"limits.{name} must be 0 or more")
        if self.cooldown < 0:
            raise ConfigError("limits.cooldown must not be negative")


def irreversible_actions(backend: str) -> frozenset[ActionKind]:
    """The action kinds ``backend`` cannot undo (see :data:`IRREVERSIBLE_ACTIONS`)."""
    return IRREVERSIBLE_ACTIONS["*"] | IRREVERSIBLE_ACTIONS.get(backend, frozenset())


def check_kinds(kinds: frozenset[str]) -> None:
    """Refuse a kind that does not exist or may not be applied automatically."""
    for kind in sorted(kinds):
        if kind in NEVER_AUTOMATIC:
            raise ConfigError(
                f"kinds: {kind} is never applied automatically: {NEVER_AUTOMATIC[kind]}"
            )
        if kind not in AUTOMATIC_KINDS:
            raise ConfigError(
                f"kinds: unknown kind {kind!r} "
                f"(automatic kinds: {', '.join(sorted(AUTOMATIC_KINDS))})"
            )


def check_range(name: str, value: float, low: float, high: float) -> None:
    """Refuse ``value`` outside ``[low, high]``."""
    if not low <= value <= high:
        raise ConfigError(f"{name} must be between {low:g} and {high:g}, not {value:g}")


class _Reader(YamlNodes):
    """The shared node checks plus the policy's own value types."""

    def names(self, node: yaml.Node, field_name: str) -> frozenset[str]:
        items = self.sequence(node, field_name)
        return frozenset(self.text(item, f"{field_name}[{i}]") for i, item in enumerate(items))

    def duration(self, node: yaml.Node, field_name: str) -> float:
        text = self.text(node, field_name)
        try:
            return parse_duration(text)
        except ConfigError as exc:
            raise self.error(node, field_name, str(exc)) from None

    def fraction(self, node: yaml.Node, field_name: str, high: float) -> float:
        value = self.number(node, field_name)
        if not 0 <= value <= high:
            raise self.error(node, field_name, f"must be between 0 and {high:g}")
        return value

    def count(self, node: yaml.Node, field_name: str) -> int:
        value = self.whole(node, field_name)
        if value < 0:
            raise self.error(node, field_name, "must be 0 or more")
        return value

    def scope(self, node: yaml.Node, field_name: str) -> Scope:
        entries = self.mapping(node, field_name, _SCOPE)
        sets = {
            key: self.names(entries[key], f"{field_name}.{key}") if key in entries else frozenset()
            for key in ("namespaces", "partitions", "accounts")
        }
        labels = None
        if "labels" in entries:
            text = self.text(entries["labels"], f"{field_name}.labels")
            try:
                labels = parse_selector(text)
            except SelectorError as exc:
                raise self.error(entries["labels"], f"{field_name}.labels", str(exc)) from None
        return Scope(sets["namespaces"], sets["partitions"], sets["accounts"], labels)

    def window(self, node: yaml.Node, index: int) -> Blackout:
        where = f"blackouts[{index}]"
        entries = self.mapping(node, where, _WINDOW)
        label = self.text(entries["name"], f"{where}.name") if "name" in entries else where
        zone_name = (
            self.text(entries["timezone"], f"{where}.timezone") if "timezone" in entries else "UTC"
        )
        try:
            zone = ZoneInfo(zone_name)
        except (ZoneInfoNotFoundError, ValueError):
            raise self.error(
                entries["timezone"], f"{where}.timezone", f"unknown time zone {zone_name!r}"
            ) from None
        if "cron" in entries:
            return self._cron_window(node, entries, where, label, zone)
        if "from" not in entries or "to" not in entries:
            raise self.error(node, where, "needs either cron and duration, or from and to")
        if "duration" in entries:
            raise self.error(entries["duration"], f"{where}.duration", "only with cron")
        start, end = (self._clock(entries[key], f"{where}.{key}") for key in ("from", "to"))
        if start in (end, 1440):
            raise self.error(node, where, 'from and to must differ (to: "24:00" ends at midnight)')
        days = frozenset(range(7))
        if "days" in entries:
            days = frozenset(
                self._day(item, f"{where}.days[{i}]")
                for i, item in enumerate(self.sequence(entries["days"], f"{where}.days"))
            )
            if not days:
                raise self.error(entries["days"], f"{where}.days", "names no day")
        return Blackout(label, zone, days, start, end)

    def _cron_window(
        self,
        node: yaml.Node,
        entries: dict[str, yaml.Node],
        where: str,
        label: str,
        zone: ZoneInfo,
    ) -> Blackout:
        for key in ("days", "from", "to"):
            if key in entries:
                raise self.error(entries[key], f"{where}.{key}", "not with cron")
        if "duration" not in entries:
            raise self.error(node, where, "a cron window needs a duration")
        try:
            schedule = parse_cron(self.text(entries["cron"], f"{where}.cron"))
        except ValueError as exc:
            raise self.error(entries["cron"], f"{where}.cron", str(exc)) from None
        duration = self.duration(entries["duration"], f"{where}.duration")
        if duration > MAX_CRON_DURATION:
            raise self.error(entries["duration"], f"{where}.duration", "must be at most 7d")
        return Blackout(label, zone, cron=schedule, duration=duration)

    def _clock(self, node: yaml.Node, field_name: str) -> int:
        try:
            return parse_clock(self.text(node, field_name))
        except ValueError as exc:
            raise self.error(node, field_name, str(exc)) from None

    def _day(self, node: yaml.Node, field_name: str) -> int:
        try:
            return parse_day(self.text(node, field_name))
        except ValueError as exc:
            raise self.error(node, field_name, str(exc)) from None


def parse_policy(text: str, source: str) -> AutoApplyPolicy:
    """The policy in YAML ``text``; ``source`` names it in errors (``source:line: ...``)."""
    root = compose_config(text, source)
    reader = _Reader(refuse_in(source), null_mapping_is_empty=True)
    if root is None:
        return AutoApplyPolicy(source=source)
    top = reader.mapping(root, "(top level)", _TOP)
    base = AutoApplyPolicy()
    kinds = base.kinds
    if "kinds" in top:
        kinds = reader.names(top["kinds"], "kinds")
        try:
            check_kinds(kinds)
        except ConfigError as exc:
            raise reader.refuse(reader.line(top["kinds"]), str(exc)) from None
    risk = base.max_risk
    if "max_risk" in top:
        risk = reader.text(top["max_risk"], "max_risk")
        if risk not in _RISKS:
            raise reader.error(top["max_risk"], "max_risk", f"must be one of {', '.join(_RISKS)}")
    limits = reader.mapping(top["limits"], "limits", _LIMITS) if "limits" in top else {}
    counts = {
        key: reader.count(limits[key], f"limits.{key}") if key in limits else getattr(base, key)
        for key in ("per_node", "per_namespace", "per_hour")
    }
    windows = reader.sequence(top["blackouts"], "blackouts") if "blackouts" in top else []
    flags = {
        key: reader.boolean(top[key], key) if key in top else getattr(base, key)
        for key in ("dry_run_first", "dry_run_only")
    }
    return AutoApplyPolicy(
        kinds=kinds,
        min_confidence=reader.fraction(top["min_confidence"], "min_confidence", 1.0)
        if "min_confidence" in top
        else base.min_confidence,
        min_gain=reader.fraction(top["min_gain"], "min_gain", 10.0)
        if "min_gain" in top
        else base.min_gain,
        max_risk=risk,
        include=reader.scope(top["include"], "include") if "include" in top else Scope(),
        exclude=reader.scope(top["exclude"], "exclude") if "exclude" in top else Scope(),
        per_node=counts["per_node"],
        per_namespace=counts["per_namespace"],
        per_hour=counts["per_hour"],
        cooldown=reader.duration(limits["cooldown"], "limits.cooldown")
        if "cooldown" in limits
        else base.cooldown,
        blackouts=tuple(reader.window(item, i) for i, item in enumerate(windows)),
        dry_run_first=flags["dry_run_first"],
        dry_run_only=flags["dry_run_only"],
        kill_switch_file=Path(reader.text(top["kill_switch_file"], "kill_switch_file"))
        if "kill_switch_file" in top
        else None,
        source=source,
    )


def load_policy(path: str | Path) -> AutoApplyPolicy:
    """The policy in the YAML file ``path`` (:class:`ConfigError` naming file and line)."""
    raw = read_bounded(path, MAX_BYTES, f"auto-apply config file {path}")
    try:
        text = raw.decode()
    except UnicodeDecodeError as exc:
        raise ConfigError(f"auto-apply config file {path}: not UTF-8 text") from exc
    return parse_policy(text, str(path))
