"""One suite of workflow behaviours (behaviours.py), run on the SDK's test kit and on the real
engine: the kit (`ezgh_workflows.testing`) is proved to do what the engine does, behaviour by
behaviour, each passing on both and leaving the same records (GetRun's runs and steps, but
for times and IDs). A behaviour added to the suite runs on both."""

from __future__ import annotations

import pytest
from behaviours import BEHAVIOURS
from ezgh_engine import clock as engine_clock
from ezgh_workflows._internal import clock as sdk_clock
from harnesses import EngineHarness, KitHarness, records
from sdk_engine import Engine

NAMES = sorted(BEHAVIOURS)


@pytest.mark.parametrize("name", NAMES)
def test_on_the_kit(name: str) -> None:
    BEHAVIOURS[name](KitHarness())


@pytest.mark.parametrize("name", NAMES)
def test_on_the_engine_as_on_the_kit(
    name: str, engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The app reads the time the engine does (one wall clock, in production): here the
    # engine's skip clock, so `now` steps see the time it skips.
    monkeypatch.setattr(sdk_clock, "now", engine_clock.now)
    on_engine = EngineHarness(engine)
    BEHAVIOURS[name](on_engine)
    monkeypatch.undo()  # the kit reads its own clock
    on_kit = KitHarness()
    BEHAVIOURS[name](on_kit)
    assert records(on_kit) == records(on_engine)
