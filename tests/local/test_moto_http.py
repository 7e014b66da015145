"""moto's server keeps connections open (`local.moto_http`): werkzeug's answered every
request with `Connection: close`, so each AWS call of each handler paid a connection, a
server thread and a 10 ms drain. Bodies (sized or chunked) are read whole, so the next
request on the same connection is intact, and HEAD keeps the app's Content-Length."""

from __future__ import annotations

import http.client
import urllib.parse

from ezgh_engine.adapters import aws
from ezgh_engine.local.emulator import Emulator

_SIGNED = "AWS4-HMAC-SHA256 Credential=testing/20260101/us-east-1/{}/aws4_request, " + (
    "SignedHeaders=host, Signature=x"
)


def _connection(emulator: Emulator) -> http.client.HTTPConnection:
    parts = urllib.parse.urlsplit(emulator.endpoint_url)
    assert parts.hostname == "127.0.0.1"
    return http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)


def _list_queues(connection: http.client.HTTPConnection, *, chunked: bool = False) -> bytes:
    body = b"Action=ListQueues&Version=2012-11-05"
    headers = {
        "Content-Type": "application/x-www-form-urlencoded",
        "Authorization": _SIGNED.format("sqs"),
    }
    if chunked:
        connection.request("POST", "/", body=iter([body[:10], body[10:]]), headers=headers)
    else:
        connection.request("POST", "/", body=body, headers=headers)
    answer = connection.getresponse()
    assert answer.status == 200
    assert not answer.will_close  # the server keeps the connection
    return answer.read()


def test_one_connection_serves_request_after_request(emulator: Emulator) -> None:
    emulator.reset()
    aws.client("sqs").create_queue(QueueName="kept")
    connection = _connection(emulator)
    try:
        assert b"/kept<" in _list_queues(connection)
        sock = connection.sock
        assert b"/kept<" in _list_queues(connection, chunked=True)  # a chunked body, whole
        assert b"/kept<" in _list_queues(connection)
        assert connection.sock is sock  # no reconnection in between
    finally:
        connection.close()


def test_head_keeps_the_objects_length(emulator: Emulator) -> None:
    emulator.reset()
    s3 = aws.client("s3")
    s3.create_bucket(Bucket="kept-bucket")
    s3.put_object(Bucket="kept-bucket", Key="k", Body=b"x" * 5000)
    assert s3.head_object(Bucket="kept-bucket", Key="k")["ContentLength"] == 5000
    assert s3.get_object(Bucket="kept-bucket", Key="k")["Body"].read() == b"x" * 5000
