"""The families every toposcope daemon publishes about itself on its ``/metrics``
(:mod:`toposcope.serving.selfmetrics`), next to prometheus_client's ``process_*`` families.
"""

from __future__ import annotations

from toposcope.catalogue.model import MetricSpec, row

DAEMON_SPECS: tuple[MetricSpec, ...] = (
    row(
        "toposcope_build_info",
        "info",
        ["version", "revision", "python_version", "python_implementation", "os", "arch"],
        "The running toposcope's version, the source revision it was installed from "
        "(unknown when not installed from version control), and the Python and platform it "
        "runs on, value 1, as Prometheus' own build_info.",
        part="every daemon",
    ),
    row(
        "toposcope_web_config_reload_failures_total",
        "counter",
        [],
        "Reloads of the --web.config.file the daemon refused (a file that no longer reads, "
        "would turn TLS on or off, or would drop every basic-auth user), keeping the previous "
        "configuration; the log says why.",
        part="every daemon",
    ),
)
