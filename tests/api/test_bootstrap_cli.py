"""`ezgh bootstrap`: from a deployed stack's outputs to a working admin key kept in SSM."""

from __future__ import annotations

import os
from collections.abc import Iterator

import boto3
import pytest
from ezgh_engine import topology
from ezgh_engine.cli import bootstrap as cli
from ezgh_engine.cli.main import main

from tests.api.conftest import ENV, Project

pytestmark = pytest.mark.moto_only("a deployed stack's outputs and SSM, not the runs table")

OUTPUTS = {
    **{topology.table_output(t): ENV[t.env_var] for t in topology.TOPOLOGY.tables},
    **{topology.queue_output(q): f"https://sqs.example/{q.key}" for q in topology.TOPOLOGY.queues},
    topology.BUCKET_OUTPUT: ENV["EZGH_PAYLOAD_BUCKET"],
    topology.API_URL_OUTPUT: "https://api.example.test",
    topology.TOKEN_SECRET_OUTPUT: "arn:aws:secretsmanager:us-east-1:123456789012:secret:t",
}


@pytest.fixture(autouse=True)
def _environ_given_back() -> Iterator[None]:
    """`bootstrap` exports the stack's variables into `os.environ`, for the rest of the CLI's
    process; here that process is the test worker's, and a variable it left behind
    (`EZGH_NOTIFICATIONS_QUEUE_URL`, which `aws_env` does not set) made the stream handler
    of a later module's test on that worker send to a queue that did not exist."""
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


def test_bootstrap_keeps_a_working_admin_key_in_ssm(aws_env: None) -> None:
    made = cli.bootstrap("Stack1", read_outputs=lambda stack: OUTPUTS)
    stored = boto3.client("ssm", region_name="us-east-1").get_parameter(
        Name="/ezgh/Stack1/bootstrap-admin-key", WithDecryption=True
    )["Parameter"]
    assert stored["Type"] == "SecureString"
    assert stored["Value"] == made["key"]
    project = Project(made["organizationId"], made["projectId"], made["key"])
    assert project.call("GET", "/apps").status == 200


def test_bootstrap_command_does_not_print_the_key(
    aws_env: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(cli, "stack_outputs", lambda stack: OUTPUTS)
    assert main(["bootstrap", "--stack", "S2"]) == 0
    out = capsys.readouterr().out
    key = boto3.client("ssm", region_name="us-east-1").get_parameter(
        Name="/ezgh/S2/bootstrap-admin-key", WithDecryption=True
    )["Parameter"]["Value"]
    assert key not in out
    assert "EZGH_ORG_ID=" in out and "ssm get-parameter" in out


def test_missing_outputs_are_named(aws_env: None) -> None:
    with pytest.raises(KeyError):
        cli.engine_env({})
