"""`ezgh bootstrap`: the first organization, project and admin API key of a deployment.

Reads the stack's outputs with the operator's AWS credentials, points this process's engine
settings at the deployed tables, mints an admin key (only its hash is stored), and keeps the
key in SSM Parameter Store as a SecureString. The key is never printed unless asked for.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Mapping
from typing import Any

from ezgh_engine import config, topology
from ezgh_engine.adapters import aws

DEFAULT_STACK = "EzghWorkflows"

OutputsReader = Callable[[str], Mapping[str, str]]


def stack_outputs(stack: str) -> dict[str, str]:
    """The CloudFormation outputs of `stack` (OutputKey → OutputValue)."""
    answer = aws.client("cloudformation").describe_stacks(StackName=stack)
    return {o["OutputKey"]: o["OutputValue"] for o in answer["Stacks"][0].get("Outputs", [])}


def engine_env(outputs: Mapping[str, str]) -> dict[str, str]:
    """The variables `ezgh_engine.config` reads, from the stack's outputs."""
    env = {t.env_var: outputs[topology.table_output(t)] for t in topology.TOPOLOGY.tables}
    env.update({q.env_var: outputs[topology.queue_output(q)] for q in topology.TOPOLOGY.queues})
    env[topology.TOPOLOGY.bucket_env_var] = outputs[topology.BUCKET_OUTPUT]
    env[config.ENV_API_URL] = outputs[topology.API_URL_OUTPUT]
    env[config.ENV_TOKEN_SECRET_ARN] = outputs[topology.TOKEN_SECRET_OUTPUT]
    return env


def bootstrap(
    stack: str,
    *,
    org_id: str | None = None,
    project_id: str | None = None,
    parameter: str | None = None,
    read_outputs: OutputsReader | None = None,
) -> dict[str, Any]:
    """Mint the admin key and store it; answer what was made (without the key)."""
    outputs = (read_outputs or stack_outputs)(stack)
    os.environ.update(engine_env(outputs))
    config.reset_settings()
    from ezgh_engine.service.auth import bootstrap_admin

    org, project, key = bootstrap_admin(org_id, project_id)
    name = parameter or f"/ezgh/{stack}/bootstrap-admin-key"
    aws.client("ssm").put_parameter(
        Name=name,
        Value=key,
        Type="SecureString",
        Overwrite=True,
        Description="EZGH admin API key made by `ezgh bootstrap`",
    )
    return {
        "apiUrl": outputs[topology.API_URL_OUTPUT],
        "organizationId": org,
        "projectId": project,
        "keyParameter": name,
        "key": key,
    }


def _run(args: argparse.Namespace) -> int:
    made = bootstrap(
        args.stack, org_id=args.org_id, project_id=args.project_id, parameter=args.parameter
    )
    key = made.pop("key")
    print(f"EZGH_API_URL={made['apiUrl']}")
    print(f"EZGH_ORG_ID={made['organizationId']}")
    print(f"EZGH_PROJECT_ID={made['projectId']}")
    if args.show_key:
        print(f"EZGH_API_KEY={key}")
    else:
        print(
            f"# the admin key is in SSM: aws ssm get-parameter --with-decryption "
            f"--name {made['keyParameter']} --query Parameter.Value --output text"
        )
    return 0


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "bootstrap",
        help="make the first organization, project and admin API key of a deployment",
        description=__doc__,
    )
    parser.add_argument("--stack", default=DEFAULT_STACK, help="the CDK stack's name")
    parser.add_argument("--org-id", help="organization UUID (default: a new one)")
    parser.add_argument("--project-id", help="project UUID (default: a new one)")
    parser.add_argument("--parameter", help="SSM parameter name for the key")
    parser.add_argument(
        "--show-key", action="store_true", help="also print the key (it lands in your terminal)"
    )
    parser.set_defaults(func=_run)
