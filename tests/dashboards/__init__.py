"""Tests of the Grafana dashboards generated in dashboards/grafana/."""
