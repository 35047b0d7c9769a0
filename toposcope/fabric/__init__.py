"""The cluster's network fabric: switches in levels, blocks, each node's NIC ports.

:mod:`~toposcope.fabric.model` is the one model; each format has its reader here, strict and
naming ``file:line`` on a refusal: Slurm's ``topology.conf`` (:mod:`~toposcope.fabric.
slurmconf`, which also writes it), a YAML or JSON file (:mod:`~toposcope.fabric.yamlfile`),
``ibnetdiscover`` output (:mod:`~toposcope.fabric.ibnetdiscover`) and Kubernetes node labels
with Kueue's topology levels (:mod:`~toposcope.fabric.kubernetes`). ``toposcope fabric show``
(:mod:`~toposcope.fabric.cli`) prints a fabric.
"""
