"""The results store: append-only, atomic, pandas-readable, survives SIGKILL mid-append."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd
import pytest

from suite.bench.record_builder import failed_record
from suite.bench.store import ResultsStore, StoreError, dump_record, read_jsonl
from suite.pipeline.config import CellConfig, CompressionPlan


def _record(seed: int = 0, status: str = "failed", spec: str = "none") -> dict:
    cfg = CellConfig(task="cifar10", tier="smoke", seed=seed, plan=CompressionPlan(forward=spec, backward=spec))
    prov = {"git_commit": None, "git_dirty": None, "machine": {}}
    rec = failed_record(cfg, f"RuntimeError: boom {seed}", prov, status=status)
    return rec


def _ok_record(seed: int = 0) -> dict:
    rec = _record(seed)
    rec.update(
        status="ok",
        error=None,
        metric_name="accuracy",
        higher_is_better=True,
        final_metric=0.5 + seed / 100,
        curve=[{"step": 1, "metric": 0.3, "metric_uncompressed": float("nan"), "train_loss": 1.0, "wall_s": 0.1}],
        bytes={"forward": {"raw": 100, "wire": 50, "messages": 2}},
        bytes_per_step={"forward": 50.0},
        time={"step_s": 0.1},
        modeled={"1Gbps": {"step_s": 0.1, "total_s": 1.0, "time_to_target_s": None}},
        run={"steps": 1},
    )
    return rec


def test_stored_paths_are_relative_to_the_store_not_the_machine(tmp_path):
    """An entry's plugin.py is stored as ``plugin.py``, a checkout file relative to the checkout,
    anything else by its name; the log relative to the store's folder."""
    from suite.bench.store import REPO_ROOT

    entry = tmp_path / "home" / "me" / "records" / "mine"
    entry.mkdir(parents=True)
    inside, checkout, elsewhere = str(entry / "plugin.py"), str(REPO_ROOT / "examples" / "x.py"), "/opt/me/other.py"
    rec = _record()
    rec["config"]["plugins"] = [inside, checkout, elsewhere, "my_pkg.comp"]
    rec["provenance"]["plugin_hashes"] = {"none": "ab", f"plugin:{inside}": "cd", f"plugin:{elsewhere}": "ef"}
    rec["provenance"]["argv"] = f"{REPO_ROOT}/suite/__main__.py run --plugin {inside} --plugin {elsewhere}"
    rec["log"] = str(entry / "results.logs" / "c.log")
    store = ResultsStore(entry / "results.jsonl")
    store.append(rec)
    (got,), problems = read_jsonl(store.path)
    assert problems == []
    assert got["config"]["plugins"] == ["plugin.py", "examples/x.py", "other.py", "my_pkg.comp"]
    assert got["provenance"]["plugin_hashes"] == {"none": "ab", "plugin:plugin.py": "cd", "plugin:other.py": "ef"}
    assert got["provenance"]["argv"] == "suite/__main__.py run --plugin plugin.py --plugin other.py"
    assert got["log"] == "results.logs/c.log" and str(tmp_path) not in store.path.read_text()
    assert rec["config"]["plugins"][0] == inside  # the caller's record is not changed


def test_append_and_read_back_with_pandas(tmp_path):
    store = ResultsStore(tmp_path / "sub" / "store.jsonl")
    assert store.records() == [] and store.done_keys() == set()
    store.append(_record(0))
    store.append(_ok_record(1))
    recs = store.records()
    assert [r["seed"] for r in recs] == [0, 1]
    assert store.done_keys() == {recs[1]["cell_key"]}  # only ok cells count as done
    frame = pd.read_json(store.path, lines=True)
    assert list(frame["seed"]) == [0, 1]
    assert list(frame["status"]) == ["failed", "ok"]
    # NaN became null: strict JSON on every line
    for line in store.path.read_text().splitlines():
        json.loads(line, parse_constant=lambda c: pytest.fail(f"non-strict JSON constant {c}"))


def test_append_rejects_invalid_record_and_keeps_store(tmp_path):
    store = ResultsStore(tmp_path / "store.jsonl")
    store.append(_record(0))
    before = store.path.read_bytes()
    bad = _record(1)
    bad["error"] = "two\nlines"
    with pytest.raises(StoreError, match="one line"):
        store.append(bad)
    bad = _record(1)
    del bad["task"]
    with pytest.raises(StoreError, match="missing field 'task'"):
        store.append(bad)
    assert store.path.read_bytes() == before


def test_foreign_lines_are_kept_and_reported(tmp_path):
    path = tmp_path / "store.jsonl"
    path.write_text(dump_record(_record(0)) + "\n{not json\n" + json.dumps({"schema": "x"}))  # no final newline
    store = ResultsStore(path)
    store.append(_record(1))
    lines = path.read_text().splitlines()
    assert len(lines) == 4 and lines[1] == "{not json"  # verbatim, not dropped
    records, problems = read_jsonl(path)
    assert [r["seed"] for r in records] == [0, 1]
    assert len(problems) == 2
    assert problems[0].startswith("line 2: not valid JSON")
    assert problems[1].startswith("line 3: schema must be")


def test_store_path_must_be_a_file(tmp_path):
    with pytest.raises(StoreError, match="not a file"):
        ResultsStore(tmp_path)


def _appender(path: str, start: int, n: int) -> None:
    store = ResultsStore(path)
    for i in range(start, start + n):
        store.append(_record(i))


def test_concurrent_appenders_lose_nothing(tmp_path):
    path = str(tmp_path / "store.jsonl")
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=_appender, args=(path, k * 100, 15)) for k in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    records, problems = read_jsonl(path)
    assert problems == []
    assert sorted(r["seed"] for r in records) == sorted(k * 100 + i for k in range(3) for i in range(15))


def test_sigkill_during_appends_leaves_a_valid_store(tmp_path):
    """Kill a process that appends in a tight loop at a random moment: the store stays valid."""
    path = tmp_path / "store.jsonl"
    script = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {str(tmp_path)!r})
        from suite.bench.store import ResultsStore
        from test_store_helper import rec
        s = ResultsStore({str(path)!r})
        i = 0
        while True:
            s.append(rec(i)); i += 1
            if i == 5:
                print("ready", flush=True)
        """
    )
    # a valid failed record built without importing torch (fast start-up)
    template = _record(0)
    (tmp_path / "test_store_helper.py").write_text(
        f"TEMPLATE = {json.dumps(template)!r}\n"
        "import json\n"
        "def rec(i):\n"
        "    r = json.loads(TEMPLATE)\n"
        "    r.update(seed=i, error='RuntimeError: x' + 'y' * 1500)\n"
        "    return r\n"
    )
    for delay in (0.05, 0.21):
        proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(delay)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        records, problems = read_jsonl(path)
        assert problems == [], problems
        seeds = [r["seed"] for r in records]
        assert len(seeds) >= 5
        pd.read_json(path, lines=True)  # pandas reads it too
    # a later append still works (the lock was released by the kernel)
    ResultsStore(path).append(_record(999))
    assert read_jsonl(path)[0][-1]["seed"] == 999


# --------------------------------------------------------------------------- issue 12: A10 full disk, A11 read-only
@pytest.fixture
def small_tmpfs(tmp_path):
    """A 64 KiB tmpfs (a disk that fills up for real); skipped where mounting is not allowed."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    if (
        os.geteuid() != 0
        or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)], capture_output=True).returncode
        != 0
    ):
        pytest.skip("needs root and mount(8) for a small tmpfs (the simulated test below runs everywhere)")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_a10_full_disk_loses_only_the_record_being_written(small_tmpfs):
    """Before: every append rewrote the whole store into a temp file, so a store larger than half the free
    space could not take another record, and the cell's record was lost with a raw OSError traceback."""
    store = ResultsStore(small_tmpfs / "store.jsonl")
    n = 0
    with pytest.raises(StoreError) as info:
        for n in range(10_000):
            store.append(_record(n))
    msg = str(info.value)
    assert (
        "\n" not in msg
        and msg.startswith("disk full: could not append the record of ")
        and "finished before are safe" in msg
    )
    records, problems = read_jsonl(store.path)
    assert problems == [] and [r["seed"] for r in records] == list(range(n))  # every earlier record, no torn line
    assert n > 20  # the store filled most of the disk: appends need room for one line, not a copy of the store


def test_a10_write_error_mid_line_leaves_the_store_as_before(tmp_path, monkeypatch):
    """The same without a mount: the disk fills up half-way through the line."""
    import errno

    from suite.bench import store as store_mod

    store = ResultsStore(tmp_path / "store.jsonl")
    store.append(_record(0))
    before = store.path.read_bytes()
    real_write = os.write

    def half_then_full(fd, data):
        if len(data) > 100:
            real_write(fd, bytes(data[:100]))
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(store_mod.os, "write", half_then_full)
    with pytest.raises(StoreError, match="disk full"):
        store.append(_record(1))
    monkeypatch.undo()
    assert store.path.read_bytes() == before
    store.append(_record(2))
    assert [r["seed"] for r in store.records()] == [0, 2]


def test_torn_last_line_stays_whole_and_the_next_record_starts_a_new_line(tmp_path):
    store = ResultsStore(tmp_path / "store.jsonl")
    store.append(_record(0))
    with open(store.path, "ab") as f:
        f.write(b'{"schema": "mpcbench.rec')  # a writer killed mid-line
    store.append(_record(1))
    records, problems = read_jsonl(store.path)
    assert [r["seed"] for r in records] == [0, 1] and len(problems) == 1 and problems[0].startswith("line 2:")


@pytest.fixture
def read_only_dir(tmp_path):
    """A folder nobody can write: a read-only tmpfs as root (chmod does not stop root), else chmod 0555."""
    d = tmp_path / "ro"
    d.mkdir()
    (d / "store.jsonl").write_text(dump_record(_record(0)) + "\n")
    mounted = False
    if os.geteuid() == 0:
        mounted = (
            subprocess.run(
                ["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(d)], capture_output=True
            ).returncode
            == 0
        )
        if not mounted:
            pytest.skip("running as root without mount(8): cannot make a read-only folder")
    else:
        d.chmod(0o555)
    yield d
    if mounted:
        subprocess.run(["umount", "-l", str(d)], check=False)
    else:
        d.chmod(0o755)


def test_a11_read_only_location_is_one_line_before_any_cell_runs(read_only_dir, tmp_path):
    """Before: ``mpcbench run`` ended in a raw ``OSError: [Errno 30]`` traceback."""
    store = ResultsStore(read_only_dir / "sub" / "store.jsonl")
    with pytest.raises(
        StoreError, match=r"is not writable \((read-only file system|permission denied)\); pass --results"
    ):
        store.check_writable()
    with pytest.raises(StoreError, match="is not writable"):
        store.append(_record(1))
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "suite",
            "run",
            "--tier",
            "smoke",
            "--task",
            "cifar10",
            "--compressor",
            "none",
            "--no-progress",
            "--results",
            str(read_only_dir / "store.jsonl"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    err = [line for line in r.stderr.splitlines() if line.strip()]
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert err[-1].startswith("mpcbench: error: results store ") and "is not writable" in err[-1]


def test_a_record_that_cannot_be_appended_is_spooled_and_recovered(tmp_path, monkeypatch, capsys):
    """Issue 23: before, when the disk filled while a finished cell's record was appended, that record was
    lost (neither in the store nor the log). Now it is kept in a spool file named in the one-line error,
    and the next `mpcbench validate` (or run) adds it."""
    import errno

    from suite.bench import store as store_mod
    from suite.bench.cli import main

    store = ResultsStore(tmp_path / "store.jsonl")
    store.append(_record(0))
    real_write = os.write

    def full(fd, data):
        if os.fstat(fd).st_ino == os.stat(store.path).st_ino:  # only the store is full
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(store_mod.os, "write", full)
    with pytest.raises(StoreError) as info:
        store.append(_record(1))
    monkeypatch.undo()
    msg = str(info.value)
    assert "\n" not in msg and "disk full" in msg and "the record is kept in" in msg
    spooled = Path(msg.split("the record is kept in ")[1].split(":")[0])
    assert spooled.is_file() and [r["seed"] for r in read_jsonl(store.path)[0]] == [0]
    assert main(["validate", str(store.path)]) == 0
    assert "recovered the record of" in capsys.readouterr().err
    assert [r["seed"] for r in read_jsonl(store.path)[0]] == [0, 1] and not spooled.exists()
    assert store.recover() == []  # nothing left, nothing doubled


def test_a_spool_folder_another_user_made_is_never_used(tmp_path, monkeypatch):
    """Issue 35: the spool sat at a predictable path in shared temp space; a folder made there in advance
    (open to everyone) had its planted records added to the store. Spool folders are private (0700)."""
    import tempfile

    monkeypatch.setattr(tempfile, "gettempdir", lambda: str(tmp_path / "tmp"))
    store = ResultsStore(tmp_path / "store.jsonl")
    store.append(_record(0))
    shared = store.spool_dirs()[0]
    shared.mkdir()
    shared.chmod(0o777)
    (shared / "planted.jsonl").write_text(dump_record(_record(5)) + "\n")
    assert store.recover() == [] and [r["seed"] for r in read_jsonl(store.path)[0]] == [0]
    kept = store._spool(_record(6))  # kept in the next spool folder, made private, never the open one
    assert str(shared) not in kept and [p.name for p in shared.iterdir()] == ["planted.jsonl"]
    private = store.spool_dirs()[1]
    assert str(private) in kept and (private.stat().st_mode & 0o777) == 0o700
