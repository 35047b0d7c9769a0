"""NodeResourceTopology publishing: the object built from what the node measures, the pods
fingerprint, the kubelet's topology-manager settings and the ownership rule.

Nothing here imports a Kubernetes client library; the writes go through the core's
:mod:`toposcope.kubeapi.client`. The fingerprint needs ``xxhash`` (the ``kubernetes`` extra).
"""
