"""Tests of the exporter's sources and collectors against fixture trees."""
