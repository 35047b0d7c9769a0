"""Host readers: what a node tells about itself, read and never turned into metrics.

sysfs and procfs (with configurable roots, like node_exporter's ``--path.sysfs`` and
``--path.procfs``), cgroups, processes and their environment, uncore PMUs and resctrl, NVML
through one error-mapping helper (:mod:`.nvml`), the kubelet's pod-resources API and container
runtime state (:mod:`.podresources`), and who a workload is (Slurm job, pod, unit). The
exporter's collectors turn these readings into families; the node agent and the simulator read
the same things through the same modules, so every part imports them downward from the core.
The fake NVML that stands in for the library in tests and the simulator lives beside them in
:mod:`toposcope.fake_nvml`.
"""
