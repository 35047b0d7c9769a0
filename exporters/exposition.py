"""How every exporter collector writes its families: straight to Prometheus text.

A collector fills one :class:`FamilyWriter` per catalogue family (``add_metric(labels,
value)``, as on a client_python family) and yields :meth:`FamilyWriter.plain` (or
:func:`plain_nonempty`): a :class:`RenderedFamily`, text that :func:`render_chunks` serves
as is. No client_python sample is built. prometheus_client's ``generate_latest`` checks and
escapes every label *name* of every sample; with thousands of workload series that was about
half of a scrape's time. Our label names come from the catalogue, which a test checks once,
so this writer only escapes label values and help text. Its output is byte-identical to
``generate_latest`` for the same samples (tested); a family of another kind that reaches
:func:`render_chunks` is handed to ``generate_latest`` unchanged.

For label sets that recur scrape after scrape (NUMA nodes x modes, GPUs), a collector keeps
a :class:`FamilyLayout` per family, which remembers each series' ``name{labels} `` text, so
that a scrape formats only the values it has just read. The workload sampler keeps its
families compressed (:meth:`FamilyWriter.rendered`), written once per sample.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import cast

from prometheus_client.core import Metric
from prometheus_client.utils import floatToGoString

from toposcope.catalogue import families_text
from toposcope.catalogue.model import MetricSpec
from toposcope.serving.httpgzip import GzipMember, plain_chunks

#: client_python's own float formatting (``+Inf``, ``NaN``, ``1e+06``), typed for mypy.
go_float = cast(Callable[[float], str], floatToGoString)

#: Integers below this size in magnitude are floats exactly, written ``<digits>.0`` by ``repr``.
_EXACT_INT = 2**53


def format_value(value: float) -> str:
    """``value`` as client_python writes it (:data:`go_float`: the same text, tested), without
    its generic checks in the common cases: a whole number (bytes, pages), whose float
    ``repr`` is its digits and ``.0``, and a finite float. Like Go, it writes an exponent for a
    positive number from a million up (``1.6769836e+07``).
    """
    if type(value) is int and -_EXACT_INT < value < _EXACT_INT:
        if value < 1_000_000:
            return f"{value}.0"
        digits = str(value)
        mantissa = digits.rstrip("0")
        if len(mantissa) == 1:
            return f"{mantissa}e+{len(digits) - 1:02d}"
        return f"{mantissa[0]}.{mantissa[1:]}e+{len(digits) - 1:02d}"
    if type(value) is not float:
        return go_float(value)
    text = repr(value)
    if not text[-1].isdigit():  # inf, nan
        return go_float(value)
    dot = text.find(".")
    if value > 0 and dot > 6:
        return f"{f'{text[0]}.{text[1:dot]}{text[dot + 1 :]}'.rstrip('0.')}e+{dot - 1:02d}"
    return text


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


#: The most series prefixes a :class:`FamilyLayout` remembers. NUMA nodes x modes is a few
#: hundred; past the limit it starts again empty, so label values that keep changing cannot
#: grow it without bound.
PREFIX_LIMIT = 4096


class FamilyLayout:
    """How one catalogue family is written, worked out once: its exposed name, its ``# HELP``
    and ``# TYPE`` header, and its label names in written (sorted) order.

    With ``remember`` it also keeps each series' ``name{labels} `` prefix, for a collector
    whose label sets recur scrape after scrape (NUMA nodes x modes): a scrape then formats
    only the values, which are read fresh every time. Safe to share between threads (a
    prefix written twice at once is the same string).
    """

    def __init__(self, row: MetricSpec, remember: bool = False) -> None:
        name = row.name
        if row.type == "counter" and not name.endswith("_total"):
            name += "_total"
        self.spec = row
        self.name = name
        kind = "counter" if row.type == "counter" else "gauge"  # as MetricSpec.family() makes
        self.header = _header(name, row.help, kind).encode("utf-8")
        self._order = sorted(range(len(row.labels)), key=lambda i: row.labels[i])
        self._keys = [row.labels[i] for i in self._order]
        self._prefixes: dict[tuple[str, ...], str] | None = {} if remember else None

    def prefix(self, labels: Sequence[str]) -> str:
        """``name{label="value",...} `` for ``labels`` in the catalogue row's label order."""
        prefixes = self._prefixes
        if prefixes is None:
            return self._write_prefix(labels)
        key = tuple(labels)
        found = prefixes.get(key)
        if found is None:
            if len(prefixes) >= PREFIX_LIMIT:
                prefixes.clear()
            found = prefixes[key] = self._write_prefix(key)
        return found

    def _write_prefix(self, labels: Sequence[str]) -> str:
        if not labels:
            return f"{self.name} "
        text = ",".join(
            f'{key}="{_escape_value(labels[i])}"'
            for key, i in zip(self._keys, self._order, strict=True)
        )
        return f"{self.name}{{{text}}} "

    def writer(self) -> FamilyWriter:
        """A writer for this scrape's samples of the family, sharing this layout."""
        return FamilyWriter(self.spec, self)


class FamilyWriter:
    """One gauge or counter family written straight to text from its label values, exactly as
    :func:`render_families` writes the same samples (sorted label names, escaped values,
    client_python's floats), without building client_python samples. ``add_metric`` takes
    what a client_python family's does, so the same code can fill either. The text is then
    served as a :class:`RenderedFamily`: compressed (:meth:`rendered`, the workload
    sampler's, written once and served many times) or plain (:meth:`plain`, a collector's
    family of this scrape).
    """

    def __init__(self, row: MetricSpec, layout: FamilyLayout | None = None) -> None:
        self.layout = layout if layout is not None else FamilyLayout(row)
        self.spec = row
        self.name = self.layout.name
        # bytes as they are written: no line objects stay alive until the family is done
        self._text = bytearray(self.layout.header)

    def add_metric(self, labels: Sequence[str], value: float) -> None:
        """Write one sample: ``labels`` in the catalogue row's label order."""
        self._text += f"{self.layout.prefix(labels)}{format_value(value)}\n".encode()

    def __bool__(self) -> bool:
        """Whether a sample was written."""
        return len(self._text) > len(self.layout.header)

    def rendered(self) -> RenderedFamily:
        """The text written so far, compressed (a gzip member about a tenth of its size), as a
        family served as is; the writer's buffer is let go.
        """
        data = GzipMember.pack([self._text])
        self._text = bytearray()
        return RenderedFamily(self.spec, data)

    def plain(self) -> RenderedFamily:
        """The text written so far, uncompressed, as a family served as is."""
        return RenderedFamily(self.spec, bytes(self._text))


class RenderedFamily(Metric):
    """A family already written (``data``, this module's format as bytes, or a
    :class:`~toposcope.serving.httpgzip.GzipMember` of it) and served as is: a collector's family of
    this scrape, or a background sampler's, served until its inputs change (its age is
    exported). It keeps no samples. :func:`render_chunks` hands ``data`` on without copying
    it. Its ``name`` and ``type`` are those of the client_python family
    :meth:`~toposcope.catalogue.model.MetricSpec.family` makes for the row (a counter's name
    without ``_total``), so that code looking families up by name sees one naming.
    """

    def __init__(self, row: MetricSpec, data: bytes) -> None:
        counter = row.type == "counter"
        name = row.name.removesuffix("_total") if counter else row.name
        super().__init__(name, row.help, "counter" if counter else "gauge")
        self.data = data


def plain_nonempty(writers: Iterable[FamilyWriter]) -> list[RenderedFamily]:
    """The families of ``writers`` that have samples, each as :meth:`FamilyWriter.plain`: a
    scrape leaves an empty family out rather than carry a HELP/TYPE block without samples.
    """
    return [writer.plain() for writer in writers if writer]


def render_chunks(families: Iterable[Metric]) -> list[bytes]:
    """The Prometheus text exposition (format 0.0.4) of ``families`` as byte chunks, for a
    response that is written chunk by chunk: a :class:`RenderedFamily` is its own chunk (the
    same bytes object every time, a gzip member when it was kept compressed:
    :func:`toposcope.serving.httpgzip.encode_answer` sends them), the families between two of them
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
            out.append(families_text([family]).decode())
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


def joined(chunks: Iterable[bytes]) -> list[bytes]:
    """``chunks`` with each run of plain chunks joined into one; a
    :class:`~toposcope.serving.httpgzip.GzipMember` stays a chunk of its own, not copied. The HTTP
    server sends every chunk of an answer with a write of its own, so a small answer made of
    a few families goes out in one.
    """
    out: list[bytes] = []
    run: list[bytes] = []
    for chunk in chunks:
        if isinstance(chunk, GzipMember):
            if run:
                out.append(b"".join(run))
                run = []
            out.append(chunk)
        elif chunk:
            run.append(chunk)
    if run:
        out.append(b"".join(run))
    return out


def render_families(families: Iterable[Metric]) -> bytes:
    """The Prometheus text exposition (format 0.0.4) of ``families``, in one piece (gzip
    members unpacked).
    """
    return b"".join(plain_chunks(render_chunks(families)))
