"""Reading the ClusterRoles of the kustomize components: their documents and what they grant."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


def rbac_documents(path: Path) -> list[dict[str, Any]]:
    """The objects of a multi-document RBAC manifest."""
    return [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]


def granted(role: dict[str, Any]) -> set[tuple[str, str, str]]:
    """Every (api group, resource, verb) a ClusterRole's rules grant."""
    return {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
