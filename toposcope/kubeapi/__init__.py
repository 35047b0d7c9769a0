"""The Kubernetes API server as toposcope talks to it: where it is, how to authenticate and
bounded requests (:mod:`.client`), and bearer tokens checked through TokenReview
(:mod:`.tokenreview`). The ``kube`` part builds its resource-manager backend on these; the
core uses them for leases and agent authentication.
"""
