"""The fake NVML library: every family of fake calls over one :class:`~.base.FakeNvmlBase`."""

from __future__ import annotations

from toposcope.fake_nvml.activity_calls import ActivityCalls
from toposcope.fake_nvml.device_calls import DeviceCalls
from toposcope.fake_nvml.event_calls import EventCalls
from toposcope.fake_nvml.health_calls import HealthCalls
from toposcope.fake_nvml.topology_calls import TopologyCalls


class FakeNvml(DeviceCalls, TopologyCalls, HealthCalls, EventCalls, ActivityCalls):
    """A stand-in for the ``pynvml`` module over a :class:`~.spec.FakeSpec`.

    ``clock`` is the fake time readings and timed faults follow (default: seconds since the
    fake was made); ``sleep`` implements fault delays. Thread-safe like the library. Test
    helpers: :meth:`add_fault`, :meth:`lose_gpu`, :meth:`hold`, :meth:`emit_xid`,
    :meth:`set_value`, :meth:`set_processes`, :meth:`call_count`, :meth:`gpm_samples_held`.
    """
