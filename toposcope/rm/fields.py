"""The constrained field types of the resource-manager models: each rule written once.

They are ``Annotated`` types that pydantic reads when it validates the models
(:mod:`toposcope.rm.validation`) and turns into the JSON Schema of ``docs/openapi.json``:

- an **index** (CPU, NUMA node or GPU number) is a JSON integer from 0 to
  :data:`INDEX_LIMIT` - 1; ``4.0`` is accepted (JSON Schema calls it an integer) but not
  ``true`` or ``"4"``; a list of them holds at most :data:`INDEX_LIMIT` entries;
- a **node name** is a host name (:func:`toposcope.identity.names.check_node_name`);
- a **workload name** is 1 to :data:`~toposcope.identity.names.MAX_WORKLOAD_NAME` characters without
  control characters (:func:`toposcope.identity.names.check_workload_name`; the agent's workloads
  are
  cgroup paths and container ids as well as unit names);
- a **request id** (and an action id) is printable ASCII without spaces, so that it can be
  logged and put in a URL path (percent-encoded) as it is;
- free text (``reason``) is at most :data:`MAX_TEXT` characters.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, BeforeValidator, Field, StrictStr, WithJsonSchema
from pydantic_core import PydanticCustomError

from toposcope.cpulist import CPU_LIMIT
from toposcope.identity.names import (
    MAX_NODE_NAME,
    MAX_WORKLOAD_NAME,
    NODE_NAME_PATTERN,
    NODE_NAME_RULE,
    WORKLOAD_NAME_PATTERN,
    WORKLOAD_NAME_RULE,
    check_node_name,
    check_workload_name,
)

#: CPU, NUMA node and GPU numbers are below this; a list of them holds at most this many
INDEX_LIMIT = CPU_LIMIT
#: the longest request id
MAX_REQUEST_ID = 256
#: the longest action id (a backend may add a prefix to the request id)
MAX_ACTION_ID = 512
#: the longest workload kind (``kubernetes``, ``slurm``, ``gpu-train``...)
MAX_KIND = 64
#: the longest free text (a request's reason)
MAX_TEXT = 4096

ID_RULE = "printable ASCII characters without spaces"

_PRINTABLE_ASCII = r"^[!-~]+$"


def _shown(value: str) -> str:
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:77]}..."


def _json_integer(value: object) -> object:
    """Refuse what JSON Schema's ``integer`` refuses but pydantic's lax ``int`` would coerce.

    A bool or a string is not a number, while ``4.0`` is an integer in JSON Schema (and so
    in the published document) and stays accepted.
    """
    if isinstance(value, bool | str | bytes):
        raise PydanticCustomError("int_type", "Input should be a valid integer")
    return value


def _identifier(what: str, limit: int) -> AfterValidator:
    def check(value: str) -> str:
        if len(value) > limit or not re.fullmatch(_PRINTABLE_ASCII, value):
            raise ValueError(f"{what} {_shown(value)} is not 1-{limit} {ID_RULE}")
        return value

    return AfterValidator(check)


def _string_schema(pattern: str, max_length: int, rule: str) -> WithJsonSchema:
    return WithJsonSchema(
        {"type": "string", "minLength": 1, "maxLength": max_length, "pattern": pattern,
         "description": rule}
    )  # fmt: skip


Index = Annotated[int, Field(ge=0, lt=INDEX_LIMIT), BeforeValidator(_json_integer)]
IndexList = Annotated[list[Index], Field(max_length=INDEX_LIMIT)]
Count = Index

NodeName = Annotated[
    StrictStr,
    AfterValidator(check_node_name),
    _string_schema(NODE_NAME_PATTERN, MAX_NODE_NAME, NODE_NAME_RULE),
]
WorkloadName = Annotated[
    StrictStr,
    AfterValidator(check_workload_name),
    _string_schema(WORKLOAD_NAME_PATTERN, MAX_WORKLOAD_NAME, WORKLOAD_NAME_RULE),
]
RequestId = Annotated[
    StrictStr,
    _identifier("request id", MAX_REQUEST_ID),
    _string_schema(_PRINTABLE_ASCII, MAX_REQUEST_ID, f"1-{MAX_REQUEST_ID} {ID_RULE}"),
]
ActionId = Annotated[
    StrictStr,
    _identifier("action id", MAX_ACTION_ID),
    _string_schema(_PRINTABLE_ASCII, MAX_ACTION_ID, f"1-{MAX_ACTION_ID} {ID_RULE}"),
]
Text = Annotated[StrictStr, Field(max_length=MAX_TEXT)]
KindName = Annotated[StrictStr, Field(min_length=1, max_length=MAX_KIND)]
Seconds = Annotated[float, Field(ge=0.0, allow_inf_nan=False)]
