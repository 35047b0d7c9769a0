"""Fault injection for the fake NVML: call counts, gates that hold calls, faults that fire.

Every fake NVML function passes :meth:`FaultInjector.enter` before it answers: the call is
counted, waits at any :class:`Gate` holding it (a test decides when a slow call returns), and
gets the delay and the error of the faults that fire on it. A :class:`~.spec.Fault` fires
on its call (or on every call on a GPU for ``"*"``) after ``after`` matching calls, ``times``
times, while the fake time is in ``[at, until)``.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from toposcope.fake_nvml.spec import Fault


class Gate:
    """Blocks matching calls until released, so a test controls when a slow call returns."""

    def __init__(self, call: str, gpu: int | None) -> None:
        self.call = call
        self.gpu = gpu
        self.entered = threading.Event()
        self._open = threading.Event()

    def release(self) -> None:
        """Let blocked and later calls through."""
        self._open.set()

    @property
    def released(self) -> bool:
        """Whether calls pass the gate now."""
        return self._open.is_set()

    def matches(self, call: str, gpu: int | None) -> bool:
        """Whether a call on ``gpu`` is one this gate holds."""
        return call == self.call and (self.gpu is None or self.gpu == gpu)

    def pass_through(self) -> None:
        """Signal that a call arrived, then wait until the gate is released."""
        self.entered.set()
        self._open.wait()


@dataclass
class _FaultState:
    """A fault and how many matching calls it has let pass and hit so far."""

    fault: Fault
    seen: int = 0
    fired: int = 0


class FaultInjector:
    """The calls made, the gates holding calls and the faults to fire, behind one lock."""

    def __init__(self, faults: Iterable[Fault]) -> None:
        self._lock = threading.Lock()
        self._faults = [_FaultState(f) for f in faults]
        self._gates: list[Gate] = []
        self.calls: Counter[tuple[str, int | None]] = Counter()

    def call_count(self, call: str, gpu: int | None = None) -> int:
        """How many times ``call`` was made (on ``gpu``, or in all)."""
        with self._lock:
            if gpu is not None:
                return self.calls[(call, gpu)]
            return sum(n for (name, _), n in self.calls.items() if name == call)

    def add(self, fault: Fault) -> None:
        """Fire ``fault`` from now on."""
        with self._lock:
            self._faults.append(_FaultState(fault))

    def clear(self) -> None:
        """Remove every fault, including the description's."""
        with self._lock:
            self._faults.clear()

    def hold(self, call: str, gpu: int | None = None) -> Gate:
        """Block ``call`` (on ``gpu``) until the returned gate is released."""
        gate = Gate(call, gpu)
        with self._lock:
            self._gates.append(gate)
        return gate

    def release_all(self) -> None:
        """Release every gate (test teardown, so that no thread stays blocked in the fake)."""
        with self._lock:
            gates = list(self._gates)
        for gate in gates:
            gate.release()

    def enter(
        self, name: str, gpu: int | None, kind: str, now: Callable[[], float]
    ) -> tuple[float, int | None]:
        """Count a call of ``name`` on ``gpu``, wait at its gates, and return the total delay
        and the first error code of the faults that fire on it at fake time ``now()``.

        ``kind`` is ``device`` for calls that take a GPU's handle (``"*"`` faults hit them).
        """
        with self._lock:
            self.calls[(name, gpu)] += 1
            gates = [g for g in self._gates if g.matches(name, gpu)]
        for gate in gates:
            gate.pass_through()
        delay = 0.0
        error: int | None = None
        with self._lock:
            t = now()
            for state in self._faults:
                fault = state.fault
                if fault.call != name and not (fault.call == "*" and kind == "device"):
                    continue
                if fault.gpu is not None and fault.gpu != gpu:
                    continue
                if (fault.at is not None and t < fault.at) or (
                    fault.until is not None and t >= fault.until
                ):
                    continue
                if state.seen < fault.after:
                    state.seen += 1
                    continue
                if fault.times is not None and state.fired >= fault.times:
                    continue
                state.fired += 1
                delay += fault.delay
                if error is None and fault.error is not None:
                    error = fault.error
        return delay, error
