"""``verify_entry``: sample an entry's rows, re-run, compare every record of each sampled row, write the report.

The report (``records/<entry>/verification.json``, schema :data:`SCHEMA`) is per **row** of the
board (:mod:`suite.results.entries`): for each row its key, the sha256 of every latest ``ok``
record it compared (the loader shows the row as verified only while exactly those records, with
those contents, make the row), the records it re-ran, and the row's verdict. The re-runs' times,
machine and load as the verifier read them go to ``verification.reruns`` (bound by its sha256):
a verified row shows and ranks by them. Files other than records (``entry.yaml``, the plugin) are
bound by hash: a changed one unbinds every row. Rows the verification did not re-run (records
added since, other helpers' new tracks) read "not verified", never verified by extrapolation.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import hashlib
import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from suite.bench.private_dir import PrivateDirError, private_dir
from suite.results.entries import RowKey, machine_label, row_id, rows_of

from .code import CodeTrees, git
from .compare import compare_all
from .errors import VerifyError
from .identity import check_identity
from .replay import NotReproducible
from .rerun import NoRecord, Rerun, SideChannel, run_cell_contained
from .row_reference import RowReference
from .sampling import FRACTION, inclusion_probabilities, sample_rows
from .sandbox import containment, sanitise
from .tolerances import Reference, reference_for

__all__ = ["CellCheck", "SCHEMA", "verify_entry", "check_verification", "check_cell", "reproducible_part"]

SCHEMA = "mpcbench.verification/3"
MACHINE_FIELDS = ("cpu", "cpu_count", "cpu_affinity", "gpu", "torch", "torch_build", "python", "os")


@dataclass
class CellCheck:
    """One comparison: a record against its own re-run or against the re-run of another seed of its row."""

    cell_id: str
    record_id: str
    status: str  # "match" | "within spread" | "mismatch" | "cannot verify" | "rerun failed"
    detail: str
    row_id: str = ""
    kind: str = "re-run"  # "re-run": its own cell re-ran | "row": compared with the row's re-run
    # | "held-out": the row's setup at the verifier's own seed, compared with the row's re-run
    compared_with: str = ""  # the record id of the re-run it was compared with
    mode: str = ""  # "exact" | "spread"
    commit: str = ""
    recorded_metric: float | None = None
    rerun_metric: float | None = None
    diffs: list[str] = field(default_factory=list)
    seconds: float = 0.0
    reference: str = ""  # the trusted spread a "spread" comparison used (:mod:`.tolerances`)

    @property
    def ok(self) -> bool:
        return self.status in ("match", "within spread")


def _exact(record: dict[str, Any], rerun: Rerun) -> tuple[bool, str]:
    """Whether the re-run can be held to equality: the verifier's own machine class and torch build
    (as it read them, not as the record says) and a clean recorded commit."""
    prov = record.get("provenance") or {}
    mine = {"machine": rerun.machine}
    diffs = []
    if machine_label(prov) != machine_label(mine):
        diffs.append("recorded on another machine class than the verifier's")
    theirs = (prov.get("machine") or {}).get("torch_build") or (prov.get("machine") or {}).get("torch")
    if theirs != (rerun.machine.get("torch_build") or rerun.machine.get("torch")):
        diffs.append("another torch build")
    if prov.get("git_dirty") is not False:
        diffs.append("the recorded tree was dirty or had no commit")
    return not diffs, "; ".join(diffs)


ReferenceOf = Callable[[dict[str, Any], Rerun], Reference]  # a record and its row's re-run -> the trusted spread


def _maintainers_only(record: dict[str, Any], rerun: Rerun) -> Reference:
    return reference_for(record)


def _judge(
    check: CellCheck, record: dict[str, Any], rerun: Rerun, same_seed: bool, reference: ReferenceOf = _maintainers_only
) -> None:
    exact, why_not = _exact(record, rerun) if same_seed else (False, "another seed of the row")
    check.rerun_metric = rerun.record.get("final_metric")
    check.compared_with = str(rerun.record.get("_record_id") or "")
    if exact:
        check.mode = "exact"
        check.status, check.detail, check.diffs = compare_all(record, rerun.record, exact=True)
        return
    ref = reference(record, rerun)
    check.reference = ref.source
    check.mode = "spread"
    check.status, check.detail, check.diffs = compare_all(
        record,
        rerun.record,
        exact=False,
        std=ref.final_std,
        field_std=ref.field_std,
        why=f"{ref.source}; not exact: {why_not}",
        same_seed=same_seed,
    )


def check_cell(
    record: dict[str, Any],
    entry_dir: Path,
    trees: CodeTrees,
    time_limit_s: float,
    threads: int,
    box: Any,
    rerun: Rerun | None = None,
    log: Path | None = None,
    attempts: int = 2,
    reference: ReferenceOf = _maintainers_only,
) -> tuple[CellCheck, Rerun | None]:
    """Re-run one record's cell with its commit's code and compare (never raises). ``rerun``: a
    re-run of this record kept by an earlier run of this verifier (``--resume``), compared instead.
    ``reference``: where a comparison that is not exact takes its spread from."""
    prov = record.get("provenance") or {}
    commit = str(prov.get("git_commit") or "")
    check = CellCheck(
        record["cell_id"], record["record_id"], "cannot verify", "", commit=commit[:12],
        recorded_metric=record.get("final_metric"),
    )  # fmt: skip
    t0 = time.perf_counter()
    new = rerun
    try:
        full, tree = trees.tree(commit)
        if new is None:
            new = run_cell_contained(
                record, tree, full, entry_dir, time_limit_s, threads, box, attempts=attempts, log=log
            )
        new.record["_record_id"] = record["record_id"]
        _judge(check, record, new, same_seed=True, reference=reference)
    except SideChannel as e:  # the re-run's stages talked past the counted wire: the row fails
        check.status, check.detail = "mismatch", str(e)
    except NotReproducible as e:  # a process, replayed alone from its counted input, did not reproduce its outputs
        check.status, check.detail = "mismatch", str(e)
    except NoRecord as e:  # said as it is: no record to compare (never read as a side channel)
        check.status, check.detail = "rerun failed", str(e)
    except VerifyError as e:
        check.detail = str(e)
    except subprocess.TimeoutExpired:
        check.status, check.detail = "rerun failed", f"the re-run did not finish within {time_limit_s:g} s"
    except Exception as e:  # noqa: BLE001 - one cell's surprise is that cell's verdict, not the whole run's
        check.detail = sanitise("the check raised", f"{type(e).__name__}: {e}", log)
    check.seconds = round(time.perf_counter() - t0, 1)
    return check, new


def _other_seeds(
    key: RowKey, done: list[tuple[CellCheck, Rerun | None, dict[str, Any]]], members: list[dict[str, Any]],
    reference: ReferenceOf, log: Path | None,
) -> list[CellCheck]:  # fmt: skip
    """The checks of the row's latest records whose own cell did not re-run: each against the row's first
    good re-run (never raises: a comparison that cannot be made reads "cannot verify" with the reason)."""
    rid = row_id(key)
    ok_reruns = [(new, rec) for c, new, rec in done if c.ok and new is not None]
    rerun_ids = {rec["record_id"] for _, _, rec in done}
    out = []
    for rec in members:
        if rec["record_id"] in rerun_ids:
            continue
        c = CellCheck(rec["cell_id"], rec["record_id"], "cannot verify", "the row's re-run failed", rid, "row")
        c.recorded_metric = rec.get("final_metric")
        if ok_reruns:
            try:
                _judge(c, rec, ok_reruns[0][0], same_seed=False, reference=reference)
            except VerifyError as e:
                c.status, c.detail = "cannot verify", str(e)
            except Exception as e:  # noqa: BLE001 - one comparison's surprise is its own verdict
                c.status, c.detail = "cannot verify", sanitise("the comparison raised", f"{type(e).__name__}: {e}", log)
        out.append(c)
    spread = any(c.mode == "spread" for c in [*(c for c, _, _ in done), *out])
    if spread and ok_reruns and isinstance(reference, RowReference):  # compared across seeds or classes
        new, rec = ok_reruns[0]
        c = CellCheck(rec["cell_id"], "", "cannot verify", "", rid, "held-out", mode="spread")
        try:
            held = reference.held_out(rec, new)
            c.status, c.detail, c.record_id = held.status, held.detail, held.record_id or f"{rid}#held-out"
            c.rerun_metric, c.reference = held.metric, reference.source
        except Exception as e:  # noqa: BLE001 - its surprise is its own verdict
            c.record_id = f"{rid}#held-out"
            c.detail = sanitise("the held-out run raised", f"{type(e).__name__}: {e}", log)
        out.append(c)
    return out


def _row_status(checks: list[CellCheck]) -> str:
    if any(c.status in ("mismatch", "rerun failed") for c in checks):
        return "failed"
    if checks and all(c.ok for c in checks) and any(c.kind == "re-run" for c in checks):
        return "verified"
    return "cannot verify"


# --------------------------------------------------------------------------- --resume: kept re-runs
def _kept_path(resume: Path | None, record: dict[str, Any]) -> Path | None:
    if resume is None:
        return None
    commit = str((record.get("provenance") or {}).get("git_commit") or "")
    key = hashlib.sha256(
        json.dumps([record.get("record_id"), commit, record.get("record_sha256")]).encode()
    ).hexdigest()
    return resume / f"rerun-{key[:24]}.json"


def _kept_rerun(resume: Path | None, record: dict[str, Any]) -> Rerun | None:
    """A re-run of ``record`` kept by an earlier, interrupted verification (None if there is none)."""
    path = _kept_path(resume, record)
    if path is None or not path.is_file():
        return None
    with contextlib.suppress(ValueError, OSError, TypeError, KeyError):
        kept = json.loads(path.read_text())
        new = kept["record"]
        # a cell at a seed of the verifier's (:func:`.row_reference.at_seed`) has no key of its own yet
        same = new.get("cell_key") == record.get("cell_key") or (
            record.get("cell_key") is None and new.get("seed") == record.get("seed")
        )
        if isinstance(new, dict) and same and new.get("status") == "ok":
            return Rerun(
                new, kept["machine"], kept["load"], kept.get("attempts", 1), kept.get("contended", False),
                loopback=kept.get("loopback") or {"audited": False, "why": "kept from a run before the loopback audit"},
            )  # fmt: skip
    return None


def _keep_rerun(resume: Path | None, record: dict[str, Any], new: Rerun) -> None:
    path = _kept_path(resume, record)
    if path is not None:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".rerun-", suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump(asdict(new), f)
        os.replace(tmp, path)  # whole or absent: an interrupted write is never read back


# --------------------------------------------------------------------------- an entry
def _seed_of(record: dict[str, Any]) -> int:
    s = record.get("seed")
    return s if isinstance(s, int) and not isinstance(s, bool) else -1


def _bound_files(entry_dir: Path) -> dict[str, str]:
    """sha256 of the entry's files that are not records nor the verification's own."""
    from leaderboard.submissions import RERUNS_FILE, VERIFICATION_FILE, entry_file_hashes

    return {
        k: v for k, v in entry_file_hashes(entry_dir).items()
        if not k.endswith(".jsonl") and k not in (VERIFICATION_FILE, RERUNS_FILE)
    }  # fmt: skip


def _rerun_line(record: dict[str, Any], rid: str, new: Rerun, entry_dir: Path) -> dict[str, Any]:
    """What the board shows of a re-run: its times, and the machine and load the verifier read."""
    from leaderboard.submissions import RERUN_FIELDS, read_entry_info

    plugin_hash = ""
    with contextlib.suppress(ValueError):
        info = read_entry_info(entry_dir)
        plugin_hash = info.plugin_hash if info.plugin.endswith(".py") else ""  # checked against the file there
    return {
        "record_id": record["record_id"],
        "row_id": rid,
        **{k: new.record[k] for k in RERUN_FIELDS if k in new.record},
        "verifier": {
            "machine": {k: new.machine.get(k) for k in MACHINE_FIELDS},
            "load_per_core": new.load,
            "attempts": new.attempts,
            "contended": new.contended,
            "loopback": new.loopback,
        },
        "plugin_hash": plugin_hash,
    }


def verify_entry(
    entry_dir: str | Path,
    *,
    seed: int | None = None,
    fraction: float = FRACTION,
    base: str = "main",
    time_limit_s: float = 3600.0,
    threads: int = 1,
    jobs: int = 1,
    write: bool = True,
    progress: Callable[[str], None] | None = None,
    resume: str | Path | None = None,
    rows: int | None = None,
    attempts: int = 2,
) -> dict[str, Any]:
    """Verify one entry folder: every sampled row's re-run and the comparison of each of its latest
    records with it (module docstring); write and return the report. ``resume``: a private folder
    keeping each finished re-run, so that a verification stopped part-way and started again with the
    same ``seed`` re-runs only the cells not yet run (every kept re-run is compared again).
    ``rows``: re-run at most this many rows (drawn with the seed); the others stay "not verified"."""
    from leaderboard.submissions import RERUNS_FILE, VERIFICATION_FILE, load_entry

    entry_dir = Path(entry_dir)
    if git(entry_dir.resolve(), "rev-parse", "--show-toplevel"):  # the pull request's path: signed by the entry's key
        checked = check_identity(entry_dir, base)
        if progress:
            progress(checked)
    records, problems = load_entry(entry_dir, as_recorded=True)
    if not records:
        raise VerifyError(
            f"{entry_dir.name}: no valid records to verify" + (" (see mpcbench validate)" if problems else "")
        )
    keep = None
    if resume is not None:
        try:
            keep = private_dir(resume)
        except PrivateDirError as e:
            raise VerifyError(f"--resume: {e}") from None
    seed = secrets.randbits(63) if seed is None else seed
    files_before = _bound_files(entry_dir)
    records_before = sorted((r["record_id"], r.get("record_sha256")) for r in records)
    repo = Path(git(entry_dir.resolve(), "rev-parse", "--show-toplevel") or Path(__file__).resolve().parents[3])
    trees = CodeTrees(repo, base)
    home = Path(os.path.expanduser("~"))
    from tasks.api import default_data_dir

    box = containment(home, needed=(Path(sys.executable), repo, default_data_dir(), Path(tempfile.gettempdir())))
    if progress and box.missing:
        progress("containment missing here: " + "; ".join(box.missing))
    sample = sample_rows(records, seed, fraction)
    # rows in an order drawn with the seed; --rows N takes the first N, so a shorter verification's rows
    # are a prefix of a longer one's (a stopped run resumed with a smaller N re-uses every kept re-run)
    # each row's place is drawn from the seed and the row alone: rows added later (other tracks) do not
    # reorder the rows already drawn
    order = sorted(sample, key=lambda k: hashlib.sha256(f"{seed}:{row_id(k)}".encode()).hexdigest())
    order = order[:rows] if rows is not None else order
    sample = {k: sample[k] for k in order}
    all_rows = rows_of(records, ok_only=True)
    log_dir = keep or Path(tempfile.mkdtemp(prefix="mpcbench-verify-log-"))
    log = log_dir / "errors.log"  # the full text of what is never published (private: 0700 / 0600)
    flat = [(key, rec) for key in order for rec in sample[key]]  # re-run in the drawn order

    def run_at(pseudo: dict[str, Any]) -> Rerun:
        """A cell at a seed of the verifier's own (a row's reference): kept with --resume like any re-run."""
        kept = _kept_rerun(keep, pseudo)
        if kept is not None:
            return kept
        if progress:
            progress(
                f"  running {pseudo['cell_id']} at the verifier's own seed {pseudo['seed']} (the row's spread) ..."
            )
        full, tree = trees.tree((pseudo.get("provenance") or {}).get("git_commit"))
        try:  # its times are never shown: one attempt, whatever the load
            new = run_cell_contained(pseudo, tree, full, entry_dir, time_limit_s, threads, box, attempts=1, log=log)
        except subprocess.TimeoutExpired:
            raise VerifyError(f"it did not finish within {time_limit_s:g} s") from None
        if new.record.get("status") == "ok":
            _keep_rerun(keep, pseudo, new)
        return new

    references = {
        key: RowReference(row_id(key), {_seed_of(records[i]) for i in all_rows.get(key, [])}, seed, run_at)
        for key in order
    }
    try:
        for _, rec in flat:  # extract each commit's tree once, before the cells run in parallel
            with contextlib.suppress(VerifyError):
                trees.tree((rec.get("provenance") or {}).get("git_commit"))

        def one(item: tuple[RowKey, dict[str, Any]]) -> tuple[RowKey, CellCheck, Rerun | None]:
            try:
                return check_one(item)
            except Exception as e:  # noqa: BLE001 - every row gets a status; the report is always written
                key, rec = item
                c = CellCheck(rec["cell_id"], rec["record_id"], "cannot verify", "", row_id(key))
                c.detail = sanitise("the check raised", f"{type(e).__name__}: {e}", log)
                return key, c, None

        def check_one(item: tuple[RowKey, dict[str, Any]]) -> tuple[RowKey, CellCheck, Rerun | None]:
            key, rec = item
            kept = _kept_rerun(keep, rec)
            if progress:
                progress(f"{'comparing the kept re-run of' if kept else 're-running'} {rec['cell_id']} ...")
            c, new = check_cell(
                rec, entry_dir, trees, time_limit_s, threads, box, rerun=kept, log=log, attempts=attempts,
                reference=references[key],
            )  # fmt: skip
            c.row_id = row_id(key)
            if kept is None and new is not None and new.record.get("status") == "ok":
                _keep_rerun(keep, rec, new)
            if progress:
                progress(f"  {c.status}: {c.cell_id}: {c.detail} ({c.seconds:g} s)")
            return key, c, new

        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            results = list(pool.map(one, flat))
        by_row: dict[RowKey, list[tuple[CellCheck, Rerun | None, dict[str, Any]]]] = {}
        for (key, rec), (_, c, new) in zip(flat, results):
            by_row.setdefault(key, []).append((c, new, rec))
        # every other latest record of a row against the row's first good re-run, while the code trees
        # are open: a comparison that is not exact may run the verifier's own seeds of the row lazily
        others = {key: _other_seeds(key, by_row[key], [records[i] for i in all_rows.get(key, [])],
                                    references[key], log) for key in by_row}  # fmt: skip
    finally:
        trees.close()
    report_rows, cells, reruns = [], [], []
    for key in sorted(by_row):
        rid = row_id(key)
        checks = [c for c, _, _ in by_row[key]] + others[key]
        ok_reruns = [(new, rec) for c, new, rec in by_row[key] if c.ok and new is not None]
        rerun_ids = {rec["record_id"] for _, rec in ok_reruns}
        members = [records[i] for i in all_rows.get(key, [])]
        status = _row_status(checks)
        report_rows.append(
            {
                "row": key.to_list(),
                "row_id": rid,
                "status": status,
                "records": {r["record_id"]: r.get("record_sha256") for r in members},
                "reruns": sorted(rerun_ids),
                # the spread the row's comparisons that were not exact were held to (none: all exact)
                "reference": references[key].source or "none needed: every comparison exact",
            }
        )
        cells += [asdict(c) for c in checks]
        if status == "verified":
            reruns += [_rerun_line(rec, rid, new, entry_dir) for new, rec in ok_reruns]
    reruns_text = "".join(json.dumps(r, sort_keys=True) + "\n" for r in reruns)
    again, _ = load_entry(entry_dir, as_recorded=True)
    if (
        _bound_files(entry_dir) != files_before
        or sorted((r["record_id"], r.get("record_sha256")) for r in again) != records_before
    ):
        raise VerifyError(f"{entry_dir.name}: the entry's files changed while it was being verified; run it again")
    statuses = {r["status"] for r in report_rows}
    report = {
        "schema": SCHEMA,
        "entry": entry_dir.name,
        "status": "verified" if statuses == {"verified"} and len(report_rows) == len(all_rows) else
                  "failed" if "failed" in statuses else "partly verified" if "verified" in statuses else "not verified",
        "verified_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "verifier_commit": os.environ.get("VERIFY_JUDGE_COMMIT") or git(repo, "rev-parse", "HEAD"),
        "judged_by": "base branch tree" if os.environ.get("VERIFY_JUDGE_COMMIT") else "this checkout",
        "base": base,
        "base_commit": trees.base_commit,
        "seed": seed,
        "sampling": {**inclusion_probabilities(records, fraction), "rows_rerun": len(report_rows), "rows_total": len(all_rows)},
        "containment": box.to_dict(),
        "files": files_before,
        "reruns_sha256": hashlib.sha256(reruns_text.encode()).hexdigest(),
        "rows": report_rows,
        "cells": cells,
    }  # fmt: skip
    if write:
        (entry_dir / RERUNS_FILE).write_text(reruns_text)
        (entry_dir / VERIFICATION_FILE).write_text(json.dumps(report, indent=1) + "\n")
    return report


def reproducible_part(report: dict[str, Any]) -> dict[str, Any]:
    """What two runs of the same verification (same seed, files and code) must agree on."""
    return {
        "schema": report.get("schema"),
        "entry": report.get("entry"),
        "status": report.get("status"),
        "seed": report.get("seed"),
        "files": report.get("files"),
        "rows": [(r.get("row_id"), r.get("status"), r.get("records")) for r in report.get("rows") or []],
        "cells": [(c.get("cell_id"), c.get("record_id"), c.get("status")) for c in report.get("cells") or []],
    }


def check_verification(entry_dir: str | Path, **kw: Any) -> list[str]:
    """Re-run the committed ``verification.json`` of an entry with its own seed; the differences
    (empty: it is what the maintainers' check gives). The CI check on the base branch. ``resume``
    (in ``kw``, :func:`verify_entry`): re-runs kept in that private folder are compared instead of
    being run again (``verify --check --resume DIR``: a kept verification checked without re-running)."""
    from leaderboard.submissions import VERIFICATION_FILE

    path = Path(entry_dir) / VERIFICATION_FILE
    try:
        committed = json.loads(path.read_text())
        seed = committed["seed"]
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise TypeError("seed is not an integer")
    except (OSError, ValueError, KeyError, TypeError) as e:
        return [f"{path.name}: not a verification this command wrote ({type(e).__name__})"]
    fraction = (committed.get("sampling") or {}).get("fraction_of_rest", FRACTION)
    rows = (committed.get("sampling") or {}).get("rows_rerun")
    if rows is not None and rows >= (committed.get("sampling") or {}).get("rows_total", rows):
        rows = None
    ours = verify_entry(entry_dir, seed=seed, fraction=fraction, write=False, rows=rows, **kw)
    a, b = reproducible_part(committed), reproducible_part(ours)
    return [f"{path.name}: {k} differs from a re-run of the check" for k in a if a[k] != b[k]]
