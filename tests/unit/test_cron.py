from datetime import UTC, datetime

import pytest
from ezgh_engine.core import cron
from ezgh_engine.errors import ValidationError


@pytest.mark.parametrize(
    ("five", "aws"),
    [
        ("*/5 * * * *", "cron(*/5 * * * ? *)"),
        ("0 9 * * 1-5", "cron(0 9 ? * 2,3,4,5,6 *)"),
        ("0 0 * * 0", "cron(0 0 ? * 1 *)"),
        ("0 0 * * 7", "cron(0 0 ? * 1 *)"),
        ("0 0 1,15 * *", "cron(0 0 1,15 * ? *)"),
        ("30 6 * 1-3 *", "cron(30 6 * 1-3 ? *)"),
    ],
)
def test_to_aws_and_back(five, aws):
    assert cron.to_aws(five) == aws
    back = cron.from_aws(aws)
    assert back is not None
    start = datetime(2026, 2, 3, 4, 5, tzinfo=UTC)
    assert cron.next_after(back, "UTC", start) == cron.next_after(five, "UTC", start)


@pytest.mark.parametrize("bad", ["", "* * * *", "* * * * * *", "60 * * * *", "0 0 1 * 1", "x"])
def test_invalid_cron(bad):
    with pytest.raises(ValidationError, match=r"^cron"):
        cron.check_cron(bad)


def test_timezones_and_occurrences():
    assert cron.check_timezone(None) == "UTC"
    with pytest.raises(ValidationError, match=r"^timezone"):
        cron.check_timezone("Mars/Base")
    at = datetime(2026, 7, 1, 12, 0, 30, tzinfo=UTC)
    assert cron.latest("0 * * * *", "UTC", at) == datetime(2026, 7, 1, 12, 0, tzinfo=UTC)
    # 09:00 in Paris in summer is 07:00 UTC.
    assert cron.next_after("0 9 * * *", "Europe/Paris", at) == datetime(
        2026, 7, 2, 7, 0, tzinfo=UTC
    )
