"""Record what NVML answers to every call toposcope makes, as plain JSON.

``python -m toposcope.host.nvml.probe --out FILE`` asks the NVIDIA library (or the fake, with
``--nvml fake:NAME``) each call the exporter uses, per GPU, and writes what came back: the
value as plain data, or the error class (``NVMLError_NotSupported`` ...) when the call failed.
GPM metrics are read from two samples ``--gpm-interval`` seconds apart, so that the rates are
those of the work running meanwhile. The file is what a bug report about a GPU reading should
carry, and what the fake NVML's descriptions are checked against
(``tests/fixtures/real-gpu/``): it holds no process names, only PIDs and byte counts.

The probe reads and never changes the GPU: it calls no ``nvmlDeviceSet*`` and no reset.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import sys
import time
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import pynvml

from toposcope.errors import ConfigError
from toposcope.fake_nvml.files import load_fake_nvml
from toposcope.host.nvml.activity import (
    FI_NVLINK_FIELDS,
    FI_PCIE_FIELDS,
    GPM_LINKS,
    GPM_NVLINK_TOTAL_METRICS,
    GPM_PCIE_METRICS,
    GPM_RATIO_METRICS,
    field_number,
    gpm_link_metric,
)

#: NVLinks asked about per GPU (NVML_NVLINK_MAX_LINKS on Hopper is 18)
MAX_LINKS = 18
#: 64-bit words asked for in CPU and memory affinity masks (1,024 CPUs or NUMA nodes)
AFFINITY_WORDS = 16

#: the shape of every recorded answer: a value or ``{"error": NAME}``
Answer = dict[str, Any]


def plain(value: Any, depth: int = 0) -> Any:
    """``value`` as JSON data: ctypes structures and the fake's objects by their fields."""
    if depth > 8:
        return repr(value)
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace").rstrip("\x00")
    if isinstance(value, list | tuple | ctypes.Array):
        return [plain(item, depth + 1) for item in value]
    fields = getattr(value, "_fields_", None)
    if fields is not None:
        return {name: plain(getattr(value, name), depth + 1) for name, *_ in fields}
    if hasattr(value, "__dict__"):
        return {
            key: plain(item, depth + 1)
            for key, item in vars(value).items()
            if not key.startswith("_") and not callable(item)
        }
    return repr(value)


def ask(backend: Any, name: str, *args: Any) -> Answer:
    """One NVML call: ``{"value": ...}``, or ``{"error": CLASS}`` with the error's class name."""
    function = getattr(backend, name, None)
    if function is None:
        return {"error": "FunctionNotInBindings"}
    try:
        return {"value": plain(function(*args))}
    except pynvml.NVMLError as exc:
        return {"error": type(exc).__name__}


def _field_values(backend: Any, handle: Any, wanted: list[tuple[int, int]]) -> Answer:
    """Field values by ``"field_id/scope"``: each entry's value or its return code's name."""
    try:
        answer = backend.nvmlDeviceGetFieldValues(handle, wanted)
    except pynvml.NVMLError as exc:
        return {"error": type(exc).__name__}
    out: dict[str, Any] = {}
    for (field_id, scope), entry in zip(wanted, answer, strict=False):
        key = f"{field_id}/{scope}"
        if entry.nvmlReturn != pynvml.NVML_SUCCESS:
            out[key] = {"return": int(entry.nvmlReturn)}
            continue
        out[key] = {"value": field_number(entry), "value_type": int(entry.valueType)}
    return {"value": out}


def _gpm_metric_ids(links: list[int]) -> list[int]:
    wanted = [*GPM_RATIO_METRICS.values(), *GPM_PCIE_METRICS.values()]
    if links:
        wanted += [*GPM_NVLINK_TOTAL_METRICS.values()]
        wanted += [
            gpm_link_metric(link, d) for link in links if link < GPM_LINKS for d in ("tx", "rx")
        ]
    return wanted


def _gpm(
    backend: Any, handle: Any, links: list[int], interval: float, sleep: Callable[[float], object]
) -> Answer:
    """GPM support and the metrics between two samples ``interval`` seconds apart."""
    support = ask(backend, "nvmlGpmQueryDeviceSupport", handle)
    out: Answer = {"support": support}
    value = support.get("value")
    if not isinstance(value, dict) or not value.get("isSupportedDevice"):
        return out
    try:
        first = backend.nvmlGpmSampleAlloc()
        second = backend.nvmlGpmSampleAlloc()
    except pynvml.NVMLError as exc:
        out["error"] = type(exc).__name__
        return out
    try:
        backend.nvmlGpmSampleGet(handle, first)
        sleep(interval)
        backend.nvmlGpmSampleGet(handle, second)
        wanted = _gpm_metric_ids(links)
        request = backend.c_nvmlGpmMetricsGet_t()
        request.version = pynvml.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(wanted)
        request.sample1 = first
        request.sample2 = second
        for slot, metric in enumerate(wanted):
            request.metrics[slot].metricId = metric
        answer = backend.nvmlGpmMetricsGet(request)
        metrics: dict[str, Any] = {}
        for slot, metric in enumerate(wanted):
            entry = answer.metrics[slot]
            code = int(entry.nvmlReturn)
            metrics[str(metric)] = (
                {"value": float(entry.value)} if code == pynvml.NVML_SUCCESS else {"return": code}
            )
        out["interval_s"] = interval
        out["metrics"] = metrics
    except pynvml.NVMLError as exc:
        out["error"] = type(exc).__name__
    finally:
        for sample in (first, second):
            with contextlib.suppress(pynvml.NVMLError):
                backend.nvmlGpmSampleFree(sample)
    return out


def probe_gpu(
    backend: Any, index: int, *, gpm_interval: float, sleep: Callable[[float], object]
) -> dict[str, Any]:
    """Every call the exporter makes for GPU ``index``, answered."""
    handle = backend.nvmlDeviceGetHandleByIndex(index)
    calls: dict[str, Answer] = {}

    def record(key: str, name: str, *args: Any) -> Answer:
        calls[key] = ask(backend, name, handle, *args)
        return calls[key]

    for name in (
        "nvmlDeviceGetName",
        "nvmlDeviceGetUUID",
        "nvmlDeviceGetPciInfo_v3",
        "nvmlDeviceGetIndex",
        "nvmlDeviceGetNumaNodeId",
        "nvmlDeviceGetMemoryInfo",
        "nvmlDeviceGetUtilizationRates",
        "nvmlDeviceGetPowerUsage",
        "nvmlDeviceGetEnforcedPowerLimit",
        "nvmlDeviceGetTotalEnergyConsumption",
        "nvmlDeviceGetCurrentClocksEventReasons",
        "nvmlDeviceGetRemappedRows",
        "nvmlDeviceGetRetiredPagesPendingStatus",
        "nvmlDeviceGetPcieReplayCounter",
        "nvmlDeviceGetMigMode",
        "nvmlDeviceGetMaxMigDeviceCount",
        "nvmlDeviceGetComputeRunningProcesses",
        "nvmlDeviceGetGraphicsRunningProcesses",
    ):
        record(name, name)
    record("nvmlDeviceGetCpuAffinity", "nvmlDeviceGetCpuAffinity", AFFINITY_WORDS)
    record(
        "nvmlDeviceGetMemoryAffinity",
        "nvmlDeviceGetMemoryAffinity",
        AFFINITY_WORDS,
        pynvml.NVML_AFFINITY_SCOPE_NODE,
    )
    record("nvmlDeviceGetTemperature/gpu", "nvmlDeviceGetTemperature", pynvml.NVML_TEMPERATURE_GPU)
    record("nvmlDeviceGetClockInfo/sm", "nvmlDeviceGetClockInfo", pynvml.NVML_CLOCK_SM)
    record("nvmlDeviceGetClockInfo/mem", "nvmlDeviceGetClockInfo", pynvml.NVML_CLOCK_MEM)
    for error_type in ("corrected", "uncorrected"):
        for counter in ("volatile", "aggregate"):
            record(
                f"nvmlDeviceGetTotalEccErrors/{error_type}/{counter}",
                "nvmlDeviceGetTotalEccErrors",
                getattr(pynvml, f"NVML_MEMORY_ERROR_TYPE_{error_type.upper()}"),
                getattr(pynvml, f"NVML_{counter.upper()}_ECC"),
            )
    for direction in ("TX", "RX"):
        record(
            f"nvmlDeviceGetPcieThroughput/{direction.lower()}",
            "nvmlDeviceGetPcieThroughput",
            getattr(pynvml, f"NVML_PCIE_UTIL_{direction}_BYTES"),
        )
    links: list[int] = []
    for link in range(MAX_LINKS):
        state = record(f"nvmlDeviceGetNvLinkState/{link}", "nvmlDeviceGetNvLinkState", link)
        if "value" not in state:
            continue
        links.append(link)
        record(f"nvmlDeviceGetNvLinkRemotePciInfo/{link}", "nvmlDeviceGetNvLinkRemotePciInfo", link)
        record(
            f"nvmlDeviceGetNvLinkRemoteDeviceType/{link}",
            "nvmlDeviceGetNvLinkRemoteDeviceType",
            link,
        )
        record(
            f"nvmlDeviceGetNvLinkErrorCounter/{link}/replay",
            "nvmlDeviceGetNvLinkErrorCounter",
            link,
            pynvml.NVML_NVLINK_ERROR_DL_REPLAY,
        )
    wanted = [(FI_PCIE_FIELDS[d], 0) for d in ("tx", "rx")] + [
        (FI_NVLINK_FIELDS[d], link) for link in links for d in ("tx", "rx")
    ]
    calls["nvmlDeviceGetFieldValues"] = _field_values(backend, handle, wanted)
    return {
        "index": index,
        "calls": calls,
        "nvlinks_present": links,
        "gpm": _gpm(backend, handle, links, gpm_interval, sleep),
    }


def probe(
    backend: Any, *, gpm_interval: float = 1.0, sleep: Callable[[float], object] = time.sleep
) -> dict[str, Any]:
    """What NVML answers on this machine: the system, every GPU and every GPU pair's path."""
    backend.nvmlInit()
    try:
        count = int(backend.nvmlDeviceGetCount())
        gpus = [
            probe_gpu(backend, index, gpm_interval=gpm_interval, sleep=sleep)
            for index in range(count)
        ]
        pairs: dict[str, Answer] = {}
        handles = [backend.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        for a in range(count):
            for b in range(a + 1, count):
                pairs[f"{a}-{b}"] = ask(
                    backend, "nvmlDeviceGetTopologyCommonAncestor", handles[a], handles[b]
                )
        return {
            "bindings": getattr(pynvml, "__version__", None) or _bindings_version(),
            "system": {
                "nvmlSystemGetDriverVersion": ask(backend, "nvmlSystemGetDriverVersion"),
                "nvmlSystemGetCudaDriverVersion": ask(backend, "nvmlSystemGetCudaDriverVersion"),
                "nvmlDeviceGetCount": {"value": count},
            },
            "gpus": gpus,
            "pairs": pairs,
        }
    finally:
        backend.nvmlShutdown()


def _bindings_version() -> str | None:
    try:
        return version("nvidia-ml-py")
    except PackageNotFoundError:
        return None


def main(argv: list[str] | None = None) -> int:
    """``python -m toposcope.host.nvml.probe``: write the answers as JSON (exit 2 on bad use)."""
    parser = argparse.ArgumentParser(
        prog="python -m toposcope.host.nvml.probe",
        description="Record what NVML answers to each call toposcope makes, as JSON.",
        epilog="Examples:\n  python -m toposcope.host.nvml.probe --out nvml.json\n"
        "  python -m toposcope.host.nvml.probe --nvml fake:hgx-h100 --gpm-interval 0",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--out", metavar="FILE", default="-", help="where to write (- stdout)")
    parser.add_argument(
        "--nvml", default="real", metavar="real|fake:NAME", help="the library or the fake"
    )
    parser.add_argument(
        "--gpm-interval", type=float, default=1.0, metavar="S", help="seconds between samples"
    )
    args = parser.parse_args(argv)
    if args.gpm_interval < 0 or args.gpm_interval > 60:
        parser.error("--gpm-interval must be between 0 and 60 seconds")
    backend: Any = pynvml
    if args.nvml != "real":
        try:
            backend = load_fake_nvml(args.nvml, sleep=lambda _seconds: None)
        except ConfigError as exc:
            parser.error(str(exc))
    try:
        answers = probe(backend, gpm_interval=args.gpm_interval)
    except pynvml.NVMLError as exc:
        print(f"error: NVML: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    text = json.dumps(answers, indent=1, sort_keys=True) + "\n"
    if args.out == "-":
        sys.stdout.write(text)
    else:
        with open(args.out, "w", encoding="utf-8") as handle:
            handle.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
