"""The emulator remembers what moto's server found per request (`emulator.quicker_dispatch`):
the backend of each host and each handler class's method names answer as moto's own."""

from __future__ import annotations

import inspect

from ezgh_engine.local import emulator as emulator_module
from ezgh_engine.local.emulator import Emulator
from moto.core import responses
from moto.dynamodb.responses import DynamoHandler
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
from moto.sqs.responses import SQSResponse


def test_method_names_are_inspects_and_the_callers_own(emulator: Emulator) -> None:
    assert emulator.endpoint_url  # started: the patches are installed
    assert responses.method_names_from_class.__module__ == emulator_module.__name__
    for handler in (DynamoHandler, SQSResponse):
        expected = [name for name, _ in inspect.getmembers(handler, inspect.isfunction)]
        names = responses.method_names_from_class(handler)
        assert names == expected
        names.clear()  # the caller's copy
        assert responses.method_names_from_class(handler) == expected


def test_each_host_is_served_by_the_backend_moto_finds(emulator: Emulator) -> None:
    assert emulator.endpoint_url
    dispatcher = DomainDispatcherApplication(create_backend_app)
    hosts = {
        "dynamodb.us-east-1.amazonaws.com": "dynamodb",
        "sqs.us-east-1.amazonaws.com": "sqs",
        "s3.us-east-1.amazonaws.com": "s3",
        "moto_api": "moto_api",
        "dynamodb": "dynamodb",
    }
    for _ in range(2):  # found, then remembered
        for host, backend in hosts.items():
            assert dispatcher.get_backend_for_host(host) == backend
    assert dispatcher.get_backend_for_host(None) is None
    assert dispatcher.get_backend_for_host("nothing.example.invalid") is None
