"""The kubelet's pod-resources API and the container runtime's state: who a workload is."""
