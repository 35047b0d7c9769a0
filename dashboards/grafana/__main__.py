"""``python -m toposcope.dashboards.grafana``: write (or check) the dashboards' JSON files.

Exit codes: 0 written (or up to date with ``--check``), 1 ``--check`` found files that
differ from the code, 2 grafana-foundation-sdk is not installed.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from toposcope.dashboards.grafana import JSON_DIR, build_all, render


def main(argv: Sequence[str] | None = None) -> int:
    """Generate every dashboard into ``--output`` (or compare with it under ``--check``)."""
    parser = argparse.ArgumentParser(
        prog="python -m toposcope.dashboards.grafana",
        description="Generate the toposcope Grafana dashboards as JSON files.",
    )
    parser.add_argument(
        "--output",
        type=Path,
        default=JSON_DIR,
        help="folder for the <uid>.json files (default: the package's json/ folder)",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 if a file is missing or differs from what the code makes",
    )
    args = parser.parse_args(argv)
    try:
        dashboards = {name: render(data) for name, data in build_all().items()}
    except ModuleNotFoundError as exc:
        if exc.name is None or not exc.name.startswith("grafana_foundation_sdk"):
            raise
        print(
            "grafana-foundation-sdk is not installed: pip install 'toposcope[grafana]'",
            file=sys.stderr,
        )
        return 2
    output: Path = args.output
    if args.check:
        stale = [
            name
            for name, text in dashboards.items()
            if not (output / name).is_file() or (output / name).read_text(encoding="utf-8") != text
        ]
        for name in stale:
            print(f"{output / name} is out of date", file=sys.stderr)
        return 1 if stale else 0
    output.mkdir(parents=True, exist_ok=True)
    for name, text in dashboards.items():
        (output / name).write_text(text, encoding="utf-8")
        print(output / name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
