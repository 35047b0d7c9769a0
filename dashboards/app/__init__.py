"""The toposcope Dash app (``toposcope dash``): cluster, node, workload, recommendations and
what-if placement pages, read from the Prometheus HTTP API and the advisor service's API.

Modules: :mod:`.promclient` and :mod:`.advisorclient` (HTTP clients), :mod:`.queries`
(PromQL from the catalogue), :mod:`.data` (pandas shaping), :mod:`.figures` (plotly),
:mod:`.pages` (layout), :mod:`.callbacks`, :mod:`.server` (the app factory) and :mod:`.cli`.
"""
