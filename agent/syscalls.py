"""The kernel calls Python's ``os`` module lacks, through ``ctypes``: ``migrate_pages(2)``."""

from __future__ import annotations

import ctypes
import errno
import os
import platform
from collections.abc import Callable, Iterable

#: ``migrate_pages`` system call numbers (``asm/unistd.h``) of the architectures we know.
MIGRATE_PAGES_SYSCALL: dict[str, int] = {"x86_64": 256, "aarch64": 238}


class Syscalls:
    """The kernel calls Python's ``os`` module lacks, through ``ctypes`` (``migrate_pages``).

    ``machine`` defaults to this host's (``platform.machine()``); on an architecture whose
    system call number is not known, ``migrate_pages`` raises ``OSError(ENOSYS)``.
    """

    def __init__(self, machine: str | None = None) -> None:
        self.machine = machine or platform.machine()
        self.number = MIGRATE_PAGES_SYSCALL.get(self.machine)
        self._libc: ctypes.CDLL | None = None

    def load(self) -> Callable[..., int]:
        """Load libc once (before dropping privileges, say) and return its ``syscall``."""
        if self._libc is None:
            self._libc = ctypes.CDLL(None, use_errno=True)
            self._libc.syscall.restype = ctypes.c_long
        function: Callable[..., int] = self._libc.syscall
        return function

    def migrate_pages(self, pid: int, old_nodes: Iterable[int], new_nodes: Iterable[int]) -> int:
        """``migrate_pages(pid, maxnode, old, new)``: the number of pages left where they were.

        Raises :class:`OSError` with the kernel's errno (``ESRCH`` gone, ``EPERM`` not
        allowed, ``EINVAL`` bad nodes, ``ENOSYS`` unknown architecture).
        """
        if self.number is None:
            raise OSError(errno.ENOSYS, f"migrate_pages is not known on {self.machine}")
        old, new = sorted(set(old_nodes)), sorted(set(new_nodes))
        words = max([*old, *new, 0]) // 64 + 1
        old_mask = (ctypes.c_ulong * words)()
        new_mask = (ctypes.c_ulong * words)()
        for mask, nodes in ((old_mask, old), (new_mask, new)):
            for node in nodes:
                mask[node // 64] |= 1 << (node % 64)
        # The kernel reads maxnode - 1 bits: one more than the masks hold.
        result = self.load()(
            ctypes.c_long(self.number),
            ctypes.c_int(pid),
            ctypes.c_ulong(words * 64 + 1),
            old_mask,
            new_mask,
        )
        if result < 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code))
        return int(result)
