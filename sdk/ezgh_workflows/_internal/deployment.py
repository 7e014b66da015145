"""Which deployment is running this code: ``EZGH_DEPLOYMENT_ID`` or the platform's own IDs."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping

Env = Mapping[str, str]


def _vercel(env: Env) -> str | None:
    return env.get("VERCEL_DEPLOYMENT_ID") or None


def _lambda(env: Env) -> str | None:
    name, version = env.get("AWS_LAMBDA_FUNCTION_NAME"), env.get("AWS_LAMBDA_FUNCTION_VERSION")
    return f"{name}:{version}" if name and version else None


def _cloud_run(env: Env) -> str | None:
    service, revision = env.get("K_SERVICE"), env.get("K_REVISION")
    return f"{service}:{revision}" if service and revision else None


def _fly(env: Env) -> str | None:
    app = env.get("FLY_APP_NAME")
    version = env.get("FLY_MACHINE_VERSION") or env.get("FLY_IMAGE_REF")
    return f"{app}:{version}" if app and version else None


def _render(env: Env) -> str | None:
    service, commit = env.get("RENDER_SERVICE_ID"), env.get("RENDER_GIT_COMMIT")
    if service and commit:
        return f"{service}:{commit}"
    return env.get("RENDER_DEPLOY_ID") or None


_DETECTORS: tuple[Callable[[Env], str | None], ...] = (_vercel, _lambda, _cloud_run, _fly, _render)


def detect_deployment_id(env: Env | None = None) -> str | None:
    """``EZGH_DEPLOYMENT_ID`` if set, else the first platform ID found, else ``None``.

    Platforms: Vercel, AWS Lambda (``name:version``), Cloud Run (``service:revision``),
    Fly.io (``app:machine version`` or ``app:image ref``), Render (``service:commit`` or the
    deploy ID).
    """
    env = os.environ if env is None else env
    explicit = env.get("EZGH_DEPLOYMENT_ID")
    if explicit:
        return explicit
    for detect in _DETECTORS:
        found = detect(env)
        if found:
            return found
    return None
