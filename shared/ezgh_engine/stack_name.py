"""What the resources the engine creates at run time (EZGH queues, pull apps' task queues)
are named after, and its metrics' `service` dimension: the stack's name when deployed (infra
sets it and scopes IAM to it, so two stacks in one account never touch each other's
queues), "ezgh" locally. Below `config` so that modules `config` reaches (the AWS clients'
throttle count) may read it too."""

from __future__ import annotations

import os

ENV_STACK_PREFIX = "EZGH_STACK_PREFIX"
DEFAULT_STACK_PREFIX = "ezgh"


def stack_prefix() -> str:
    """The prefix of every resource name the engine creates at run time.

    Read on each call, not cached with `config.settings()`: it only names things, and the
    adapters that use it need no other setting.
    """
    return os.environ.get(ENV_STACK_PREFIX) or DEFAULT_STACK_PREFIX
