"""Tests of the resource-manager HTTP API (``toposcope.sim.api``) over an in-memory fake."""
