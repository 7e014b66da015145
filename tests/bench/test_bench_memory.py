"""The bench's Lambda memory model: the waiting part of a locally measured invocation as
measured, its CPU part stretched to the memory's share of a vCPU (1 vCPU at 1,769 MB)."""

from __future__ import annotations

import pytest

from bench.report import modeled_seconds


def test_the_waiting_part_does_not_depend_on_memory() -> None:
    assert modeled_seconds(0.2, 0.0, 128) == pytest.approx(0.2)
    assert modeled_seconds(0.2, 0.0, 1024) == pytest.approx(0.2)


def test_the_cpu_part_stretches_below_one_vcpu_and_not_above() -> None:
    assert modeled_seconds(0.1, 0.01, 1769) == pytest.approx(0.1)
    assert modeled_seconds(0.1, 0.01, 3538) == pytest.approx(0.1)
    assert modeled_seconds(0.1, 0.01, 256) == pytest.approx(0.09 + 0.01 * 1769 / 256)
