"""The node agent: the only part that changes a host (CPU affinity, cpusets, memory placement).

It reads the host with the exporter's sources and serves the core's resource-manager API
(``toposcope agent``), so the advisor acts on a node only through that API. Imports go
core <- exporters <- agent; nothing but the command line imports the agent, and the advisor's
``local`` backend finds it through the ``toposcope.resource_managers`` entry point.
"""
