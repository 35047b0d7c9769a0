"""Keep the exporter's resident memory close to what it holds (glibc's allocator only).

A serving exporter allocates from many threads (the HTTP workers, the workload sampler) and
builds a few large buffers per sample (the workload text, about 1.7 MB at 500 workloads).
With glibc's defaults each thread gets its own heap arena and a freed large buffer raises
the size under which later ones come from those heaps, so freed memory stays resident.
:func:`tune_for_serving` caps the arenas and keeps buffers of 128 KiB and more in their own
mappings, returned to the system when freed; :func:`release_free_memory` hands free heap
pages back after each sample. Elsewhere (musl, macOS) both do nothing but the first also
moves every object alive at start-up (modules, the catalogue, the collectors) out of the
cyclic garbage collector's sight (``gc.freeze``), so its full collections, which a scrape may
trigger, walk only what scrapes and samples allocate.
"""

from __future__ import annotations

import ctypes
import gc
import logging
import sys

LOG = logging.getLogger("toposcope.exporter")

#: ``mallopt`` parameters (``malloc.h``)
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8
#: heap arenas a serving exporter uses (the main one and one for every other thread)
ARENAS = 2
#: allocations of this size and more get their own mapping (glibc's initial threshold)
MMAP_THRESHOLD = 128 * 1024


def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None)
    except OSError:
        return None
    return libc if hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") else None


_LIBC = _libc()


def tune_for_serving() -> bool:
    """Freeze the start-up objects, cap the heap arenas and fix the mapping threshold;
    ``False`` where not glibc.
    """
    gc.collect()
    gc.freeze()
    if _LIBC is None:
        return False
    done = bool(_LIBC.mallopt(M_ARENA_MAX, ARENAS)) and bool(
        _LIBC.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)
    )
    LOG.debug("malloc tuned for serving: %s", done)
    return done


def release_free_memory() -> bool:
    """Return free heap pages to the system (``malloc_trim``); ``False`` where not glibc or
    when nothing could be returned.
    """
    return _LIBC is not None and bool(_LIBC.malloc_trim(0))
