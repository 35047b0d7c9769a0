"""Description files: the shipped ones, what an ``--nvml fake[:NAME|:FILE]`` value names,
and loading one into a fake library.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import yaml

from toposcope.errors import ConfigError
from toposcope.fake_nvml.library import FakeNvml
from toposcope.fake_nvml.parse import parse_spec
from toposcope.fake_nvml.spec import FakeSpec

#: The shipped descriptions (packaged data of ``toposcope.exporters``).
SPEC_DIR = Path(__file__).resolve().parent / "specs"
#: What plain ``--nvml fake`` loads.
DEFAULT_SPEC = "dgx-a100"


def load_spec(path: Path) -> FakeSpec:
    """Read and validate a description file (YAML, or JSON by its ``.json`` suffix)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(
            f"fake NVML description {path}: cannot read: {exc.strerror or exc}"
        ) from exc
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise ConfigError(f"fake NVML description {path}: not valid YAML/JSON: {exc}") from exc
    return parse_spec(data, str(path))


def shipped_specs() -> list[str]:
    """Names of the descriptions shipped with toposcope (``dgx-a100``, ``mig``, ...)."""
    return sorted(p.stem for p in SPEC_DIR.glob("*.yaml"))


def resolve_spec(mode: str) -> Path:
    """The description file an ``--nvml`` value names.

    ``fake`` is the shipped ``dgx-a100``; ``fake:NAME`` a shipped description when no file
    of that name exists; ``fake:FILE`` any file. Raises :class:`ConfigError` otherwise.
    """
    if mode == "fake":
        return SPEC_DIR / f"{DEFAULT_SPEC}.yaml"
    if not mode.startswith("fake:") or not mode[5:]:
        raise ConfigError(f"not a fake NVML setting: {mode!r} (fake, fake:NAME or fake:FILE)")
    target = mode[5:]
    path = Path(target)
    if path.is_file():
        return path
    shipped = SPEC_DIR / f"{target.removesuffix('.yaml')}.yaml"
    if "/" not in target and shipped.is_file():
        return shipped
    raise ConfigError(
        f"fake NVML description {target}: no such file and not a shipped description "
        f"(shipped: {', '.join(shipped_specs())})"
    )


def load_fake_nvml(
    mode: str,
    clock: Callable[[], float] | None = None,
    sleep: Callable[[float], None] | None = None,
) -> FakeNvml:
    """A :class:`FakeNvml` for an ``--nvml fake[:NAME|:FILE]`` setting."""
    return FakeNvml(load_spec(resolve_spec(mode)), clock=clock, sleep=sleep)
