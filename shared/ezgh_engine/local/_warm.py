"""Imported only by the execution environments' forkserver (as its last preload): read what
the handlers' boto3 clients need into botocore's loader, once, so a new environment (a
fork) makes its clients from memory.

A first client costs about 30-50 ms of CPU (botocore reads and parses its model, endpoint
rules and partitions); with the loader filled, about 7 ms. No client is kept: the
forkserver starts before the emulator's endpoint and credentials exist (first thing in
`ezgh dev`), and each environment makes its own for the variables it is given
(`environments._set_env`). Nothing is connected, and no credential is read: the server
drops every `AWS_*` variable it inherited (the user's profile or keys, when `ezgh dev`
starts it before the emulator's replace them), so none reaches an environment either.
"""

from __future__ import annotations

import contextlib
import gc
import os

from ezgh_engine.adapters import aws

for _name in [name for name in os.environ if name.startswith("AWS_")]:
    del os.environ[_name]

SERVICES = ("dynamodb", "sqs", "s3", "scheduler", "dynamodbstreams", "lambda", "xray")

with contextlib.suppress(Exception):  # only a cost: an environment then reads them itself
    aws.load_models(SERVICES)

# The preloads' objects live as long as the forkserver: out of every environment's
# collections (`local._prefork`).
gc.freeze()
