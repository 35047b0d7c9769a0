"""Bearer tokens: reading and writing token files (:mod:`.tokens`) and the check every
state-changing API applies to a request's ``Authorization`` header (:mod:`.bearer`). Tokens
checked by the Kubernetes API server instead (TokenReview) are in :mod:`toposcope.kubeapi`.
"""
