"""``mpcbench verify`` (issue 23): an unpredictable sample, only base-branch code, contained re-runs,
every field the board shows compared, and a committed verification that the check reproduces."""

from __future__ import annotations

import contextlib
import copy
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from suite.bench import verify
from suite.bench.verify import compare, field_diffs, inclusion_probabilities, sample_records

REPO = Path(__file__).resolve().parents[3]
TINY = REPO / "tests" / "fixtures" / "tiny_task.py"
HAS_GIT = shutil.which("git") is not None and (REPO / ".git").exists()


def _rec(cell_id="c", task="cifar10", metric=0.5, wire=100, created="2026-01-01", status="ok", key="k", **kw):
    return {
        "cell_id": cell_id,
        "cell_key": key,
        "record_id": cell_id + created,
        "task": task,
        "tier": "quick",
        "status": status,
        "created": created,
        "compressor": "topk",
        "specs": {"forward": "topk", "backward": "topk", "dp": "none"},
        "metric_name": "accuracy",
        "final_metric": metric,
        "final_metric_uncompressed": 0.6,
        "reached_target_step": 20,
        "curve": [{"step": 10, "metric": 0.4, "train_loss": 1.0}, {"step": 20, "metric": metric, "train_loss": 0.9}],
        "error": None,
        "bytes": {"forward": {"raw": 400, "wire": wire, "messages": 2}},
        "time": {"step_s": 0.1, "total_train_s": 5.0},
        **kw,
    }


# --------------------------------------------------------------------------- every field compared
def test_compare_exact_needs_identical_numbers():
    old = _rec()
    assert compare(old, copy.deepcopy(old), exact=True)[0] == "match"
    assert compare(old, _rec(metric=0.5000001), exact=True)[0] == "mismatch"
    status, detail = compare(old, _rec(wire=101), exact=True)
    assert status == "mismatch" and "bytes.forward.wire" in detail
    assert compare(old, _rec(key="other"), exact=True)[0] == "mismatch"
    assert compare(old, _rec(status="failed", error="boom"), exact=True)[0] == "rerun failed"


def test_compare_across_machines_uses_the_seed_spread():
    old = _rec(metric=0.3477)
    # the same cifar10 none seed-0 cell on an Intel Xeon and an AMD EPYC
    assert compare(old, _rec(metric=0.3223), exact=False, std=0.027)[0] == "within spread"
    assert compare(old, _rec(metric=0.20), exact=False, std=0.027)[0] == "mismatch"
    assert compare(old, _rec(metric=0.3477, wire=150), exact=False, std=0.027)[0] == "mismatch"


def _seeds(early, final, wire, uncompressed=0.6):
    """A 3-seed row: (step-10 metric, final metric, forward wire bytes) per seed."""
    return [
        _rec(
            cell_id=f"c-seed{s}",
            key=f"k{s}",
            seed=s,
            run={"stages": 2},
            metric=final[s],
            wire=wire[s],
            final_metric_uncompressed=uncompressed,
            curve=[
                {"step": 10, "metric": early[s], "train_loss": 1.0},
                {"step": 20, "metric": final[s], "train_loss": 0.9},
            ],
        )
        for s in range(3)
    ]


def test_across_machines_each_field_is_held_to_its_own_seed_spread():
    """The committed cifar10 baselines (AMD EPYC) re-run on an Intel Xeon: honest cells failed on an
    early curve point (fp8: 0.332 vs 0.292 at step 120 against a final-metric tolerance of 0.026), a
    model-trained-on-codes' uncompressed evaluation, a train loss, and ef(topk)'s data-dependent
    payload size (1.08% off). Each field is now compared within its own measured seed spread."""
    row = _seeds(early=[0.30, 0.36, 0.33], final=[0.500, 0.505, 0.495], wire=[1000, 1030, 970])
    old = row[0]
    spreads = verify.field_spreads(old, row)
    assert "final_metric" not in spreads  # the headline keeps the row's (or the tier's) spread
    assert spreads["curve[step 10].metric"] > 0.005
    assert spreads["bytes.forward.wire"] == pytest.approx(0.03, rel=1e-6)  # relative
    moved = _rec(
        cell_id="c-seed0",
        key="k0",
        seed=0,
        run={"stages": 2},
        metric=0.51,
        wire=1010,
        curve=[{"step": 10, "metric": 0.37, "train_loss": 1.0}, {"step": 20, "metric": 0.51, "train_loss": 0.9}],
    )
    # the final metric's tolerance alone (3 sqrt(2) x 0.005 = 0.021) would call the step-10 move of 0.07 a mismatch
    assert field_diffs(old, moved, exact=False, tol=0.021)
    assert compare(old, moved, exact=False, std=0.005)[0] == "mismatch"
    status, detail, diffs = verify.compare_all(old, moved, exact=False, std=0.005, field_std=spreads)
    assert (status, diffs) == ("within spread", []), detail
    # ... but a forged curve point or payload size beyond the field's spread is still caught
    forged = copy.deepcopy(moved)
    forged["curve"][0]["metric"] = 0.60
    assert verify.compare_all(old, forged, exact=False, std=0.005, field_std=spreads)[0] == "mismatch"
    forged = copy.deepcopy(moved)
    forged["bytes"]["forward"]["wire"] = 1200
    status, detail, _ = verify.compare_all(old, forged, exact=False, std=0.005, field_std=spreads)
    assert status == "mismatch" and "bytes.forward.wire" in detail
    # a one-seed row of the same task takes the task's largest spread of each field
    single = _rec(cell_id="d-seed0", key="d0", seed=0, specs={"forward": "fp8", "backward": "fp8", "dp": "none"})
    assert verify.field_spreads(single, [*row, single])["curve[step 10].metric"] == spreads["curve[step 10].metric"]


def test_across_machines_a_target_reached_on_one_machine_only_is_judged_by_the_final_metric():
    old = _rec(metric=0.452, target=0.45, reached_target_step=20)
    near = _rec(metric=0.445, target=0.45, reached_target_step=None)  # ends 0.005 under the target
    far = _rec(metric=0.30, target=0.45, reached_target_step=None)
    assert not [d for d in field_diffs(old, near, exact=False, tol=0.02) if d.startswith("reached")]
    assert [
        d for d in field_diffs(old, far, exact=False, tol=0.2) if d.startswith("reached")
    ] == []  # the target lies inside so wide a tolerance
    assert any(d.startswith("reached") for d in field_diffs(old, far, exact=False, tol=0.02))
    assert any(d.startswith("reached") for d in field_diffs(old, near, exact=True))
    # nor do the modeled times to target (one side has none) count against it; the other times still do
    timed_old = {**old, "timing_inputs": _timing(1.0)}
    timed_near = {**near, "timing_inputs": _timing(1.2)}
    assert not field_diffs(timed_old, timed_near, exact=False, tol=0.02)
    assert any(
        d.startswith("modeled")
        for d in field_diffs(timed_old, {**near, "timing_inputs": _timing(0.01)}, exact=False, tol=0.02)
    )


@pytest.mark.parametrize(
    "field,forge",
    [
        ("bytes.forward.raw", lambda r: r["bytes"]["forward"].update(raw=r["bytes"]["forward"]["raw"] * 100)),
        ("reached_target_step", lambda r: r.update(reached_target_step=1)),
        ("compressor", lambda r: r.update(compressor="my-better-topk")),
        ("specs", lambda r: r["specs"].update(forward="none")),
        ("final_metric_uncompressed", lambda r: r.update(final_metric_uncompressed=0.9)),
        ("curve", lambda r: r["curve"][0].update(metric=0.95)),
        ("curve steps", lambda r: r["curve"].pop(0)),
        (
            "bytes_per_boundary",
            lambda r: r.update(bytes_per_boundary={"b0.forward": {"raw": 1, "wire": 1, "messages": 1}}),
        ),
        ("time.step_s", lambda r: r["time"].update(step_s=0.001)),
    ],
)
def test_every_field_the_board_shows_is_compared(field, forge):
    """Before: only the metric and the wire bytes were compared; raw bytes x100 still 'matched'."""
    old = _rec()
    forged = copy.deepcopy(old)
    forge(forged)
    for exact in (True, False):
        diffs = field_diffs(forged, old, exact=exact, tol=0.1)
        assert any(d.startswith(field) for d in diffs), (exact, diffs)


def _timing(scale: float) -> dict:
    """A committed baseline's network-model inputs with every measured compute time scaled."""
    # one fixed record (a cifar10 pipeline baseline), not whichever file a directory listing gives first
    line = (REPO / "records" / "mpcbench-baselines" / "quick-cpu-2core-v2.jsonl").open().readline()
    ti = json.loads(line)["timing_inputs"]

    def walk(x):
        if isinstance(x, dict):
            return {k: v * scale if k == "compute_s" and isinstance(v, float) else walk(v) for k, v in x.items()}
        return [walk(v) for v in x] if isinstance(x, list) else x

    return walk(ti)


def test_modeled_times_are_recomputed_from_each_runs_own_timing_inputs():
    """Before: time_to_target_s = 0.01 in the sampled record still 'matched'. The board derives its
    times from timing_inputs; a forged faster compute time is > TIME_FACTOR off the re-run's."""
    from suite.results.network import MODEL_VERSION

    old = _rec(timing_inputs=_timing(1.0), reached_target_step=None)
    honest = copy.deepcopy(old)
    honest["timing_inputs"] = _timing(1.5)  # load: slower
    assert not [d for d in field_diffs(old, honest, exact=True) if d.startswith("modeled")]
    forged = copy.deepcopy(old)
    forged["timing_inputs"] = _timing(0.01)
    assert any(d.startswith("modeled") for d in field_diffs(forged, old, exact=True))
    # stored modeled times that the record's own inputs do not give (current model version)
    stored = verify._modeled_now(old)
    lying = {**copy.deepcopy(old), "model_version": MODEL_VERSION, "modeled": copy.deepcopy(stored)}
    assert not [d for d in field_diffs(lying, old, exact=True) if d.startswith("modeled.")]
    lying["modeled"]["1Gbps"]["time_to_target_s"] = 0.01
    assert any("its own timing inputs give" in d for d in field_diffs(lying, old, exact=True))


# --------------------------------------------------------------------------- an unpredictable sample
def _entry_records():
    recs = []
    for task in ("cifar10", "sst2"):
        for comp in ("none", "topk", "fp8"):
            for seed in range(3):
                recs.append(
                    _rec(
                        f"{task}-{comp}-seed{seed}",
                        task=task,
                        key=f"{task}{comp}{seed}",
                        specs={"forward": comp},
                        seed=seed,
                        run={"steps": 10},
                    )
                )
    return recs


def test_sample_covers_every_setup_and_is_drawn_from_the_seed():
    """Before: a fixed seed; the submitter knew the re-run cell in advance."""
    recs = _entry_records()
    picked = sample_records(recs, seed=1)
    setups = {(r["task"], r["specs"]["forward"]) for r in picked}
    assert len(setups) == 6  # one cell of every (task, plan)
    assert len(picked) == 6 + 2  # + ceil(10% of the 12 others)
    assert sample_records(recs, seed=1) == picked  # --seed reproduces
    draws = {tuple(r["cell_id"] for r in sample_records(recs, seed=s)) for s in range(20)}
    assert len(draws) > 10  # another seed, another sample: nothing to run honestly in advance
    p = inclusion_probabilities(recs)
    assert p["sampled"] == 8 and p["setups"] == 6 and 1 / 3 < p["p_min"] < 1
    assert p["detect_at_least"]["a whole setup (every seed of a row)"] == 1.0


def test_sample_takes_the_latest_ok_record_per_cell():
    recs = [
        _rec("a", key="1", created="2026-01-01", metric=0.1),
        _rec("a", key="1", created="2026-01-02", metric=0.2),
        _rec("d", key="4", task="sst2", status="failed"),
    ]
    [picked] = sample_records(recs, seed=0)
    assert picked["final_metric"] == 0.2


def test_verify_draws_a_fresh_seed_and_stores_it(tmp_path, monkeypatch):
    entry = _fake_entry(tmp_path, monkeypatch)
    seeds = {verify.verify_entry(entry, base="HEAD", write=False)["seed"] for _ in range(3)}
    assert len(seeds) == 3


# --------------------------------------------------------------------------- only the project's code
def _git(cwd: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@x", "GIT_COMMITTER_NAME": "t"}
    env["GIT_COMMITTER_EMAIL"] = "t@x"
    return subprocess.run(["git", "-C", str(cwd), *args], check=True, capture_output=True, text=True, env=env).stdout


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_a_commit_off_the_base_branchs_first_parent_history_is_refused(tmp_path):
    """Before: verify checked out whatever commit the record named: a commit making run_cell return chosen
    numbers, reverted by the next one, 'confirmed' a cifar10 accuracy of 0.97."""
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    (repo / "a.txt").write_text("a")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "a")
    good = _git(repo, "rev-parse", "HEAD").strip()
    _git(repo, "checkout", "-q", "-b", "pr")
    (repo / "a.txt").write_text("cheat")
    _git(repo, "commit", "-q", "-am", "cheat")
    cheat = _git(repo, "rev-parse", "HEAD").strip()
    _git(repo, "revert", "--no-edit", "HEAD")
    _git(repo, "checkout", "-q", "main")
    _git(repo, "merge", "-q", "--no-ff", "-m", "merge", "pr")
    trees = verify.CodeTrees(repo, "main")
    try:
        assert trees.resolve(good) == good
        with pytest.raises(verify.VerifyError, match="not on the first-parent history of main"):
            trees.resolve(cheat)
        with pytest.raises(verify.VerifyError, match="is not in this repository"):
            trees.resolve("f" * 40)
        with pytest.raises(verify.VerifyError, match="names no git commit"):
            trees.resolve(None)
        assert (trees.tree(good)[1] / "a.txt").read_text() == "a"  # a clean tree of that commit
    finally:
        trees.close()


def _entry_dir(tmp_path: Path, plugin: bool = False, extra: str = "") -> Path:
    from leaderboard.submissions import plugin_file_hash

    entry = tmp_path / "records" / "e"
    entry.mkdir(parents=True)
    text = "name: e\nsubmitter: s\ndate: '2026-01-01'\n"
    if plugin:
        (entry / "tiny_task.py").write_text(TINY.read_text() + extra)
        text += f"plugin: tiny_task.py\nplugin_hash: {plugin_file_hash(entry / 'tiny_task.py')}\n"
    (entry / "entry.yaml").write_text(text)
    return entry


@pytest.mark.parametrize(
    "plugins,link",
    [(["evil.py"], None), (["os"], None), (["/abs/elsewhere/tiny_task.py"], None), ([], "1Gbps")],
)
def test_only_the_hash_pinned_plugin_runs(tmp_path, plugins, link):
    """Before: a .py file named only in a record's config (not pinned in entry.yaml) ran as root."""
    entry = _entry_dir(tmp_path, plugin=plugins == ["/abs/elsewhere/tiny_task.py"] and False)
    rec = _rec(config={"task": "tiny", "plugins": plugins, "link": link})
    with pytest.raises(verify.VerifyError):
        verify._config_for_rerun(rec, entry, 60, tmp_path)


def test_the_pinned_plugin_runs_from_a_checked_copy(tmp_path):
    entry = _entry_dir(tmp_path, plugin=True)
    rec = _rec(config={"task": "tiny", "plugins": ["/somewhere/tiny_task.py"]})
    cfg = verify._config_for_rerun(rec, entry, 60, tmp_path)
    [p] = cfg["plugins"]
    assert Path(p).read_text() == TINY.read_text() and Path(p).parent == tmp_path / "plugin"
    (entry / "tiny_task.py").write_text("import os\n")  # changed after entry.yaml pinned it
    with pytest.raises(verify.VerifyError):
        verify._config_for_rerun(rec, entry, 60, tmp_path)


@pytest.mark.parametrize(
    "specs,mode,refused",
    [
        ({"forward": "mycomp", "backward": "none"}, "single", True),  # a plugin's name: unknown here
        ({"forward": "ef(mycomp)", "backward": "none"}, None, True),  # no mode recorded: the single default
        ({"forward": "mycomp", "backward": "none"}, "torchrun", False),
        ({"forward": "topk(ratio=0.1)", "backward": "ef(quant(bits=4))"}, "single", False),  # built-ins
    ],
)
def test_a_submitted_compressor_measured_in_single_process_mode_is_refused(tmp_path, specs, mode, refused):
    """Issue 23 item 6: a submitted compressor's two ends run in separate processes by default; one
    measured in a single process (where its receiver could reach the sender's objects) is refused with
    one line naming the record and the fix. Built-ins measured in single mode stay accepted."""
    entry = _entry_dir(tmp_path)
    cfg = {"task": "tiny", "plugins": []} | ({"mode": mode} if mode else {})
    rec = _rec(cell_id="cell-x", specs=specs, config=cfg, run={"steps": 3} | ({"mode": mode} if mode else {}))
    if refused:
        with pytest.raises(verify.VerifyError) as e:
            verify._config_for_rerun(rec, entry, 60, tmp_path)
        msg = str(e.value)
        assert "\n" not in msg and "cell-x" in msg and rec["record_id"] in msg and "mycomp" in msg
        assert "--mode auto" in msg and "--mode torchrun" in msg
    else:
        assert verify._config_for_rerun(rec, entry, 60, tmp_path)["task"] == "tiny"


# --------------------------------------------------------------------------- contained re-runs
PROBE = r"""
import json, os, socket, subprocess, sys, time
out = {"env": sorted(os.environ), "home": os.environ.get("HOME"), "pid": os.getpid()}
try:
    socket.create_connection(("10.255.255.1", 80), timeout=2)
    out["net"] = "connected"
except OSError as e:
    out["net"] = type(e).__name__
out["ifaces"] = sorted(n for _, n in socket.if_nameindex())
out["home_listing"] = os.listdir(sys.argv[1]) if os.path.isdir(sys.argv[1]) else None
kept = os.path.join(sys.argv[1], "keep", "needed.txt")
out["kept"] = open(kept).read() if os.path.exists(kept) else None
# writes: its own folder and /dev/shm yes; anywhere else (the verifier's folders, the code tree) no
for name, path in (("own", os.environ["HOME"] + "/f"), ("shm", "/dev/shm/f"), ("outside", sys.argv[3]),
                   ("cwd", "written-into-the-tree")):
    try:
        with open(path, "w") as f:
            f.write("x")
        out["write_" + name] = "written"
    except OSError as e:
        out["write_" + name] = type(e).__name__
with open(os.devnull, "w") as f:
    f.write("x")
r = subprocess.run(["mount", "-o", "remount,bind,rw", "/"], capture_output=True)
out["remount"] = r.returncode
# a daemon: double fork, new session, outlives its parent
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        with open(sys.argv[2], "w") as f:
            f.write(str(os.getpid()))
            f.flush()
        time.sleep(120)
        os._exit(0)
    os._exit(0)
time.sleep(0.5)
print(json.dumps(out))
"""


def test_a_rerun_is_contained_and_nothing_it_starts_outlives_it(tmp_path, monkeypatch):
    """Before: the re-run had the full environment, network, the home folder, and a double-forked
    daemon stayed alive after it. Layers this machine lacks are named, never silently skipped."""
    monkeypatch.setenv("SECRET_TOKEN", "hunter2")
    fake_home = tmp_path / "home"
    fake_home.mkdir()
    (fake_home / ".ssh").mkdir()
    (fake_home / "keep").mkdir()
    (fake_home / "keep" / "needed.txt").write_text("needed")  # like the interpreter under /root/.pyenv
    box = verify.containment(fake_home, needed=(Path(sys.executable), fake_home / "keep" / "needed.txt"))
    home = tmp_path / "rerun-home"
    home.mkdir()
    env = verify.rerun_environment(tmp_path, "0" * 40, 1, home)
    pidfile = home / "daemon.pid"
    outside = tmp_path / "outside.txt"
    tree = tmp_path / "tree"
    tree.mkdir()
    proc = verify.contained_run(
        [sys.executable, "-c", PROBE, str(fake_home), str(pidfile), str(outside)],
        cwd=tree,
        env=env,
        box=box,
        timeout_s=60,
        cpu_s=60,
        writable=(home,),
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "SECRET_TOKEN" not in out["env"] and out["home"] == str(home)
    # LC_CTYPE: Python sets it itself in a C locale (PEP 538 coercion), as in CI's bare environment
    assert set(out["env"]) <= set(verify.ENV_ALLOW) | set(env) | {"PWD", "SHLVL", "_", "OLDPWD", "LC_CTYPE"}
    time.sleep(0.5)
    daemon = int(pidfile.read_text()) if pidfile.exists() else None
    assert out["write_own"] == "written"
    if box.missing:  # no root or no unshare here: the output says which layers are missing
        layers = ("network namespace", "PID namespace", "hidden home folder", "read-only file system")
        assert all(m.split(":")[0] in layers for m in box.missing)
        pytest.skip("no namespaces here: " + "; ".join(box.missing))
    assert box.readonly
    # before: the re-run could write anywhere the verifier's user can (the checkout, other folders)
    assert out["write_outside"] == out["write_cwd"] == "OSError" and not outside.exists(), out
    assert not (tree / "written-into-the-tree").exists()
    assert out["write_shm"] == "written" and not Path("/dev/shm/f").exists()  # a private /dev/shm
    assert out["remount"] != 0  # no capabilities left to undo the layer
    assert out["ifaces"] == ["lo"] and out["net"] != "connected"
    # the verifier's home is an empty tmpfs inside, but for the folder holding what the re-run needs
    assert out["home_listing"] == ["keep"] and out["kept"] == "needed", out
    assert daemon is not None
    # the daemon lived in the re-run's PID namespace: its pid there is not ours; it must be gone
    assert not any(
        "120" in Path(f"/proc/{p}/cmdline").read_text(errors="replace")
        and str(pidfile) in Path(f"/proc/{p}/cmdline").read_text(errors="replace")
        for p in os.listdir("/proc")
        if p.isdigit() and Path(f"/proc/{p}/cmdline").exists()
    )


@pytest.mark.parametrize(
    "lack,why",
    [("root", "not root"), ("setpriv", "no setpriv or awk command")],
)
def test_a_missing_read_only_layer_is_reported_and_printed(tmp_path, monkeypatch, capsys, lack, why):
    """Where the read-only layer cannot be set up, the report and the command's output say so."""
    real_which = shutil.which
    if lack == "root":
        monkeypatch.setattr(os, "geteuid", lambda: 1000)
    else:
        monkeypatch.setattr(shutil, "which", lambda name, *a, **k: None if name == "setpriv" else real_which(name))
    box = verify.containment()
    assert not box.readonly and f"read-only file system: {why}" in box.missing
    entry = _fake_entry(tmp_path, monkeypatch)
    report = verify.verify_entry(entry, base="HEAD", write=False)
    assert f"read-only file system: {why}" in report["containment"]["missing"]
    capsys.readouterr()
    verify.main(["verify", str(entry), "--base", "HEAD", "--no-write"])
    out = capsys.readouterr().out
    assert f"{entry}: containment missing: " in out and f"read-only file system: {why}" in out, out


# --------------------------------------------------------------------------- the committed verification
def _fake_entry(tmp_path, monkeypatch):
    entry = _entry_dir(tmp_path)
    recs = _entry_records()
    (entry / "results.jsonl").write_text("{}\n")
    monkeypatch.setattr("leaderboard.submissions.load_entry", lambda d: (recs, []))

    def fake_check(rec, *a, **kw):
        return verify.CellCheck(rec["cell_id"], rec["record_id"], "match", "same"), None

    monkeypatch.setattr(verify, "check_cell", fake_check)
    return entry


def test_the_check_reproduces_a_committed_verification_and_rejects_an_edited_one(tmp_path, monkeypatch):
    """How the board knows a verification came from the maintainers' check: CI re-runs it with the
    file's seed (`mpcbench verify --check`) and rejects one that differs from its own."""
    from leaderboard.submissions import verification_status

    entry = _fake_entry(tmp_path, monkeypatch)
    report = verify.verify_entry(entry, base="HEAD")
    assert report["status"] == "verified" and verification_status(entry) == "verified"
    assert verify.check_verification(entry, base="HEAD") == []
    path = entry / "verification.json"
    forged = json.loads(path.read_text())
    forged["seed"] = report["seed"] + 1  # a seed chosen so that the honest cells are the sampled ones
    path.write_text(json.dumps(forged))
    assert any("cells differs" in d for d in verify.check_verification(entry, base="HEAD"))
    path.write_text("{}")
    assert verify.check_verification(entry, base="HEAD")
    monkeypatch.setattr(
        verify,
        "check_cell",
        lambda rec, *a, **kw: (verify.CellCheck(rec["cell_id"], rec["record_id"], "mismatch", "no"), None),
    )
    assert verify.verify_entry(entry, base="HEAD")["status"] == "failed" and verification_status(entry) == "failed"


def _head_is_clean() -> bool:
    r = subprocess.run(
        ["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True
    )
    return r.returncode == 0 and not r.stdout.strip()


@pytest.mark.skipif(not HAS_GIT, reason="needs a git checkout")
@pytest.mark.parametrize(
    "mode", ["single", pytest.param("torchrun", marks=[pytest.mark.distributed, pytest.mark.slow])]
)
def test_verify_reruns_a_tiny_cell_contained_and_catches_a_forged_number(tmp_path, mode):
    """A record of the tiny task made here, at HEAD: the contained re-run (from `git archive HEAD`, with
    every layer this machine has, the verifier's home hidden as `verify` does) matches it when the
    checkout is clean; the same record with a forged metric fails. In torchrun mode too: the stage
    processes and their rendezvous work inside the namespaces and the read-only file system."""
    import tempfile

    from suite.bench.cell import run_cell
    from suite.pipeline.config import CellConfig, CompressionPlan
    from tasks.api import default_data_dir

    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    # the pinned plugin also tries to write outside the re-run's own folder (refused by the read-only layer)
    escaped = tmp_path / "escaped.txt"
    escape = f"\ntry:\n    open({str(escaped)!r}, 'w').write('x')\nexcept OSError:\n    pass\n"
    entry = _entry_dir(tmp_path, plugin=True, extra=escape)
    cfg = CellConfig(
        task="tiny",
        tier="smoke",
        plan=CompressionPlan("quant(bits=4)", "none"),
        stages=2,
        steps=3,
        mode=mode,
        plugins=(str(entry / "tiny_task.py"),),
        time_limit_s=300,
    )
    rec = run_cell(cfg, log_dir=tmp_path / "logs")
    assert rec["status"] == "ok", rec["error"]
    assert escaped.exists()  # uncontained, the plugin's write lands
    escaped.unlink()
    rec["provenance"]["git_commit"], rec["provenance"]["git_dirty"] = head, not _head_is_clean()
    forged = {**copy.deepcopy(rec), "record_id": "forged", "final_metric": min(1.0, rec["final_metric"] + 0.3)}
    trees = verify.CodeTrees(REPO, "HEAD")
    needed = (Path(sys.executable), REPO, default_data_dir(), Path(tempfile.gettempdir()))
    box = verify.containment(Path.home(), needed=needed)
    try:
        check, new = verify.check_cell(rec, entry, [rec], trees, 300, 1, box)
        if box.readonly:
            assert not escaped.exists()  # the re-run ran the plugin (its task), but could not write outside
        if rec["provenance"]["git_dirty"]:
            assert check.status in ("within spread", "mismatch", "cannot verify"), check  # HEAD is not the working tree
        else:
            assert (check.status, check.mode) == ("match", "exact"), check
            assert new is not None and new["timing_inputs"]
        bad, _ = verify.check_cell(forged, entry, [forged], trees, 300, 1, box)
        # a dirty checkout compares across code versions: the tiny task has no measured seed spread for that
        assert bad.status in (("mismatch", "cannot verify") if rec["provenance"]["git_dirty"] else ("mismatch",)), bad
    finally:
        trees.close()


def test_a_rerun_dies_with_the_verifier(tmp_path):
    """Found while verifying the baselines: a verifier killed mid-run left its re-runs alive (unshare
    ignores SIGTERM; the re-run has its own session)."""
    marker = f"mpcbench-orphan-probe-{os.getpid()}-{time.time_ns()}"
    code = (
        "import sys; from pathlib import Path; from suite.bench import verify; "
        "box = verify.containment(); "
        # the marker is assembled in the verifier, so that only the re-run's command line holds it whole
        f"verify.contained_run([sys.executable, '-c', 'import time; time.sleep(120)', {marker[:10]!r} + {marker[10:]!r}], "
        "cwd=Path('.'), "
        "env=verify.rerun_environment(Path('.'), '0' * 40, 1, Path('.')), box=box, timeout_s=120, cpu_s=120)"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)})

    def running() -> bool:
        for p in os.listdir("/proc"):
            with contextlib.suppress(OSError):
                if p.isdigit() and marker in Path(f"/proc/{p}/cmdline").read_text(errors="replace"):
                    return True
        return False

    deadline = time.monotonic() + 60
    while not running() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert running(), "the probe did not start"
    proc.kill()  # the verifier dies without cleaning up
    proc.wait()
    deadline = time.monotonic() + 10
    while running() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not running()


# --------------------------------------------------------------------------- resuming a long verification
def test_a_stopped_verification_resumes_from_its_kept_reruns(tmp_path, monkeypatch):
    """A 90-cell verification takes hours on a 2-core machine: --resume keeps each finished re-run
    (by record id and commit), and the next start compares the kept ones instead of running them again."""
    old = _rec(provenance={"git_commit": "abc", "git_dirty": False})
    new = copy.deepcopy(old)
    assert verify._kept_rerun(tmp_path, old) is None
    verify._keep_rerun(tmp_path, old, new)
    assert verify._kept_rerun(tmp_path, old) == new
    assert verify._kept_rerun(None, old) is None
    verify._keep_rerun(tmp_path, {**old, "record_id": "failed"}, {**new, "status": "failed"})
    assert verify._kept_rerun(tmp_path, {**old, "record_id": "failed"}) is None  # a failed re-run runs again
    assert verify._kept_rerun(tmp_path, {**old, "cell_key": "another cell"}) is None  # never another cell's
    assert verify._kept_rerun(tmp_path, {**old, "provenance": {"git_commit": "def"}}) is None  # nor another commit's

    class Trees:
        def tree(self, commit):
            return commit, tmp_path

    def no_rerun(*a, **k):
        raise AssertionError("a kept re-run was run again")

    monkeypatch.setattr(verify, "_rerun", no_rerun)
    box = verify.Containment(prefix=(), layers=(), missing=())
    check, got = verify.check_cell(old, tmp_path, [old], Trees(), 60.0, 1, box, rerun=new)
    assert (check.status, got) == ("match", new), check.detail
    forged = {**copy.deepcopy(new), "final_metric": 0.99}  # a kept re-run is compared again like a fresh one
    assert verify.check_cell(old, tmp_path, [old], Trees(), 60.0, 1, box, rerun=forged)[0].status == "mismatch"


def test_a_one_seed_row_across_machines_takes_the_tasks_pooled_spread():
    """shakespeare's ef(topk) (one seed) moved 0.061 nats between the AMD and the Intel machine, where
    the uncompressed run's spread allows 0.026: a one-seed row's own spread is unknown, so its headline
    is held to the pooled spread of the task's multi-seed rows when that is larger than the tier's."""
    noisy = [_rec(cell_id=f"n{s}", key=f"n{s}", seed=s, metric=m) for s, m in enumerate((3.30, 3.40, 3.35))]
    calm = [
        _rec(cell_id=f"c{s}", key=f"c{s}", seed=s, metric=m, specs={"forward": "none"})
        for s, m in enumerate((2.14, 2.15, 2.13))
    ]
    single = _rec(cell_id="e0", key="e0", seed=0, metric=3.43, specs={"forward": "ef(topk)"})
    std, why = verify._spread(single, [*noisy, *calm, single])
    assert std == pytest.approx(((0.05**2 + 0.01**2) / 2) ** 0.5) and "pooled" in why
    assert verify._spread(noisy[0], [*noisy, *calm])[1] == "std of the entry's 3 seeds"


def test_across_machines_steps_may_regroup_by_payload_size_but_not_change_in_number():
    """ef(topk)'s per-step payload sizes follow the values, so the timing inputs' run-length groups of
    equal sizes differ across machines; their total, the step count, must not."""
    old = _rec(timing_inputs={"counts": [1, 1, 3, 1]})
    regrouped = _rec(timing_inputs={"counts": [1, 2, 2, 1]})
    shorter = _rec(timing_inputs={"counts": [1, 2, 2]})
    assert not [d for d in field_diffs(old, regrouped, exact=False, tol=0.1) if "counts" in d]
    assert [d for d in field_diffs(old, shorter, exact=False, tol=0.1) if "counts" in d]
    assert [d for d in field_diffs(old, regrouped, exact=True) if "counts" in d]
