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
