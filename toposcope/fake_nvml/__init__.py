"""A fake NVML backend that behaves like the ``pynvml`` module, driven by a YAML/JSON file.

The exporter's NVML source takes the bindings as a backend object; :class:`FakeNvml` stands in
for the ``pynvml`` module with the same function names, argument order and return shapes
(structures become small objects with the same attribute names, ``busId`` stays ``bytes``),
and it raises the *real* ``pynvml.NVMLError`` subclasses, so code under test cannot tell it
from the library. Constants and error classes the fake does not define itself are taken
from ``pynvml`` (``fake.NVML_CLOCK_SM``, ``fake.NVMLError_GpuIsLost``).

A description file (see ``specs/*.yaml`` in this package) gives the machine: GPUs with model,
UUID, PCI id, NUMA node and CPU affinity, the PCIe path between every pair, NVLinks (to peers
or NVSwitches), MIG instances, processes, health signals (row remapping, retired pages,
NVLink and PCIe replay error counters), throughput and activity sources (GPM metrics, the
NVLink throughput and PCIe byte counter field values), and readings as constants, step
series over a fake clock (``{series: [[t, v], ...], period: p}``) or counters (``{start: s,
rate: r}``).
``faults`` inject any NVML error by its ``NVML_ERROR_*`` name into a call, per GPU, after N
good calls, for a number of times or a window of fake time, with an optional delay; ``call:
"*"`` hits every call on that GPU (a GPU lost mid-run). A malformed file raises
:class:`~toposcope.errors.ConfigError` naming the file, the field and the problem.

Units are NVML's own (mW, mJ, MHz, KB/s, percent): converting them is the source's job.

Where each piece lives:

* :mod:`.values`: readings over the fake clock, and :class:`ManualClock`;
* :mod:`.spec`: the validated description (:class:`FakeSpec`, :class:`FakeGpu`, ...);
* :mod:`.fields`, :mod:`.health_fields`, :mod:`.activity_fields` and :mod:`.parse`:
  validating a loaded description;
* :mod:`.files`: the shipped descriptions and ``--nvml fake[:NAME|:FILE]``;
* :mod:`.faults`: fault injection and gates;
* :mod:`.base`, :mod:`.device_calls`, :mod:`.topology_calls`, :mod:`.health_calls`,
  :mod:`.event_calls`, :mod:`.activity_calls`, :mod:`.library`: the fake library, one family
  of NVML calls per module (:mod:`.structs` and :mod:`.activity_structs` what they return).

This package exports the names its users need.
"""

from __future__ import annotations

from toposcope.fake_nvml.faults import Gate
from toposcope.fake_nvml.files import (
    DEFAULT_SPEC,
    SPEC_DIR,
    load_fake_nvml,
    load_spec,
    resolve_spec,
    shipped_specs,
)
from toposcope.fake_nvml.library import FakeNvml
from toposcope.fake_nvml.parse import parse_spec
from toposcope.fake_nvml.spec import (
    CLOCK_EVENT_BITS,
    ERROR_CODES,
    FakeGpu,
    FakeMigInstance,
    FakeNvLink,
    FakeProcess,
    FakeSpec,
    Fault,
    XidEvent,
)
from toposcope.fake_nvml.values import ManualClock, Ramp, Series, Value, evaluate

__all__ = [
    "CLOCK_EVENT_BITS",
    "DEFAULT_SPEC",
    "ERROR_CODES",
    "SPEC_DIR",
    "FakeGpu",
    "FakeMigInstance",
    "FakeNvLink",
    "FakeNvml",
    "FakeProcess",
    "FakeSpec",
    "Fault",
    "Gate",
    "ManualClock",
    "Ramp",
    "Series",
    "Value",
    "XidEvent",
    "evaluate",
    "load_fake_nvml",
    "load_spec",
    "parse_spec",
    "resolve_spec",
    "shipped_specs",
]
