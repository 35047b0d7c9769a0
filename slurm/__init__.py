"""Slurm as a resource manager toposcope reads from, and the tools that go with it.

* :mod:`toposcope.slurm.reader` reads nodes, running jobs (with their exact CPU ids and GPU
  indices) and pending jobs, from slurmrestd (:mod:`~toposcope.slurm.rest`, JWT) or, when no
  slurmrestd is configured, from ``squeue``/``sinfo``/``scontrol``
  (:mod:`~toposcope.slurm.commands`);
* :mod:`toposcope.slurm.gresconf` writes the ``gres.conf`` lines of a node from toposcope's
  topology model (``toposcope slurm gres-conf``);
* :mod:`toposcope.slurm.localcluster` runs a real Slurm cluster on one host, on loopback, with
  fake GPUs, for the tests and the local stack.

The part imports the core only (core <- slurm); other parts reach Slurm through it over the wire.
"""
