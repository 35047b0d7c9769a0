"""Which request paths name a file of an installed component bundle (Dash's own JavaScript),
the one thing the app serves without a user.

A browser loads lazy chunks of those bundles without the credentials of the page that asked
(a chunk refused with 401 left the page without its dialogs), and they hold no data of this
app. Anything else under the bundle route is the app's: a path with ``..``, ``//`` or
percent-escapes falls through Dash's routes to its catch-all and answers the page shell (with
the Python, Dash and Plotly versions). So a path is a bundle file only when it is already in
its plain form (percent-decoding, collapsing ``//`` and resolving ``..`` change nothing) and
names ``BUNDLES/<registered package>/<file>``, the file among that package's registered
resources (with or without Dash's cache fingerprint) and present in the installed package.
"""

from __future__ import annotations

import functools
import importlib.resources
import posixpath
import urllib.parse
from collections.abc import Collection, Mapping

from dash.fingerprint import check_fingerprint

#: the route Dash serves component bundles under, below the app's path prefix
BUNDLES = "_dash-component-suites/"


def normalise(path: str) -> str:
    """``path`` percent-decoded (until nothing changes), ``//`` collapsed and ``..``
    resolved; ``..`` never climbs above the root.
    """
    decoded = path
    for _ in range(4):
        again = urllib.parse.unquote(decoded)
        if again == decoded:
            break
        decoded = again
    clean = posixpath.normpath("/" + decoded.lstrip("/"))
    clean = "/" + clean.lstrip("/")
    if decoded.endswith("/") and clean != "/":
        clean += "/"
    return clean


@functools.lru_cache(maxsize=256)
def _installed(package: str, file: str) -> bool:
    """Whether ``file`` is a file of the installed, registered package ``package``."""
    try:
        return importlib.resources.files(package).joinpath(file).is_file()
    except (ImportError, OSError, ValueError):
        return False


def bundle_file(path: str, prefix: str, registered: Mapping[str, Collection[str]]) -> bool:
    """Whether the request path ``path`` (as the router sees it) names a file of a component
    bundle under ``prefix`` (the app's route prefix, ``/`` by default), given Dash's
    ``registered`` resources (package -> relative paths).
    """
    library = f"{prefix}{BUNDLES}"
    if not path.startswith(library) or normalise(path) != path or "\\" in path:
        return False
    package, _, fingerprinted = path[len(library) :].partition("/")
    if not package or not fingerprinted or package not in registered:
        return False
    file, _fingerprinted = check_fingerprint(fingerprinted)  # type: ignore[no-untyped-call]  # dash is untyped
    return file in registered[package] and _installed(package, file)
