"""A fast Prometheus text-format writer for the gauge and counter families toposcope emits.

prometheus_client's ``generate_latest`` checks and escapes every label *name* of every
sample; with thousands of workload series that is about half of a scrape's time. Our label
names come from the catalogue, which a test checks once, so this writer only escapes label
values and help text. Its output is byte-identical to ``generate_latest`` for these families
(also tested); any other family type is handed to ``generate_latest`` unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import cast

from prometheus_client import generate_latest
from prometheus_client.core import Metric
from prometheus_client.utils import floatToGoString

#: client_python's own float formatting (``+Inf``, ``NaN``, ``1e+06``), typed for mypy.
format_value = cast(Callable[[float], str], floatToGoString)


class _One:
    """Adapts a single family to the collector interface ``generate_latest`` expects."""

    def __init__(self, family: Metric) -> None:
        self.family = family

    def collect(self) -> Iterable[Metric]:
        """Yield the one family."""
        return [self.family]


def _escape_value(value: str) -> str:
    if "\\" in value or "\n" in value or '"' in value:
        return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
    return value


def _plain(family: Metric) -> bool:
    """True for gauges and counters whose samples this writer renders exactly."""
    return family.type in ("gauge", "counter") and all(
        sample.timestamp is None and not sample.name.endswith("_created")
        for sample in family.samples
    )


class RenderedFamily(Metric):
    """A family rendered once (``text``, in this module's format) and served as is until its
    inputs change; it keeps no samples (a background sampler's output, whose age is exported).
    """

    def __init__(self, family: Metric) -> None:
        super().__init__(family.name, family.documentation, family.type, family.unit)
        self.text = render_families([family]).decode("utf-8")


def render_families(families: Iterable[Metric]) -> bytes:
    """The Prometheus text exposition (format 0.0.4) of ``families``."""
    out: list[str] = []
    for family in families:
        if isinstance(family, RenderedFamily):
            out.append(family.text)
            continue
        if not _plain(family):
            out.append(generate_latest(_One(family)).decode())
            continue
        name = family.name + "_total" if family.type == "counter" else family.name
        help_text = family.documentation.replace("\\", r"\\").replace("\n", r"\n")
        out.append(f"# HELP {name} {help_text}\n# TYPE {name} {family.type}\n")
        for sample in family.samples:
            if sample.labels:
                labels = ",".join(
                    f'{key}="{_escape_value(value)}"'
                    for key, value in sorted(sample.labels.items())
                )
                out.append(f"{sample.name}{{{labels}}} {format_value(sample.value)}\n")
            else:
                out.append(f"{sample.name} {format_value(sample.value)}\n")
    return "".join(out).encode("utf-8")
