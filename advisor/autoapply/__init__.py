"""The advisor service's automatic loop (``toposcope advisor serve --auto-apply``).

Off by default. When on, it applies recommendations on its own within a policy, as the
Kubernetes descheduler evicts within its limits: :mod:`.config` (the policy and its YAML
file), :mod:`.blackout` (windows when it does nothing), :mod:`.limits` (whether one
recommendation may be applied now), :mod:`.scopes` (namespaces, Slurm partitions and
accounts, labels), :mod:`.decisions` (what it decided, in the audit database),
:mod:`.loop` (a tick, the kill switch), :mod:`.metrics`, :mod:`.flags` (the command line)
and :mod:`.api` (its routes).
"""
