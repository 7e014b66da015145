"""CDK app entry: `npx aws-cdk synth` / `deploy` run this through cdk.json.

Nothing here calls AWS, and the stack has no fixed account or region (the CLI's credentials
decide). Before synthesizing, the app (re)builds the Lambda asset (infra/bundle.py); the first
build downloads wheels from PyPI. `EZGH_SKIP_BUNDLE=1` (or `-c ezgh:skipBundle=true`) builds
sources only, for offline synth and review: such a template is not deployable.

Context: `ezgh:stackName` (default EzghWorkflows), `ezgh:alarmTopicArn` (SNS topic for alarms),
`ezgh:alarms` (default true; false makes none: each alarm is $0.10 a month, idle or not),
`ezgh:stepsConcurrency` / `ezgh:apiConcurrency` (reserved concurrency of the public functions,
see infra/stack.py PUBLIC_CONCURRENCY; 0 for none), `ezgh:apiRateLimit` / `ezgh:apiBurstLimit`
(the API stage's throttling, infra/components/api.py `Throttle`), `ezgh:keyRateLimit` (requests
a second per API key, `EZGH_KEY_RATE_LIMIT`; 0 for none), `ezgh:traceSampleRate` (0 to 1,
default 0: the share of runs whose trace goes to X-Ray, $5 a million traces),
`ezgh:metrics` (default true: the engine's EMF metrics), `ezgh:dashboard` (default false: a
CloudWatch dashboard of the runs, $3 a month past an account's first three), `ezgh:logLevel`
(default INFO; DEBUG adds a line per completed step and wait, billed per GB ingested).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

_HERE = Path(__file__).resolve().parent
_ROOT = _HERE.parent
# `python3 infra/app.py` puts infra/ itself first on sys.path; import `infra.*` and the engine
# from the repository instead (the engine need not be pip-installed for a synth).
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path[:0] = [str(_ROOT), str(_ROOT / "shared")]

from aws_cdk import App, Aspects  # noqa: E402
from cdk_nag import AwsSolutionsChecks  # noqa: E402
from ezgh_engine.topology import RUNS_NARROW_INDEXES  # noqa: E402

from infra import bundle  # noqa: E402
from infra.components.api import Throttle  # noqa: E402
from infra.stack import PUBLIC_CONCURRENCY, EzghStack  # noqa: E402

DEFAULT_STACK_NAME = "EzghWorkflows"
NO_DEPS_OUT = _ROOT / "build" / "lambda-nodeps"


def build_app(*, code_dir: str, app: App | None = None) -> tuple[App, EzghStack]:
    """The app with its one stack and cdk-nag's AwsSolutions checks (tests use this too)."""
    app = app or App()
    stack_name = app.node.try_get_context("ezgh:stackName") or DEFAULT_STACK_NAME
    stack = EzghStack(
        app,
        stack_name,
        code_dir=code_dir,
        alarm_topic_arn=app.node.try_get_context("ezgh:alarmTopicArn"),
        alarms=_flag(app, "ezgh:alarms", default=True),
        reserved_concurrency=_reserved_concurrency(app),
        throttle=_throttle(app),
        key_rate_limit=_int_context(app, "ezgh:keyRateLimit"),
        trace_sample_rate=float(app.node.try_get_context("ezgh:traceSampleRate") or 0),
        metrics=_flag(app, "ezgh:metrics", default=True),
        dashboard=_flag(app, "ezgh:dashboard", default=False),
        log_level=str(app.node.try_get_context("ezgh:logLevel") or "INFO").upper(),
        # An existing stack upgrading to the narrow runs indexes: one more per deploy
        # (docs/deploy.md); unset, all of them.
        runs_indexes=_runs_indexes(app),
        description="EZGH Workflows: durable workflow engine (serverless, zero idle cost)",
    )
    Aspects.of(app).add(AwsSolutionsChecks(verbose=True))
    return app, stack


def _reserved_concurrency(app: App) -> dict[str, int]:
    """PUBLIC_CONCURRENCY, with `-c ezgh:<key>Concurrency=N` overrides (0: no reservation)."""
    chosen = {}
    for key, default in PUBLIC_CONCURRENCY.items():
        value = app.node.try_get_context(f"ezgh:{key}Concurrency")
        chosen[key] = default if value is None else int(value)
    return chosen


def _flag(app: App, key: str, *, default: bool) -> bool:
    """A yes/no context value (`true`/`false`, `1`/`0`, `yes`/`no`); `default` when unset."""
    value = app.node.try_get_context(key)
    if value is None:
        return default
    return str(value).lower() not in {"false", "0", "no"}


def _runs_indexes(app: App) -> int:
    value = _int_context(app, "ezgh:runsIndexes")
    return len(RUNS_NARROW_INDEXES) if value is None else value


def _int_context(app: App, key: str) -> int | None:
    value = app.node.try_get_context(key)
    return None if value is None else int(value)


def _throttle(app: App) -> Throttle:
    """The API stage's throttling: `-c ezgh:apiRateLimit=N` (requests a second, all callers)
    and `-c ezgh:apiBurstLimit=N`, each defaulting to `Throttle`'s."""
    default = Throttle()
    rate = app.node.try_get_context("ezgh:apiRateLimit")
    burst = _int_context(app, "ezgh:apiBurstLimit")
    return Throttle(
        rate=default.rate if rate is None else float(rate),
        burst=default.burst if burst is None else burst,
    )


def _skip_bundle(app: App) -> bool:
    flag = os.environ.get("EZGH_SKIP_BUNDLE") or app.node.try_get_context("ezgh:skipBundle")
    return str(flag).lower() in {"1", "true", "yes"}


def main() -> None:
    app = App()
    skip = _skip_bundle(app)
    code_dir = bundle.build(NO_DEPS_OUT, with_deps=False) if skip else bundle.build()
    build_app(code_dir=str(code_dir), app=app)
    app.synth()


if __name__ == "__main__":
    main()
