"""The web console: three static files served at `GET /console` by the API itself.

The console is a single page that talks to the public HTTP API with the user's API key, so
serving it needs no key: the files hold no data. They ship as package data of `ezgh_engine`
(the Lambda bundle copies the package folder), and only the names in `ASSETS` are served, so
no request path ever reaches the file system.
"""

from __future__ import annotations

from importlib import resources
from typing import Any
from urllib.parse import quote, urlencode

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.router import APIGatewayHttpRouter

from ezgh_engine.api.errors import error_response

router = APIGatewayHttpRouter()

# name -> content type; nothing else under /console/ is answered.
ASSETS = {
    "index.html": "text/html; charset=utf-8",
    "console.js": "text/javascript; charset=utf-8",
    "console.css": "text/css; charset=utf-8",
}

# The page loads nothing from elsewhere and may only call its own origin (the API).
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    # Small files, and a new engine version must not run an old page against a new API.
    "Cache-Control": "no-cache",
}

_cache: dict[str, str] = {}


def asset_text(name: str) -> str:
    """The text of one console asset (read from the package once per process)."""
    if name not in _cache:
        _cache[name] = resources.files("ezgh_engine").joinpath("console", name).read_text("utf-8")
    return _cache[name]


def _asset(name: str) -> Response[Any]:
    if name not in ASSETS:
        return error_response(404, "not_found", "no such path")
    return Response(
        status_code=200,
        content_type=ASSETS[name],
        body=asset_text(name),
        headers=dict(SECURITY_HEADERS),
    )


@router.get("/console", include_in_schema=False)
def console_page() -> Response[Any]:
    """The console's page."""
    return _asset("index.html")


@router.get("/console/<name>", include_in_schema=False)
def console_asset(name: str) -> Response[Any]:
    """The console's script and style sheet (`/console/` alone is the page too)."""
    return _asset(name or "index.html")


def sign_in_link(api_url: str, api_key: str, org_id: str, project_id: str) -> str:
    """A link that opens the console signed in: the credentials ride in the URL fragment,
    which browsers never send to a server; the page moves them to sessionStorage."""
    fragment = urlencode({"key": api_key, "org": org_id, "project": project_id}, quote_via=quote)
    return f"{api_url.rstrip('/')}/console#{fragment}"
