"""The column-at-a-time ways of reading ``/proc/stat`` and keeping its ticks give exactly what
the line-by-line and CPU-by-CPU ways give.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from toposcope.exporters.collectors.numa_cpu_totals import CpuTotals
from toposcope.host.procfs import CpuTicks, _parse_lines, parse_proc_stat

FUZZ = settings(max_examples=300, deadline=None, database=None)

TOKEN = st.sampled_from(
    ["cpu", "cpu0", "cpu1", "cpu7", "cpux", "cpu2a", "1", "22", "0", "x", "+5", "9" * 21, "intr"]
)
SEPARATOR = st.sampled_from([" ", "  ", "\t", "\x0b"])


@st.composite
def stat_line(draw: st.DrawFn) -> str:
    if draw(st.booleans()):
        cpu = draw(st.integers(min_value=0, max_value=3))
        fields = draw(st.lists(st.integers(min_value=0, max_value=10**6), max_size=11))
        return " ".join([f"cpu{cpu}", *map(str, fields)])
    return draw(SEPARATOR).join(draw(st.lists(TOKEN, max_size=12)))


def regular_stat(cpus: int, modes: int, base: int) -> bytes:
    lines = [
        f"cpu{cpu} " + " ".join(str(base + cpu + m) for m in range(modes)) for cpu in range(cpus)
    ]
    return ("cpu  1 2 3\n" + "\n".join(lines) + "\nintr 1 2\nctxt 5\n").encode()


@FUZZ
@given(st.lists(stat_line(), max_size=6), st.sampled_from(["", "\n", "\r\n"]))
def test_any_file_parses_as_line_by_line(lines: list[str], end: str) -> None:
    data = ("\n".join(lines) + end).encode()
    reading = parse_proc_stat(data)
    ticks, bad = _parse_lines(data)
    assert reading.by_cpu() == ticks
    assert reading.bad == bad
    if reading.columns is not None:
        assert not bad and len({len(row) for row in ticks.values()}) <= 1


def test_a_regular_file_is_read_in_columns() -> None:
    reading = parse_proc_stat(regular_stat(cpus=3, modes=10, base=100))
    assert reading.cpus == [0, 1, 2]
    assert reading.columns is not None and len(reading.columns) == 8  # guest modes left out
    assert reading.columns[0] == [100, 101, 102]
    assert reading.by_cpu()[2] == tuple(range(102, 110))


def test_repeated_or_ragged_cpus_are_read_line_by_line() -> None:
    repeated = parse_proc_stat(b"cpu0 1 2\ncpu0 3 4\n")
    assert repeated.columns is None and repeated.by_cpu() == {0: (3, 4)}
    ragged = parse_proc_stat(b"cpu0 1 2 3\ncpu1 4 5\n")
    assert ragged.columns is None and ragged.by_cpu() == {0: (1, 2, 3), 1: (4, 5)}


def reference_sums(
    history: list[dict[int, tuple[int, ...]]], cpu_node: dict[int, int]
) -> dict[int, list[int]]:
    """Per CPU the highest tick per mode over every reading that listed it, summed per node."""
    kept: dict[int, list[int]] = {}
    for ticks in history:
        for cpu, values in ticks.items():
            if cpu not in cpu_node:
                continue
            row = kept.setdefault(cpu, [])
            for mode, value in enumerate(values):
                if mode < len(row):
                    row[mode] = max(row[mode], value)
                else:
                    row.append(value)
    sums: dict[int, list[int]] = {}
    for cpu, row in kept.items():
        total = sums.setdefault(cpu_node[cpu], [])
        for mode, value in enumerate(row):
            if mode < len(total):
                total[mode] += value
            else:
                total.append(value)
    return sums


READING = st.dictionaries(
    st.integers(min_value=0, max_value=7),
    st.lists(st.integers(min_value=0, max_value=50), min_size=7, max_size=8).map(tuple),
    max_size=8,
)


@FUZZ
@given(st.lists(READING, min_size=1, max_size=8), st.booleans())
def test_folding_in_columns_sums_what_cpu_by_cpu_does(
    history: list[dict[int, tuple[int, ...]]], steady: bool
) -> None:
    # CPUs 0-5 on nodes 0 (0, 2, 4: not consecutive) and 1 (1, 3, 5); 6 and 7 are unplaced
    cpu_node = {cpu: cpu % 2 for cpu in range(6)}
    if steady:  # the usual case: the same CPUs with as many modes every time: columns
        first = history[0]
        history = [{cpu: ticks.get(cpu, first[cpu])[:7] for cpu in first} for ticks in history]
    totals = CpuTotals()
    for seen in range(1, len(history) + 1):
        ticks = history[seen - 1]
        widths = {len(values) for values in ticks.values()}
        columns = (
            [[ticks[cpu][mode] for cpu in ticks] for mode in range(widths.pop())]
            if len(widths) == 1
            else None
        )
        reading = CpuTicks(list(ticks), columns, [], dict(ticks))
        assert totals.fold(reading, cpu_node) == reference_sums(history[:seen], cpu_node)
        if steady and ticks and set(ticks) <= set(cpu_node):
            assert totals._columns is not None


def test_a_mode_stepping_back_in_the_columns_is_held() -> None:
    totals = CpuTotals()
    nodes = {0: 0, 1: 0}
    for values, expected in (((5, 9), [14]), ((7, 3), [16]), ((8, 4), [17])):
        reading = CpuTicks([0, 1], [list(values)], [])
        assert totals.fold(reading, nodes) == {0: expected}
