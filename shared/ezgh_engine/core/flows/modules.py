"""The built-in module types: their handles, the JSON schema of their config, and the check of
a node's config against that schema at commit time.

The check reads the schema itself (a small subset: `type`, `required`, `properties`,
`minimum`, `maximum`, `enum`, `minItems`, `maxItems`, `oneOf` of required sets), so the
schema served by `GET /flows/moduleTypes` and the rule enforced are one truth. A string that
is a whole template (`{{ expr }}`) stands for any type: it is checked when the node runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

ANY_INPUT = "*"  # an input handle of any name (the default key is the source node's id)
DEFAULT_OUTPUT = "out"
MAX_TIMEOUT_SECONDS = 30 * 86_400
# The module types whose node waits (a durable sleep, an event): a job may be WAITING.
WAIT_MODULES = frozenset({"delay", "wait.event"})


@dataclass(frozen=True)
class ModuleType:
    """A module type: what it takes in, which output handles it has, its config schema."""

    module_type: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    config_schema: dict[str, Any]
    description: str

    def to_api(self) -> dict[str, Any]:
        return {
            "moduleType": self.module_type,
            "description": self.description,
            "inputs": list(self.inputs),
            "outputs": list(self.outputs),
            "configSchema": self.config_schema,
        }


def _obj(
    properties: dict[str, Any], required: tuple[str, ...] = (), **extra: Any
) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": properties, **extra}
    if required:
        schema["required"] = list(required)
    return schema


_EXPR = {"type": "string", "minLength": 1, "description": "a JMESPath expression"}
_TIMEOUT = {"type": "number", "minimum": 1, "maximum": MAX_TIMEOUT_SECONDS}

MODULE_TYPES: dict[str, ModuleType] = {
    m.module_type: m
    for m in (
        ModuleType("trigger.manual", (), (DEFAULT_OUTPUT,), _obj({}), "the job's input"),
        ModuleType(
            "transform",
            (ANY_INPUT,),
            (DEFAULT_OUTPUT,),
            _obj({"expression": _EXPR}, ("expression",)),
            "the value of a JMESPath expression over {input, in, trackingId}",
        ),
        ModuleType(
            "condition",
            (ANY_INPUT,),
            ("true", "false"),
            _obj({"expression": _EXPR}, ("expression",)),
            '{"result": bool}; leaves by the "true" or the "false" handle',
        ),
        ModuleType(
            "http.request",
            (ANY_INPUT,),
            (DEFAULT_OUTPUT,),
            _obj(
                {
                    "url": {"type": "string", "minLength": 1},
                    "method": {
                        "type": "string",
                        "enum": ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD"],
                    },
                    "headers": {"type": "object"},
                    "body": {},
                    "timeoutSeconds": {"type": "number", "minimum": 1, "maximum": 60},
                    "retries": {"type": "integer", "minimum": 0, "maximum": 10},
                },
                ("url",),
            ),
            "{status, headers, body}; 5xx and network errors retried, other 4xx fail the node",
        ),
        ModuleType(
            "delay",
            (ANY_INPUT,),
            (DEFAULT_OUTPUT,),
            _obj(
                {
                    "seconds": {"type": "number", "minimum": 0, "maximum": 365 * 86_400},
                    "until": {"type": "string", "description": "an ISO 8601 time"},
                },
                oneOf=[{"required": ["seconds"]}, {"required": ["until"]}],
            ),
            "a durable sleep; null",
        ),
        ModuleType(
            "wait.event",
            (ANY_INPUT,),
            (DEFAULT_OUTPUT,),
            _obj(
                {
                    "timeoutSeconds": _TIMEOUT,
                    "queueId": {"type": "string", "minLength": 1},
                    "key": {"type": "string", "minLength": 1},
                },
                ("timeoutSeconds",),
            ),
            "a queue message by key (queueId and key), else the body POSTed to the action's "
            "resumeUrl; null on timeout",
        ),
        ModuleType(
            "queue.send",
            (ANY_INPUT,),
            (DEFAULT_OUTPUT,),
            _obj(
                {
                    "queueId": {"type": "string", "minLength": 1},
                    "messages": {"type": "array", "minItems": 1, "maxItems": 10},
                },
                ("queueId", "messages"),
            ),
            "{messages: [{messageId, seq?}]}, sent exactly once",
        ),
        ModuleType(
            "workflow.invoke",
            (ANY_INPUT,),
            (DEFAULT_OUTPUT,),
            _obj(
                {
                    "appId": {"type": "string", "minLength": 1},
                    "workflow": {"type": "string", "minLength": 1},
                    "input": {},
                },
                ("appId", "workflow"),
            ),
            "the child run's output",
        ),
        ModuleType(
            "flow.invoke",
            (ANY_INPUT,),
            (DEFAULT_OUTPUT,),
            _obj({"flowId": {"type": "string", "minLength": 1}, "input": {}}, ("flowId",)),
            "the child job's output",
        ),
        ModuleType("comment", (), (), _obj({"text": {"type": "string"}}), "never runs"),
    )
}

_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "number": (int, float),
    "integer": (int,),
    "object": (dict,),
    "array": (list,),
    "boolean": (bool,),
}


def _is_template(value: Any) -> bool:
    return (
        isinstance(value, str) and value.strip().startswith("{{") and value.strip().endswith("}}")
    )


def _type_error(value: Any, schema: dict[str, Any], where: str) -> str | None:
    wanted = schema.get("type")
    if wanted is None or _is_template(value):
        return None
    ok = isinstance(value, _TYPES[wanted]) and not (
        wanted in ("number", "integer") and isinstance(value, bool)
    )
    return None if ok else f"{where} must be of type {wanted}"


def _range_error(value: Any, schema: dict[str, Any], where: str) -> str | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            return f"{where} must be at least {schema['minimum']}"
        if "maximum" in schema and value > schema["maximum"]:
            return f"{where} must be at most {schema['maximum']}"
    if isinstance(value, str) and len(value) < schema.get("minLength", 0):
        return f"{where} must not be empty"
    too_few = isinstance(value, list) and len(value) < schema.get("minItems", 0)
    if too_few or (isinstance(value, list) and len(value) > schema.get("maxItems", 10**9)):
        return f"{where} must hold {schema.get('minItems')} to {schema.get('maxItems')} items"
    if "enum" in schema and not _is_template(value) and value not in schema["enum"]:
        return f"{where} must be one of {', '.join(map(str, schema['enum']))}"
    return None


def config_error(module: ModuleType, config: dict[str, Any]) -> str | None:
    """What is wrong with `config` for `module` (None when nothing)."""
    schema = module.config_schema
    for name in schema.get("required", ()):
        if config.get(name) is None:
            return f"config.{name} is required"
    alternatives = schema.get("oneOf")
    if alternatives:
        matching = [
            a for a in alternatives if all(config.get(r) is not None for r in a["required"])
        ]
        if len(matching) != 1:
            names = " or ".join(a["required"][0] for a in alternatives)
            return f"config needs exactly one of {names}"
    for name, prop in schema.get("properties", {}).items():
        if config.get(name) is None:
            continue
        where = f"config.{name}"
        problem = _type_error(config[name], prop, where) or _range_error(config[name], prop, where)
        if problem:
            return problem
    return None
