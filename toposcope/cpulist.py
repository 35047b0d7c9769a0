"""Parsers and formatters for the CPU-set notations Linux and hwloc use.

Two notations appear in sysfs: *cpulists* (``0-3,8,10-11``, in ``cpulist`` and ``online``
files) and *cpumasks* (comma-separated 32-bit hexadecimal words, most significant first,
in ``cpumap`` and ``local_cpus`` files). hwloc XML uses the mask notation too, with
``0x`` prefixes. Everything here returns sorted tuples of CPU numbers.
"""

from __future__ import annotations

from collections.abc import Iterable


def parse_cpulist(text: str) -> tuple[int, ...]:
    """Parse a cpulist such as ``"0-3,8,10-11"`` (empty text means no CPU).

    Raises ``ValueError`` naming the offending part when the text is malformed.
    """
    cpus: set[int] = set()
    text = text.replace("\x00", "").strip()
    if not text:
        return ()
    for raw in text.split(","):
        entry = raw.strip()
        if not entry:
            continue
        used = group = 0
        part = entry
        if ":" in entry:
            # Kernel group notation "a-b:used/group": the first `used` CPUs of every
            # `group` CPUs in a..b (see the kernel's bitmap_parselist).
            part, _, group_text = entry.partition(":")
            used_text, _, size_text = group_text.partition("/")
            try:
                used, group = int(used_text), int(size_text)
            except ValueError:
                raise ValueError(f"malformed cpulist group {entry!r}") from None
            if not 0 < used <= group:
                raise ValueError(f"malformed cpulist group {entry!r}")
        if "-" in part:
            lo_text, _, hi_text = part.partition("-")
            try:
                lo, hi = int(lo_text), int(hi_text)
            except ValueError:
                raise ValueError(f"malformed cpulist range {part!r}") from None
            if hi < lo or lo < 0:
                raise ValueError(f"malformed cpulist range {part!r}")
            if group:
                for base in range(lo, hi + 1, group):
                    cpus.update(range(base, min(base + used, hi + 1)))
            else:
                cpus.update(range(lo, hi + 1))
        else:
            try:
                value = int(part)
            except ValueError:
                raise ValueError(f"malformed cpulist entry {part!r}") from None
            if value < 0:
                raise ValueError(f"negative CPU number {part!r}")
            cpus.add(value)
    return tuple(sorted(cpus))


def parse_cpumask(text: str) -> tuple[int, ...]:
    """Parse a cpumask such as ``"00000000,0000ff00"`` or hwloc's ``"0x000000ff,0xf0000000"``.

    Words are 32 bits wide and the most significant word comes first, as in sysfs
    ``cpumap`` and ``local_cpus`` files. Raises ``ValueError`` on non-hexadecimal words.
    """
    text = text.replace("\x00", "").strip()
    if not text:
        return ()
    words = [w.strip() for w in text.split(",")]
    value = 0
    for raw in words:
        word = raw[2:] if raw.lower().startswith("0x") else raw
        if len(words) > 1 and len(word) > 8:
            raise ValueError(f"cpumask word {raw!r} is wider than 32 bits")
        try:
            value = (value << 32) | int(word or "0", 16)
        except ValueError:
            raise ValueError(f"malformed cpumask word {word!r}") from None
    return bits_to_cpus(value)


def bits_to_cpus(value: int) -> tuple[int, ...]:
    """Return the positions of the set bits of ``value`` in ascending order."""
    cpus: list[int] = []
    index = 0
    while value:
        if value & 1:
            cpus.append(index)
        value >>= 1
        index += 1
    return tuple(cpus)


def format_cpulist(cpus: Iterable[int]) -> str:
    """Format CPU numbers as a compact cpulist (``[0, 1, 2, 5]`` -> ``"0-2,5"``)."""
    ordered = sorted(set(cpus))
    parts: list[str] = []
    start = prev = None
    for cpu in ordered:
        if start is None:
            start = prev = cpu
        elif prev is not None and cpu == prev + 1:
            prev = cpu
        else:
            parts.append(str(start) if start == prev else f"{start}-{prev}")
            start = prev = cpu
    if start is not None:
        parts.append(str(start) if start == prev else f"{start}-{prev}")
    return ",".join(parts)
