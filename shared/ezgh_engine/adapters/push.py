"""Signed HTTPS calls from the engine to push apps (docs/protocol.md section 1)."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import hmac
import ipaddress
import json
import os
import re
import socket
import ssl
import threading
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx

from ezgh_engine import clock
from ezgh_engine.config import settings
from ezgh_engine.core import tokens, validation
from ezgh_engine.core.models import App
from ezgh_engine.core.queues import redacted_url
from ezgh_engine.core.sizes import LAMBDA_PAYLOAD_BYTES
from ezgh_engine.errors import EngineError, ValidationError
from ezgh_engine.protocol import PROTOCOL_VERSION

SYNC_TIMEOUT_SECONDS = 30.0
# A protocol version as an app says it (`"1.5"`).
VERSION_RE = re.compile(r"^[0-9]{1,4}(\.[0-9]{1,4}){0,3}$")


class AppUnreachable(EngineError):
    """The app could not be reached or did not answer as the protocol says (retryable)."""

    status, code = 502, "app_unreachable"
    retryable = True


class RequestTooLarge(AppUnreachable):
    """The app refused the request as too large (HTTP 413: a Lambda function URL's 6 MB, a
    proxy's body limit). The same request is refused again: no retry helps."""


@dataclass(frozen=True)
class Synced:
    """A push app's sync answer: the workflows it hosts, and the newest protocol version it
    speaks (None when it said none)."""

    workflows: list[str]
    protocol: str | None


class AppNotReached(AppUnreachable):
    """The request never reached the app: no URL, a target the engine refused, or no
    connection made (refused, not resolved, TLS refused, not in time). Whatever the app
    would have run (a step's body) surely did not run."""


class AppTimedOut(AppUnreachable):
    """The app took the invocation but did not answer within the invoke timeout: it may
    still be running it (a step's body included)."""


# --- request signatures (docs/protocol.md section 1) -----------------------------------------

TIMESTAMP_HEADER = "X-Ezgh-Timestamp"
SIGNATURE_HEADER = "X-Ezgh-Signature"
INVOCATION_HEADER = "X-Ezgh-Invocation"


def sign(signing_key: str, timestamp: int, body: bytes) -> str:
    """The first form, `v1=<hex HMAC("<timestamp>.<body>")>`: still sent next to `v2` so apps
    on SDKs before protocol 1.4 keep working (they verify only this one)."""
    mac = hmac.new(signing_key.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return "v1=" + mac.hexdigest()


def sign_v2(
    signing_key: str, timestamp: int, method: str, path: str, invocation: str, body: bytes
) -> str:
    """`v2=<hex HMAC("v2\\n<timestamp>\\n<METHOD>\\n<path>\\n<invocation>\\n<body>")>`
    (protocol 1.4): the request's method and path, and the invocation it delivers
    (`<invocationId>/<epoch>`, empty for a sync), are covered, so a captured request can be
    replayed only as itself: to the same path, repeating an invocation the engine then
    refuses (its epoch is over, or it answered)."""
    message = f"v2\n{timestamp}\n{method.upper()}\n{path}\n{invocation}\n".encode() + body
    return "v2=" + hmac.new(signing_key.encode(), message, hashlib.sha256).hexdigest()


def request_path(url: str) -> str:
    """The path an app sees for `url` (without the query): what `sign_v2` covers."""
    return urlsplit(url).path or "/"


def invocation_of(body: dict[str, Any]) -> str:
    """`<invocationId>/<epoch>` of an invoke request (the epoch read from its own token), or
    "" for a sync."""
    invocation_id = body.get("invocationId")
    if body.get("type") != "invoke" or not isinstance(invocation_id, str):
        return ""
    token = str((body.get("api") or {}).get("token") or "")
    try:
        epoch = str(tokens.verify(settings().token_secret, token, 0).epoch)
    except EngineError:  # not one of ours: signed as it is, the app need not read it
        epoch = "-"
    return f"{invocation_id}/{epoch}"


def signed_headers(signing_key: str, url: str, raw: bytes, invocation: str) -> dict[str, str]:
    """The headers of a signed POST to a push app: both signature forms, one header."""
    timestamp = clock.wall_seconds()
    v2 = sign_v2(signing_key, timestamp, "POST", request_path(url), invocation, raw)
    headers = {
        TIMESTAMP_HEADER: str(timestamp),
        SIGNATURE_HEADER: f"{sign(signing_key, timestamp, raw)},{v2}",
    }
    if invocation:
        headers[INVOCATION_HEADER] = invocation
    return headers


# --- the address guard (SSRF) ---------------------------------------------------------------

Resolver = Callable[[str, int], list[str]]

# What `ezgh dev` may call besides public addresses: its own machine and private networks.
_LOCAL_NETWORKS = tuple(
    ipaddress.ip_network(n)
    for n in ("127.0.0.0/8", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "::1/128", "fc00::/7")
)
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
# The cloud's own services inside a VPC, refused even under `ezgh dev` (as link-local is):
# AWS's IPv6 instance metadata (fd00:ec2::254), DNS resolver (::253) and time service
# (::123) sit in this block of the private range fc00::/7 that `ezgh dev` otherwise allows.
_CLOUD_SERVICES = (ipaddress.ip_network("fd00:ec2::/32"),)
# Special-purpose blocks (IANA registries) that some Python versions count as global.
_NOT_GLOBAL = tuple(
    ipaddress.ip_network(n)
    for n in (
        "0.0.0.0/8",
        "100.64.0.0/10",
        "192.0.0.0/24",
        "192.0.2.0/24",
        "198.18.0.0/15",
        "198.51.100.0/24",
        "203.0.113.0/24",
        "240.0.0.0/4",
        "100::/64",
        "2001::/23",
        "2001:db8::/32",
        "64:ff9b:1::/48",
        "fec0::/10",
    )
)


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses an IPv6 address carries (mapped, 6to4, Teredo, NAT64, compatible):
    a packet to it may end up there."""
    found = [ip.ipv4_mapped, ip.sixtofour, *(ip.teredo or ())]
    if ip in _NAT64 or (int(ip) >> 32 == 0 and int(ip) > 1):  # not :: or ::1 themselves
        found.append(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
    return [a for a in found if a is not None]


def _one_allowed(ip: ipaddress.IPv4Address | ipaddress.IPv6Address, allow_local: bool) -> bool:
    if ip.is_multicast or ip.is_unspecified:
        return False
    if any(ip in net for net in _CLOUD_SERVICES if ip.version == net.version):
        return False
    special = any(ip in net for net in _NOT_GLOBAL if ip.version == net.version)
    if ip.is_global and not special:
        return True
    return allow_local and any(ip in net for net in _LOCAL_NETWORKS if ip.version == net.version)


def address_allowed(address: str, *, allow_local: bool = False) -> bool:
    """Whether the engine may connect to `address` (pure). Deployed: only global unicast
    addresses (not private, shared 100.64/10, loopback, link-local, reserved or multicast),
    judged on every IPv4 address an IPv6 one carries too. `ezgh dev` (`allow_local`) also
    allows loopback and the private networks, never link-local or the cloud's own service
    addresses (`_CLOUD_SERVICES`: the metadata service over IPv6)."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.scope_id:  # a zoned address names a link: link-local by definition
            return False
        ip = ipaddress.IPv6Address(int(ip))
        candidates: list[ipaddress.IPv4Address | ipaddress.IPv6Address] = [ip]
        candidates += _embedded_ipv4(ip)
        if ip.ipv4_mapped is not None:  # ::ffff:a.b.c.d is a.b.c.d itself
            candidates = [ip.ipv4_mapped]
        return all(_one_allowed(c, allow_local) for c in candidates)
    return _one_allowed(ip, allow_local)


def _system_resolver(host: str, port: int) -> list[str]:
    infos = socket.getaddrinfo(host, port, proto=socket.IPPROTO_TCP)
    return [str(info[4][0]) for info in infos]


def _check_host_name(host: str) -> str:
    """The host as DNS sees it (IDNA), or `ValidationError` for a name DNS cannot carry (a
    label over 63 characters, a name over 253, an empty label)."""
    with contextlib.suppress(ValueError):
        return str(ipaddress.ip_address(host))
    try:
        ascii_host = host.encode("idna").decode("ascii")
    except UnicodeError:
        raise ValidationError("url's host is not a valid DNS name") from None
    labels = ascii_host.rstrip(".").split(".")
    if len(ascii_host) > 253 or not all(1 <= len(label) <= 63 for label in labels):
        raise ValidationError("url's host is not a valid DNS name")
    return ascii_host


@dataclass(frozen=True)
class Target:
    """A checked URL and the one address its request connects to."""

    url: str
    host: str
    address: str


def check_target(
    url: str, *, allow_loopback: bool | None = None, resolver: Resolver | None = None
) -> Target:
    """Check a URL the engine is about to call (or store) and pick the address to connect to.

    Refused (`ValidationError`): not http(s); http outside `ezgh dev`; a host DNS cannot carry
    or that does not resolve (fail closed); any resolved address that `address_allowed`
    refuses."""
    allow = settings().allow_loopback_apps if allow_loopback is None else allow_loopback
    parts = urlsplit(url)
    try:
        hostname, port = parts.hostname, parts.port
    except ValueError:
        raise ValidationError("url must be an absolute https URL") from None
    if parts.scheme not in ("https", "http") or not hostname:
        raise ValidationError("url must be an absolute https URL")
    if parts.scheme == "http" and not allow:
        raise ValidationError("url must use https")
    host = _check_host_name(hostname)
    try:
        addresses = (resolver or _system_resolver)(host, port or 443)
    except (OSError, UnicodeError):
        raise ValidationError(f"url's host {host} does not resolve") from None
    if not addresses:
        raise ValidationError(f"url's host {host} does not resolve")
    if not all(address_allowed(a, allow_local=allow) for a in addresses):
        raise ValidationError(
            "url must not point at a link-local or metadata address"
            if allow
            else "url must point at a public address (not loopback, private, shared, "
            "link-local or reserved)"
        )
    return Target(url, hostname, addresses[0])


def check_app_url(url: str, *, allow_loopback: bool | None = None) -> str:
    """`check_target`, answering the URL (for storing it)."""
    return check_target(url, allow_loopback=allow_loopback).url


# --- pinned requests -----------------------------------------------------------------------


def network_transport() -> httpx.BaseTransport:
    """The transport that reaches the network (tests put a mock one in its place)."""
    return httpx.HTTPTransport(
        verify=_tls_context(os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))
    )


@functools.lru_cache(maxsize=4)
def _tls_context(cafile: str | None, capath: str | None) -> ssl.SSLContext:
    """httpx's default TLS context (same CAs, same settings), made once per CA setting
    (the arguments: the variables httpx reads). Making one loads the CA bundle, about
    25 ms of CPU, which every push (one per invocation) paid."""
    return httpx.create_ssl_context()


class PinnedTransport(httpx.BaseTransport):
    """Connects to one checked address whatever DNS says now: the URL's host stays in the Host
    header and in TLS (SNI and certificate checks), so a name cannot be re-pointed at a
    forbidden address between the check and the connection."""

    def __init__(self, address: str, inner: httpx.BaseTransport) -> None:
        self._address = address
        self._inner = inner

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        """Send `request` to the pinned address."""
        host = request.url.host
        request.url = request.url.copy_with(host=self._address)
        request.extensions = {**request.extensions, "sni_hostname": host}
        return self._inner.handle_request(request)

    def close(self) -> None:
        """Close the network transport."""
        self._inner.close()


def pinned_request(target: Target, method: str, *, timeout: float, **kwargs: Any) -> httpx.Response:
    """A request to a checked target's pinned address (the URL's host stays in the Host
    header, SNI and certificate checks); redirects are never followed. `kwargs` are
    httpx's (`headers`, `content`, `json`)."""
    transport = PinnedTransport(target.address, network_transport())
    with httpx.Client(transport=transport, timeout=timeout, follow_redirects=False) as client:
        return client.request(method, target.url, **kwargs)


class AnswerTooLarge(httpx.HTTPError):
    """The target answered a body over the cap (`pinned_post`): read no further."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"the answer is over {limit} bytes")
        self.limit = limit


# Content encodings `pinned_post` asks for and reads, each through a bounded decoder.
_ZLIB_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}


def pinned_post(
    target: Target,
    *,
    content: bytes,
    headers: dict[str, str],
    timeout: float,
    max_answer_bytes: int = LAMBDA_PAYLOAD_BYTES,
) -> httpx.Response:
    """POST to a checked target's pinned address; redirects are never followed. The answer's
    body is read as it arrives, at most `max_answer_bytes` (Lambda's 6 MB by default: no
    answer of the protocol is larger) on the wire and decoded, so a hostile target cannot
    make the engine buffer more: `AnswerTooLarge` past it."""
    transport = PinnedTransport(target.address, network_transport())
    sent = {**headers, "Accept-Encoding": ", ".join(_ZLIB_WBITS)}
    with (
        httpx.Client(transport=transport, timeout=timeout, follow_redirects=False) as client,
        client.stream("POST", target.url, content=content, headers=sent) as answer,
    ):
        declared = answer.headers.get("Content-Length", "")
        if declared.isdigit() and int(declared) > max_answer_bytes:
            raise AnswerTooLarge(max_answer_bytes)
        body = _read_capped(answer, max_answer_bytes)
    kept = [(k, v) for k, v in answer.headers.items() if k.lower() not in _BODY_HEADERS]
    return httpx.Response(answer.status_code, headers=kept, content=body, request=answer.request)


_BODY_HEADERS = ("content-encoding", "content-length", "transfer-encoding")


def _read_capped(answer: httpx.Response, limit: int) -> bytes:
    """The answer's body, decoded, or `AnswerTooLarge` once it is over `limit` bytes (on
    the wire or decoded: a small compressed body may expand without bound)."""
    encoding = answer.headers.get("Content-Encoding", "identity").strip().lower()
    if encoding not in ("", "identity") and encoding not in _ZLIB_WBITS:
        raise httpx.DecodingError(f"the answer's Content-Encoding {encoding[:40]!r} is not read")
    decoder = zlib.decompressobj(_ZLIB_WBITS[encoding]) if encoding in _ZLIB_WBITS else None
    chunks: Iterable[bytes] = answer.iter_raw()
    if answer.is_stream_consumed:  # a transport answering from memory (a test's mock)
        chunks, decoder = [answer.content], None  # read and decoded already
    body = bytearray()
    wire = 0
    for chunk in chunks:
        wire += len(chunk)
        try:
            body += decoder.decompress(chunk, limit + 1 - len(body)) if decoder else chunk
        except zlib.error:
            raise httpx.DecodingError("the answer's body does not decode") from None
        if wire > limit or len(body) > limit:
            raise AnswerTooLarge(limit)
    return bytes(body)


def _post(app: App, body: dict[str, Any], timeout: float) -> dict[str, Any]:
    if not app.url:
        raise AppNotReached(f"app {app.name} has no URL")
    # What a failure names of the URL: its scheme and host. Its path and query string may
    # hold a secret (`?code=...`), and these messages are logged and shown to run readers.
    shown = redacted_url(app.url)
    try:
        target = check_target(app.url)
    except ValidationError as exc:
        raise AppNotReached(f"app {app.name} at {shown}: {exc.message}") from None
    raw = json.dumps(body, separators=(",", ":")).encode()
    headers = {
        "Content-Type": "application/json",
        **signed_headers(app.signing_key, app.url, raw, invocation_of(body)),
        "User-Agent": "ezgh-engine",
        **trace_headers(body),
    }
    try:
        answer = pinned_post(target, content=raw, headers=headers, timeout=timeout)
    except AnswerTooLarge as exc:
        # The contract's `payload_too_large`: no answer is larger than Lambda's 6 MB.
        raise AppUnreachable(
            f"app {app.name} at {shown} answered more than {exc.limit} bytes "
            "(payload_too_large: an answer must fit in Lambda's 6 MB); it was not read"
        ) from None
    except httpx.ReadTimeout:
        raise AppTimedOut(
            f"app {app.name} at {shown} did not answer within {timeout:g} s"
        ) from None
    except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
        raise AppNotReached(
            f"could not reach app {app.name} at {shown}: {type(exc).__name__}"
        ) from None
    except httpx.HTTPError as exc:
        raise AppUnreachable(
            f"could not reach app {app.name} at {shown}: {type(exc).__name__}"
        ) from None
    if answer.status_code == 413:
        raise RequestTooLarge(
            f"app {app.name} at {app.url} refused a request of {len(raw)} bytes as too large"
        )
    if answer.status_code != 200:
        # The status only: the body is the target's, and an API error must not reflect it.
        raise AppUnreachable(f"app {app.name} at {shown} answered HTTP {answer.status_code}")
    try:
        data = _parsed(answer)
    except (ValueError, RecursionError):
        raise AppUnreachable(
            f"app {app.name} at {shown} answered a body that is not JSON"
        ) from None
    if not isinstance(data, dict):
        raise AppUnreachable(f"app {app.name} at {shown} answered a body that is not an object")
    return data


# One invoker environment makes several pushes at once (service/invocation_queue.py): a
# large answer is parsed while no other is, so ten of them never need ten parses' memory at
# the same moment (a 6 MB body of small values takes about 65 MB parsed).
LARGE_ANSWER_BYTES = 1024 * 1024
_large_parse = threading.Lock()


def _parsed(answer: httpx.Response) -> Any:
    if len(answer.content) <= LARGE_ANSWER_BYTES:
        return answer.json()
    with _large_parse:
        return answer.json()


def sync_app(app: App) -> Synced:
    """Ask a push app which workflows it hosts, and which protocol it speaks. The names are
    held to the rules a pull app's workers are (`validation.check_app_workflows`): an
    answer that breaks them is `AppUnreachable` naming `workflows`, before anything is
    written."""
    data = _post(app, {"protocol": PROTOCOL_VERSION, "type": "sync"}, SYNC_TIMEOUT_SECONDS)
    workflows = data.get("workflows")
    if not isinstance(workflows, list):
        raise AppUnreachable(f"app {app.name} answered sync without a workflows list")
    given = [w.get("name") if isinstance(w, dict) else w for w in workflows]
    if not all(isinstance(n, str) and n for n in given):
        raise AppUnreachable(f"app {app.name} answered sync with a malformed workflows list")
    names = list(dict.fromkeys(str(n) for n in given))
    try:
        validation.check_app_workflows(names)
    except ValidationError as exc:
        raise AppUnreachable(f"app {app.name} answered sync with {exc.message}") from None
    said = data.get("protocol")
    return Synced(names, said if isinstance(said, str) and VERSION_RE.match(said) else None)


def trace_headers(body: dict[str, Any]) -> dict[str, str]:
    """An invoke request's trace context (its `trace` field) as the HTTP headers tracing
    libraries read (W3C `traceparent`, X-Ray's `X-Amzn-Trace-Id`): an app's instrumented
    server joins the run's trace without reading the body."""
    trace = body.get("trace")
    if not isinstance(trace, dict):
        return {}
    names = {"traceparent": "traceparent", "xrayTraceHeader": "X-Amzn-Trace-Id"}
    return {header: str(trace[key]) for key, header in names.items() if trace.get(key)}


def invoke_app(app: App, request: dict[str, Any]) -> dict[str, Any]:
    """Deliver one invocation and answer the app's outcome body."""
    return _post(app, request, settings().invoke_timeout_seconds)
