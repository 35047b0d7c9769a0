"""Tests of the resource-manager HTTP API (``toposcope.rmapi``) over an in-memory fake."""
