"""The learning-rate factor of each schedule (xbench/training/schedule.factor), by hand: warm-up, constant,
step, cosine and poly decays to their end, and an unknown name refused."""

from __future__ import annotations

import math

import pytest

from xbench.config.optim import ScheduleConfig
from xbench.training.schedule import factor


def test_each_schedule_gives_its_factor():
    warm = ScheduleConfig(name="cosine", warmup_epochs=2, warmup_start_factor=0.5)
    assert factor(warm, 1.0, 12) == 0.75  # halfway through the warm-up
    assert factor(ScheduleConfig(), 3.0, 10) == 1.0
    step = ScheduleConfig(name="step", milestones_epochs=[2, 4], gamma=0.5)
    assert [factor(step, e, 10) for e in (1, 2, 5)] == [1.0, 0.5, 0.25]
    assert factor(warm, 7.0, 12) == pytest.approx(0.5)  # the cosine's middle: progress 0.5
    assert factor(warm, 12.0, 12, end_factor=0.1) == pytest.approx(0.1)
    poly = ScheduleConfig(name="poly", power=2.0, end_factor=0.2, decay_epochs=4)
    assert factor(poly, 2.0, 100) == pytest.approx(0.2 + 0.8 * 0.25) and factor(poly, 9.0, 100) == 0.2
    # no decay left after the warm-up
    assert factor(ScheduleConfig(name="cosine", warmup_epochs=3), 3.0, 3) == pytest.approx(0.0)
    assert math.isclose(factor(ScheduleConfig(name="cosine"), 0.0, 10), 1.0)
    with pytest.raises(ValueError, match="optim.schedule.name='nosuch' is unknown; allowed: "):
        factor(ScheduleConfig(name="nosuch"), 5.0, 10)
