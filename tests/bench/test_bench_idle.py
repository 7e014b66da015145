"""The idle month of `python -m bench`, from the synthesized template: which
resources bill while nothing happens, and that an idle pull worker costs at most $0.10."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("aws_cdk")

from ezgh_engine.topology import TOPOLOGY

from bench import idle
from bench import prices as p

pytestmark = pytest.mark.infra


@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    return idle.synth_template()


def _line(figures: dict[str, Any], start: str) -> dict[str, Any]:
    return next(x for x in figures["lines"] if x["item"].startswith(start))


def test_every_sqs_mapping_of_the_template_is_priced_with_its_pollers(
    template: dict[str, Any],
) -> None:
    figures = idle.idle_figures(template, workers=0, subscriptions=0)
    mappings = [x for x in figures["lines"] if x["item"].startswith("SQS event source mapping")]
    assert len(mappings) == sum(1 for s in TOPOLOGY.sources if s.kind == "sqs")
    month = p.SECONDS_PER_MONTH / p.SQS_LONG_POLL_SECONDS * p.SQS_USD_PER_REQUEST
    for line in mappings:  # none sets MaximumConcurrency: Lambda may go down to 2 pollers
        assert line["usd_low"] == pytest.approx(2 * month)
        assert line["usd_high"] == pytest.approx(5 * month)
    alarms = _line(figures, "CloudWatch alarms")
    assert alarms["usd_low"] == pytest.approx(alarms["count"] * 0.10)
    assert _line(figures, "Secrets Manager")["usd_low"] == pytest.approx(0.40)
    lo, hi = figures["stack_usd_per_month"]
    assert lo == pytest.approx(sum(x["usd_low"] for x in figures["lines"]))
    assert 0 < lo <= hi


def test_an_idle_pull_worker_costs_at_most_ten_cents_a_month(template: dict[str, Any]) -> None:
    figures = idle.idle_figures(template, workers=3, subscriptions=2)
    workers = _line(figures, "idle pull workers")
    assert workers["count"] == 3 and workers["usd_low"] / 3 <= 0.10
    legacy = _line(figures, "  for comparison")
    assert legacy["usd_low"] / 3 > 10  # 20 s of the api function per poll, around the clock
    subs = _line(figures, "subscriptions")
    per_subscription = 5 * p.SECONDS_PER_MONTH / 20 * p.SQS_USD_PER_REQUEST
    assert subs["usd_high"] == pytest.approx(2 * per_subscription)
    # The comparison line is shown, not added.
    lo, _ = figures["usd_per_month"]
    assert lo == pytest.approx(
        figures["stack_usd_per_month"][0] + workers["usd_low"] + subs["usd_low"]
    )


def test_a_mapping_with_maximum_concurrency_keeps_five_pollers() -> None:
    assert idle.mapping_pollers({"ScalingConfig": {"MaximumConcurrency": 2}}) == (5, 5)
    assert idle.mapping_pollers({}) == (2, 5)
    assert idle.mapping_pollers({"Enabled": False}) == (0, 0)


def test_idle_only_prints_and_writes_the_idle_month(
    tmp_path: Any,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    template: dict[str, Any],
) -> None:
    from bench.__main__ import main

    # The module's synth is the one `main` makes (`synth_template()`, the default stack):
    # one synth of the stack is seconds of CPU, so it is not made twice.
    synths: list[str] = []
    monkeypatch.setattr(idle, "synth_template", lambda: synths.append("ezgh") or template)
    out = tmp_path / "idle.json"
    assert main(["--idle-only", "--workers", "2", "--subscriptions", "0", "--json", str(out)]) == 0
    assert synths == ["ezgh"]
    import json

    figures = json.loads(out.read_text())
    assert figures["idle"]["workers"] == 2 and "sizes" in figures
    assert "Idle month" in capsys.readouterr().out
