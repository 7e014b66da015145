"""AWS's DynamoDB Local for the tests: start it on a free loopback port, empty it, stop it.

`scripts/test-deps.sh` (run by scripts/test.sh) installs the jar (from the npm package amplify-dynamodb-simulator) into
`.venv/dynamodb-local/emulator`; `EZGH_DYNAMODB_LOCAL_DIR` points elsewhere. It is AWS's own
implementation of the DynamoDB API (on SQLite), so it refuses what DynamoDB refuses and moto
accepts: unused expression placeholders, reserved words, malformed keys.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DIR = ROOT / ".venv" / "dynamodb-local" / "emulator"
REGION = "us-east-1"

# The DynamoDB backends a suite's fixtures are parametrized with: moto, and DynamoDB Local
# under the `ddblocal` marker.
BACKENDS = ["moto", pytest.param("ddblocal", marks=pytest.mark.ddblocal)]


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM when the test process dies (Linux), so a killed
    pytest never leaves a JVM behind."""
    try:
        import ctypes
        import signal

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception:  # another platform: the fixture's teardown still stops it
        pass


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class DynamoDBLocal:
    """One in-memory DynamoDB Local process (`start()`, `url`, `wipe()`, `stop()`)."""

    def __init__(self, directory: Path | None = None) -> None:
        self.directory = Path(os.environ.get("EZGH_DYNAMODB_LOCAL_DIR") or directory or DEFAULT_DIR)
        self.port = 0
        self.url = ""
        self._process: subprocess.Popen[bytes] | None = None
        self._log = ""
        self._clients: dict[str, Any] = {}

    def client(self, service: str = "dynamodb") -> Any:
        """A boto3 client of this instance (any credentials do: it runs with -sharedDb), made
        once per service (boto3 clients are thread-safe; making one, on a new session when
        moto's mock has replaced the default one, took a third of `wipe`)."""
        made = self._clients.get(service)
        if made is None:
            made = self._clients[service] = self._new_client(service)
        return made

    def _new_client(self, service: str) -> Any:
        return boto3.session.Session().client(
            service,  # type: ignore[call-overload]
            endpoint_url=self.url,
            region_name=REGION,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            config=Config(retries={"max_attempts": 1}, connect_timeout=1, read_timeout=30),
        )

    def start(self, timeout: float = 60.0) -> DynamoDBLocal:
        """Start the JVM and return once it answers `ListTables`."""
        jar = self.directory / "DynamoDBLocal.jar"
        java = shutil.which("java")
        if java is None or not jar.is_file():
            raise RuntimeError(
                f"DynamoDB Local is not installed (java: {java}, jar: {jar}); "
                "run `bash scripts/test-deps.sh`"
            )
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._clients.clear()  # of an earlier start, at another port
        log_path = self.directory.parent / f"server-{self.port}.log"
        self._log = str(log_path)
        with open(log_path, "wb") as log:
            self._process = subprocess.Popen(
                [
                    java,
                    # A small heap and the quick JIT tier: a 2-core CI box runs it beside the tests.
                    "-Xms64m",
                    "-Xmx512m",
                    "-XX:+UseSerialGC",
                    # C1 only: a test session is too short for C2's compiles to pay back
                    # (tests/api -m ddblocal: 71 s -> 59 s of CPU, the JVM's included).
                    "-XX:TieredStopAtLevel=1",
                    f"-Djava.library.path={self.directory / 'DynamoDBLocal_lib'}",
                    "-jar",
                    str(jar),
                    "-inMemory",
                    "-sharedDb",  # one database whatever the credentials and region
                    "-disableTelemetry",  # it would otherwise report to AWS
                    "-port",
                    str(self.port),
                ],
                cwd=self.directory,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                preexec_fn=_die_with_parent,
            )
        self._wait_ready(timeout)
        return self

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        ddb = self.client()
        while True:
            if self._process is not None and self._process.poll() is not None:
                raise RuntimeError(f"DynamoDB Local exited; see {self._log}")
            try:
                ddb.list_tables()
                return
            except Exception:
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(
                        f"DynamoDB Local did not answer within {timeout}s; see {self._log}"
                    ) from None
                time.sleep(0.1)

    def wipe(self) -> None:
        """Delete every table (in-memory: immediate), so the next test starts from nothing."""
        ddb = self.client()
        for page in ddb.get_paginator("list_tables").paginate():
            for name in page.get("TableNames", []):
                ddb.delete_table(TableName=name)

    def stop(self) -> None:
        if self._process is None:
            return
        self._process.terminate()
        try:
            self._process.wait(10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait(10)
        self._process = None
