"""The advisor's policies and their explicit registry.

Each policy lives in its own module (rule and gain model in its docstring, documented in
``docs/policies.md``); :data:`POLICIES` maps names to classes. There is no subclass scan:
adding a policy means adding it here, and tests can build their own mapping. A part of one
policy that is not the policy itself sits beside it (numa-pinning's capacity planning in
:mod:`.pin_capacity`, job-migration's recommendations in :mod:`.migration_recommendations`);
what several parts of the advisor share lives in the advisor package: the GPU-set ranking
(:mod:`toposcope.advisor.gpu_sets`), its per-run searches (:mod:`toposcope.advisor.gpu_search`),
defragmentation plans (:mod:`toposcope.advisor.defragment`) and the NUMA locality model
(:mod:`toposcope.advisor.locality`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from toposcope.advisor.model import ClusterModel
from toposcope.advisor.policies.base import (
    Evaluation,
    Policy,
    PolicySettings,
    SettingInfo,
    setting,
)
from toposcope.advisor.policies.dra_alignment import DraAlignment
from toposcope.advisor.policies.fabric_placement import FabricPlacement
from toposcope.advisor.policies.gpu_placement import GpuPlacement
from toposcope.advisor.policies.idle_release import IdleRelease
from toposcope.advisor.policies.job_migration import JobMigration
from toposcope.advisor.policies.memory_migration import MemoryMigration
from toposcope.advisor.policies.nic_affinity import NicAffinity
from toposcope.advisor.policies.node_settings import NodeSettingsCheck
from toposcope.advisor.policies.numa_pinning import NumaPinning
from toposcope.errors import ConfigError

PolicyType = type[Policy[Any]]

POLICIES: dict[str, PolicyType] = {
    NumaPinning.name: NumaPinning,
    MemoryMigration.name: MemoryMigration,
    GpuPlacement.name: GpuPlacement,
    JobMigration.name: JobMigration,
    IdleRelease.name: IdleRelease,
    NodeSettingsCheck.name: NodeSettingsCheck,
    DraAlignment.name: DraAlignment,
    FabricPlacement.name: FabricPlacement,
    NicAffinity.name: NicAffinity,
}

#: the policies that place pending jobs: the advisor reads the resource manager's queue for them
PLACING = frozenset({GpuPlacement.name, FabricPlacement.name})


def find(name: str, registry: Mapping[str, PolicyType] = POLICIES) -> PolicyType:
    """The policy class called ``name``; :class:`ConfigError` lists the known names."""
    try:
        return registry[name]
    except KeyError:
        raise ConfigError(
            f"unknown policy {name!r}; known policies: {', '.join(sorted(registry))}"
        ) from None


def parse_overrides(items: Iterable[str]) -> dict[str, dict[str, str]]:
    """``["numa-pinning.min_remote_share=0.3"]`` -> ``{"numa-pinning": {...: "0.3"}}``."""
    result: dict[str, dict[str, str]] = {}
    problems = []
    for item in items:
        key, sep, value = item.partition("=")
        policy, dot, name = key.strip().partition(".")
        if not sep or not dot or not policy or not name:
            problems.append(f"{item!r} is not POLICY.SETTING=VALUE")
            continue
        result.setdefault(policy, {})[name.strip()] = value.strip()
    if problems:
        raise ConfigError("; ".join(problems))
    return result


def build(
    names: Iterable[str] | None = None,
    overrides: Mapping[str, Mapping[str, str]] | None = None,
    registry: Mapping[str, PolicyType] = POLICIES,
) -> list[Policy[Any]]:
    """Instances of the named policies (all when ``names`` is empty) with their settings.

    Every problem (unknown policy, unknown setting, value out of bounds) is collected and
    reported in one :class:`ConfigError`.
    """
    chosen = list(dict.fromkeys(names or ())) or list(registry)
    overrides = overrides or {}
    problems: list[str] = []
    for policy in overrides:
        if policy not in registry:
            known = ", ".join(sorted(registry))
            problems.append(f"--set for unknown policy {policy!r}; known policies: {known}")
        elif policy not in chosen:
            problems.append(f"--set for policy {policy!r}, which is not selected")
    policies: list[Policy[Any]] = []
    for name in chosen:
        try:
            cls = find(name, registry)
            settings = cls.settings_type().with_overrides(overrides.get(name, {}))
            policies.append(cls(settings))
        except ConfigError as exc:
            problems.append(str(exc))
    if problems:
        raise ConfigError("; ".join(problems))
    return policies


def evaluate_all(policies: Iterable[Policy[Any]], model: ClusterModel) -> list[Evaluation]:
    """Run each policy on ``model`` (policies do not see each other's results)."""
    return [policy.evaluate(model) for policy in policies]


def _format_default(value: object) -> str:
    if isinstance(value, tuple):
        return ",".join(str(v) for v in value)
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:g}" if abs(value) < 1e6 else f"{value:.0f}"
    return str(value)


def settings_markdown(cls: PolicyType) -> str:
    """A markdown table of a policy's settings (name, default, bounds, help) for the docs."""
    lines = ["| setting | default | bounds | meaning |", "|---|---|---|---|"]
    for info in cls.settings_type.describe():
        default = _format_default(info.default)
        lines.append(f"| `{info.name}` | {default} | {info.bounds or '-'} | {info.help} |")
    return "\n".join(lines)


__all__ = [
    "PLACING",
    "POLICIES",
    "Evaluation",
    "Policy",
    "PolicySettings",
    "SettingInfo",
    "build",
    "evaluate_all",
    "find",
    "parse_overrides",
    "setting",
    "settings_markdown",
]
