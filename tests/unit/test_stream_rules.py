from ezgh_engine.service.stream import wants_invocation


def run(**kw):
    base = {"status": "running", "invokeSeq": 1, "handledSeq": 0, "leaseUntil": 0}
    return {**base, **kw}


def test_new_run_wants_an_invocation():
    assert wants_invocation(run())


def test_leased_or_backing_off_run_does_not():
    assert not wants_invocation(run(leaseUntil=123))


def test_handled_run_does_not():
    assert not wants_invocation(run(handledSeq=1))


def test_ended_run_does_not():
    assert not wants_invocation(run(status="completed"))


def test_cancelling_run_does():
    assert wants_invocation(run(status="cancelling", invokeSeq=2, handledSeq=1))


def _record(
    event_name: str,
    item_type: str | None,
    status: str | None = None,
    lease: int = 0,
    branch: bool = False,
) -> dict:
    image: dict = {"type": {"S": item_type}} if item_type else {}
    if status:
        image["status"] = {"S": status}
    if branch:
        image["branch"] = {"BOOL": True}
    if item_type == "run":
        image["leaseUntil"] = {"N": str(lease)}
    side = "OldImage" if event_name == "REMOVE" else "NewImage"  # as DynamoDB streams them
    return {"eventName": event_name, "dynamodb": {side: image}}


def test_the_runs_stream_delivers_only_what_the_outbox_reacts_to():
    from ezgh_engine.topology import TOPOLOGY, StreamSource

    source = next(s for s in TOPOLOGY.sources if isinstance(s, StreamSource))
    assert source.matches(_record("INSERT", "run", "running"))
    assert source.matches(_record("MODIFY", "run", "completed"))
    # A lease taken (or a backoff) owes nothing until it is answered: no invocation for it.
    assert not source.matches(_record("MODIFY", "run", "running", lease=1_790_000_000_000))
    for status in ("sleeping", "retrying", "waiting"):
        assert source.matches(_record("MODIFY", "step", status))
    for status in ("running", "completed", "failed", "cancelled"):
        assert not source.matches(_record("MODIFY", "step", status))
    # A parallel step that ends asks for its run's next invocation (service/stream.py).
    for status in ("completed", "failed", "cancelled"):
        assert source.matches(_record("MODIFY", "step", status, branch=True))
    assert not source.matches(_record("MODIFY", "step", "running", branch=True))
    assert not source.matches(_record("INSERT", "run.started"))  # an event item
    # A run item's removal (TTL or DeleteRun) deletes the rest of the run (service/retention);
    # other removals (steps, events, index items) cost nothing.
    assert source.matches(_record("REMOVE", "run", "completed"))
    assert not source.matches(_record("REMOVE", "step", "completed"))
    assert not source.matches(_record("REMOVE", "run.started"))
    assert not source.matches(_record("INSERT", None))
    patterns = source.filter_patterns()
    assert len(patterns) == 4  # Lambda allows 5 per mapping
    assert patterns[-1] == {
        "eventName": ["REMOVE"],
        "dynamodb": {"OldImage": {"type": {"S": ["run"]}}},
    }
