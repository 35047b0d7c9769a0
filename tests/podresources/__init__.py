"""Tests of workload identity on Kubernetes: the kubelet's pod-resources API and runtime state."""
