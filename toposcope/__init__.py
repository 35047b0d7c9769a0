"""toposcope: topology-aware observability and tuning for GPU/CPU clusters.

The core package holds what every other part shares: the topology model and its builders,
the metric catalogue (the contract between exporters, rules, dashboards and the advisor),
configuration and the command-line entry point.

``__version__`` is the installed distribution's version, which setuptools-scm takes from the
last git tag when the package is built (``0+unknown`` when run from a tree never installed).
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("toposcope")
except PackageNotFoundError:  # pragma: no cover - only outside any installation
    __version__ = "0+unknown"
