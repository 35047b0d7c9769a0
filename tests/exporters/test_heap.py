"""The serving exporter's allocator settings take effect on glibc (in a process of its own:
they change the whole process).
"""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

SCRIPT = """
import gc
from toposcope.exporters.heap import release_free_memory, tune_for_serving
before = gc.get_freeze_count()
print(tune_for_serving(), gc.get_freeze_count() > before)
blocks = [bytearray(4 << 20) for _ in range(8)]
del blocks
print(isinstance(release_free_memory(), bool))
"""


def test_tuning_applies_freezes_start_up_objects_and_trims() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60, check=True
    )
    tuned, frozen, trimmed = done.stdout.split()
    assert frozen == "True" and trimmed == "True"
    glibc = sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"
    if not glibc:
        pytest.skip("the allocator settings are glibc's")
    assert tuned == "True"
