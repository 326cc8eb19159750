"""records/<entry>/times.json: the maintainers' modeled times computed once, never a way to change them."""

from __future__ import annotations

import json
import shutil

import pytest

from leaderboard.frame import BOARD_HARDWARE, board_times, to_frame
from leaderboard.submissions import MAINTAINER_ENTRIES, load_entry
from leaderboard.times_file import TIMES_FILE, read_times, step_key, times_key, write_times
from suite.results import COMMITTED_RECORDS


@pytest.mark.parametrize("entry", sorted(MAINTAINER_ENTRIES))
def test_the_committed_times_are_current_and_equal_the_model(entry):
    """Recomputes every stored time: a stale file (records, calibration or model changed since) or an
    edited one fails here. Fix: `mpcbench retime records/<entry>`."""
    folder = COMMITTED_RECORDS / entry
    if not (folder / TIMES_FILE).exists():
        pytest.skip(f"{entry} has no {TIMES_FILE}")
    doc = json.loads((folder / TIMES_FILE).read_text())
    assert doc["key"] == times_key(BOARD_HARDWARE), f"stale {TIMES_FILE}: run `mpcbench retime records/{entry}`"
    stored = read_times(folder, BOARD_HARDWARE)
    records, _ = load_entry(folder, as_recorded=True)
    assert len(stored) == len([r for r in records if r.get("timing_inputs")])
    for r in records:
        got = board_times(r)
        if got is None:
            continue
        step, modeled = got
        hit = stored[(r["record_sha256"], step_key(step))]
        for p, m in modeled.items():
            for k, v in m.items():
                assert hit[p][k] == v, f"{entry}: {r['record_id']} {p} {k}: stored {hit[p][k]}, model {v}"


def test_a_stored_time_is_used_only_for_a_maintainers_entry_and_only_when_current(tmp_path, lb):
    rec = lb.make_record("cifar10", "fp16", 0)
    for name in ("mpcbench-baselines", "someone"):
        d = lb.write_entry(tmp_path, name, [rec])
        write_times(d, BOARD_HARDWARE)
        doc = json.loads((d / TIMES_FILE).read_text())
        for row in doc["records"]:
            for m in row["modeled"].values():
                m["time_to_target_s"] = 0.001  # an edit: CI's recomputation above would refuse it
        (d / TIMES_FILE).write_text(json.dumps(doc))
    [own], _ = load_entry(tmp_path / "mpcbench-baselines")
    [other], _ = load_entry(tmp_path / "someone")
    assert to_frame([own]).iloc[0]["time_to_target_s@1Gbps"] == 0.001  # read, not simulated: hence the test above
    assert to_frame([other]).iloc[0]["time_to_target_s@1Gbps"] != 0.001  # another entry's file is never read
    stale = tmp_path / "stale"
    shutil.copytree(tmp_path / "mpcbench-baselines", stale / "mpcbench-baselines")
    doc = json.loads((stale / "mpcbench-baselines" / TIMES_FILE).read_text())
    (stale / "mpcbench-baselines" / TIMES_FILE).write_text(json.dumps(dict(doc, key="another model")))
    [again], _ = load_entry(stale / "mpcbench-baselines")
    assert to_frame([again]).iloc[0]["time_to_target_s@1Gbps"] != 0.001  # stale: simulated
