"""Parsers and formatters for the CPU-set notations Linux and hwloc use.

Two notations appear in sysfs: *cpulists* (``0-3,8,10-11``, in ``cpulist`` and ``online``
files) and *cpumasks* (comma-separated 32-bit hexadecimal words, most significant first,
in ``cpumap`` and ``local_cpus`` files). hwloc XML uses the mask notation too, with
``0x`` prefixes. Everything here returns sorted tuples of CPU numbers.

The text comes from files and labels anyone can write, so the parsers are bounded: CPU
numbers must be below :data:`CPU_LIMIT` (Linux supports at most 8,192 CPUs today), a cpulist
may not name more than :data:`MAX_CPULIST_EXPANSION` CPUs in all (overlaps counted), and the
work done is linear in the length of the text. Every refusal is a :class:`CpuSetError`, a
``ValueError`` that names the offending part and, for an out-of-range number, the limit.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

#: CPU (and NUMA node) numbers must be below this: 0 to 65,535.
CPU_LIMIT = 65_536
#: The most CPUs one cpulist may name, overlaps included, before it is refused.
MAX_CPULIST_EXPANSION = 16 * CPU_LIMIT

_NUMBER_RE = re.compile(r"\s*([0-9]+)\s*")
_MASK_WORD_RE = re.compile(r"(?:0[xX])?([0-9a-fA-F]*)")
_MASK_WORD_DIGITS = 8
#: Longest part of the input quoted in an error message.
_SHOWN = 40


class CpuSetError(ValueError):
    """A cpulist or cpumask that is malformed or names a CPU beyond :data:`CPU_LIMIT`."""


def _shown(text: str) -> str:
    """``text`` quoted for an error message, cut short when long."""
    if len(text) <= _SHOWN:
        return repr(text)
    return f"{text[:_SHOWN]!r}... ({len(text):,} characters)"


def _number(text: str, what: str, entry: str, limit: int = CPU_LIMIT - 1) -> int:
    """The decimal number ``text`` (part ``what`` of ``entry``), at most ``limit``."""
    match = _NUMBER_RE.fullmatch(text)
    if match is None:
        raise CpuSetError(f"malformed cpulist {what} in {_shown(entry)}")
    digits = match.group(1).lstrip("0") or "0"
    if len(digits) > len(str(limit)) or int(digits) > limit:
        where = "" if digits == entry.strip() else f" in cpulist entry {_shown(entry)}"
        raise CpuSetError(
            f"{what} {_shown(digits)}{where} is above {limit} "
            f"(CPU numbers must be below {CPU_LIMIT:,})"
        )
    return int(digits)


def _group_size(lo: int, hi: int, used: int, group: int) -> int:
    """How many CPUs ``lo-hi:used/group`` names (``used == group`` for a plain range)."""
    span = hi - lo + 1
    return (span // group) * used + min(used, span % group)


def parse_cpulist(text: str) -> tuple[int, ...]:
    """Parse a cpulist such as ``"0-3,8,10-11"`` (empty text means no CPU).

    The kernel's group notation ``a-b:used/group`` is understood too. Raises
    :class:`CpuSetError` (a ``ValueError``) naming the offending part when the text is
    malformed, names a CPU at or above :data:`CPU_LIMIT` or names more than
    :data:`MAX_CPULIST_EXPANSION` CPUs in all.
    """
    cpus: set[int] = set()
    named = 0
    text = text.replace("\x00", "").strip()
    if not text:
        return ()
    for raw in text.split(","):
        entry = raw.strip()
        if not entry:
            continue
        part, colon, group_text = entry.partition(":")
        if "-" in part:
            lo_text, _, hi_text = part.partition("-")
            lo = _number(lo_text, "range start", entry)
            hi = _number(hi_text, "range end", entry)
            if hi < lo:
                raise CpuSetError(f"malformed cpulist range {_shown(entry)}: end before start")
        else:
            lo = hi = _number(part, "CPU number", entry)
        used = group = hi - lo + 1
        if colon:
            # Kernel group notation "a-b:used/group": the first `used` CPUs of every
            # `group` CPUs in a..b (see the kernel's bitmap_parselist).
            used_text, slash, size_text = group_text.partition("/")
            if not slash:
                raise CpuSetError(f"malformed cpulist group {_shown(entry)}")
            used = _number(used_text, "group", entry, CPU_LIMIT)
            group = _number(size_text, "group", entry, CPU_LIMIT)
            if not 0 < used <= group:
                raise CpuSetError(f"malformed cpulist group {_shown(entry)}")
        named += _group_size(lo, hi, used, group)
        if named > MAX_CPULIST_EXPANSION:
            raise CpuSetError(
                f"cpulist names more than {MAX_CPULIST_EXPANSION:,} CPUs in all, overlaps "
                f"included (at entry {_shown(entry)})"
            )
        for base in range(lo, hi + 1, group):
            cpus.update(range(base, min(base + used, hi + 1)))
    return tuple(sorted(cpus))


def parse_cpumask(text: str) -> tuple[int, ...]:
    """Parse a cpumask such as ``"00000000,0000ff00"`` or hwloc's ``"0x000000ff,0xf0000000"``.

    Words are 32 bits wide and the most significant word comes first, as in sysfs
    ``cpumap`` and ``local_cpus`` files; a mask of one word may be wider. Raises
    :class:`CpuSetError` (a ``ValueError``) on non-hexadecimal or too wide words and on a
    mask with a bit set at or above :data:`CPU_LIMIT`. Linear in the length of the text.
    """
    text = text.replace("\x00", "").strip()
    if not text:
        return ()
    words = text.split(",")
    digits: list[str] = []
    for raw in words:
        match = _MASK_WORD_RE.fullmatch(raw.strip())
        if match is None:
            raise CpuSetError(f"malformed cpumask word {_shown(raw.strip())}")
        word = match.group(1)
        if len(words) > 1:
            if len(word) > _MASK_WORD_DIGITS:
                raise CpuSetError(f"cpumask word {_shown(raw.strip())} is wider than 32 bits")
            word = word.rjust(_MASK_WORD_DIGITS, "0")
        digits.append(word)
    hex_digits = "".join(digits).lstrip("0")
    if len(hex_digits) * 4 > CPU_LIMIT:
        raise CpuSetError(
            f"cpumask {_shown(text)} sets a CPU at or above {CPU_LIMIT:,} "
            f"(CPU numbers must be below {CPU_LIMIT:,})"
        )
    return bits_to_cpus(int(hex_digits or "0", 16))


def bits_to_cpus(value: int) -> tuple[int, ...]:
    """Return the positions of the set bits of ``value`` in ascending order.

    Raises :class:`CpuSetError` for a negative value or a bit at or above
    :data:`CPU_LIMIT`; linear in the number of bits.
    """
    if value < 0:
        raise CpuSetError("a CPU mask cannot be negative")
    if value.bit_length() > CPU_LIMIT:
        raise CpuSetError(
            f"CPU mask has bit {value.bit_length() - 1} set (CPU numbers must be below "
            f"{CPU_LIMIT:,})"
        )
    bits = bin(value)[:1:-1]  # least significant bit first, without the "0b" prefix
    return tuple(position for position, bit in enumerate(bits) if bit == "1")


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
