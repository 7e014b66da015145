"""`Worker`: runs a pull app's workflows by long-polling its task queue.

A task is the invoke request a push app would get (protocol §1.2) plus ``taskId`` and
``leaseSeconds``. The worker runs it with the same replay driver as `PushApp`, extends the
task's lease while it runs (``POST /v1/invocations/heartbeat``) and posts the outcome
(``POST /v1/invocations/outcome``), both with the invocation's token. A worker that dies
stops heartbeating: when the lease ends the engine hands the task to another worker, and the
dead worker's late step calls are refused. A parallel step's task (a branch task: its
request carries ``branch``) is run, heartbeated and answered the same way; the engine holds
it by the step's own lease instead of the run's.

Waiting for tasks: by default the worker asks the engine for credentials to its app's task
queue (``POST .../tasks/access``) and long-polls the queue itself, so an idle worker costs one
SQS request per 20 s instead of a Lambda function waiting inside ``tasks/poll``.
A task received so is claimed with a first heartbeat (the engine's ``poll`` does the same
check: a superseded, answered or expired task is dropped). An engine that vends no
credentials (409, or 404 from an older engine) is polled through ``tasks/poll`` as before.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Iterable
from typing import Any

import httpx

from . import clock, protocol
from .api import ApiClient, ApiError, segment
from .deployment import detect_deployment_id
from .driver import Invocation
from .errors import UnknownWorkflowError
from .push_app import _index
from .task_queue import QueueAccess, QueueError, TaskQueue
from .threads import run_in_loop_thread
from .transport import TransportFactory, http_transport_factory
from .workflow import Workflow

logger = logging.getLogger("ezgh_workflows")

OUTCOME_PATH = "/v1/invocations/outcome"
HEARTBEAT_PATH = "/v1/invocations/heartbeat"
MAX_POLL_SECONDS = 20
# Answers of `tasks/access` that mean "this engine vends no queue credentials".
NO_DIRECT_ACCESS = {404, 405, 409, 501}


class Worker:
    """Polls pull app ``app_id`` (UUID or slug) and runs its tasks, ``concurrency`` at a time.

    ``api_key``, ``base_url``, ``organization_id`` and ``project_id`` fall back to
    ``EZGH_API_KEY``, ``EZGH_API_URL``, ``EZGH_ORG_ID`` and ``EZGH_PROJECT_ID``. `run` blocks
    until `stop` (or SIGTERM, when `run` is called in the main thread); tasks in progress
    finish first. Several workers, in one process or many, share an app's tasks.
    ``direct_queue=False`` waits for tasks on ``tasks/poll`` even where the engine offers
    direct queue access. ``deployment_id`` names the code being run, as for `PushApp`.
    """

    def __init__(
        self,
        app_id: str,
        workflows: Iterable[Workflow],
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        organization_id: str | None = None,
        project_id: str | None = None,
        worker_id: str | None = None,
        concurrency: int = 4,
        poll_wait_seconds: int = MAX_POLL_SECONDS,
        transport_factory: TransportFactory | None = None,
        direct_queue: bool = True,
        deployment_id: str | None = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.app_id = app_id
        self._workflows = _index(workflows)
        self.poll_wait_seconds = max(0, min(int(poll_wait_seconds), MAX_POLL_SECONDS))
        self._api = ApiClient(
            api_key, organization_id, project_id, base_url, timeout=self.poll_wait_seconds + 30
        )
        self.worker_id = worker_id or f"{socket.gethostname()}-{os.getpid()}-{id(self):x}"
        self.concurrency = concurrency
        self._transport_factory = transport_factory or http_transport_factory
        self._stop = threading.Event()
        self._slots = threading.Semaphore(concurrency)
        self._tasks: set[threading.Thread] = set()
        self._tasks_lock = threading.Lock()
        self._http = httpx.Client(timeout=30.0)
        self.app: dict[str, Any] = {}
        self.direct_queue = direct_queue
        self._queue: TaskQueue | None = None
        # As `PushApp`'s: else EZGH_DEPLOYMENT_ID or the platform's IDs, read per task.
        self.deployment_id = deployment_id

    @property
    def workflows(self) -> list[Workflow]:
        return list(self._workflows.values())

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    # -- lifecycle --------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop polling; `run` returns once the tasks in progress have ended."""
        self._stop.set()

    def run(self) -> None:
        """Announce this worker, then poll and run tasks until `stop` or SIGTERM."""
        previous: Any = None
        in_main = threading.current_thread() is threading.main_thread()
        if in_main:
            previous = signal.signal(signal.SIGTERM, lambda signum, frame: self.stop())
        try:
            self._announce()
            while not self._stop.is_set():
                if not self._slots.acquire(timeout=0.5):
                    continue
                try:
                    task = self._poll()
                except Exception as exc:
                    self._slots.release()
                    logger.warning("worker %s: poll failed: %s", self.worker_id, exc)
                    self._stop.wait(1.0)
                    continue
                if task is None:
                    self._slots.release()
                    continue
                self._start(task)
            self._join()
        finally:
            if in_main:
                signal.signal(signal.SIGTERM, previous)

    def _join(self) -> None:
        while True:
            with self._tasks_lock:
                running = list(self._tasks)
            if not running:
                return
            for thread in running:
                thread.join()

    # -- engine calls -----------------------------------------------------------------------

    def _announce(self) -> None:
        # `protocol`: tasks come in the newest version both sides speak (1.5: references).
        body = {
            "workerId": self.worker_id,
            "workflows": list(self._workflows),
            "protocol": protocol.PROTOCOL_VERSION,
        }
        delay = 0.5
        while not self._stop.is_set():
            try:
                self.app = self._api.request(
                    "POST", f"/apps/{segment(self.app_id)}/workers", json=body
                )
                return
            except ApiError as exc:
                if exc.status < 500 and exc.status != 429:
                    raise
                logger.warning("worker %s: announce failed: %s", self.worker_id, exc)
            except httpx.HTTPError as exc:
                logger.warning("worker %s: announce failed: %s", self.worker_id, exc)
            self._stop.wait(delay)
            delay = min(delay * 2, 10.0)

    def _poll(self) -> dict[str, Any] | None:
        if self.direct_queue:
            queue = self._task_queue()
            if queue is not None:
                return self._receive(queue)
        return self._poll_api()

    def _task_queue(self) -> TaskQueue | None:
        """The app's queue with fresh credentials; None once the engine vends none."""
        if self._queue is not None and self._queue.access.fresh:
            return self._queue
        try:
            answer = self._api.request("POST", f"/apps/{segment(self.app_id)}/tasks/access")
        except ApiError as exc:
            if exc.status not in NO_DIRECT_ACCESS:
                raise
            logger.info(
                "worker %s: no direct queue access (%s); polling the API", self.worker_id, exc
            )
            self.direct_queue = False
            return None
        self._queue = TaskQueue(QueueAccess.from_answer(answer), self._http)
        return self._queue

    def _receive(self, queue: TaskQueue) -> dict[str, Any] | None:
        """One task from the queue, deleted and claimed; None when none came or it was
        stale. The lease, not the message, is the truth: a task lost between delete and
        claim is delivered again when its lease ends."""
        try:
            got = queue.receive(self.poll_wait_seconds)
            if got is None:
                return None
            body, receipt = got
            queue.delete(receipt)
        except QueueError:
            self._queue = None  # expired or revoked credentials, a deleted queue: ask again
            raise
        try:
            task = json.loads(body)
        except ValueError:
            logger.warning("worker %s: dropping a malformed task", self.worker_id)
            return None
        if not isinstance(task, dict) or not task.get("taskId"):
            return None
        return task if self._claim(task) else None

    def _claim(self, task: dict[str, Any]) -> bool:
        """A first heartbeat: 200 while the task's invocation holds a live lease and no other
        receipt of the task claimed it (SQS may deliver a task twice). The claim's name is
        this receipt's: sent again after a lost answer, it still holds."""
        body = {"taskId": task["taskId"], "claim": clock.new_uuid()}
        for delay in (0.2, 1.0, None):
            try:
                status = self._post(task, HEARTBEAT_PATH, body)
            except httpx.HTTPError as exc:
                status = 0
                logger.warning("worker %s: claiming a task failed: %s", self.worker_id, exc)
            if status == 200:
                return True
            if 400 <= status < 500 and status != 429:
                return False  # superseded, answered or expired: someone else has it
            if delay is None:
                return False  # its lease ends unrenewed and the engine delivers it again
            time.sleep(delay)
        return False

    def _poll_api(self) -> dict[str, Any] | None:
        answer = self._api.request(
            "POST",
            f"/apps/{segment(self.app_id)}/tasks/poll",
            json={"waitSeconds": self.poll_wait_seconds, "workerId": self.worker_id},
        )
        return answer if isinstance(answer, dict) and answer.get("taskId") else None

    def _post(self, task: dict[str, Any], path: str, body: dict[str, Any]) -> int:
        api = task.get("api") or {}
        answer = self._http.post(
            str(api.get("url", "")).rstrip("/") + path,
            json=body,
            headers={"Authorization": f"Bearer {api.get('token', '')}"},
        )
        return answer.status_code

    # -- running a task ---------------------------------------------------------------------

    def _start(self, task: dict[str, Any]) -> None:
        run_id = str((task.get("run") or {}).get("id", "?"))
        thread = threading.Thread(
            target=self._handle, args=(task,), name=f"ezgh-task:{run_id}", daemon=True
        )
        with self._tasks_lock:
            self._tasks.add(thread)
        thread.start()

    def _handle(self, task: dict[str, Any]) -> None:
        done = threading.Event()
        beat = threading.Thread(target=self._heartbeat, args=(task, done), daemon=True)
        beat.start()
        try:
            outcome = self._execute(task)
            if outcome is not None:
                self._post_outcome(task, outcome)
        except Exception as exc:
            logger.error("worker %s: task failed in the SDK", self.worker_id, exc_info=exc)
        finally:
            done.set()
            self._slots.release()
            with self._tasks_lock:
                self._tasks.discard(threading.current_thread())

    def _execute(self, task: dict[str, Any]) -> dict[str, Any] | None:
        """The outcome body of the task, by the same driver `PushApp` uses; None when the SDK
        could not run it (the engine delivers it again when the lease ends)."""
        deployment_id = self.deployment_id or detect_deployment_id()
        try:
            request = protocol.parse_invoke(task)
        except protocol.ProtocolError as exc:
            logger.error("worker %s: malformed task: %s", self.worker_id, exc)
            return None
        workflow = self._workflows.get(request.run.workflow)
        if workflow is None:
            error = UnknownWorkflowError(f"this worker has no workflow {request.run.workflow!r}")
            return protocol.failed(error.to_body(), deployment_id)

        async def execute() -> dict[str, Any]:
            transport = self._transport_factory(request.api, deployment_id)
            try:
                return await Invocation(workflow, request, transport, deployment_id).execute()
            finally:
                await transport.aclose()

        try:
            return run_in_loop_thread(execute, name=f"ezgh-invoke:{request.run.id}").result()
        except BaseException as exc:
            logger.error("invocation of run %s failed in the SDK", request.run.id, exc_info=exc)
            return None

    def _post_outcome(self, task: dict[str, Any], outcome: dict[str, Any]) -> None:
        body = {**outcome, "taskId": task["taskId"]}
        for delay in (0.2, 1.0, 3.0, None):
            try:
                status = self._post(task, OUTCOME_PATH, body)
            except httpx.HTTPError as exc:
                status, problem = 0, str(exc)
            else:
                problem = f"HTTP {status}"
            if status == 200:
                return
            if 400 <= status < 500 and status != 429:
                # 409: the lease was lost (another worker has the task); 401: token expired.
                logger.warning("worker %s: outcome refused (%s)", self.worker_id, problem)
                return
            if delay is None:
                logger.error("worker %s: could not post the outcome: %s", self.worker_id, problem)
                return
            time.sleep(delay)

    def _heartbeat(self, task: dict[str, Any], done: threading.Event) -> None:
        lease = float(task.get("leaseSeconds") or 60)
        interval = max(0.2, lease / 3)
        while not done.wait(interval):
            try:
                status = self._post(task, HEARTBEAT_PATH, {"taskId": task["taskId"]})
            except httpx.HTTPError as exc:
                logger.warning("worker %s: heartbeat failed: %s", self.worker_id, exc)
                continue
            if status == 409 or status == 401:
                return  # lost: the step calls will be refused and the invocation aborts
