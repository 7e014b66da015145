"""A small, exact IAM evaluator for the synthesized template, and the IAM actions an AWS
request needs.

- `Resolver` turns the template's intrinsics (Ref, Fn::GetAtt, Fn::Join, Fn::Sub, pseudo
  parameters) into the local runtime's names and ARNs (the resources `ezgh dev` provisions
  in moto), so a recorded request can be matched against a policy statement.
- `needs(call)` maps a recorded request (`ezgh_engine.local.call_log`) to the (action,
  resource, condition context) triples IAM authorizes it by.
- `allows(statements, need)` decides as IAM does for identity policies made only of Allow
  statements: some statement's Action and Resource match (wildcards `*` and `?`) and every
  condition holds (a condition on a key the request does not carry fails, as without
  `IfExists`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache
from typing import Any
from urllib.parse import urlparse

PARTITION = "aws"
URL_SUFFIX = "amazonaws.com"


@dataclass(frozen=True)
class Need:
    """One authorization a request needs."""

    action: str
    resource: str
    context: tuple[tuple[str, str], ...] = ()

    def __str__(self) -> str:
        extra = f" with {dict(self.context)}" if self.context else ""
        return f"{self.action} on {self.resource}{extra}"


@dataclass
class Resolver:
    """Template intrinsics → local names. `refs`/`attrs` are keyed by logical id."""

    region: str
    account: str
    stack_name: str
    refs: dict[str, str] = field(default_factory=dict)
    attrs: dict[tuple[str, str], str] = field(default_factory=dict)

    def pseudo(self, name: str) -> str | None:
        return {
            "AWS::Partition": PARTITION,
            "AWS::Region": self.region,
            "AWS::AccountId": self.account,
            "AWS::URLSuffix": URL_SUFFIX,
            "AWS::StackName": self.stack_name,
        }.get(name)

    def resolve(self, node: Any) -> Any:
        if isinstance(node, list):
            return [self.resolve(n) for n in node]
        if not isinstance(node, dict):
            return node
        if "Ref" in node:
            name = node["Ref"]
            return self.pseudo(name) or self.refs.get(name, f"<unresolved Ref {name}>")
        if "Fn::GetAtt" in node:
            lid, attr = node["Fn::GetAtt"]
            return self.attrs.get((lid, attr), f"<unresolved {lid}.{attr}>")
        if "Fn::Join" in node:
            sep, parts = node["Fn::Join"]
            return sep.join(str(self.resolve(p)) for p in parts)
        if "Fn::Sub" in node:
            body = node["Fn::Sub"]
            text, extra = (body, {}) if isinstance(body, str) else (body[0], body[1])

            def sub(match: re.Match[str]) -> str:
                name = match.group(1)
                if name in extra:
                    return str(self.resolve(extra[name]))
                if "." in name:
                    lid, attr = name.split(".", 1)
                    return self.attrs.get((lid, attr), f"<unresolved {name}>")
                return self.pseudo(name) or self.refs.get(name, f"<unresolved {name}>")

            return re.sub(r"\$\{([^}]+)\}", sub, text)
        return {k: self.resolve(v) for k, v in node.items()}


# --- matching ------------------------------------------------------------------------------


@cache
def _glob(pattern: str, case: bool) -> re.Pattern[str]:
    body = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.compile(f"^{body}$", 0 if case else re.IGNORECASE)


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


_CONDITIONS = {
    "StringEquals": lambda v, p: v == p,
    "StringLike": lambda v, p: bool(_glob(p, True).match(v)),
    "ArnEquals": lambda v, p: v == p,
    "ArnLike": lambda v, p: bool(_glob(p, True).match(v)),
    "Bool": lambda v, p: v.lower() == str(p).lower(),
}


def _condition_holds(condition: dict[str, Any], context: dict[str, str]) -> bool:
    for operator, tests in condition.items():
        check = _CONDITIONS.get(operator)
        if check is None:
            raise ValueError(f"condition operator {operator} is not understood by this evaluator")
        for key, wanted in tests.items():
            value = context.get(key)
            if value is None or not any(check(value, str(w)) for w in _as_list(wanted)):
                return False
    return True


def statement_allows(statement: dict[str, Any], need: Need) -> bool:
    if statement.get("Effect") != "Allow":
        return False
    if "NotAction" in statement or "NotResource" in statement:
        raise ValueError(f"NotAction/NotResource are not understood by this evaluator: {statement}")
    if not any(_glob(a, False).match(need.action) for a in _as_list(statement["Action"])):
        return False
    if not any(_glob(str(r), True).match(need.resource) for r in _as_list(statement["Resource"])):
        return False
    return _condition_holds(statement.get("Condition", {}), dict(need.context))


def allows(statements: list[dict[str, Any]], need: Need) -> bool:
    """Whether the (resolved) Allow statements authorize `need`; any Deny is refused."""
    for s in statements:
        if s.get("Effect") == "Deny":
            raise ValueError(f"Deny statements are not understood by this evaluator: {s}")
    return any(statement_allows(s, need) for s in statements)


# --- requests → needs ----------------------------------------------------------------------


def _queue_arn(region: str, account: str, params: dict[str, Any]) -> str:
    if "QueueUrl" in params:
        owner, name = urlparse(params["QueueUrl"]).path.split("/")[-2:]
        return f"arn:{PARTITION}:sqs:{region}:{owner or account}:{name}"
    return f"arn:{PARTITION}:sqs:{region}:{account}:{params.get('QueueName', '*')}"


# SQS batch calls are authorized as their single-message action.
_SQS_ACTIONS = {
    "SendMessageBatch": "SendMessage",
    "DeleteMessageBatch": "DeleteMessage",
    "ChangeMessageVisibilityBatch": "ChangeMessageVisibility",
}
_S3_ACTIONS = {
    "HeadObject": "GetObject",
    "ListObjectsV2": "ListBucket",
    "ListObjects": "ListBucket",
    "HeadBucket": "ListBucket",
}
_TRANSACT = {
    "Put": "PutItem",
    "Update": "UpdateItem",
    "Delete": "DeleteItem",
    "ConditionCheck": "ConditionCheckItem",
    "Get": "GetItem",
}


def needs(call: dict[str, Any], region: str, account: str) -> list[Need]:
    """What IAM checks for one recorded request (see `ezgh_engine.local.call_log`)."""
    service, operation, params = call["service"], call["operation"], call["params"]
    table_arn = f"arn:{PARTITION}:dynamodb:{region}:{account}:table/"
    if service == "dynamodb":
        if "TransactItems" in params:
            return [
                Need(f"dynamodb:{_TRANSACT[op]}", table_arn + table)
                for item in params["TransactItems"]
                for op, table in item.items()
            ]
        if "RequestItems" in params:
            return [Need(f"dynamodb:{operation}", table_arn + t) for t in params["RequestItems"]]
        resource = table_arn + params.get("TableName", "*")
        if "IndexName" in params:
            resource += f"/index/{params['IndexName']}"
        return [Need(f"dynamodb:{operation}", resource)]
    if service == "dynamodbstreams":
        return [Need(f"dynamodb:{operation}", params.get("StreamArn", "*"))]
    if service == "sqs":
        action = _SQS_ACTIONS.get(operation, operation)
        resource = "*" if operation == "ListQueues" else _queue_arn(region, account, params)
        return [Need(f"sqs:{action}", resource)]
    if service == "s3":
        bucket = f"arn:{PARTITION}:s3:::{params.get('Bucket', '*')}"
        if operation == "DeleteObjects":
            return [Need("s3:DeleteObject", f"{bucket}/{k}") for k in params.get("Keys", [])]
        action = _S3_ACTIONS.get(operation, operation)
        if action == "ListBucket":
            return [Need("s3:ListBucket", bucket)]
        return [Need(f"s3:{action}", f"{bucket}/{params.get('Key', '*')}")]
    if service == "scheduler":
        group = params.get("GroupName") or "default"
        arn = f"arn:{PARTITION}:scheduler:{region}:{account}:schedule/{group}/{params.get('Name')}"
        found = [Need(f"scheduler:{operation}", arn)]
        role = (params.get("Target") or {}).get("RoleArn")
        if role:  # handing Scheduler a role is PassRole on it
            passed = (("iam:PassedToService", "scheduler.amazonaws.com"),)
            found.append(Need("iam:PassRole", role, passed))
        return found
    if service == "lambda":
        name = str(params.get("FunctionName", ""))
        function_arn = (
            name
            if name.startswith("arn:")
            else f"arn:{PARTITION}:lambda:{region}:{account}:function:{name}"
        )
        context = (("lambda:FunctionArn", function_arn),) if name else ()
        if operation == "CreateEventSourceMapping":
            return [Need("lambda:CreateEventSourceMapping", "*", context)]
        if "UUID" in params:
            arn = f"arn:{PARTITION}:lambda:{region}:{account}:event-source-mapping:{params['UUID']}"
            return [Need(f"lambda:{operation}", arn, context)]
        # The Invoke API (synchronous or not) is authorized as lambda:InvokeFunction.
        action = "InvokeFunction" if operation == "Invoke" else operation
        return [Need(f"lambda:{action}", function_arn)]
    if service == "sts" and operation == "AssumeRole":
        return [Need("sts:AssumeRole", str(params.get("RoleArn", "*")))]
    if service == "secretsmanager":
        return [Need(f"secretsmanager:{operation}", str(params.get("SecretId", "*")))]
    if service == "xray":  # X-Ray's actions take no resource but "*"
        return [Need(f"xray:{operation}", "*")]
    raise ValueError(
        f"no IAM mapping for {service}:{operation}; add one to tests/infra/iam_eval.py"
    )
