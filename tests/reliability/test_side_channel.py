"""Issue 12, attack A9: no side channel between a plugin's sender and receiver in any mode that makes records.

``fault_side_channel`` (tests/fixtures/faulty_plugins.py) stores the tensor in a module-global dict and sends
one byte. Before the fix, single-process mode (the default, and the mode of the committed baselines) ran it
`ok` with the `none` baseline's exact loss at a 364x "compression ratio", and ``--check-consistency`` did not
catch it (the twin read the same global). Now each stage of a single-process run builds its compressors from
its own copy of the plugin's module (as torchrun gives each stage its own process), so the receiver finds
nothing; torchrun already failed it.
"""

from __future__ import annotations

import pytest
from reliability_support import FAULTY, TINY

from suite.pipeline.config import CellConfig, CompressionPlan


def _cfg(**kw) -> CellConfig:
    return CellConfig(
        task="tiny", plan=CompressionPlan("fault_side_channel", "none"), stages=2, steps=2, plugins=(TINY, FAULTY), **kw
    )


@pytest.mark.parametrize("check", [False, True], ids=["single", "single+check-consistency"])
def test_a9_side_channel_plugin_fails_in_single_process_mode(faulty_registry, tally, check):
    from suite.pipeline.runtime import run

    with tally.fault(
        "side channel", f"module-global side channel, single mode{' + consistency check' if check else ''}"
    ):
        with pytest.raises(Exception, match="nothing in the side channel") as info:
            run(_cfg(mode="single", check_consistency=check))
        assert "fault_side_channel" in str(info.value)


def test_a9_side_channel_cell_record_is_failed(faulty_registry, tmp_path, tally):
    """Through the cell's child process (what `mpcbench run` stores): a failed record, never `ok`."""
    from suite.bench.cell import run_cell

    with tally.fault("side channel", "module-global side channel, a cell's record"):
        rec = run_cell(_cfg(mode="single", time_limit_s=300), log_dir=tmp_path / "logs")
        assert rec["status"] == "failed" and "nothing in the side channel" in rec["error"], rec.get("error")


@pytest.mark.distributed
def test_a9_side_channel_plugin_fails_under_torchrun(faulty_registry, tally):
    from suite.pipeline.errors import RunError
    from suite.pipeline.runtime import run

    with tally.fault("side channel", "module-global side channel, torchrun mode"):
        with pytest.raises(RunError, match=r"rank 1 .*nothing in the side channel"):
            run(_cfg(mode="torchrun", time_limit_s=300, comm_timeout_s=30))


def test_private_copies_keep_honest_plugins_working(faulty_registry):
    """The tiny task with a stateful plugin compressor still trains in single mode (the copies are real classes)."""
    from compressors.registry import build, get_class, private_plugin_modules

    plain = get_class("fault_side_channel")
    with private_plugin_modules(("stage", 0)):
        a = build("fault_side_channel")
    with private_plugin_modules(("stage", 1)):
        b = build("fault_side_channel")
    assert type(a) is not plain and type(b) is not type(a) and type(a).__name__ == plain.__name__
    assert type(a).__module__ == plain.__module__ and a.name == "fault_side_channel"
    assert get_class("none") is get_class("none")  # built-ins are not copied
    with private_plugin_modules(("stage", 0)):
        assert get_class("none") is type(build("none"))
