"""Tests of the resource-manager HTTP API (``toposcope.rm.api``) over an in-memory fake."""
