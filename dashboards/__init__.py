"""toposcope.dashboards: the Dash app and the Grafana dashboards generated as code."""
