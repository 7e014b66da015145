"""What the API subcommands (`ezgh workflows …`, `ezgh queues …`) share: where the API is and
which key to use, one HTTP call with errors as messages, tables for people, `--json` for
scripts.

Settings come from, in order: the flags (`--api-url`, `--api-key`, `--org-id`,
`--project-id`), the environment (`EZGH_API_URL`, `EZGH_API_KEY`, `EZGH_ORG_ID`,
`EZGH_PROJECT_ID`), then `<state-dir>/dev.env` (`--state-dir`, default `.ezgh`, as written by
`ezgh dev`).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

ENV = {
    "api_url": "EZGH_API_URL",
    "api_key": "EZGH_API_KEY",
    "org_id": "EZGH_ORG_ID",
    "project_id": "EZGH_PROJECT_ID",
}
UUID_RE = re.compile(
    r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"
)


class CliError(Exception):
    """A failure to report on stderr (exit code 1), never a stack trace."""

    def __init__(self, message: str, status: int | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code


def connection_parent() -> argparse.ArgumentParser:
    """A parent parser with the connection flags and `--json`."""
    parent = argparse.ArgumentParser(add_help=False)
    group = parent.add_argument_group("connection")
    group.add_argument("--api-url", help="engine API base URL (EZGH_API_URL)")
    group.add_argument("--api-key", help="API key (EZGH_API_KEY)")
    group.add_argument("--org-id", help="organization ID (EZGH_ORG_ID)")
    group.add_argument("--project-id", help="project ID (EZGH_PROJECT_ID)")
    group.add_argument(
        "--state-dir", default=".ezgh", help="read <dir>/dev.env as a fallback (default .ezgh)"
    )
    parent.add_argument("--json", action="store_true", help="print JSON (for scripts)")
    return parent


def _dev_env(state_dir: str | None) -> dict[str, str]:
    path = Path(state_dir or ".ezgh") / "dev.env"
    values: dict[str, str] = {}
    try:
        text = path.read_text()
    except OSError:
        return values
    for line in text.splitlines():
        name, sep, value = line.strip().partition("=")
        if sep and not name.startswith("#"):
            values[name.strip()] = value.strip()
    return values


def settings_from(args: argparse.Namespace) -> dict[str, str]:
    dev = _dev_env(getattr(args, "state_dir", None))
    found: dict[str, str] = {}
    for attr, env in ENV.items():
        value = getattr(args, attr, None) or os.environ.get(env) or dev.get(env)
        if not value:
            flag = "--" + attr.replace("_", "-")
            state_dir = getattr(args, "state_dir", None) or ".ezgh"
            command = "ezgh dev" if state_dir == ".ezgh" else f"ezgh dev --state-dir {state_dir}"
            raise CliError(
                f"no {attr.replace('_', ' ')}: pass {flag}, set {env}, or run `{command}` "
                f"(which writes {Path(state_dir) / 'dev.env'}; not found)",
                code="validation_error",
            )
        found[attr] = value
    return found


def segment(value: str) -> str:
    return quote(str(value), safe="")


class Api:
    """The project's API: `request(method, path)` under `/v1/organizations/…/projects/…`."""

    def __init__(self, args: argparse.Namespace, *, timeout: float = 30.0) -> None:
        cfg = settings_from(args)
        self.base_url = cfg["api_url"].rstrip("/")
        self.prefix = (
            f"/v1/organizations/{segment(cfg['org_id'])}/projects/{segment(cfg['project_id'])}"
        )
        self._headers = {"Authorization": f"Bearer {cfg['api_key']}"}
        self._timeout = timeout

    def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: dict[str, Any] | None = None,
    ) -> Any:
        kwargs: dict[str, Any] = {"headers": self._headers, "timeout": self._timeout}
        if body is not None:
            kwargs["json"] = body
        if params:
            kwargs["params"] = {k: v for k, v in params.items() if v is not None}
        url = self.base_url + self.prefix + path
        try:
            answer = httpx.request(method, url, **kwargs)
        except httpx.HTTPError as exc:
            raise CliError(f"cannot reach {self.base_url}: {exc}") from None
        if answer.status_code >= 400:
            try:
                error = answer.json()["error"]
                code, message = str(error["code"]), str(error.get("message", ""))
            except (ValueError, KeyError, TypeError):
                code, message = "http_error", answer.text[:300]
            raise CliError(f"{answer.status_code} {code}: {message}", answer.status_code, code)
        if not answer.content:
            return {}
        return answer.json()

    def all_pages(self, path: str, name: str, params: dict[str, Any] | None = None) -> Any:
        """`{name: [...]}`: a list the API answers page by page by size (`nextCursor`),
        whole."""
        found: list[Any] = []
        cursor = None
        while True:
            page = self.request("GET", path, params={**(params or {}), "cursor": cursor})
            found += page.get(name, [])
            cursor = page.get("nextCursor")
            if not cursor:
                return {name: found}

    def run(self, run_id: str) -> Any:
        """GetRun with every step: a run whose steps do not fit one answer is read page by
        page (`stepsCursor`)."""
        path = f"/runs/{segment(run_id)}"
        run = self.request("GET", path)
        following = run.pop("nextStepsCursor", None)
        while following:
            page = self.request("GET", path, params={"stepsCursor": following})
            run["steps"] = [*run.get("steps", []), *page.get("steps", [])]
            following = page.get("nextStepsCursor")
        return run


def parse_json(text: str, flag: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise CliError(f"{flag}: not valid JSON ({exc})") from None


def csv(text: str | None) -> list[str] | None:
    if text is None:
        return None
    return [part.strip() for part in text.split(",") if part.strip()]


def shown(value: Any) -> str:
    """A value as the CLI prints it: a string as it is, anything else in JSON's spelling
    (`true`, `null`, `1.5`, `{"a":1}`), never Python's (`True`, `None`)."""
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _cell(value: Any) -> str:
    """A table cell: `-` when there is no value."""
    return "-" if value is None else shown(value)


def table(rows: Sequence[dict[str, Any]], columns: Sequence[str], out: Any = None) -> None:
    """Rows as an aligned text table with a header."""
    out = out or sys.stdout
    cells = [[_cell(r.get(c)) for c in columns] for r in rows]
    widths = [max([len(c.upper())] + [len(row[i]) for row in cells]) for i, c in enumerate(columns)]
    print(
        "  ".join(c.upper().ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip(),
        file=out,
    )
    for row in cells:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip(), file=out)
    if not rows:
        print("(none)", file=out)


def record(item: dict[str, Any], fields: Sequence[str] | None = None, out: Any = None) -> None:
    """One resource as `field: value` lines."""
    out = out or sys.stdout
    keys = list(fields) if fields else list(item)
    width = max((len(k) for k in keys), default=0)
    for key in keys:
        if key in item:
            print(f"{key.ljust(width)}  {shown(item[key])}", file=out)


def emit(args: argparse.Namespace, data: Any, human: Callable[[Any], None]) -> int:
    """Print `data` as JSON (`--json`) or through `human`; answers exit code 0."""
    if getattr(args, "json", False):
        print(json.dumps(data, indent=2, ensure_ascii=False))
    else:
        human(data)
    return 0


def guarded(func: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Report a `CliError` on stderr with exit code 1: a line for people, or with `--json`
    the API's error shape (`{"error": {"code", "message", "status"?}}`) for scripts."""

    def run(args: argparse.Namespace) -> int:
        try:
            return func(args)
        except CliError as exc:
            report_error(args, exc)
            return 1

    return run


def report_error(args: argparse.Namespace, exc: CliError) -> None:
    """Print `exc` on stderr as `guarded` does."""
    if not getattr(args, "json", False):
        print(f"error: {exc.message}", file=sys.stderr)
        return
    error: dict[str, Any] = {"code": exc.code or "error", "message": exc.message}
    if exc.status is not None:
        error["status"] = exc.status
    print(json.dumps({"error": error}), file=sys.stderr)


def tables_parent(older_than_help: str) -> argparse.ArgumentParser:
    """A parent parser for operator commands over the engine's tables: `--project-id`,
    `--older-than SECONDS` (default 300), `--stack` and `--json`."""
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument("--project-id", help="one project (a query, not a table scan)")
    parent.add_argument(
        "--older-than", type=float, default=300.0, metavar="SECONDS", help=older_than_help
    )
    parent.add_argument("--stack", help="read table names from this CloudFormation stack")
    parent.add_argument("--json", action="store_true", help="JSON for scripts")
    return parent


def add_yes(parser: argparse.ArgumentParser, verb: str) -> None:
    """`--yes`: the operator command acts (`verb`); without it, it only lists (a dry run)."""
    parser.add_argument("--yes", action="store_true", help=f"{verb} (without: list only)")


def operator_command(
    name: str,
) -> Callable[[Callable[[argparse.Namespace], int]], Callable[[argparse.Namespace], int]]:
    """An `ezgh ops NAME` command: any failure is one line on stderr and exit code 2 (an
    operator command says what failed, not a stack trace)."""

    def wrap(func: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
        @functools.wraps(func)
        def run(args: argparse.Namespace) -> int:
            try:
                return func(args)
            except Exception as exc:
                print(f"ezgh ops {name}: {exc}", file=sys.stderr)
                return 2

        return run

    return wrap


# Operator commands read the tables directly; they need no API, but settings want a URL.
_NO_API_URL = "http://ezgh-ops.invalid"


def configure_stack(stack: str | None) -> None:
    """Point the engine's settings at a deployed stack's resources (`--stack NAME`), or at
    the environment's when no stack is named."""
    from ezgh_engine import config

    if stack:
        from ezgh_engine.cli.bootstrap import engine_env, stack_outputs

        os.environ.update(engine_env(stack_outputs(stack)))
    os.environ.setdefault(config.ENV_API_URL, _NO_API_URL)
    config.reset_settings()
