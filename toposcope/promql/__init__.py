"""PromQL over HTTP: the one transport to Prometheus-compatible APIs (Prometheus,
VictoriaMetrics, Thanos, Mimir, Cortex) in :mod:`.client`, and what a query answers, typed
(samples, series, vectors, matrices) in :mod:`.results`. The advisor's loaders and the Dash
app read metrics through these.
"""
