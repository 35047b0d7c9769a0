"""A fast Prometheus text-format writer for the gauge and counter families toposcope emits.

prometheus_client's ``generate_latest`` checks and escapes every label *name* of every
sample; with thousands of workload series that is about half of a scrape's time. Our label
names come from the catalogue, which a test checks once, so this writer only escapes label
values and help text. Its output is byte-identical to ``generate_latest`` for these families
(also tested); any other family type is handed to ``generate_latest`` unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import cast

from prometheus_client import generate_latest
from prometheus_client.core import Metric
from prometheus_client.utils import floatToGoString

from toposcope.catalogue.model import MetricSpec
from toposcope.httpgzip import GzipMember, plain_chunks

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


def _header(name: str, help_text: str, kind: str) -> str:
    escaped = help_text.replace("\\", r"\\").replace("\n", r"\n")
    return f"# HELP {name} {escaped}\n# TYPE {name} {kind}\n"


def _plain(family: Metric) -> bool:
    """True for gauges and counters whose samples this writer renders exactly."""
    return family.type in ("gauge", "counter") and all(
        sample.timestamp is None and not sample.name.endswith("_created")
        for sample in family.samples
    )


class FamilyWriter:
    """One gauge or counter family written straight to text from its label values, exactly as
    :func:`render_families` writes the same samples (sorted label names, escaped values,
    client_python's floats), without building client_python samples: for output written
    once and served many times (the workload sampler's). ``add_metric`` takes what a
    client_python family's does, so the same code can fill either.
    """

    def __init__(self, row: MetricSpec) -> None:
        name = row.name
        if row.type == "counter" and not name.endswith("_total"):
            name += "_total"
        self.spec = row
        self.name = name
        self._order = sorted(range(len(row.labels)), key=lambda i: row.labels[i])
        self._keys = [row.labels[i] for i in self._order]
        # bytes as they are written: no line objects stay alive until the family is done
        kind = "counter" if row.type == "counter" else "gauge"  # as MetricSpec.family() makes
        self._text = bytearray(_header(name, row.help, kind).encode("utf-8"))
        self._samples = 0

    def add_metric(self, labels: Sequence[str], value: float) -> None:
        """Write one sample: ``labels`` in the catalogue row's label order."""
        if labels:
            text = ",".join(
                f'{key}="{_escape_value(labels[i])}"'
                for key, i in zip(self._keys, self._order, strict=True)
            )
            line = f"{self.name}{{{text}}} {format_value(value)}\n"
        else:
            line = f"{self.name} {format_value(value)}\n"
        self._text += line.encode("utf-8")
        self._samples += 1

    def __bool__(self) -> bool:
        """Whether a sample was written."""
        return self._samples > 0

    def rendered(self) -> RenderedFamily:
        """The text written so far, compressed (a gzip member about a tenth of its size), as a
        family served as is; the writer's buffer is let go.
        """
        data = GzipMember.pack([self._text])
        self._text = bytearray()
        return RenderedFamily(self.spec, data)


class RenderedFamily(Metric):
    """A family rendered once (``data``, this module's format as bytes, or a
    :class:`~toposcope.httpgzip.GzipMember` of it) and served as is until its inputs change;
    it keeps no samples (a background sampler's output, whose age is exported).
    :func:`render_chunks` hands ``data`` on without copying it.
    """

    def __init__(self, row: MetricSpec, data: bytes) -> None:
        super().__init__(row.name, row.help, row.type, row.unit)
        self.data = data


def render_chunks(families: Iterable[Metric]) -> list[bytes]:
    """The Prometheus text exposition (format 0.0.4) of ``families`` as byte chunks, for a
    response that is written chunk by chunk: a :class:`RenderedFamily` is its own chunk (the
    same bytes object every time, a gzip member when it was kept compressed:
    :func:`toposcope.httpgzip.encode_answer` sends them), the families between two of them
    one chunk each.
    """
    chunks: list[bytes] = []
    out: list[str] = []
    for family in families:
        if isinstance(family, RenderedFamily):
            if out:
                chunks.append("".join(out).encode("utf-8"))
                out = []
            chunks.append(family.data)
            continue
        if not _plain(family):
            out.append(generate_latest(_One(family)).decode())
            continue
        name = family.name + "_total" if family.type == "counter" else family.name
        out.append(_header(name, family.documentation, family.type))
        keys: list[str] = []
        names: set[str] = set()
        for sample in family.samples:
            values = sample.labels
            if values:
                if values.keys() != names:  # a family's samples share their label names
                    keys = sorted(values)
                    names = set(keys)
                labels = ",".join([f'{key}="{_escape_value(values[key])}"' for key in keys])
                out.append(f"{sample.name}{{{labels}}} {format_value(sample.value)}\n")
            else:
                out.append(f"{sample.name} {format_value(sample.value)}\n")
    if out:
        chunks.append("".join(out).encode("utf-8"))
    return chunks


def render_families(families: Iterable[Metric]) -> bytes:
    """The Prometheus text exposition (format 0.0.4) of ``families``, in one piece (gzip
    members unpacked).
    """
    return b"".join(plain_chunks(render_chunks(families)))
