"""The annotations, labels and gate names toposcope reads and writes on Kubernetes objects.

Opt-in is explicit and per owner: toposcope evicts only pods whose owner (or the pod itself)
says the workload checkpoints and resumes, and releases idle GPUs only of owners that say
so. The names are documented in ``docs/kubernetes.md``.
"""

from __future__ import annotations

#: on a pod or its owner's pod template, "true": it checkpoints and resumes, it may be evicted
MIGRATABLE = "toposcope.io/migratable"
#: on a Deployment, StatefulSet or Kubeflow Notebook, "true": scale to zero / stop when idle
RELEASE_IDLE = "toposcope.io/release-idle"
#: the scheduling gate of pods whose node toposcope chooses
PLACEMENT_GATE = "toposcope.io/placement"
#: on an owner, JSON: what toposcope changed and how to undo it (see :mod:`.undo`)
UNDO = "toposcope.io/undo"
#: the label key toposcope narrows node affinity with
HOSTNAME_LABEL = "kubernetes.io/hostname"
#: the Kubeflow notebook controller stops a notebook carrying this annotation
KUBEFLOW_STOPPED = "kubeflow-resource-stopped"
#: the field manager toposcope's writes are made as
FIELD_MANAGER = "toposcope"

# The descheduler's annotations (sigs.k8s.io/descheduler, pkg/framework/plugins/
# defaultevictor/defaultevictor.go and README "Pod Evictions").
DESCHEDULER_EVICT = "descheduler.alpha.kubernetes.io/evict"
DESCHEDULER_PREFER_NO_EVICTION = "descheduler.alpha.kubernetes.io/prefer-no-eviction"
# The kubelet's annotations for static and mirror pods (k8s.io/kubernetes pkg/kubelet/types).
MIRROR_POD = "kubernetes.io/config.mirror"
CONFIG_SOURCE = "kubernetes.io/config.source"
#: the priority from which a pod is system-critical (k8s.io/api scheduling/v1
#: SystemCriticalPriority = 2 * HighestUserDefinablePriority)
SYSTEM_CRITICAL_PRIORITY = 2_000_000_000


def truthy(value: object) -> bool:
    """Whether an annotation value says yes (``"true"``, any case)."""
    return isinstance(value, str) and value.strip().lower() == "true"
