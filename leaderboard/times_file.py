"""The maintainers' entries' modeled times, computed once: ``records/<entry>/times.json``.

Pricing every committed record through the time model costs seconds of simulation; the board must
open in about one. So the maintainers' own entries carry their records' modeled times, written by
``mpcbench retime records/<entry>`` after records or the calibration change, keyed by

* each record's stored line (``record_sha256``) and the target step the board models it at, and
* :func:`times_key`: the time model's and the network model's versions, the calibration file's
  digest and a digest of the model's code.

The board uses a stored time only for a maintainers' entry (protected like their records) and only
where both keys match; any other record, or a stale file, is simulated as before. A test recomputes
every stored time and fails when the file is stale or edited (tests/leaderboard/test_times_file.py),
so the file can speed the board up but never change what it shows.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

from suite.results.calibration import load_calibration
from suite.results.network import MODEL_VERSION
from suite.results.time_model import TIME_MODEL_VERSION

__all__ = ["TIMES_FILE", "times_key", "step_key", "read_times", "write_times"]

TIMES_FILE = "times.json"
_CODE = Path(__file__).resolve().parents[1] / "suite" / "results"


def _code_digest() -> str:
    h = hashlib.sha256()
    for f in sorted([_CODE / "time_model.py", _CODE / "calibration.py", *(_CODE / "network").glob("*.py")]):
        h.update(f.name.encode() + b"\0" + f.read_bytes().replace(b"\r\n", b"\n"))
    return h.hexdigest()[:16]


def times_key(hardware: str) -> str:
    """What the stored times depend on besides the records: model versions, calibration, code."""
    cal = load_calibration(hardware)
    return json.dumps([TIME_MODEL_VERSION, MODEL_VERSION, hardware, cal.digest if cal else None, _code_digest()])


def step_key(target_step: Any) -> str:
    """How a target step is written in the file (``\"stored\"``: the record's own)."""
    return "stored" if isinstance(target_step, str) else repr(target_step)


def read_times(entry_dir: Path, hardware: str) -> dict[tuple[str, str], dict[str, Any]]:
    """(record sha256, target step) -> modeled times per profile, from a current ``times.json``
    (empty when the file is missing, unreadable or stale)."""
    path = Path(entry_dir) / TIMES_FILE
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(doc, dict) or doc.get("key") != times_key(hardware):
        return {}
    out = {}
    for row in doc.get("records", []):
        if isinstance(row, dict) and isinstance(row.get("sha256"), str) and isinstance(row.get("modeled"), dict):
            out[(row["sha256"], str(row.get("target_step")))] = row["modeled"]
    return out


def write_times(entry_dir: Path, hardware: str) -> int:
    """Model every record of the entry as the board does and write ``times.json``; the number of
    records written."""
    from leaderboard.frame import board_times  # the board's own computation, nothing else
    from leaderboard.submissions import load_entry

    records, problems = load_entry(entry_dir, as_recorded=True)
    if problems and not records:
        raise ValueError(f"{entry_dir}: {problems[0].reason}")
    rows = []
    for r in records:
        got = board_times(r, hardware)
        if got is None:
            continue
        step, modeled = got
        clean = {
            p: {k: (v if v is None or math.isfinite(v) else None) for k, v in m.items()} for p, m in modeled.items()
        }
        rows.append({"sha256": r.get("record_sha256"), "target_step": step_key(step), "modeled": clean})
    doc = {"schema": "mpcbench.times/1", "key": times_key(hardware), "records": rows}
    (Path(entry_dir) / TIMES_FILE).write_text(json.dumps(doc, indent=0, sort_keys=True) + "\n")
    return len(rows)
