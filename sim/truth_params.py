"""The simulator's ground-truth parameters, loaded and checked from ``truth.yaml``.

The performance model (:mod:`toposcope.sim.model`) reads its figures only from here, never
from the advisor: link bandwidths per tier, remote/local memory bandwidth ratios by SLIT
distance, the formulas' global weights, what a GPU's activity and traffic counters show
(:data:`GPU_PARAMETERS`), what the network between nodes costs a multi-node gang job
(:data:`FABRIC_PARAMETERS`, :mod:`toposcope.sim.gang_price`), and per job class the ranges
each job draws its NUMA sensitivity, communication fraction, input-pipeline weight and
GPU-sharing overhead from. Every parameter carries its default, its range, whether it is
``measured`` (a cited publication) or ``assumed``, and its source. A bad file is a
:class:`ConfigError` naming ``FILE:LINE: FIELD``.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import yaml

from toposcope.errors import ConfigError

#: the shipped truth, next to this module
TRUTH_FILE = Path(__file__).with_name("truth.yaml")
#: link tiers, best first
LINK_TIERS = (
    "nvswitch",
    "nvlink",
    "pcie-switch",
    "host-bridge",
    "same-socket",
    "cross-socket",
    "cross-node",
)
#: what each job class draws
CLASS_PARAMETERS = ("numa_sensitivity", "comm_fraction", "input_weight", "sharing_overhead")
#: the global weights of the model
MODEL_PARAMETERS = ("thread_spread", "input_threads", "input_memory", "memory_stream_gbps")
#: what a GPU's counters show while a job runs (:mod:`toposcope.sim.gpu_traffic`)
GPU_PARAMETERS = (
    "sm_active",
    "sm_occupancy",
    "tensor_active",
    "dram_active",
    "collective_sm_share",
    "host_to_gpu",
    "gpu_to_host",
)
#: the GPU parameters that are shares of a whole (at most 1)
GPU_SHARES = GPU_PARAMETERS[:5]
#: the network between nodes (:mod:`toposcope.sim.gang_price`)
FABRIC_PARAMETERS = (
    "port_gbps",
    "oversubscription",
    "nic_host_bridge",
    "nic_cross_socket",
    "data_parallel",
    "tensor_parallel",
    "pipeline",
)
#: the fabric parameters that are shares of a whole (at most 1)
FABRIC_SHARES = FABRIC_PARAMETERS[2:]
KINDS = ("measured", "assumed")
#: the job classes (the values of :class:`~toposcope.sim.jobs.JobKind`)
CLASS_NAMES = ("cpu-train", "gpu-train", "inference", "notebook")


@dataclass(frozen=True)
class Parameter:
    """One figure of the truth: default, range, ``measured`` or ``assumed``, and source."""

    value: float
    low: float
    high: float
    kind: str
    source: str


@dataclass(frozen=True)
class Truth:
    """Every parameter of the performance model (see the module docstring)."""

    links: dict[str, Parameter]
    numa_bandwidth: tuple[tuple[int, Parameter], ...]
    model: dict[str, Parameter]
    classes: dict[str, dict[str, Parameter]]
    gpu: dict[str, Parameter]
    fabric: dict[str, Parameter] = field(default_factory=dict)

    def link_bandwidth(self, tier: str) -> float:
        """Effective GB/s of a link tier."""
        return self.links[tier].value

    def remote_cost(self, distance: float) -> float:
        """``local / remote bandwidth - 1`` at a SLIT distance (0 when local), the ratio
        interpolated linearly between the file's points and held flat beyond them.
        """
        if distance <= 10:
            return 0.0
        points = [(10.0, 1.0), *((float(d), p.value) for d, p in self.numa_bandwidth)]
        ratio = points[-1][1]
        for (d0, r0), (d1, r1) in itertools.pairwise(points):
            if distance <= d1:
                ratio = r0 + (r1 - r0) * (distance - d0) / (d1 - d0)
                break
        return 1.0 / ratio - 1.0

    def weight(self, name: str) -> float:
        """A global weight of the model (:data:`MODEL_PARAMETERS`)."""
        return self.model[name].value

    def gpu_figure(self, name: str) -> float:
        """A figure of what a GPU's counters show (:data:`GPU_PARAMETERS`)."""
        return self.gpu[name].value

    def fabric_figure(self, name: str) -> float:
        """A figure of the network between nodes (:data:`FABRIC_PARAMETERS`)."""
        return self.fabric[name].value


class _Checker:
    """Typed reads of the composed YAML tree, failing with ``FILE:LINE: FIELD: problem``."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def fail(self, node: yaml.Node, field: str, problem: str) -> ConfigError:
        """A :class:`ConfigError` at ``node``'s line."""
        return ConfigError(f"{self.path}:{node.start_mark.line + 1}: {field}: {problem}")

    def mapping(
        self, node: yaml.Node, field: str, keys: tuple[str, ...] = ()
    ) -> dict[str, yaml.Node]:
        """A mapping's children by key; with ``keys``, exactly those keys."""
        if not isinstance(node, yaml.MappingNode):
            raise self.fail(node, field, "expected a mapping")
        found: dict[str, yaml.Node] = {}
        for key, value in node.value:
            name = str(key.value)
            if keys and name not in keys:
                raise self.fail(key, f"{field}.{name}", f"unknown key (known: {', '.join(keys)})")
            found[name] = value
        for name in keys:
            if name not in found:
                raise self.fail(node, f"{field}.{name}", "missing")
        return found

    def number(self, node: yaml.Node, field: str) -> float:
        """A finite, non-negative number."""
        try:
            if not isinstance(node, yaml.ScalarNode):
                raise ValueError
            value = float(node.value)
        except ValueError:
            raise self.fail(node, field, "expected a number") from None
        if not math.isfinite(value) or value < 0:
            raise self.fail(node, field, f"must be a finite number >= 0, got {node.value}")
        return value

    def parameter(self, node: yaml.Node, field: str, *, positive: bool = False) -> Parameter:
        """A ``{value, range, kind, source}`` parameter with ``low <= value <= high``."""
        parts = self.mapping(node, field, ("value", "range", "kind", "source"))
        value = self.number(parts["value"], f"{field}.value")
        bounds = parts["range"]
        if not isinstance(bounds, yaml.SequenceNode) or len(bounds.value) != 2:
            raise self.fail(bounds, f"{field}.range", "expected [low, high]")
        low, high = (self.number(b, f"{field}.range") for b in bounds.value)
        if not low <= value <= high:
            raise self.fail(bounds, f"{field}.range", f"[{low:g}, {high:g}] must hold {value:g}")
        if positive and low <= 0:
            raise self.fail(bounds, f"{field}.range", "must be above 0")
        kind = str(parts["kind"].value)
        if kind not in KINDS:
            raise self.fail(parts["kind"], f"{field}.kind", f"{kind!r} is not one of {KINDS}")
        source = str(parts["source"].value).strip()
        if not source:
            raise self.fail(parts["source"], f"{field}.source", "must say where it comes from")
        return Parameter(value, low, high, kind, source)


def load_truth(path: Path | str = TRUTH_FILE) -> Truth:
    """Read and check a truth file (:class:`ConfigError` naming file, line and field)."""
    path = Path(path)
    check = _Checker(path)
    try:
        root = yaml.compose(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read: {exc}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    if root is None:
        raise ConfigError(f"{path}: empty truth file")
    top = check.mapping(
        root, "truth", ("links", "numa_bandwidth", "model", "gpu", "fabric", "classes")
    )
    links = check.mapping(top["links"], "links", LINK_TIERS)
    points_node = top["numa_bandwidth"]
    if not isinstance(points_node, yaml.SequenceNode) or not points_node.value:
        raise check.fail(points_node, "numa_bandwidth", "expected a list of points")
    points: list[tuple[int, Parameter]] = []
    for i, item in enumerate(points_node.value):
        field = f"numa_bandwidth[{i}]"
        parts = check.mapping(item, field, ("distance", "ratio"))
        distance = check.number(parts["distance"], f"{field}.distance")
        if distance <= 10 or (points and distance <= points[-1][0]):
            raise check.fail(parts["distance"], f"{field}.distance", "must rise above 10")
        ratio = check.parameter(parts["ratio"], f"{field}.ratio", positive=True)
        if ratio.high > 1:
            raise check.fail(parts["ratio"], f"{field}.ratio", "remote/local must be <= 1")
        points.append((int(distance), ratio))
    weights = check.mapping(top["model"], "model", MODEL_PARAMETERS)
    gpu_nodes = check.mapping(top["gpu"], "gpu", GPU_PARAMETERS)
    gpu: dict[str, Parameter] = {}
    for name in GPU_PARAMETERS:
        gpu[name] = check.parameter(gpu_nodes[name], f"gpu.{name}")
        if name in GPU_SHARES and gpu[name].high > 1:
            raise check.fail(gpu_nodes[name], f"gpu.{name}", "a share must be <= 1")
    fabric_nodes = check.mapping(top["fabric"], "fabric", FABRIC_PARAMETERS)
    fabric: dict[str, Parameter] = {}
    for name in FABRIC_PARAMETERS:
        fabric[name] = check.parameter(fabric_nodes[name], f"fabric.{name}", positive=True)
        if name in FABRIC_SHARES and fabric[name].high > 1:
            raise check.fail(fabric_nodes[name], f"fabric.{name}", "a share must be <= 1")
    if fabric["oversubscription"].low < 1:
        raise check.fail(fabric_nodes["oversubscription"], "fabric.oversubscription", "below 1:1")
    classes = check.mapping(
        top["classes"], "classes", ("cpu-train", "gpu-train", "inference", "notebook")
    )
    return Truth(
        links={t: check.parameter(links[t], f"links.{t}", positive=True) for t in LINK_TIERS},
        numa_bandwidth=tuple(points),
        model={m: check.parameter(weights[m], f"model.{m}") for m in MODEL_PARAMETERS},
        classes={
            name: {
                p: check.parameter(node_p, f"classes.{name}.{p}")
                for p, node_p in check.mapping(node, f"classes.{name}", CLASS_PARAMETERS).items()
            }
            for name, node in classes.items()
        },
        gpu=gpu,
        fabric=fabric,
    )


@cache
def shipped_truth() -> Truth:
    """The shipped truth (read once)."""
    return load_truth(TRUTH_FILE)


#: truths put in place by :func:`truth_in_effect`, innermost last
_IN_EFFECT: list[Truth] = []


def truth() -> Truth:
    """The truth the model reads: the shipped one, or the one :func:`truth_in_effect` put in
    place (a perturbed truth for the closed loop's robustness runs).
    """
    return _IN_EFFECT[-1] if _IN_EFFECT else shipped_truth()


@contextmanager
def truth_in_effect(replacement: Truth) -> Iterator[Truth]:
    """Make the model read ``replacement`` instead of the shipped truth while the block runs
    (this process only; the advisor, another process, never reads either).
    """
    _IN_EFFECT.append(replacement)
    try:
        yield replacement
    finally:
        _IN_EFFECT.remove(replacement)
