"""Per-key rate limits: `429 rate_limited` with `Retry-After` past a key's requests a second,
counted in DynamoDB (so every Lambda environment agrees), on moto and DynamoDB Local.

The engine's clock is held still inside one second, so nothing here depends on timing."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from ezgh_engine import clock, config, ids
from ezgh_engine.adapters import rate_limit_store
from ezgh_engine.service import rate_limits

from tests.api.conftest import Project, call


class HeldClock:
    """The engine's clock, held at one instant until the test moves it."""

    def __init__(self) -> None:
        # Mid-second, so a test's requests all fall in one window.
        self.at = datetime.now(UTC).replace(microsecond=500_000)

    def now(self) -> datetime:
        return self.at

    def advance(self, seconds: float) -> None:
        self.at += timedelta(seconds=seconds)


@pytest.fixture
def held() -> Iterator[HeldClock]:
    previous = clock.get_clock()
    held = HeldClock()
    clock.set_clock(held)
    yield held
    clock.set_clock(previous)


@pytest.fixture
def limit(monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setenv(config.ENV_KEY_RATE_LIMIT, "3")
    config.reset_settings()
    return 3


def _reader(project: Project) -> str:
    made = project.call(
        "POST", "/apiKeys", body={"name": "reader", "permissions": [{"action": "*"}]}
    )
    assert made.status == 201, made.body
    return str(made.body["key"])


def test_past_its_limit_a_key_gets_429_with_retry_after(
    project: Project, limit: int, held: HeldClock
) -> None:
    for _ in range(limit):
        assert project.call("GET", "/apps").status == 200
    refused = project.call("GET", "/apps")
    assert refused.status == 429, refused.raw
    assert refused.body == {
        "error": {"code": "rate_limited", "message": refused.body["error"]["message"]}
    }
    assert refused.headers["Retry-After"] == "1"
    # Before validation too: a bad body is refused for the rate, not read.
    assert project.call("POST", "/runs", raw_body="{").status == 429
    held.advance(1)  # the next second: admitted again
    assert project.call("GET", "/apps").status == 200


def test_each_key_has_its_own_count(project: Project, limit: int, held: HeldClock) -> None:
    other = _reader(project)  # one request of the admin key
    for _ in range(limit - 1):
        assert project.call("GET", "/apps").status == 200
    assert project.call("GET", "/apps").status == 429
    assert project.call("GET", "/apps", key=other).status == 200


def test_unauthenticated_requests_count_for_no_key(
    project: Project, limit: int, held: HeldClock
) -> None:
    for _ in range(limit * 3):
        answer = call("GET", f"{project.prefix}/apps", headers={"authorization": "Bearer x"})
        assert answer.status == 401
    assert project.call("GET", "/apps").status == 200


def test_no_limit_with_zero(
    project: Project, monkeypatch: pytest.MonkeyPatch, held: HeldClock
) -> None:
    monkeypatch.setenv(config.ENV_KEY_RATE_LIMIT, "0")
    config.reset_settings()
    for _ in range(10):
        assert project.call("GET", "/apps").status == 200


def test_the_count_is_shared_by_concurrent_environments(aws_env: None) -> None:
    """Environments share nothing but the table: 40 concurrent takes of one second's budget
    of 10 admit exactly 10 (the conditional write is atomic)."""
    key_id, window, admitted = ids.new_id(), 1_900_000_000, []
    lock = threading.Lock()

    def take() -> None:
        ok = rate_limit_store.take(key_id, window, 10)
        with lock:
            admitted.append(ok)

    threads = [threading.Thread(target=take) for _ in range(40)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert admitted.count(True) == 10
    assert rate_limit_store.take(key_id, window + 1, 10)  # a new second, a new budget


def test_a_refused_key_costs_no_more_writes_in_that_second(
    project: Project, limit: int, held: HeldClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    takes: list[str] = []
    real = rate_limit_store.take

    def counting(key_id: str, window: int, most: int, full: set[int] | None = None) -> bool:
        takes.append(key_id)
        return real(key_id, window, most, full)

    monkeypatch.setattr(rate_limit_store, "take", counting)
    for _ in range(limit + 5):
        project.call("GET", "/apps")
    assert len(takes) == limit + 1  # the admitted ones and the first refusal
    held.advance(1)
    assert project.call("GET", "/apps").status == 200
    assert len(takes) == limit + 2


def test_admit_answers_retry_after_seconds(aws_env: None, limit: int, held: HeldClock) -> None:
    key_id = ids.new_id()  # this process remembers refusals: a key of this test's own
    for _ in range(limit):
        rate_limits.admit(key_id)
    with pytest.raises(rate_limits.RateLimited) as refused:
        rate_limits.admit(key_id)
    assert refused.value.retry_after_seconds == 1


def test_a_high_limit_counts_on_several_items_and_stays_exact(
    aws_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past `ITEM_WRITES_PER_SECOND` a key's count spreads over several counter items (no
    partition key takes more than its share), and 40 concurrent takes of a budget of 10
    still admit exactly 10: a full shard sends a request to the others."""
    monkeypatch.setattr(rate_limit_store, "ITEM_WRITES_PER_SECOND", 4)
    assert rate_limit_store.shares(10) == [4, 3, 3]
    key_id, window, admitted = ids.new_id(), 1_900_000_000, []
    lock = threading.Lock()

    def take() -> None:
        ok = rate_limit_store.take(key_id, window, 10)
        with lock:
            admitted.append(ok)

    threads = [threading.Thread(target=take) for _ in range(40)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert admitted.count(True) == 10
    from ezgh_engine.adapters import aws
    from ezgh_engine.config import settings

    counts = [
        aws.client("dynamodb").get_item(
            TableName=settings().registry_table,
            Key={
                "pk": {"S": rate_limit_store.counter_pk(key_id, window, shard)},
                "sk": {"S": rate_limit_store.SK},
            },
            ConsistentRead=True,
        )["Item"]["n"]["N"]
        for shard in range(3)
    ]
    assert counts == ["4", "3", "3"]


def test_a_sharded_key_is_refused_from_memory_once_every_shard_is_full(
    project: Project, limit: int, held: HeldClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the key's count on three items, the request past the limit tries each shard once
    (three refused writes), and after that this environment refuses from memory."""
    monkeypatch.setattr(rate_limit_store, "ITEM_WRITES_PER_SECOND", 1)
    writes: list[int] = []
    real = rate_limit_store._take_shard

    def counting(key_id: str, window: int, shard: int, share: int) -> bool:
        writes.append(shard)
        return real(key_id, window, shard, share)

    monkeypatch.setattr(rate_limit_store, "_take_shard", counting)
    for _ in range(limit):
        assert project.call("GET", "/apps").status == 200
    assert sorted(set(writes)) == [0, 1, 2]  # each request on a shard of its own turn
    refused = project.call("GET", "/apps")
    assert refused.status == 429 and refused.body["error"]["code"] == "rate_limited"
    assert len(writes) == limit + 3
    assert project.call("GET", "/apps").status == 429
    assert len(writes) == limit + 3
    held.advance(1)
    assert project.call("GET", "/apps").status == 200
