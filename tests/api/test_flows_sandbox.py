"""The sandbox (a flow's user-directed code) and the flows function's door, in process.

- `http.request` connects to the address its URL's check resolved: a resolver that answers
  a checked address first and a forbidden one after (DNS rebinding) never gets the request
  to the second; the URL's name stays in the Host header and TLS's SNI.
- Under `ezgh dev` (loopback allowed) a flow's request still never reaches the emulator's
  own endpoints, which answer without credentials.
- JMESPath bombs stop at their limit, fast and small, naming it.
- The flows function answers 401 to anything but a POST carrying the engine's signature,
  before it reads the token secret.

Names resolve through stubs only (`.invalid` hosts): no traffic leaves loopback.
"""

from __future__ import annotations

import threading
import tracemalloc
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from ezgh_engine import config
from ezgh_engine.adapters import push
from ezgh_engine.interpreter import usercode

PUBLIC = "93.184.215.14"  # what the stub says first for a deployed engine (never reached)


class Resolver:
    """Answers `first` at the first lookup and `then` at every later one (a rebinding)."""

    def __init__(self, first: str, then: str) -> None:
        self.answers = [first, then]
        self.lookups = 0

    def __call__(self, host: str, port: int) -> list[str]:
        self.lookups += 1
        return [self.answers[min(self.lookups - 1, 1)]]


@pytest.fixture
def loopback_server() -> Iterator[tuple[int, list[dict[str, str]]]]:
    seen: list[dict[str, str]] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            return None

        def do_GET(self) -> None:
            seen.append(dict(self.headers))
            body = b'{"ok": true}'
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1], seen
    server.shutdown()
    server.server_close()


def _http(url: str) -> dict[str, Any]:
    return usercode.run(
        {
            "op": "http",
            "config": {"url": url},
            "scope": {"input": None, "in": {}, "trackingId": "t"},
            "trackingId": "t",
            "idempotencyKey": "k",
        }
    )


def test_a_rebinding_name_is_connected_to_at_the_checked_loopback_address(
    monkeypatch: pytest.MonkeyPatch, loopback_server: tuple[int, list[dict[str, str]]]
) -> None:
    """`ezgh dev`: the check sees 127.0.0.1 (allowed there); a second lookup would say the
    metadata address. The request reaches the checked address, named as the URL names it."""
    port, seen = loopback_server
    resolver = Resolver("127.0.0.1", "169.254.169.254")
    monkeypatch.setattr(push, "_system_resolver", resolver)
    monkeypatch.setattr(push, "network_transport", lambda: httpx.HTTPTransport())
    monkeypatch.setenv(config.ENV_ALLOW_LOOPBACK, "1")
    answer = _http(f"http://rebind.invalid:{port}/x")
    assert answer == {
        "ok": {"status": 200, "headers": answer["ok"]["headers"], "body": {"ok": True}}
    }
    assert resolver.lookups == 1
    assert seen[0]["Host"] == f"rebind.invalid:{port}"


def test_a_deployed_request_goes_to_the_global_address_its_check_saw(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Deployed: the check sees a global address; the stub would answer 127.0.0.1 after.
    The connection is made to the checked address, with the name for Host, SNI and the
    certificate (a recording transport stands for the network: nothing is sent)."""
    resolver = Resolver(PUBLIC, "127.0.0.1")
    connected: list[httpx.Request] = []

    class Recording(httpx.BaseTransport):
        def handle_request(self, request: httpx.Request) -> httpx.Response:
            connected.append(request)
            return httpx.Response(200, json={"pinned": True})

    monkeypatch.setattr(push, "_system_resolver", resolver)
    monkeypatch.setattr(push, "network_transport", Recording)
    monkeypatch.delenv(config.ENV_ALLOW_LOOPBACK, raising=False)
    answer = _http("https://rebind.invalid/hook")
    assert answer["ok"]["body"] == {"pinned": True}
    (request,) = connected
    assert request.url.host == PUBLIC and resolver.lookups == 1
    assert request.headers["host"] == "rebind.invalid"
    assert request.extensions["sni_hostname"] == "rebind.invalid"


def test_a_name_resolving_to_metadata_or_loopback_is_refused_deployed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(config.ENV_ALLOW_LOOPBACK, raising=False)
    for address in ("169.254.169.254", "127.0.0.1", "10.0.0.1"):
        monkeypatch.setattr(push, "_system_resolver", Resolver(address, address))
        answer = _http("https://rebind.invalid/hook")
        assert answer["error"]["kind"] == "module", answer
        assert "public address" in answer["error"]["message"]


def test_under_ezgh_dev_a_flow_never_reaches_the_emulators_endpoints(
    monkeypatch: pytest.MonkeyPatch, loopback_server: tuple[int, list[dict[str, str]]]
) -> None:
    port, seen = loopback_server
    monkeypatch.setenv(config.ENV_ALLOW_LOOPBACK, "1")
    monkeypatch.setenv("AWS_ENDPOINT_URL_DYNAMODB", f"http://127.0.0.1:{port}")
    monkeypatch.setattr(push, "_system_resolver", Resolver("127.0.0.1", "127.0.0.1"))
    answer = _http(f"http://moto.invalid:{port}/")
    assert answer["error"]["kind"] == "module" and "the engine itself" in answer["error"]["message"]
    assert seen == []


def test_the_21_stage_bomb_stops_fast_and_small_naming_its_limit() -> None:
    """375 bytes of transform over a small input: refused at the size limit, in a few
    kilobytes of memory (it built 12.5 MB of JSON and a ~400 MB spike before)."""
    expression = "input" + " | [@, @]" * 21
    tracemalloc.start()
    try:
        answer = usercode.run(
            {
                "op": "pure",
                "node": {
                    "id": "boom",
                    "moduleType": "transform",
                    "config": {"expression": expression},
                },
                "scope": {"input": {"a": "x" * 300}, "in": {}, "trackingId": "t"},
            }
        )
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert answer["error"]["kind"] == "module"
    assert "4194304 bytes as JSON (the limit)" in answer["error"]["message"]
    assert peak < 5 * 1024 * 1024, peak


def test_a_long_evaluation_stops_at_its_step_limit() -> None:
    """Small values, many steps (each element of a projection visits its expression)."""
    answer = usercode.run(
        {
            "op": "pure",
            "node": {"id": "slow", "moduleType": "transform",
                     "config": {"expression": "input[*].to_string(@)"}},
            "scope": {"input": list(range(200_000)), "in": {}, "trackingId": "t"},
        }
    )  # fmt: skip
    assert answer["error"]["kind"] == "module"
    assert "more than 250000 steps (the limit)" in answer["error"]["message"], answer


def test_the_flows_function_refuses_unsigned_requests_before_any_work(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from functions.flows import handler as flows

    monkeypatch.setattr(flows, "signing_key", lambda: pytest.fail("the secret was read"))
    monkeypatch.setattr(flows.ezgh_flows, "signing_key", None)
    for method, headers in (
        ("GET", {}),
        ("POST", {}),
        ("POST", {"x-ezgh-timestamp": "1"}),
        ("PUT", {"x-ezgh-timestamp": "1", "x-ezgh-signature": "v1=00"}),
    ):
        event = {
            "version": "2.0",
            "rawPath": "/",
            "headers": headers,
            "requestContext": {"http": {"method": method, "path": "/"}},
            "body": '{"type": "sync"}',
        }
        answer = flows.handler(event, None)
        assert answer["statusCode"] == 401, (method, headers, answer)


def test_the_sandbox_gets_none_of_the_engines_variables_locally_either() -> None:
    """`ezgh dev` gives each function the handlers' variables, but a sandboxed one only the
    runtime's `AWS_*` (no credentials: the emulator's open every table), `POWERTOOLS_*` and
    `SANDBOX_ENV` (as the stack does)."""
    from ezgh_engine.local.environments import function_environment
    from ezgh_engine.topology import FLOWS_FUNCTION, SANDBOX_ENV, SANDBOX_FUNCTION

    env = {
        config.ENV_TOKEN_SECRET: "secret",
        "EZGH_REGISTRY_TABLE": "registry",
        config.ENV_ALLOW_LOOPBACK: "1",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "the-emulators",
        "AWS_SECRET_ACCESS_KEY": "the-emulators",
    }
    assert function_environment(FLOWS_FUNCTION, env) == env
    assert function_environment(SANDBOX_FUNCTION, env) == {
        config.ENV_ALLOW_LOOPBACK: "1",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    assert SANDBOX_ENV == (config.ENV_ALLOW_LOOPBACK,)
