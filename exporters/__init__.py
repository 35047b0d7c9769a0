"""toposcope.exporters: sources (sysfs, procfs, cgroups, NVML) -> collectors -> HTTP /metrics.

The default listen port is 9847, which none of the common exporters this stack runs beside
use (node_exporter 9100, dcgm-exporter 9400, Prometheus 9090, Alertmanager 9093).
"""

DEFAULT_PORT = 9847
