"""Tests of the deployment files: Kubernetes manifests, systemd unit, Dockerfile."""
