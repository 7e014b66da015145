"""The engine's outgoing-request guard: which addresses it may call, failing closed
when a name does not resolve, and the request pinned to the address it checked.

Nothing here connects anywhere: the decisions are a pure function over addresses, names
resolve through an injected resolver, and requests end in a mock transport.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from ezgh_engine import config
from ezgh_engine.adapters import push
from ezgh_engine.errors import ValidationError

from tests.api.conftest import Project

REFUSED_DEPLOYED = [
    "10.0.0.1",
    "172.16.5.4",
    "192.168.1.1",
    "127.0.0.1",
    "::1",
    "169.254.169.254",  # instance metadata
    "fd00:ec2::254",  # instance metadata over IPv6
    "100.64.0.1",  # shared address space (carrier-grade NAT)
    "100.127.255.254",
    "0.0.0.0",
    "::",
    "224.0.0.1",
    "ff0e::1",  # global-scope multicast
    "192.0.0.8",
    "198.18.0.1",  # benchmarking
    "240.0.0.1",  # reserved
    "255.255.255.255",
    "::ffff:127.0.0.1",  # IPv4-mapped loopback
    "::ffff:169.254.169.254",
    "::127.0.0.1",  # IPv4-compatible
    "2002:a9fe:a9fe::",  # 6to4 of the metadata service
    "2002:7f00:1::",  # 6to4 of loopback
    "2002:0a00:0001::1",  # 6to4 of 10.0.0.1
    "64:ff9b::a9fe:a9fe",  # NAT64 of the metadata service
    "64:ff9b::7f00:1",
    "2001:0:4136:e378:8000:63bf:3fff:fdd2",  # Teredo
    "fe80::1",
    "fe80::1%eth0",  # zoned link-local
    "fe80::1%1",
    "fc00::1",
    "not-an-address",
]
ALLOWED = ["93.184.215.14", "8.8.8.8", "2606:4700::1111", "2a00:1450:4001::200e"]


@pytest.mark.parametrize("address", REFUSED_DEPLOYED)
def test_anything_not_global_is_refused_deployed(address: str) -> None:
    assert not push.address_allowed(address, allow_local=False)


@pytest.mark.parametrize("address", ALLOWED)
def test_global_unicast_addresses_are_allowed(address: str) -> None:
    assert push.address_allowed(address, allow_local=False)
    assert push.address_allowed(address, allow_local=True)


@pytest.mark.parametrize("address", ["127.0.0.1", "127.1.2.3", "::1", "10.0.0.1", "fd00::5"])
def test_ezgh_dev_allows_loopback_and_private(address: str) -> None:
    assert push.address_allowed(address, allow_local=True)


@pytest.mark.parametrize(
    "address",
    [
        "169.254.169.254",
        "fe80::1%eth0",
        "2002:a9fe:a9fe::",
        "::ffff:169.254.169.254",
        "0.0.0.0",
        "224.0.0.1",
        "100.64.0.1",
        "fd00:ec2::254",  # instance metadata over IPv6 (a ULA address: private, not local)
        "fd00:ec2::253",  # the VPC's DNS resolver
        "fd00:ec2::123",  # the time service
    ],
)
def test_ezgh_dev_still_refuses_link_local_metadata_and_the_rest(address: str) -> None:
    assert not push.address_allowed(address, allow_local=True)


def _resolver(*answers: list[str] | Exception) -> Any:
    """A resolver answering each call with the next answer (the last one repeats)."""
    calls: list[str] = []

    def resolve(host: str, port: int) -> list[str]:
        calls.append(host)
        answer = answers[min(len(calls), len(answers)) - 1]
        if isinstance(answer, Exception):
            raise answer
        return answer

    resolve.calls = calls  # type: ignore[attr-defined]
    return resolve


def test_a_name_that_does_not_resolve_is_refused(aws_env: None) -> None:
    with pytest.raises(ValidationError, match="does not resolve"):
        push.check_target("https://app.example.invalid/", resolver=_resolver(OSError("nx")))
    with pytest.raises(ValidationError, match="does not resolve"):
        push.check_target("https://app.example.invalid/", resolver=_resolver([]))


def test_one_forbidden_address_among_several_refuses_the_name(aws_env: None) -> None:
    with pytest.raises(ValidationError):
        push.check_target(
            "https://app.example.invalid/", resolver=_resolver(["93.184.215.14", "10.0.0.7"])
        )


def test_an_unresolvable_app_url_is_refused_at_create(project: Project) -> None:
    # `.invalid` never resolves (RFC 6761); before, such a URL was stored "to check later".
    answer = project.call(
        "POST", "/apps", body={"name": "x", "kind": "push", "url": "https://app.example.invalid/"}
    )
    assert answer.status == 400 and answer.body["error"]["code"] == "validation_error"
    assert "does not resolve" in answer.body["error"]["message"]


def test_a_name_re_pointed_after_the_check_is_not_followed(
    aws_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DNS answers a public address to the check and loopback right after: the request still
    goes to the checked address, with the name in the Host header and in TLS's SNI."""
    sent: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(200, json={})

    monkeypatch.setattr(push, "network_transport", lambda: httpx.MockTransport(handle))
    resolve = _resolver(["93.184.215.14"], ["127.0.0.1"])
    target = push.check_target("https://app.example.invalid:8443/hook?x=1", resolver=resolve)
    answer = push.pinned_post(target, content=b"{}", headers={}, timeout=5)
    assert answer.status_code == 200
    (request,) = sent
    assert request.url.host == "93.184.215.14" and request.url.port == 8443
    assert request.url.raw_path == b"/hook?x=1"
    assert request.headers["host"] == "app.example.invalid:8443"
    assert request.extensions["sni_hostname"] == "app.example.invalid"
    assert resolve.calls == ["app.example.invalid"]  # resolved once, for the check


def test_an_ipv6_address_is_pinned_in_brackets(
    aws_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent: list[httpx.Request] = []
    monkeypatch.setattr(
        push,
        "network_transport",
        lambda: httpx.MockTransport(lambda r: sent.append(r) or httpx.Response(204)),
    )
    target = push.check_target("https://v6.example.invalid/", resolver=_resolver(["2606:4700::1"]))
    push.pinned_post(target, content=b"", headers={}, timeout=5)
    assert sent[0].url.host == "2606:4700::1"
    assert sent[0].headers["host"] == "v6.example.invalid"


def test_ezgh_dev_calls_a_loopback_app_through_the_pinned_transport(
    aws_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real request to a server on 127.0.0.1, named `localhost`: pinned, it still arrives."""
    import http.server
    import threading

    seen: dict[str, str] = {}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            seen["host"] = self.headers["host"]
            self.send_response(200)
            self.send_header("content-length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        monkeypatch.setenv(config.ENV_ALLOW_LOOPBACK, "1")
        config.reset_settings()
        url = f"http://localhost:{server.server_port}/"
        target = push.check_target(url, resolver=_resolver(["127.0.0.1"]))
        # (A real socket: its read timeout is a backstop a loaded machine must not reach.)
        answer = push.pinned_post(target, content=b"{}", headers={}, timeout=60)
        assert answer.status_code == 200
        assert seen["host"] == f"localhost:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_failed_sync_reports_the_status_not_the_body(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        push,
        "network_transport",
        lambda: httpx.MockTransport(
            lambda r: httpx.Response(500, text="internal secret: db-password-hunter2")
        ),
    )
    created = project.call(
        "POST", "/apps", body={"name": "x", "kind": "push", "url": "https://app.example.com/"}
    )
    assert created.status == 201
    answer = project.call("POST", f"/apps/{created.body['id']}/sync")
    assert answer.status == 409
    assert "HTTP 500" in answer.body["error"]["message"]
    assert "hunter2" not in answer.raw


@pytest.mark.parametrize(
    "url",
    [
        "https://100.64.0.1/",
        "https://[2002:a9fe:a9fe::]/",
        "https://[2002:7f00:1::]/",
        "https://[::ffff:169.254.169.254]/",
        "https://[fe80::1%25eth0]/",
        "https://192.0.0.8/",
    ],
)
def test_a_push_app_url_at_a_non_global_address_is_refused_at_create(
    project: Project, url: str
) -> None:
    answer = project.call("POST", "/apps", body={"name": "x", "kind": "push", "url": url})
    assert answer.status == 400 and answer.body["error"]["code"] == "validation_error"


@pytest.mark.parametrize("url", ["http://[fd00:ec2::254]/", "https://[fd00:ec2::254]:443/x"])
def test_ezgh_dev_refuses_the_ipv6_metadata_address_as_a_push_url(
    project: Project, monkeypatch: pytest.MonkeyPatch, url: str
) -> None:
    monkeypatch.setenv(config.ENV_ALLOW_LOOPBACK, "1")  # as under `ezgh dev`
    config.reset_settings()
    answer = project.call("POST", "/apps", body={"name": "x", "kind": "push", "url": url})
    assert answer.status == 400 and answer.body["error"]["code"] == "validation_error"
    assert "metadata" in answer.body["error"]["message"]
    fine = project.call(
        "POST", "/apps", body={"name": "y", "kind": "push", "url": "http://[fd00::5]/"}
    )
    assert fine.status == 201, fine.body  # other private IPv6 addresses stay allowed here


def test_a_failed_call_names_the_apps_host_never_its_path_or_query(
    project: Project, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """An app's URL may carry a secret (`?code=...`): what a failure says, logged and shown
    to whoever reads the run or the app, names its host only."""
    monkeypatch.setattr(
        push, "network_transport", lambda: httpx.MockTransport(lambda r: httpx.Response(503))
    )
    url = "https://app.example.com/hook/PATHSECRET?code=QUERYSECRET"
    created = project.call("POST", "/apps", body={"name": "x", "kind": "push", "url": url})
    assert created.status == 201
    answer = project.call("POST", f"/apps/{created.body['id']}/sync")
    assert answer.status == 409
    assert "https://app.example.com answered HTTP 503" in answer.body["error"]["message"]
    assert "SECRET" not in answer.raw and "SECRET" not in caplog.text
