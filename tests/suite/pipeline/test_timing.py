"""suite.pipeline.timing.Clock: exclusive section times, on the host clock and with (fake) device events.

A fake clock drives both modes, so the arithmetic is checked exactly, without sleeping.
"""

from __future__ import annotations

import pytest
import torch

from suite.pipeline import timing
from suite.pipeline.timing import CLOCK_ENV, Clock


class FakeTime:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class FakeEvent:
    """A CUDA-event stand-in: records the fake time; counts synchronizations."""

    syncs = 0

    def __init__(self, clock: FakeTime) -> None:
        self.clock, self.t = clock, None

    def record(self) -> None:
        self.t = self.clock.now

    def synchronize(self) -> None:
        FakeEvent.syncs += 1

    def elapsed_time(self, end: FakeEvent) -> float:
        return (end.t - self.t) * 1000.0  # milliseconds, like torch.cuda.Event


def _nested_step(clock: Clock, t: FakeTime) -> None:
    """compute 1.0 s, of which a nested compress 0.25 s containing comm 0.1 s; optimizer 0.5 s."""
    with clock.section("compute"):
        t.now += 0.5
        with clock.section("compress"):
            t.now += 0.15
            with clock.section("comm"):
                t.now += 0.1
        t.now += 0.25
    with clock.section("optimizer"):
        t.now += 0.5


EXPECTED = {"compute": 0.75, "compress": 0.15, "comm": 0.1, "optimizer": 0.5, "step": 1.5}


class HalfTime:
    """A thread-CPU clock that runs at half the wall clock (the process had half a core)."""

    def __init__(self, wall: FakeTime) -> None:
        self.wall = wall

    def __call__(self) -> float:
        return self.wall.now / 2


def test_host_clock_charges_exclusive_time(monkeypatch):
    t = FakeTime()
    monkeypatch.setattr(timing.time, "perf_counter", t)
    monkeypatch.setattr(timing.time, "thread_time", HalfTime(t))
    clock = Clock(torch.device("cpu"))
    assert not clock.uses_events and clock.cpu_clock
    _nested_step(clock, t)
    clock.snapshot(1.5)
    row = clock.steps[-1]
    cpu = {f"{k}_cpu": v / 2 for k, v in EXPECTED.items() if k != "step"}
    assert row == pytest.approx({**EXPECTED, **cpu})  # wall and thread CPU seconds, both exclusive
    assert clock.counts == {"compute": 1, "compress": 1, "comm": 1, "optimizer": 1}


def test_cpu_action_costs_are_charged_like_the_wall_ones(monkeypatch):
    t = FakeTime()
    monkeypatch.setattr(timing.time, "perf_counter", t)
    monkeypatch.setattr(timing.time, "thread_time", HalfTime(t))
    clock = Clock(torch.device("cpu"))
    clock.action = "F0"
    with clock.section("compress"):  # decompressing what F0 received
        t.now += 0.2
    with clock.section("compute"):
        t.now += 1.0
    with clock.section("compress"):  # compressing what it sends
        t.now += 0.4
    clock.action = None
    clock.snapshot(1.6)
    assert clock.action_steps == [{"F0": pytest.approx([0.2, 1.0, 0.4])}]
    assert clock.cpu_action_steps == [{"F0": pytest.approx([0.1, 0.5, 0.2])}]


def test_event_clocks_keep_no_cpu_costs():
    t = FakeTime()
    clock = Clock(torch.device("cpu"), event_factory=lambda: FakeEvent(t))
    assert not clock.cpu_clock
    _nested_step(clock, t)
    clock.snapshot(1.5)
    assert "compute_cpu" not in clock.steps[-1] and clock.cpu_action_steps == []


def test_event_clock_resolves_once_per_step_with_the_same_split():
    t = FakeTime()
    FakeEvent.syncs = 0
    clock = Clock(torch.device("cpu"), event_factory=lambda: FakeEvent(t))
    assert clock.uses_events
    for _ in range(3):
        _nested_step(clock, t)
        assert not clock.current  # nothing resolved before the step ends: no synchronization
        clock.snapshot(1.5)
        assert FakeEvent.syncs == len(clock._steps)  # resolved at the step's end, before anyone reads it
        assert clock.steps[-1] == pytest.approx(EXPECTED)
    assert FakeEvent.syncs == 3  # one per step, not one per section
    assert len(clock._free) == 8  # events are reused after resolution


def test_event_clock_discard_drops_evaluation_sections():
    t = FakeTime()
    clock = Clock(torch.device("cpu"), event_factory=lambda: FakeEvent(t))
    _nested_step(clock, t)
    clock.discard()
    with clock.section("comm"):
        t.now += 2.0
    clock.snapshot(2.0)
    assert clock.steps[-1]["comm"] == pytest.approx(2.0)


def test_unknown_clock_mode_is_refused(monkeypatch):
    monkeypatch.setenv(CLOCK_ENV, "fast")
    with pytest.raises(ValueError, match="valid values are events, sync"):
        Clock(torch.device("cpu"))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_event_clock_times_kernels_in_their_section():
    dev = torch.device("cuda")
    x = torch.randn(4096, 4096, device=dev)
    clock = Clock(dev)
    assert clock.uses_events
    with clock.section("compute"):
        for _ in range(20):
            x = x @ x.T / 4096
    with clock.section("comm"):
        pass
    clock.snapshot(0.0)
    row = clock.steps[-1]
    assert row["compute"] > 10 * row["comm"] > 0


def test_sections_are_charged_to_the_schedule_action_before_and_after_its_compute(monkeypatch):
    t = FakeTime()
    monkeypatch.setattr(timing.time, "perf_counter", t)
    clock = Clock(torch.device("cpu"))

    def sec(name: str, s: float) -> None:
        with clock.section(name):
            t.now += s

    clock.action = "F0"  # receive (waiting), decompress, compute with a nested hook, compress, send
    sec("comm", 1.0)
    sec("compress", 0.1)
    with clock.section("compute"):
        t.now += 0.3
        sec("compress", 0.05)  # e.g. a data-parallel hook inside the backward: compute
        sec("comm", 0.5)  # its collective: network, left out
    sec("compress", 0.2)
    sec("comm", 0.01)  # framing and handing to the backend: the sender's CPU work
    clock.action = None
    sec("optimizer", 0.4)  # not an action
    clock.snapshot(2.56)
    assert clock.action_steps[-1] == {"F0": pytest.approx([0.1, 0.35, 0.21])}
    clock.action = "B0"
    sec("compute", 1.0)
    clock.discard()  # evaluation: dropped
    assert clock.current_actions == {}


def test_a_cpu_reading_under_20_us_old_is_extended_by_the_wall_gap_not_read_again(monkeypatch):
    t = FakeTime()
    half = HalfTime(t)
    reads = []
    monkeypatch.setattr(timing.time, "perf_counter", t)
    monkeypatch.setattr(timing.time, "thread_time", lambda: reads.append(t.now) or half())
    clock = Clock(torch.device("cpu"))
    with clock.section("compute"):  # enter: a reading
        t.now += 1.0
    t.now += 10e-6  # 10 us later: the next section starts from the exit's reading + 10 us
    with clock.section("compress"):
        t.now += 1.0
    t.now += 1e-3  # 1 ms later: read again
    with clock.section("comm"):
        t.now += 1.0
    clock.snapshot(t.now)
    row = clock.steps[-1]
    assert len(reads) == 5  # not 6: the compress section's start was not read
    assert row["compute_cpu"] == pytest.approx(0.5) and row["comm_cpu"] == pytest.approx(0.5)
    # compress: from (0.5 + 10 us) to its exit's reading (1.000005 s of wall / 2): the gap ran at full speed
    assert row["compress_cpu"] == pytest.approx((1.0 + 10e-6 + 1.0) / 2 - (0.5 + 10e-6))
    assert 10e-6 < timing.CPU_REUSE_S < 1e-3  # the premise of the gaps above


def test_the_host_clock_turns_sections_into_rows_when_they_are_read_not_at_each_step(monkeypatch):
    t = FakeTime()
    monkeypatch.setattr(timing.time, "perf_counter", t)
    monkeypatch.setattr(timing.time, "thread_time", HalfTime(t))
    clock = Clock(torch.device("cpu"))
    for _ in range(2):
        _nested_step(clock, t)
        clock.snapshot(1.5)
    assert len(clock._unresolved) == 2 and clock._steps == []  # nothing computed inside the steps
    assert (
        clock.steps
        == [pytest.approx({**EXPECTED, **{f"{k}_cpu": v / 2 for k, v in EXPECTED.items() if k != "step"}})] * 2
    )
    assert clock._unresolved == [] and len(clock.action_steps) == len(clock.cpu_action_steps) == 2
