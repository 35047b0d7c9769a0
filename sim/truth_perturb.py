"""Perturbed truths: the simulator's parameters moved away from its defaults, the advisor
not told, to judge advice on machines whose behaviour nobody tuned for.

``bench/closed_loop.py --perturb F --seeds N`` runs each scenario N times; run ``s`` scales

* every job's own parameters (NUMA sensitivity, communication fraction, input weight,
  GPU-sharing overhead) by a factor drawn per job and parameter from ``[1 - F, 1 + F]``
  (:func:`perturb_scenario`), and
* every global figure of the truth (each link tier's bandwidth, each remote/local memory
  ratio, each model weight, each figure of a GPU's activity and traffic) by a factor drawn
  once per run (:func:`perturb_truth`), the fabric's too (port rate, oversubscription, the
  NIC-far shares, each communication pattern's share of a step),
  put in place with :func:`toposcope.sim.truth_params.truth_in_effect`.

Draws are seeded by the run's seed, the job's name and the parameter's name, so a run is
reproducible. Fractions stay within their meaning: a communication fraction or input weight
at most 1, a remote/local memory ratio at most 1, a GPU activity share at most 1, everything
at least 0.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import replace

from toposcope.sim.jobs import JobSpec
from toposcope.sim.scenarios import Scenario
from toposcope.sim.truth_params import FABRIC_SHARES, GPU_SHARES, Parameter, Truth

#: the largest perturbation accepted (a factor of 0 or below would invert a parameter)
MAX_FRACTION = 0.9


def check_fraction(fraction: float) -> float:
    """``fraction`` when it is a usable perturbation (0 to :data:`MAX_FRACTION`), else
    ``ValueError`` saying so.
    """
    if not 0.0 <= fraction <= MAX_FRACTION:
        raise ValueError(f"perturbation must be between 0 and {MAX_FRACTION}, got {fraction:g}")
    return fraction


def factor(seed: int, *names: str, fraction: float) -> float:
    """A multiplier drawn uniformly from ``[1 - fraction, 1 + fraction]``, seeded by
    ``seed`` and ``names`` (the same arguments always draw the same factor).
    """
    digest = hashlib.sha256(":".join((str(seed), *names)).encode()).digest()
    rng = random.Random(int.from_bytes(digest[:8], "big"))
    return rng.uniform(1.0 - fraction, 1.0 + fraction)


def _scaled(param: Parameter, by: float, ceiling: float | None = None) -> Parameter:
    """``param`` with its value scaled, its range widened to hold the new value."""
    value = param.value * by
    if ceiling is not None:
        value = min(value, ceiling)
    return replace(param, value=value, low=min(param.low, value), high=max(param.high, value))


def perturb_truth(base: Truth, fraction: float, seed: int) -> Truth:
    """``base`` with every global figure scaled by its own factor (see the module
    docstring); ``fraction`` 0 returns ``base`` unchanged.
    """
    if fraction == 0:
        return base
    return replace(
        base,
        links={
            tier: _scaled(p, factor(seed, "link", tier, fraction=fraction))
            for tier, p in base.links.items()
        },
        numa_bandwidth=tuple(
            (d, _scaled(p, factor(seed, "numa", str(d), fraction=fraction), ceiling=1.0))
            for d, p in base.numa_bandwidth
        ),
        model={
            name: _scaled(p, factor(seed, "model", name, fraction=fraction))
            for name, p in base.model.items()
        },
        gpu={
            name: _scaled(
                p,
                factor(seed, "gpu", name, fraction=fraction),
                ceiling=1.0 if name in GPU_SHARES else None,
            )
            for name, p in base.gpu.items()
        },
        fabric={name: _fabric_scaled(name, p, seed, fraction) for name, p in base.fabric.items()},
    )


def _fabric_scaled(name: str, param: Parameter, seed: int, fraction: float) -> Parameter:
    """A fabric figure scaled by its factor: shares stay at most 1, oversubscription at
    least 1:1.
    """
    scaled = _scaled(
        param,
        factor(seed, "fabric", name, fraction=fraction),
        ceiling=1.0 if name in FABRIC_SHARES else None,
    )
    if name == "oversubscription" and scaled.value < 1.0:
        return replace(scaled, value=1.0, low=min(scaled.low, 1.0))
    return scaled


def perturb_job(spec: JobSpec, fraction: float, seed: int, overhead: float) -> JobSpec:
    """``spec`` with its own performance parameters scaled per parameter (fractions capped
    at 1); ``overhead`` is the class default used when the job has no sharing overhead.
    """

    def draw(parameter: str) -> float:
        return factor(seed, "job", spec.name, parameter, fraction=fraction)

    base_overhead = spec.sharing_overhead if spec.sharing_overhead is not None else overhead
    return replace(
        spec,
        numa_sensitivity=spec.numa_sensitivity * draw("numa_sensitivity"),
        comm_intensity=min(1.0, spec.comm_intensity * draw("comm_fraction")),
        input_intensity=min(1.0, spec.input_intensity * draw("input_weight")),
        sharing_overhead=base_overhead * draw("sharing_overhead"),
    )


def perturb_scenario(scenario: Scenario, truth: Truth, fraction: float, seed: int) -> Scenario:
    """``scenario`` with every job perturbed by :func:`perturb_job` (``truth`` gives the
    class defaults); ``fraction`` 0 returns it unchanged.
    """
    if fraction == 0:
        return scenario
    jobs = tuple(
        replace(
            job,
            spec=perturb_job(
                job.spec,
                fraction,
                seed,
                truth.classes[job.spec.kind.value]["sharing_overhead"].value,
            ),
        )
        for job in scenario.jobs
    )
    return replace(scenario, jobs=jobs)
