"""The toposcope Dash app (``toposcope dash``): cluster, node, workload, recommendations,
what-if placement and queue pages, read from the Prometheus HTTP API and the advisor
service's API.

Modules: :mod:`.promclient` and :mod:`.advisorclient` (HTTP clients), :mod:`.sources` (both
for the pages, and how their failures show), :mod:`.queries` (PromQL from the catalogue);
pandas shaping per source: :mod:`.prom_frames`, :mod:`.cluster_data`, :mod:`.node_data`,
:mod:`.workload_data`; plotly figures: :mod:`.charts`, :mod:`.topology_figure`; one module
per page (skeleton and callbacks): :mod:`.cluster_page`, :mod:`.node_page`,
:mod:`.workload_page`, :mod:`.recommendations_page` (tables in
:mod:`.recommendation_views`), :mod:`.placement_page`, :mod:`.queue_page`; shared parts:
:mod:`.components`, :mod:`.shell` (the frame and the routing); :mod:`.access` and
:mod:`.csrf` (request checks), :mod:`.server` (the app factory) and :mod:`.cli`.
"""
