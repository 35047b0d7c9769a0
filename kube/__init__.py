"""Kubernetes as a resource manager: ``--resource-manager kubernetes``.

The advisor's actions carried out through the API server's own mechanisms (the Eviction API
under PodDisruptionBudgets, scheduling gates, node affinity, the scale subresource, the
Kubeflow notebook stop annotation), never behind the kubelet's back. See
``docs/kubernetes.md``; the backend is :mod:`toposcope.kube.manager`.
"""
