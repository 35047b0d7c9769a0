"""toposcope: topology-aware observability and tuning for GPU/CPU clusters.

The core package holds what every other part shares: the topology model and its builders,
the metric catalogue (the contract between exporters, rules, dashboards and the advisor),
configuration and the command-line entry point.
"""

__version__ = "0.1.0"
