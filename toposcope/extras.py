"""Loading code that needs an optional library, and saying which install extra brings it.

The base install is the exporter; the other parts' libraries come with extras
(``toposcope[advisor]``, ``[agent]``, ``[dash]``...). Whatever loads a part's code on demand
(the command dispatcher, the advisor's entry-point backends) goes through
:func:`load_with_extra`, so a missing library is one clear error naming the extra to install,
never an ``ImportError`` traceback, and a missing module of toposcope itself (a bug or a
broken install) still surfaces as it is.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from toposcope.errors import ToposcopeError

T = TypeVar("T")


def load_with_extra(load: Callable[[], T], what: str, extra: str, error: type[ToposcopeError]) -> T:
    """``load()``, or ``error`` saying that ``what`` needs the library ``toposcope[extra]`` adds.

    ``what`` names what was asked for, as the user wrote it (``toposcope advise``,
    ``--resource-manager local``).
    """
    try:
        return load()
    except ModuleNotFoundError as exc:
        if exc.name is None or exc.name.split(".")[0] == "toposcope":
            raise
        raise error(
            f"{what} needs the {exc.name!r} library: install toposcope[{extra}] "
            f"(pip install 'toposcope[{extra}]')"
        ) from exc
