"""The node exporter's check of the node's Slurm gres.conf against its topology.

Slurm picks a job's GPUs and CPUs inside a node from gres.conf's ``Cores=`` and ``Links=``; a
line that disagrees with the hardware costs every job a cross-socket path without any error.
The ``slurm_gres`` collector (off by default) publishes, per GPU, whether each field matches
and the line toposcope would write, so that the advisor's ``config`` policy can hand the
operator the lines to merge. One series per GPU and field: bounded by the GPU count.
"""

from __future__ import annotations

from toposcope.catalogue.model import MetricSpec, row

#: fields of ``toposcope_slurm_gres_config_match``
GRES_FIELDS: tuple[str, ...] = ("cores", "links")
#: values of its ``source`` label: what Slurm uses for the GPU
GRES_SOURCES: tuple[str, ...] = ("gres.conf", "missing", "autodetect")

SLURM_GRES_SPECS: tuple[MetricSpec, ...] = (
    row(
        "toposcope_slurm_gres_config_match",
        "gauge",
        ["gpu", "field", "source"],
        "1 when the node's gres.conf gives the GPU the Cores= (field cores) or Links= (field "
        "links) its topology calls for, 0 when not. source: gres.conf (the file's line), "
        "missing (no line for the GPU), autodetect (AutoDetect=nvml: Slurm detects the GPUs "
        "itself, always 1).",
    ),
    row(
        "toposcope_slurm_gres_expected_info",
        "gauge",
        ["gpu", "line"],
        "The gres.conf line toposcope writes for the GPU from the node's topology "
        "(toposcope slurm gres-conf); value always 1.",
    ),
)
