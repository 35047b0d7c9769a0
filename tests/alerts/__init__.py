"""Tests of the Prometheus rules and the Alertmanager configuration in alerts/."""
