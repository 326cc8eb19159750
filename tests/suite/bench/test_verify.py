"""``mpcbench verify`` (issues 23, 35): the board's row is the unit, tolerances come from trusted
references, times are the re-run's, only landed and unreverted code re-runs, the base branch judges,
and re-runs are contained (stages apart from each other too), with errors never published."""

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

from suite.bench.verify import VerifyError, code, compare, report, rerun, sampling, sandbox, tolerances, trusted
from suite.bench.verify.rerun import Rerun

REPO = Path(__file__).resolve().parents[3]
TINY = REPO / "tests" / "fixtures" / "tiny_task.py"
HAS_GIT = shutil.which("git") is not None and (REPO / ".git").exists()
MACHINE = {"cpu": "Test CPU", "cpu_count": 2, "torch_build": "2.x+cpu"}


def _rec(cell_id="c", task="cifar10", metric=0.5, wire=100, created="2026-01-01", status="ok", key="k", seed=0, **kw):
    return {
        "cell_id": cell_id,
        "cell_key": key,
        "record_id": cell_id + created,
        "record_sha256": "h-" + cell_id + created,
        "entry": "e",
        "task": task,
        "tier": "quick",
        "seed": seed,
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
        "config": {"task": task, "seed": seed},
        "provenance": {"git_commit": "abc", "git_dirty": False, "machine": dict(MACHINE)},
        **kw,
    }


# --------------------------------------------------------------------------- class 3: every shown field compared; times not judged
def test_compare_exact_needs_identical_numbers_and_warnings():
    a = _rec()
    assert compare.compare(a, copy.deepcopy(a), exact=True)[0] == "match"
    assert compare.compare(a, _rec(metric=0.5000001), exact=True)[0] == "mismatch"
    assert compare.compare(a, _rec(wire=101), exact=True)[0] == "mismatch"
    assert (
        compare.compare(a, _rec(warnings=["forward: compressed payloads are larger (x)"]), exact=True)[0] == "mismatch"
    )


def test_the_timing_inputs_step_grouping_may_differ_but_not_their_step_count():
    """An honest maintainers' row failed in exact mode: which step a message's bytes count for follows the
    measured timeline, so its re-run regrouped the steps (225 runs recorded, 256 re-run, same bytes). The
    grouping is not shown (a verified row takes the re-run's timing inputs); the number of steps is compared."""
    load = {"links": [{"fwd_bytes": 10.0, "bwd_bytes": 10.0}]}
    a = _rec(timing_inputs={"steps": [load, load], "counts": [1, 1], "target_step": 2.0})
    b = _rec(timing_inputs={"steps": [load], "counts": [2], "target_step": 2.0})
    assert compare.compare(a, b, exact=True)[0] == "match"
    c = _rec(timing_inputs={"steps": [load], "counts": [3], "target_step": 2.0})
    assert compare.compare(a, c, exact=True)[0] == "mismatch"
    d = _rec(timing_inputs={"steps": [load], "counts": [2], "target_step": 1.5})
    assert compare.compare(a, d, exact=True)[0] == "mismatch"


def test_a_short_cell_is_not_judged_by_its_times_under_load():
    """The fresh-clone failure: total_train_s 0.72 s recorded, 0.017 s re-run, "37.9x apart" at load 4-5.
    Times are not compared (a verified row shows the re-run's), so an honest short cell agrees."""
    a = _rec(time={"step_s": 0.24, "total_train_s": 0.72})
    b = _rec(time={"step_s": 0.0057, "total_train_s": 0.017})
    assert compare.compare(a, b, exact=True)[0] == "match"


def test_another_seed_of_the_row_is_held_to_the_trusted_spread_only():
    rerun_seed0 = _rec(seed=0, metric=0.50)
    other = _rec(cell_id="c1", key="k1", seed=1, metric=0.51, config={"task": "cifar10", "seed": 1})
    assert compare.compare(other, rerun_seed0, exact=True, std=0.01, same_seed=False)[0] == "within spread"
    far = _rec(cell_id="c1", key="k1", seed=1, metric=0.70, config={"task": "cifar10", "seed": 1})
    assert compare.compare(far, rerun_seed0, exact=True, std=0.01, same_seed=False)[0] == "mismatch"
    # no trusted spread: it cannot be compared across seeds at all
    assert compare.compare(other, rerun_seed0, exact=False, same_seed=False)[0] == "cannot verify"


# --------------------------------------------------------------------------- class 1: tolerances from trusted references
def _maintainers(tmp_path: Path, lb_records: list[dict]) -> Path:
    d = tmp_path / "records" / "mpcbench-baselines"
    d.mkdir(parents=True)
    (d / "entry.yaml").write_text("name: m\nsubmitter: m\ndate: '2026-01-01'\n")
    (d / "r.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lb_records))
    return d


def test_the_spread_never_comes_from_the_entrys_records(tmp_path, monkeypatch):
    """Before: the spread was the entry's own seeds (or pooled over its rows, issue 35), then the verifier's
    runs of the entry's plugin at seeds of its own (issue 45: a plugin that recognised them widened it).
    Now only the maintainers' measured spread of the task and tier, and their runs of the setup, count."""
    monkeypatch.setattr(tolerances, "_maintainers", lambda folder: {})  # no maintainers' run of this setup
    from leaderboard.statistics import MEASURED_SPREAD

    task, tier = next(iter(MEASURED_SPREAD))
    rec = _rec(task=task, tier=tier)
    rec["tier"] = tier
    ref = tolerances.reference_for(rec)
    assert ref.final_std == MEASURED_SPREAD[(task, tier)].seed_std and "maintainers' measured spread" in ref.source
    for name in ("reference_for", "maintainers_reference"):
        assert "entry" not in " ".join(getattr(tolerances, name).__code__.co_varnames)
    with pytest.raises(VerifyError, match="no trusted seed spread"):
        tolerances.reference_for(_rec(task="no-spread-task"))  # nothing measured: cannot verify


def test_the_maintainers_runs_of_the_same_setup_are_the_reference(monkeypatch):
    same = [_rec(seed=s, cell_id=f"m{s}", metric=0.5 + 0.01 * s) for s in range(3)]
    monkeypatch.setattr(tolerances, "_maintainers", lambda folder: {tolerances._setup(same[0]): same})
    ref = tolerances.reference_for(_rec(metric=0.9))
    tier = tolerances.tier_spread(same[0])  # never below the tier's measured spread
    assert abs(ref.final_std - max(0.01, tier)) < 1e-9 and "maintainers' 3 seeds" in ref.source
    assert abs(ref.field_std["final_metric"] - 0.01) < 1e-9


def test_the_maintainers_setup_spread_is_capped_at_twice_the_tiers(monkeypatch):
    """A bimodal setup of the maintainers (1.0 nat on shakespeare) opened a window a forged seed passed."""
    from leaderboard.statistics import MEASURED_SPREAD

    task, tier = next(iter(MEASURED_SPREAD))
    wild = [_rec(seed=s, cell_id=f"m{s}", task=task, metric=m) for s, m in ((0, 0.1), (1, 0.9), (2, 0.5))]
    for r in wild:
        r["tier"] = tier
    monkeypatch.setattr(tolerances, "_maintainers", lambda folder: {tolerances._setup(wild[0]): wild})
    ref = tolerances.reference_for(wild[0])
    cap = tolerances.CAP_FACTOR * MEASURED_SPREAD[(task, tier)].seed_std
    assert ref.final_std == cap and all(v <= cap for k, v in ref.field_std.items() if "metric" in k)
    assert not any("bytes" in k for k in ref.field_std)  # byte counts: 1 %, never a spread


def test_own_seeds_are_drawn_from_the_verification_seed_and_look_like_recorded_seeds():
    """Before: the verifier's seeds were ~1e9 (recorded ones are 0-2): a plugin could tell them apart."""
    a = tolerances.self_seeds(7, "row", {0, 1})
    assert a == tolerances.self_seeds(7, "row", {0, 1}) and len(a) == tolerances.SELF_SEEDS
    assert not {0, 1} & set(a) and all(0 <= s < tolerances.SEED_RANGE for s in a)
    drawn = {tolerances.self_seeds(v, "row", {0, 1, 2})[0] for v in range(200)}
    assert len(drawn) > 40 and max(drawn) < tolerances.SEED_RANGE  # spread over the range, unpredictable
    assert tolerances.self_seeds(7, "row", set(a)) != a  # a recorded seed is never one of the verifier's


def test_exact_mode_follows_the_verifiers_machine_not_the_records_claim():
    rec = _rec()
    here = Rerun(_rec(), {"cpu": "Other CPU", "cpu_count": 2, "torch_build": "2.x+cpu"}, [0.5, 0.5])
    assert report._exact(rec, here)[0] is False  # the record's label matches its own re-run's claim: irrelevant
    same = Rerun(_rec(), dict(MACHINE), [0.5, 0.5])
    assert report._exact(rec, same)[0] is True


# --------------------------------------------------------------------------- class 2: the unit is the board's row
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


def _fake_entry(tmp_path, monkeypatch, recs, rerun_of=None):
    """An entry whose records are ``recs``; re-runs return ``rerun_of(record)`` (default: the record)."""
    entry = _entry_dir(tmp_path)
    (entry / "results.jsonl").write_text("{}\n")
    monkeypatch.setattr("leaderboard.submissions.load_entry", lambda d, **kw: (copy.deepcopy(recs), []))
    monkeypatch.setattr(report, "CodeTrees", _NoTrees)
    monkeypatch.setattr(
        report, "containment", lambda *a, **k: sandbox.Containment((), ("test",), ("test: no sandbox",))
    )
    monkeypatch.setattr(tolerances, "_maintainers", lambda folder: {})

    def fake_run(rec, *a, **kw):
        new = copy.deepcopy((rerun_of or (lambda r: r))(rec))
        return Rerun(new, dict(MACHINE), [0.4, 0.4])

    monkeypatch.setattr(report, "run_cell_contained", fake_run)
    return entry


class _NoTrees:
    def __init__(self, repo, base):
        self.base_commit = "b" * 40

    def tree(self, commit):
        return "a" * 40, Path(".")

    def close(self):
        pass


def _row(n=3, forged_seed=None, task="cifar10"):
    out = []
    for s in range(n):
        r = _rec(
            cell_id=f"c{s}", key=f"k{s}", seed=s, task=task, metric=0.5 + 0.001 * s, config={"task": task, "seed": s}
        )
        if s == forged_seed:
            r["final_metric"] = 0.95
        out.append(r)
    return out


def test_every_record_of_a_rerun_row_is_compared_and_a_forged_seed_fails_the_row(tmp_path, monkeypatch):
    """Before: the sample re-ran one cell per setup and the rest of the row went unchecked: a forged seed
    sat inside a "verified" group. Now every latest record of the row is compared with the row's re-run."""
    from leaderboard.statistics import MEASURED_SPREAD

    task = next(t for t, tier in MEASURED_SPREAD if tier == "quick")
    honest = _row(task=task)
    forged = _row(forged_seed=2, task=task)
    for recs, want in ((honest, "verified"), (forged, "failed")):
        entry = _fake_entry(
            tmp_path / want, monkeypatch, recs, rerun_of=lambda r: {**r, "final_metric": 0.5 + 0.001 * (r["seed"] % 3)}
        )
        out = report.verify_entry(entry, base="HEAD", seed=1, write=False)
        (row,) = out["rows"]
        assert row["status"] == want, out["cells"]
        assert set(row["records"]) == {r["record_id"] for r in recs} and len(row["reruns"]) >= 1
        kinds = {c["record_id"]: c["kind"] for c in out["cells"] if c["kind"] != "held-out"}
        assert set(kinds) == {r["record_id"] for r in recs}  # every record of the row was compared


@pytest.mark.parametrize("seed1_metric,want", [(0.75, "failed"), (0.502, "verified")])
def test_a_forged_seed_the_largest_task_spread_passed_fails_against_the_verifiers_own_seeds(
    tmp_path, monkeypatch, seed1_metric, want
):
    """Before: without the maintainers' run of the same setup, a row's other seeds were held to the largest
    spread among the maintainers' rows of the task (1.0 nat on shakespeare: bimodal sparsifier rows), so a
    seed forged by 0.25 passed. Now the row is held to the maintainers' measured spread of the task and tier
    (issue 45: the verifier's own seeds are a held-out check, never a tolerance): the forged seed fails, an
    honest one passes, and the report names the reference."""
    from leaderboard.statistics import MEASURED_SPREAD

    task = next(t for t, tier in MEASURED_SPREAD if tier == "quick")
    recs = [
        _rec(cell_id=f"c{s}", key=f"k{s}", seed=s, task=task, metric=m, config={"task": task, "seed": s})
        for s, m in ((0, 0.5), (1, seed1_metric))
    ]
    # the maintainers ran the task only with another compressor, whose two seeds landed far apart
    wild = [
        _rec(cell_id=f"m{s}", key=f"m{s}", seed=s, task=task, metric=m, compressor="fp16",
             specs={"forward": "fp16"}, config={"task": task, "seed": s})
        for s, m in ((0, 0.2), (1, 0.9))
    ]  # fmt: skip
    maint = tmp_path / "maintainers"
    maint.mkdir()
    real = tolerances._maintainers.__wrapped__  # uncached
    entry = _fake_entry(tmp_path, monkeypatch, recs)
    monkeypatch.setattr(tolerances, "MAINTAINERS_DIR", maint)
    monkeypatch.setattr(tolerances, "_maintainers", real)
    monkeypatch.setattr(
        "leaderboard.submissions.load_entry", lambda d, **kw: (copy.deepcopy(wild if Path(d) == maint else recs), [])
    )
    ran = []

    def fake_run(rec, *a, **kw):
        ran.append(rec["seed"])
        return Rerun({**copy.deepcopy(rec), "final_metric": 0.5 + 0.002 * (rec["seed"] % 3)}, dict(MACHINE), [0.4])

    monkeypatch.setattr(report, "run_cell_contained", fake_run)
    # a verification seed whose sample re-runs seed 0 (honest): seed 1 is compared with the spread
    seed = next(s for s in range(100) if next(iter(sampling.sample_rows(recs, s, 0.0).values()))[0]["seed"] == 0)
    out = report.verify_entry(entry, base="HEAD", seed=seed, fraction=0.0, write=False)
    (row,) = out["rows"]
    assert row["status"] == want, out["cells"]
    own = tolerances.self_seeds(seed, row["row_id"], {0, 1})
    assert ran == [0, *own] and "maintainers' measured spread" in row["reference"]
    other = next(c for c in out["cells"] if c["record_id"] == recs[1]["record_id"])
    assert other["status"] == ("mismatch" if want == "failed" else "within spread")
    assert "maintainers' measured spread" in other["reference"]
    held = next(c for c in out["cells"] if c["kind"] == "held-out")
    assert held["status"] == "within spread" and held["record_id"].endswith(f"#verifier-seed-{own[0]}")


def test_the_verifier_samples_the_records_as_recorded_not_as_a_verification_shows_them(tmp_path, monkeypatch):
    """Before: the verifier loaded the board's records, where a verified row takes the verifier's machine:
    a row recorded on another machine class changed its key (Xeon -> this machine's) once verified, so
    the next verification drew other rows and ``verify --check`` could not reproduce a committed report."""
    import json as _json

    from leaderboard.submissions import load_entry
    from suite.results.entries import row_keys

    baselines = REPO / "records" / "mpcbench-baselines"
    stored = [_json.loads(line) for f in sorted(baselines.glob("*.jsonl")) for line in f.read_text().splitlines()]
    machines = {r["record_id"]: r["provenance"].get("machine") for r in stored}
    raw, _ = load_entry(baselines, as_recorded=True)
    assert all(r["provenance"].get("machine") == machines[r["record_id"]] for r in raw)
    assert not any("verification" in r for r in raw) and len(row_keys(raw)) == len(raw)
    seen = {}

    def spy(d, **kw):
        seen.update(kw)
        return [], []

    monkeypatch.setattr("leaderboard.submissions.load_entry", spy)
    with pytest.raises(VerifyError, match="no valid records"):
        report.verify_entry(_entry_dir(tmp_path), base="HEAD", seed=1, write=False)
    assert seen.get("as_recorded") is True


def test_the_sample_is_one_cell_of_every_board_row_drawn_from_the_seed():
    recs = _row(3) + [
        _rec(cell_id="x", key="kx", compressor="fp16", specs={"forward": "fp16"}, config={"task": "cifar10", "seed": 0})
    ]
    a, b = sampling.sample_rows(recs, 1), sampling.sample_rows(recs, 1)
    assert a == b and len(a) == 2 and all(len(v) >= 1 for v in a.values())
    big = next(k for k, v in a.items() if k.compressor == "topk")
    seen = {sampling.sample_rows(recs, s)[big][0]["cell_id"] for s in range(40)}
    assert len(seen) > 1  # which seed of a row re-runs follows the seed


# --------------------------------------------------------------------------- class 6: only landed, unreverted code
def _git(cwd: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@x", "GIT_COMMITTER_NAME": "t"}
    env["GIT_COMMITTER_EMAIL"] = "t@x"
    return subprocess.run(["git", "-C", str(cwd), *args], check=True, capture_output=True, text=True, env=env).stdout


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
@pytest.mark.parametrize("merge", ["--no-ff", "--ff-only"])
def test_a_reverted_code_commit_never_reruns_cells_merge_or_fast_forward(tmp_path, merge):
    """Before: only merge commits were assumed: a fast-forward merge of a modify-then-revert history put
    the modifying commit on the first-parent line and its code re-ran cells ("verified")."""
    repo = tmp_path / "repo"
    (repo / "suite").mkdir(parents=True)
    _git(repo, "init", "-q", "-b", "main")
    (repo / "suite" / "a.py").write_text("a = 1\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "a")
    good = _git(repo, "rev-parse", "HEAD").strip()
    _git(repo, "checkout", "-q", "-b", "pr")
    (repo / "suite" / "a.py").write_text("a = 'cheat'\n")
    _git(repo, "commit", "-q", "-am", "cheat")
    cheat = _git(repo, "rev-parse", "HEAD").strip()
    _git(repo, "revert", "--no-edit", "HEAD")
    (repo / "records").mkdir()
    (repo / "records" / "r.jsonl").write_text("{}\n")  # a record file change is data, not code
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "records")
    data = _git(repo, "rev-parse", "HEAD").strip()
    _git(repo, "checkout", "-q", "main")
    _git(repo, "merge", "-q", merge, *(["-m", "merge"] if merge == "--no-ff" else []), "pr")
    trees = code.CodeTrees(repo, "main")
    try:
        assert trees.resolve(good) == good and trees.resolve(data) == data
        with pytest.raises(VerifyError, match="reverted by"):
            trees.resolve(cheat)
        with pytest.raises(VerifyError, match="is not in this repository"):
            trees.resolve("f" * 40)
        with pytest.raises(VerifyError, match="names no git commit"):
            trees.resolve(None)
        assert (trees.tree(good)[1] / "suite" / "a.py").read_text() == "a = 1\n"
    finally:
        trees.close()


# --------------------------------------------------------------------------- class 5: the base branch judges
@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_the_base_branchs_code_judges_not_the_pull_requests(tmp_path, capfd):
    """Before: CI ran the pull request's own verifier and data files (tier_spread.json) and its output
    became the verdict. Now the command re-executes itself from a clean tree of the base commit."""
    repo = tmp_path / "repo"
    (repo / "suite").mkdir(parents=True)
    _git(repo, "init", "-q", "-b", "main")
    (repo / "suite" / "__init__.py").write_text("")
    main = "import os, sys; print('judge', open(os.path.join(os.path.dirname(__file__), 'who')).read(), sys.argv[1:])\n"
    (repo / "suite" / "__main__.py").write_text(main)
    (repo / "suite" / "who").write_text("base")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "base")
    _git(repo, "checkout", "-q", "-b", "pr")
    (repo / "suite" / "who").write_text("pull request")
    (repo / "records" / "e").mkdir(parents=True)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "pr")
    assert trusted.run_judged([str(repo / "records" / "e"), "--no-write"], [str(repo / "records" / "e")], "main") == 0
    out = capfd.readouterr().out
    assert "judge base" in out and "pull request" not in out and str(repo / "records" / "e") in out


def test_ci_runs_the_base_branchs_verifier_on_a_pull_requests_records():
    ci = (REPO / ".github" / "workflows" / "ci.yml").read_text()
    job = ci[ci.index("verify-submissions:") : ci.index("verification-check:")]
    assert "pull_request_target" in ci and "ref: ${{ github.event.pull_request.base.sha }}" in job
    assert "python -m suite verify" in job and "--here" in job  # the base checkout's own code, the PR's folder as data
    owners = (REPO / ".github" / "CODEOWNERS").read_text()
    for path in ("/suite/bench/verify/", "/suite/results/", "/leaderboard/", "/records/mpcbench-baselines/"):
        assert path in owners


# --------------------------------------------------------------------------- class 7: contained, stages apart, nothing published
def test_a_failed_reruns_output_is_never_published(tmp_path, monkeypatch):
    """Before: the last stderr line of a failed re-run went into verification.json: a plugin printing a
    root-only file's contents published it."""
    secret = "root-only-content-1234"
    monkeypatch.setattr(
        rerun, "contained_run",
        lambda *a, **k: subprocess.CompletedProcess([], 1, "", f"PermissionError: {secret}\n"),
    )  # fmt: skip
    monkeypatch.setattr(rerun, "config_for_rerun", lambda *a, **k: {})
    box = sandbox.Containment((), (), ())
    log = tmp_path / "errors.log"
    with pytest.raises(VerifyError) as e:
        rerun._once(_rec(), tmp_path, "a" * 40, tmp_path, 60, 1, box, log)
    assert secret not in str(e.value) and "PermissionError" in str(e.value)
    assert secret in log.read_text() and (log.stat().st_mode & 0o077) == 0
    assert sandbox.sanitise("x", "ValueError: " + secret) == "x (ValueError)"
    assert sandbox.sanitise("x", secret) == "x"


JAIL_PROBE = r"""
import json, os, sys
out = {"tmp": os.environ["TMPDIR"]}
with open(os.path.join(os.environ["TMPDIR"], "payload"), "w") as f:
    f.write("activation")
for name, path in (("outside", sys.argv[1]), ("other", sys.argv[2]), ("shm", "/dev/shm")):
    try:
        os.listdir(path) if os.path.isdir(path) else open(path).read()
        out[name] = "read"
    except OSError as e:
        out[name] = type(e).__name__
print(json.dumps(out))
"""


@pytest.mark.skipif(
    sandbox._landlock_abi() < 1, reason="no Landlock in this kernel (the report names the layer missing)"
)
def test_stages_share_no_writable_path_and_see_only_the_minimal_root(tmp_path):
    """Before: both pipeline ends of a re-run shared /dev/shm and TMPDIR (a 1-byte payload plus a file
    verified "exact" at 364x) and could read the host's files. Each stage now writes only its own folder
    and reads only the code, the interpreter and the data."""
    work = tmp_path / "work"
    (work / "run").mkdir(parents=True)
    (work / "run" / "config.json").write_text("{}")
    outside = tmp_path / "outside.txt"
    outside.write_text("host file")
    jail = {"read": rerun._jail_reads(REPO), "work": str(work)}
    env = {**rerun.rerun_environment(REPO, "0" * 40, 1, work, jail), "LOCAL_RANK": "0"}
    outs = []
    for rank in ("0", "1"):
        other = outs[0]["tmp"] if outs else str(work)
        p = subprocess.run(
            [sys.executable, "-c", JAIL_PROBE, str(outside), other, str(work / "run" / "config.json")],
            env={**env, "RANK": rank}, capture_output=True, text=True, cwd=REPO,
        )  # fmt: skip
        assert p.returncode == 0, p.stderr
        outs.append(json.loads(p.stdout.strip().splitlines()[-1]))
    zero, one = outs
    assert zero["tmp"] != one["tmp"] and all(Path(o["tmp"]).parent == work for o in outs)
    assert one["other"] == "PermissionError"  # stage 1 cannot read stage 0's folder
    assert zero["outside"] == one["outside"] == "PermissionError" and zero["shm"] == "PermissionError"


def test_the_report_names_every_missing_layer(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setattr(sandbox, "_landlock_abi", lambda: 0)
    monkeypatch.setattr(sandbox, "make_cgroup", lambda: (None, "no cgroup here"))
    box = sandbox.containment()
    text = "; ".join(box.missing)
    for layer in ("network namespace", "PID and IPC namespaces", "read-only file system", "stages:", "cgroup caps"):
        assert layer in text, text
    assert not box.readonly and not box.cgroups and not box.stage_jail


# --------------------------------------------------------------------------- plugins, modes
@pytest.mark.parametrize(
    "plugins,link",
    [(["evil.py"], None), (["os"], None), (["/abs/elsewhere/tiny_task.py"], None), ([], "1Gbps")],
)
def test_only_the_hash_pinned_plugin_runs(tmp_path, plugins, link):
    entry = _entry_dir(tmp_path)
    rec = _rec(config={"task": "tiny", "plugins": plugins, "link": link})
    with pytest.raises(VerifyError):
        rerun.config_for_rerun(rec, entry, 60, tmp_path)


def test_the_pinned_plugin_runs_from_a_checked_copy(tmp_path):
    entry = _entry_dir(tmp_path, plugin=True)
    rec = _rec(config={"task": "tiny", "plugins": ["/somewhere/tiny_task.py"], "mode": "torchrun"})
    cfg = rerun.config_for_rerun(rec, entry, 60, tmp_path)
    [p] = cfg["plugins"]
    assert Path(p).read_text() == TINY.read_text() and Path(p).parent == tmp_path / "plugin"
    (entry / "tiny_task.py").write_text("import os\n")  # changed after entry.yaml pinned it
    with pytest.raises(VerifyError):
        rerun.config_for_rerun(rec, entry, 60, tmp_path)


@pytest.mark.parametrize(
    "specs,mode,refused",
    [
        ({"forward": "mycomp", "backward": "none"}, "single", True),
        ({"forward": "ef(mycomp)", "backward": "none"}, None, True),
        ({"forward": "mycomp", "backward": "none"}, "torchrun", False),
        ({"forward": "topk(ratio=0.1)", "backward": "ef(quant(bits=4))"}, "single", False),
    ],
)
def test_a_submitted_compressor_measured_in_single_process_mode_is_refused(tmp_path, specs, mode, refused):
    entry = _entry_dir(tmp_path)
    cfg = {"task": "tiny", "plugins": []} | ({"mode": mode} if mode else {})
    rec = _rec(cell_id="cell-x", specs=specs, config=cfg, run={"steps": 3} | ({"mode": mode} if mode else {}))
    if refused:
        with pytest.raises(VerifyError) as e:
            rerun.config_for_rerun(rec, entry, 60, tmp_path)
        msg = str(e.value)
        assert "\n" not in msg and "cell-x" in msg and "mycomp" in msg and "--mode torchrun" in msg
    else:
        assert rerun.config_for_rerun(rec, entry, 60, tmp_path)["task"] == "tiny"


# --------------------------------------------------------------------------- the committed verification, resume
def test_the_check_reproduces_a_committed_verification_and_rejects_an_edited_one(tmp_path, monkeypatch):
    from leaderboard.statistics import MEASURED_SPREAD

    task = next(t for t, tier in MEASURED_SPREAD if tier == "quick")
    entry = _fake_entry(tmp_path, monkeypatch, _row(task=task))
    out = report.verify_entry(entry, base="HEAD", seed=3)
    assert out["status"] == "verified"
    assert report.check_verification(entry, base="HEAD") == []
    path = entry / "verification.json"
    forged = json.loads(path.read_text())
    forged["rows"][0]["status"] = "failed"
    path.write_text(json.dumps(forged))
    assert report.check_verification(entry, base="HEAD")
    path.write_text("{}")
    assert report.check_verification(entry, base="HEAD")


def test_check_with_resume_compares_the_kept_reruns_without_running_them(tmp_path, monkeypatch, capsys):
    """Before: ``verify --check --resume DIR`` ignored DIR and re-ran every cell of the committed report."""
    from leaderboard.statistics import MEASURED_SPREAD
    from suite.bench.verify import main as verify_main

    task = next(t for t, tier in MEASURED_SPREAD if tier == "quick")
    entry = _fake_entry(tmp_path, monkeypatch, _row(task=task))
    keep = tmp_path / "keep"
    assert report.verify_entry(entry, base="HEAD", seed=3, resume=keep)["status"] == "verified"
    assert list(keep.glob("rerun-*.json"))

    def no_rerun(*a, **kw):
        raise AssertionError("a kept cell was re-run")

    monkeypatch.setattr(report, "run_cell_contained", no_rerun)
    argv = ["verify", str(entry), "--check", "--here", "--base", "HEAD"]
    assert verify_main([*argv, "--resume", str(keep)]) == 0
    assert "verification.json equals a re-run of the check" in capsys.readouterr().out
    # an edited report still differs from the kept re-runs
    path = entry / "verification.json"
    forged = json.loads(path.read_text())
    forged["rows"][0]["status"] = "failed"
    path.write_text(json.dumps(forged))
    assert verify_main([*argv, "--resume", str(keep)]) == 1
    assert "rows differs from a re-run of the check" in capsys.readouterr().out


def test_resume_keeps_reruns_only_in_a_private_folder(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    rec = _rec()
    with pytest.raises(Exception, match="open to other users"):
        from suite.bench.private_dir import private_dir

        private_dir(shared)
    keep = tmp_path / "keep"
    from suite.bench.private_dir import private_dir

    private_dir(keep)
    assert (keep.stat().st_mode & 0o777) == 0o700
    assert report._kept_rerun(keep, rec) is None
    report._keep_rerun(keep, rec, Rerun(copy.deepcopy(rec), dict(MACHINE), [0.1, 0.2]))
    kept = report._kept_rerun(keep, rec)
    assert kept is not None and kept.record["final_metric"] == rec["final_metric"] and kept.machine == MACHINE


def test_a_rerun_dies_with_the_verifier(tmp_path):
    """A verifier killed mid-run left its re-runs alive (unshare ignores SIGTERM; the re-run has its own session)."""
    marker = f"mpcbench-orphan-probe-{os.getpid()}-{time.time_ns()}"
    code_ = (
        "import sys; from pathlib import Path; from suite.bench.verify import sandbox, rerun; "
        "box = sandbox.containment(); "
        f"sandbox.contained_run([sys.executable, '-c', 'import time; time.sleep(120)', {marker[:10]!r} + {marker[10:]!r}], "
        "cwd=Path('.'), "
        "env=rerun.rerun_environment(Path('.'), '0' * 40, 1, Path('.')), box=box, timeout_s=120, cpu_s=120)"
    )
    proc = subprocess.Popen([sys.executable, "-c", code_], cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)})

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
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + 10
    while running() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not running()


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
    """A record of the tiny task made here, at HEAD: the contained re-run (every layer this machine has:
    namespaces, the size-capped tmpfs, cgroup caps, each stage's jail) matches it when the checkout is
    clean; the same record with a forged metric fails. In torchrun mode the stages rendezvous inside."""
    import tempfile

    from suite.bench.cell import run_cell
    from suite.bench.provenance import machine_info
    from suite.pipeline.config import CellConfig, CompressionPlan
    from tasks.api import default_data_dir

    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    escaped = tmp_path / "escaped.txt"  # the pinned plugin also tries to write outside the re-run's folder
    escape = f"\ntry:\n    open({str(escaped)!r}, 'w').write('x')\nexcept OSError:\n    pass\n"
    entry = _entry_dir(tmp_path, plugin=True, extra=escape)
    cfg = CellConfig(
        task="tiny", tier="smoke", plan=CompressionPlan("quant(bits=4)", "none"), stages=2, steps=3, mode=mode,
        plugins=(str(entry / "tiny_task.py"),), time_limit_s=300,
    )  # fmt: skip
    rec = run_cell(cfg, log_dir=tmp_path / "logs")
    assert rec["status"] == "ok", rec["error"]
    assert escaped.exists()  # uncontained, the plugin's write lands
    escaped.unlink()
    rec["provenance"]["git_commit"], rec["provenance"]["git_dirty"] = head, not _head_is_clean()
    rec["provenance"]["machine"] = machine_info()
    forged = {**copy.deepcopy(rec), "record_id": "forged", "final_metric": min(1.0, rec["final_metric"] + 0.3)}
    trees = code.CodeTrees(REPO, "HEAD")
    needed = (Path(sys.executable), REPO, default_data_dir(), Path(tempfile.gettempdir()))
    box = sandbox.containment(Path.home(), needed=needed)
    try:
        check, new = report.check_cell(rec, entry, trees, 300, 1, box)
        if box.readonly or box.stage_jail:
            assert not escaped.exists()  # the re-run ran the plugin (its task), but could not write outside
        if rec["provenance"]["git_dirty"]:
            assert check.status in ("within spread", "mismatch", "cannot verify"), check
        else:
            assert (check.status, check.mode) == ("match", "exact"), check
            assert (
                new is not None
                and new.record["timing_inputs"]
                and new.machine["cpu"] == rec["provenance"]["machine"]["cpu"]
            )
        bad, _ = report.check_cell(forged, entry, trees, 300, 1, box, rerun=new)
        assert bad.status in (("mismatch", "cannot verify") if rec["provenance"]["git_dirty"] else ("mismatch",)), bad
    finally:
        trees.close()


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
for name, path in (("own", os.environ["HOME"] + "/f"), ("shm", "/dev/shm/f"), ("outside", sys.argv[3]),
                   ("cwd", "written-into-the-tree")):
    try:
        with open(path, "w") as f:
            f.write("x")
        out["write_" + name] = "written"
    except OSError as e:
        out["write_" + name] = type(e).__name__
r = subprocess.run(["mount", "-o", "remount,bind,rw", "/"], capture_output=True)
out["remount"] = r.returncode
rd, wr = os.pipe()
if os.fork() == 0:  # a daemon: double fork, new session, outlives its parent
    os.setsid()
    if os.fork() == 0:
        os.write(wr, str(os.getpid()).encode())
        time.sleep(120)
        os._exit(0)
    os._exit(0)
out["daemon"] = int(os.read(rd, 20))
print(json.dumps(out))
"""


def test_a_rerun_is_contained_and_nothing_it_starts_outlives_it(tmp_path, monkeypatch):
    """The re-run has an allow-listed environment, no network, a hidden home, a read-only file system
    (its own folder a tmpfs: nothing it writes lands outside), and no daemon outlives it."""
    monkeypatch.setenv("SECRET_TOKEN", "hunter2")
    fake_home = tmp_path / "home"
    (fake_home / ".ssh").mkdir(parents=True)
    box = sandbox.containment(fake_home, needed=(Path(sys.executable),))
    home = tmp_path / "rerun-home"
    home.mkdir()
    env = rerun.rerun_environment(tmp_path, "0" * 40, 1, home)
    marker = tmp_path / f"marker-{time.time_ns()}"
    outside = tmp_path / "outside.txt"
    tree = tmp_path / "tree"
    tree.mkdir()
    proc = sandbox.contained_run(
        [sys.executable, "-c", PROBE, str(fake_home), str(marker), str(outside)],
        cwd=tree, env=env, box=box, timeout_s=60, cpu_s=60, writable=(home,),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "SECRET_TOKEN" not in out["env"] and out["home"] == str(home) and out["write_own"] == "written"
    if not box.prefix:
        pytest.skip("no namespaces here: " + "; ".join(box.missing))
    assert box.readonly and out["write_outside"] == out["write_cwd"] == "OSError" and not outside.exists()
    assert not (home / "f").exists()  # its folder was a tmpfs: nothing it wrote lands on the host
    assert out["write_shm"] == "written" and not Path("/dev/shm/f").exists()
    assert out["remount"] != 0 and out["ifaces"] == ["lo"] and out["net"] != "connected"
    assert out["home_listing"] == []

    def alive() -> bool:
        for p in os.listdir("/proc"):
            with contextlib.suppress(OSError):
                if p.isdigit() and str(marker) in Path(f"/proc/{p}/cmdline").read_text(errors="replace"):
                    return True
        return False

    assert not alive()  # the daemon lived in the re-run's PID namespace and died with it
