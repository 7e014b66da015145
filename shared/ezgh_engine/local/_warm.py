"""Imported only by the execution environments' forkserver (as a preload): make the boto3
clients the handlers use, once, so a new environment (a fork) starts with them.

A client costs about half a second to make (botocore loads its model and registers its
handlers); made here, for the forkserver's endpoint and credentials, every environment
forked from it has them. Nothing is connected yet, so a fork is safe. An environment whose
`AWS_*` variables differ makes its own (`environments._set_env`).
"""

from __future__ import annotations

import contextlib

from ezgh_engine.adapters import aws

SERVICES = ("dynamodb", "sqs", "s3", "scheduler", "dynamodbstreams")

for _service in SERVICES:
    with contextlib.suppress(Exception):  # no region or endpoint yet: environments make them
        aws.client(_service)
