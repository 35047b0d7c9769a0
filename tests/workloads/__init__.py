"""Tests of the workloads collector, its process and cgroup sources, and sim.fsgen."""
