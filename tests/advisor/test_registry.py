"""The policy registry, settings validation and the policy docs."""

from __future__ import annotations

import pytest

from tests.helpers import REPO
from toposcope.advisor.policies import (
    POLICIES,
    build,
    find,
    parse_overrides,
    settings_markdown,
)
from toposcope.advisor.policies.numa_pinning import NumaPinning, NumaPinningSettings
from toposcope.catalogue import CATALOGUE
from toposcope.errors import ConfigError


def test_registry_names_match_classes() -> None:
    assert set(POLICIES) == {
        "numa-pinning",
        "memory-migration",
        "gpu-placement",
        "job-migration",
        "idle-release",
        "config",
        "dra-alignment",
        "fabric-placement",
        "nic-affinity",
    }
    for name, cls in POLICIES.items():
        assert cls.name == name
        assert all(spec.name in CATALOGUE for spec in cls.requires)
        cls.settings_type().validate()


def test_unknown_policy_lists_known_names() -> None:
    with pytest.raises(ConfigError) as raised:
        find("numa")
    assert "known policies: config, dra-alignment, fabric-placement, gpu-placement" in str(
        raised.value
    )


def test_validate_reports_every_problem_at_once() -> None:
    bad = NumaPinningSettings(min_remote_share=2.0, numa_penalty=0.0, reference_distance=5)
    problems = bad.problems()
    assert len(problems) == 3
    with pytest.raises(ConfigError) as raised:
        NumaPinning(bad)
    for field in ("min_remote_share", "numa_penalty", "reference_distance"):
        assert field in str(raised.value)


def test_overrides_from_text() -> None:
    overrides = parse_overrides(
        ["numa-pinning.min_remote_share=0.4", "config.reasons=hw_thermal,sw_power_cap"]
    )
    policies = {p.name: p for p in build(["numa-pinning", "config"], overrides)}
    assert policies["numa-pinning"].settings.min_remote_share == 0.4
    assert policies["config"].settings.reasons == ("hw_thermal", "sw_power_cap")


def test_build_collects_every_problem() -> None:
    overrides = parse_overrides(
        [
            "numa-pinning.nope=1",
            "numa-pinning.max_cpu_load=abc",
            "idle-release.min_samples=0",
            "ghost.x=1",
        ]
    )
    with pytest.raises(ConfigError) as raised:
        build(["numa-pinning", "idle-release"], overrides)
    text = str(raised.value)
    for part in ("nope: unknown setting", "not a number", "min_samples: 0 must be >= 1", "ghost"):
        assert part in text


def test_bad_override_syntax() -> None:
    with pytest.raises(ConfigError, match=r"POLICY\.SETTING=VALUE"):
        parse_overrides(["min_gain=3"])


def test_docs_describe_every_policy_and_setting() -> None:
    docs = (REPO / "docs" / "policies.md").read_text()
    for name, cls in POLICIES.items():
        assert f"## {name}" in docs
        assert settings_markdown(cls) in docs, f"settings table of {name} out of date"
