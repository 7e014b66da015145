"""Serve push apps on loopback and register them with the local engine through its HTTP API."""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import logging
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ezgh_engine.local import loopback
from ezgh_engine.local._http import ServedHttp
from ezgh_engine.local.asgi import serve_asgi

log = logging.getLogger("ezgh.local.apps")

_GENERIC_ATTRS = {"app", "application", "push_app", "pushapp", "asgi"}
# What the SDK reads for the deployment ID (`ezgh_workflows._internal.deployment`).
DEPLOYMENT_ENV = "EZGH_DEPLOYMENT_ID"


def app_name(module: str, attr: str) -> str:
    """A contract-valid app name (`^[a-z0-9-]{1,64}$`) from `MODULE:ATTR`.

    The attribute names the app unless it is a generic one like `app`; then the module does.
    """
    base = module.rsplit(".", 1)[-1] if attr.lower() in _GENERIC_ATTRS else attr
    name = re.sub(r"[^a-z0-9]+", "-", base.lower()).strip("-")[:64].strip("-")
    return name or "app"


def load_app(spec: str) -> tuple[str, Any]:
    """Import `MODULE:ATTR` (the working directory importable, as for uvicorn); (name, app).

    An app that names no deployment, where `EZGH_DEPLOYMENT_ID` does not either, reports
    `dev_deployment_id`: so a run's events say which version of the code ran each step."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ValueError(f"--app {spec!r}: expected MODULE:ATTR")
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    module = importlib.import_module(module_name)
    app: Any = module
    for part in attr.split("."):
        app = getattr(app, part)
    if getattr(app, "deployment_id", "") is None and not os.environ.get(DEPLOYMENT_ENV):
        app.deployment_id = dev_deployment_id(app, module)
    return app_name(module_name, attr.split(".")[-1]), app


def dev_deployment_id(app: Any, module: Any) -> str:
    """`dev-` and a digest of the source files of the app's module and of its workflows'
    modules: the same code has the same ID across restarts, an edit gives a new one."""
    names = {module.__name__} | {getattr(wf, "__module__", "") for wf in app.workflows}
    digest = hashlib.sha256()
    for name in sorted(n for n in names if n in sys.modules):
        source = getattr(sys.modules[name], "__file__", None)
        digest.update(name.encode() + b"\0")
        if source:
            with contextlib.suppress(OSError):
                digest.update(Path(source).read_bytes())
    return f"dev-{digest.hexdigest()[:12]}"


@dataclass
class ServedApp:
    """A push app served on loopback and, once registered, its engine record."""

    name: str
    app: Any
    server: ServedHttp
    record: dict[str, Any] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return self.server.url


def serve_app(name: str, app: Any) -> ServedApp:
    return ServedApp(name=name, app=app, server=serve_asgi(app))


class EngineApi:
    """Just enough of the engine's HTTP API to register apps (the SDK is not a dependency)."""

    def __init__(self, api_url: str, api_key: str, org_id: str, project_id: str) -> None:
        self._prefix = f"{api_url}/v1/organizations/{org_id}/projects/{project_id}"
        self._headers = {"Authorization": f"Bearer {api_key}"}

    def close(self) -> None:
        """Nothing to release (a connection per call): kept for callers that close."""

    def _call(self, method: str, path: str, json: Any = None) -> Any:
        answer = loopback.request(
            method, f"{self._prefix}{path}", headers=self._headers, json_body=json
        )
        if answer.status >= 400:
            raise RuntimeError(f"{method} {path}: {answer.status} {answer.text[:500]}")
        return answer.json() if answer.body else None

    def find_app(self, name: str) -> dict[str, Any] | None:
        listed = self._call("GET", "/apps")
        apps = listed if isinstance(listed, list) else (listed or {}).get("apps", [])
        return next((a for a in apps if a.get("name") == name), None)

    def register(self, served: ServedApp) -> dict[str, Any]:
        """Create (or recreate) the app, give the app its signing key, and sync it.

        The signing key is only in the create answer, so an app of the same name that this
        process did not create is deleted and created again.
        """
        existing = self.find_app(served.name)
        key = served.record.get("signingKey") if served.record else None
        if existing is not None and key and existing.get("id") == served.record.get("id"):
            record = self._call("PATCH", f"/apps/{existing['id']}", json={"url": served.url})
            record = {**existing, **(record or {}), "signingKey": key}
        else:
            if existing is not None:
                self._call("DELETE", f"/apps/{existing['id']}")
            record = self._call(
                "POST", "/apps", json={"name": served.name, "kind": "push", "url": served.url}
            )
        served.app.signing_key = record["signingKey"]
        synced = self._call("POST", f"/apps/{record['id']}/sync") or {}
        served.record = {**record, **synced, "signingKey": record["signingKey"]}
        return served.record
