"""`python -m bench.junk_requests [--seconds S]`: how many junk requests a second one execution
environment of the steps function absorbs (its handler alone, in this process, as Lambda runs
it: one request at a time).

The steps function's URL is public (auth NONE): anyone can invoke it, and each invocation holds
one of its reserved environments until answered. Junk here is what a flood would send: another
path, another method, no token, a forged token, an expired one, each with a 64 KiB body
and with none. No
AWS request is made (the refusals make none; the settings are dummies). Prints one line per
kind: microseconds per request and requests a second per environment; docs/benchmarks.md
("Junk at the function URLs") has the figures and what they mean for 200 reserved
environments.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

SECRET = "bench-token-secret"
ENV = {
    "EZGH_RUNS_TABLE": "runs",
    "EZGH_REGISTRY_TABLE": "registry",
    "EZGH_INVOCATIONS_QUEUE_URL": "https://sqs.invalid/q",
    "EZGH_PAYLOAD_BUCKET": "payloads",
    "EZGH_ENGINE_API_URL": "https://api.invalid",
    "EZGH_TOKEN_SECRET": SECRET,
    "AWS_DEFAULT_REGION": "us-east-1",
    "POWERTOOLS_TRACE_DISABLED": "1",
    "POWERTOOLS_METRICS_DISABLED": "1",
}
# A flood's body: about 64 KiB of well-formed ops (what the resolver would parse and
# validate), or nothing.
BODIES = {
    "64 KiB": '{"ops": [' + ",".join(['{"op": "start", "stepId": "a#1"}'] * 1800) + "]}",
    "empty": "",
}


class _Context:
    function_name = "steps"
    memory_limit_in_mb = 512
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:steps"
    aws_request_id = "bench"


def _event(method: str, path: str, authorization: str | None, body: str) -> dict[str, Any]:
    headers = {"content-type": "application/json"}
    if authorization is not None:
        headers["authorization"] = authorization
    return {
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": path,
        "rawQueryString": "",
        "headers": headers,
        "requestContext": {  # as a function URL gives it
            "accountId": "anonymous",
            "apiId": "bench",
            "domainName": "bench.lambda-url.us-east-1.on.aws",
            "domainPrefix": "bench",
            "http": {
                "method": method,
                "path": path,
                "protocol": "HTTP/1.1",
                "sourceIp": "198.51.100.1",
                "userAgent": "junk",
            },
            "requestId": "bench",
            "routeKey": "$default",
            "stage": "$default",
            "time": "06/Dec/2026:10:00:00 +0000",
            "timeEpoch": 0,
        },
        "body": body,
        "isBase64Encoded": False,
    }


def _expired() -> str:
    from ezgh_engine.core import tokens

    return tokens.mint(SECRET, tokens.InvocationClaims("r", "p", 1, 1, expires_ms=1))


def kinds(body: str) -> dict[str, dict[str, Any]]:
    steps = "/v1/invocations/steps"
    return {
        "another path": _event("GET", "/wp-login.php", None, body),
        "another method": _event("GET", steps, None, body),
        "no token": _event("POST", steps, None, body),
        "forged token": _event("POST", steps, "Bearer eyJyIjoieCJ9.Zm9yZ2Vk", body),
        "expired token": _event("POST", steps, f"Bearer {_expired()}", body),
    }


def measure(seconds: float, body: str) -> dict[str, tuple[int, float]]:
    """Per kind: (status, seconds per request)."""
    os.environ.update(ENV)
    from functions.steps.handler import handler

    figures = {}
    for kind, event in kinds(body).items():
        status = handler(dict(event), _Context())["statusCode"]  # warm
        count, began = 0, time.perf_counter()
        while time.perf_counter() - began < seconds:
            handler(dict(event), _Context())
            count += 1
        figures[kind] = (status, (time.perf_counter() - began) / count)
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.junk_requests", description=__doc__)
    parser.add_argument("--seconds", type=float, default=2.0, help="per kind of junk")
    args = parser.parse_args(argv)
    for name, body in BODIES.items():
        for kind, (status, each) in measure(args.seconds, body).items():
            print(f"{name:7} {kind:15} {status}  {each * 1e6:8.1f} us  {1 / each:9.0f} requests/s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
