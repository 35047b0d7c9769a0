"""Slurm as a resource manager toposcope reads from and applies through, and its tools.

* :mod:`toposcope.slurm.reader` reads nodes, running jobs (with their exact CPU ids and GPU
  indices) and pending jobs, from slurmrestd (:mod:`~toposcope.slurm.rest`, JWT) or, when no
  slurmrestd is configured, from ``squeue``/``sinfo``/``scontrol``
  (:mod:`~toposcope.slurm.commands`);
* :mod:`toposcope.slurm.manager` is the resource-manager backend ``--resource-manager slurm``:
  it steers pending jobs to nodes, requeues jobs that opted in onto other nodes and acts on
  idle GPUs as the operator configured, changing Slurm only through
  :mod:`~toposcope.slurm.control`;
* :mod:`toposcope.topology.gresconf` writes the ``gres.conf`` lines of a node from toposcope's
  topology model (``toposcope slurm gres-conf``);
* :mod:`toposcope.slurm.localcluster` runs a real Slurm cluster on one host, on loopback, with
  fake GPUs, for the tests and the local stack.

The part imports the core only (core <- slurm); the advisor loads its backend by name, through
the ``toposcope.resource_managers`` entry point, never by import.
"""
