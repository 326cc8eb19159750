"""Records -> one flat pandas row per record (:func:`to_frame`), the first step of the leaderboard.

Column conventions: per-direction columns end in ``_forward`` / ``_backward`` / ``_dp`` /
``_total``; per-network-profile columns are ``<name>@<profile>`` (``time_to_target_s@1Gbps``).
Records are untrusted text: every field is coerced to its type here (a wrong type is NaN or
``""``), so the modules after this one can trust the columns.

``details=False`` leaves out the bulky per-record objects (``curve``, ``config``,
``provenance``) and keeps ``timing_inputs`` as a JSON text (orjson's where it is installed and
lossless, :func:`inputs_text`): that is the row the compact index (:mod:`leaderboard.index`)
stores; :func:`leaderboard.index.load_details` brings the objects back for the rows on screen and
``Index.heavy`` the inputs, as ``json``'s compact text (:func:`canonical_inputs`).
"""

from __future__ import annotations

import json
import math
import time
from functools import lru_cache
from typing import Any, Iterable

import pandas as pd

from leaderboard.networks import network_profiles
from leaderboard.times_file import step_key
from suite.results import network as model
from suite.results.calibration import DEFAULT_HARDWARE, load_calibration
from suite.results.entries import latest_flags, machine_label, row_keys, setup_label
from suite.results.network.timing_inputs import interpolate_target_step
from suite.results.records import (  # the record schema's byte directions and key lists
    DIRECTIONS,
    IDENTITY_KEYS,
    QUALITY_KEYS,
)
from suite.results.task_catalog import describe as describe_task
from suite.results.time_model import TIME_MODEL_VERSION, Basis, NotProjectable, Projection, model_times, priced_timing

_orjson: Any
try:  # optional (the leaderboard extra): the index's inputs text ~10x cheaper
    import orjson as _orjson
except ImportError:  # pragma: no cover - the tests hide it to check the other path
    _orjson = None

__all__ = [
    "BASELINE",
    "DIRECTIONS",
    "BYTE_DIRECTIONS",
    "MAINTAINERS",
    "DETAIL_COLUMNS",
    "setup_label",
    "machine_label",
    "to_frame",
]

BASELINE = "none"  # the uncompressed compressor every delta is measured against
BYTE_DIRECTIONS = DIRECTIONS + ("total",)
# the maintainers' baseline entry (records/mpcbench-baselines): the one third-party-free
# fallback baseline; an entry.yaml may also say ``maintainers: true`` once the loader allows it
MAINTAINERS = "mpcbench-baselines"
DETAIL_COLUMNS = ("curve", "config", "provenance")  # what details=False leaves out


def _num(v: Any) -> float:
    """A JSON number as float; anything else (None, bool, str) is NaN."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return math.nan
    return float(v)


def _dict(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _str(v: Any) -> str:
    return v if isinstance(v, str) else ("" if v is None else str(v))


MAX_WARNINGS = 100  # per record; a record is bounded anyway, this keeps one record from flooding the page


def _warning_list(v: Any) -> list[str]:
    """A record's ``warnings`` as a list of one-line strings (None or a missing field: none).

    Records come from strangers, so anything that is not a list of strings is coerced: a bare
    string is one warning, other items are shown via ``str``; never more than MAX_WARNINGS.
    """
    items = [v] if isinstance(v, str) else (v if isinstance(v, list) else [])
    return [" ".join(_str(w).split()) for w in items[:MAX_WARNINGS] if _str(w).strip()]


def _pos_int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None


def _load(provenance: dict[str, Any]) -> tuple[float, float]:
    """(1-minute, 15-minute) load average of the machine when the record was written, from
    ``provenance.load.load_avg`` (``os.getloadavg()``: runnable processes, not a percentage);
    NaN when the record predates the field."""
    avg = _dict(provenance.get("load")).get("load_avg")
    if isinstance(avg, list) and len(avg) == 3:
        one, fifteen = _num(avg[0]), _num(avg[2])
        if one >= 0 and fifteen >= 0:  # NaN compares False too
            return one, fifteen
    return math.nan, math.nan


def _spec_label(specs: dict[str, Any], fallback: str) -> str:
    """A compressor with its parameters from the record's ``specs_resolved`` (every parameter
    spelled out, e.g. ``quant(bits=8)``: same direction names as ``specs``), else ``fallback``
    (the record's ``compressor`` name as the user typed it)."""
    resolved = {d: " ".join(_str(specs.get(d)).split())[:120] for d in DIRECTIONS}
    pipe = {d: resolved[d] for d in ("forward", "backward") if resolved[d]}
    if not pipe:
        return fallback
    # tensor-parallel reductions: " | tp <spec>", or " | tp fwd=..,bwd=.." when they differ
    tp = {d: resolved[d] or "none" for d in ("tp_forward", "tp_backward")}
    tp_label = ""
    if set(tp.values()) != {"none"}:
        same = tp["tp_forward"] == tp["tp_backward"]
        tp_label = " | tp " + (tp["tp_forward"] if same else f"fwd={tp['tp_forward']},bwd={tp['tp_backward']}")
    if len(set(pipe.values())) == 1 and resolved["dp"] in ("", "none"):
        return next(iter(pipe.values())) + tp_label
    short = {"forward": "fwd", "backward": "bwd", "dp": "dp"}
    return (
        ",".join(
            f"{short[d]}={resolved[d]}" for d in short if resolved[d] and not (d == "dp" and resolved[d] == "none")
        )
        + tp_label
    )


def board_target(r: dict[str, Any]) -> tuple[float, float | None, float | None] | None:
    """(target, interpolated steps to it, first evaluated step at it) of a record written under a
    target its task has since revised (``DESCRIPTION["superseded_targets"]``: the record's stored
    target is listed there for its tier), met on the record's own curve; None when the record's
    own target stands. So a target found too loose (worse than the trivial predictor, or never
    reached by the baseline) is revised once, in the task module, and applies to every record
    written before the revision."""
    stored = _num(r.get("target"))
    desc = describe_task(_str(r.get("task")))
    tier = _str(r.get("tier"))
    if desc is None or stored not in desc.superseded_targets.get(tier, ()) or tier not in desc.targets:
        return None
    target = desc.targets[tier]
    hib = bool(r.get("higher_is_better")) if isinstance(r.get("higher_is_better"), bool) else True
    points = []
    for pt in r.get("curve") or []:
        if isinstance(pt, dict):
            step, metric = _num(pt.get("step")), _num(pt.get("metric"))
            if step == step and metric == metric:
                points.append((step, metric))
    first = next((s for s, m in points if (m >= target if hib else m <= target)), None)
    return target, interpolate_target_step(points, target, hib), first


class RemodelBudget:
    """What re-modeling older records may cost one :func:`to_frame` call (one entry folder or store,
    on every path that builds rows: the page, the index, ``report``): at most
    :data:`REMODEL_BUDGET_S` seconds of CPU in all and, per record, inputs of at most
    :data:`suite.results.network.MAX_MODEL_COST` simulation work. A record beyond either keeps its
    stored times and gets model version NaN ("not re-modeled"), counted in :attr:`skipped`."""

    def __init__(self, seconds: float | None = None) -> None:
        self.left = REMODEL_BUDGET_S if seconds is None else seconds
        self.skipped = 0
        self.prefetched: dict[tuple[str, tuple[str, ...]], tuple[dict[str, dict[str, float | None]], float]] = {}
        self._counted: set[tuple[str, tuple[str, ...]]] = set()

    def prefetch(self, records: list[dict[str, Any]]) -> None:
        """Re-model the records that need it on every core at once (:mod:`leaderboard.remodel_pool`),
        before they are flattened one by one: the workers share this budget's CPU seconds (each stops
        at its share) and skip inputs over :data:`suite.results.network.MAX_MODEL_COST`, so the checks
        are the serial ones; what they did not finish is re-modeled here as before."""
        from leaderboard.remodel_pool import remodel_in_workers

        wanted: dict[tuple[str, tuple[str, ...]], None] = {}
        for r in records:
            if _retimed(r, board_target_step(r)) is not None:
                continue
            request = _remodel_request(r, board_target_step(r))
            if request is None:
                continue
            text = json.dumps(request[0], sort_keys=True, separators=(",", ":"))
            if text not in _COSTS:
                wanted[(text, request[1])] = None
        self.prefetched.update(remodel_in_workers(list(wanted), self.left))

    def remodel(self, timing: dict[str, Any], profiles: tuple[str, ...]) -> dict[str, dict[str, float | None]] | None:
        """The current model's times, or None when over budget (or the inputs cannot be read)."""
        text = json.dumps(timing, sort_keys=True, separators=(",", ":"))
        try:
            if text in _COSTS:  # simulated before in this process: its cost was counted then
                return _remodel(text, profiles)
            done = self.prefetched.get((text, profiles))
            if done is not None:  # simulated by a worker (:meth:`prefetch`): its CPU time counts here, once
                if (text, profiles) not in self._counted:
                    if self.left <= 0:
                        self.skipped += 1
                        return None
                    self.left -= done[1]
                    self._counted.add((text, profiles))
                return done[0]
            inputs = model.TimingInputs.from_dict(timing)
            if self.left <= 0 or model.model_cost(inputs, len(profiles)) > model.MAX_MODEL_COST:
                self.skipped += 1
                return None
            t0 = time.process_time()
            out = _remodel(text, profiles)
            _COSTS.add(text)
            self.left -= time.process_time() - t0
            return out
        except (ValueError, TypeError, KeyError, AttributeError, RecursionError):  # untrusted stored inputs
            return None


REMODEL_BUDGET_S = 120.0  # CPU seconds of re-modeling per to_frame call (the baselines' 84 old records: ~15 s)
_COSTS: set[str] = set()  # inputs already simulated in this process (the lru cache holds their times)


def _modeled(
    r: dict[str, Any], target_step: float | None | str = "stored", budget: RemodelBudget | None = None
) -> tuple[dict[str, Any], float]:
    """(the record's modeled times per named profile, the time model's version). Every record is
    priced by the time model (:mod:`suite.results.time_model`: the setup's calibrated compute, the
    codec as a multiple of a copy, the counted bytes) at ``target_step`` (the board's, from
    :func:`board_target`; ``"stored"``: the record's own), within ``budget`` (:class:`RemodelBudget`).
    A record's own stored times are never shown: without usable inputs, or over the budget, it has
    no modeled time (NaN, version NaN)."""
    hit = _retimed(r, target_step)
    if hit is not None:
        return hit, float(TIME_MODEL_VERSION)
    request = _remodel_request(r, target_step)
    if request is None:
        return {}, math.nan
    fresh = (budget or RemodelBudget()).remodel(*request)
    if fresh is None:
        return {}, math.nan
    return fresh, float(TIME_MODEL_VERSION)


def board_target_step(r: dict[str, Any]) -> float | None | str:
    """The target step :func:`_flatten` models a record at (``"stored"``: its inputs' own)."""
    revised = board_target(r) if r.get("status") == "ok" else None
    return "stored" if revised is None else revised[1]


def _retimed(r: dict[str, Any], target_step: float | None | str) -> dict[str, Any] | None:
    """The record's times from its maintainers' entry's current ``times.json`` (attached by the
    loader as ``retimed``: target step -> times; :mod:`leaderboard.times_file`), if it has them."""
    stored = r.get("retimed")
    if not isinstance(stored, dict) or not r.get("is_maintainer"):
        return None
    hit = stored.get(step_key(target_step))
    return hit if isinstance(hit, dict) else None


def board_times(
    r: dict[str, Any], hardware: str = DEFAULT_HARDWARE
) -> tuple[float | None | str, dict[str, Any]] | None:
    """(the target step the board models a record at, its modeled times at every named profile) on
    ``hardware``: what :mod:`leaderboard.times_file` stores for the maintainers' entries."""
    step = board_target_step(r)
    try:
        got = model_times(r, model.PROFILES, load_calibration(hardware), step)
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError):  # untrusted stored inputs
        return None
    return None if got is None else (step, got[0])


def _remodel_request(
    r: dict[str, Any], target_step: float | None | str
) -> tuple[dict[str, Any], tuple[str, ...]] | None:
    """(the record's priced inputs, the named profiles) that :func:`_modeled` simulates, or None when
    the record has no usable inputs."""
    priced = priced_inputs(r, target_step)
    return None if priced is None else (priced[0], tuple(model.PROFILES))


def priced_inputs(
    r: dict[str, Any], target_step: float | None | str = "stored", projection: Projection | None = None
) -> tuple[dict[str, Any], Basis] | None:
    """The record's timing inputs as the time model prices them (``time_model.priced_timing`` on the
    board's calibration), at ``target_step`` (``"stored"``: the record's own), and the basis; None
    when the record's inputs cannot be read. Every time the board shows is simulated from these.
    Memoized per :func:`to_frame` call (the request and the row read it)."""
    key = (id(r), target_step, projection)
    if _PRICED_ACTIVE and key in _PRICED:
        return _PRICED[key]
    try:
        got = priced_timing(r, load_calibration(BOARD_HARDWARE), projection)
    except NotProjectable:
        raise
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError):  # untrusted stored inputs
        got = None
    if got is not None and not isinstance(target_step, str):
        got = ({**got[0], "target_step": target_step}, got[1])
    if _PRICED_ACTIVE:
        _PRICED[key] = got
    return got


# memo of one to_frame call (keyed by the ids of its records, so only while they are alive)
_PRICED: dict[tuple[Any, ...], tuple[dict[str, Any], Basis] | None] = {}
_PRICED_ACTIVE = False
BOARD_HARDWARE = DEFAULT_HARDWARE  # the calibration the board's times are priced on


@lru_cache(maxsize=4096)
def _remodel(timing_json: str, profiles: tuple[str, ...]) -> dict[str, dict[str, float | None]]:
    """The current model's times of stored inputs at named profiles (cached: copies of one run,
    e.g. a record in a results store and in ``records/``, are simulated once)."""
    inputs = model.TimingInputs.from_dict(json.loads(timing_json))
    return model.model_run(inputs, {p: model.PROFILES[p] for p in profiles})


def to_frame(
    records: Iterable[dict[str, Any]], *, details: bool = True, budget: RemodelBudget | None = None
) -> pd.DataFrame:
    """One row per record, flattened for pandas.

    Records are ``mpcbench.record/1`` dicts (already validated), optionally with ``entry``,
    ``submitter`` and ``entry_info`` attached by :mod:`leaderboard.submissions` (a record
    without them belongs to entry ``"local"``). Columns:

    - identity: ``record_id, cell_key, cell_id, created, entry, entry_name, submitter, task,
      tier, compressor, setup`` (:func:`setup_label`), ``seed, status, error``; ``latest`` is
      False for a record superseded by a newer record of the same entry and cell_key, or of
      the same entry, task, tier, compressor, setup and seed (a rerun: one seed is never
      counted twice), and such rows are ignored by :func:`aggregate`.
    - quality: ``metric_name, higher_is_better, final_metric, final_metric_uncompressed,
      target, reached_target_step``.
    - bytes: ``raw_bytes_<dir>, wire_bytes_<dir>, ratio_<dir>`` (raw / wire, NaN when the
      direction sent nothing) for forward/backward/dp/total, and ``bytes_per_step_<dir>``
      (wire bytes per training step; total = sum of the directions present).
    - time: measured ``step_s, compute_s, compress_s, comm_s, total_train_s, wall_s``; over a link
      (``mpcbench run --link``): ``link``, ``measured_link_step_s`` and ``modeled_link_step_s`` (the
      network model for the same link; NaN / ``""`` for runs without one);
      modeled ``time_to_target_s@<profile>`` (NaN: target not reached) and ``total_s@<profile>``
      for every network profile present in any record, by the current network model
      (``model_version``; older records are re-modeled from their inputs, see :func:`_modeled`).
    - ``warnings`` (list of one-line strings, e.g. a payload larger than the raw tensor; see
      ``suite.bench.record_builder.expansion_warnings``) and ``n_warnings`` (its length).
    - run / provenance: ``spec_forward, spec_backward, spec_dp, n_stages, dp, microbatches,
      schedule, steps, mode, device, git_commit, git_dirty, mpcbench_version, plugin_hash,
      torch, cuda, gpu, cpu``.
    - machine and ownership: ``machine`` (:func:`machine_label` of the record's own provenance: the
      machine class it was made on, part of the row key), ``verified_on`` (a verified record's
      re-run machine class, ``""`` otherwise), ``load_1m, load_15m`` (load average when the shown
      times were measured: the record's, or a verified record's re-run's; NaN if unknown),
      ``cpu_count`` (of the machine that measured the shown times),
      ``code_version`` (git commit, 12 digits, ``+dirty`` when the checkout was modified),
      ``maintainers`` (True for the maintainers' baseline entry, :data:`MAINTAINERS`),
      ``compressor_label`` (the compressor with its parameters where the record spells them
      out, see :func:`_spec_label`), ``display`` (the short name the runner recorded with a plugin's
      declared label, ``""`` if none: :mod:`leaderboard.names`), ``eval_samples`` (evaluation-set size; NaN if unknown),
      ``timing_inputs`` (the stored network-model inputs as a JSON string, ``""`` if none; with
      ``details=False`` a JSON text of them, :func:`inputs_text`).
    - raw objects for detail views: ``curve`` (list of points), ``config``, ``provenance``,
      ``entry_info`` (dicts). With ``details=False`` the first three are left out and
      ``entry_info`` is a JSON string (the compact index's row, see the module docstring).
    """
    global _PRICED_ACTIVE
    records = list(records)
    _PRICED.clear()  # ids of this call's records (a later call may reuse an id)
    _PRICED_ACTIVE = True
    try:
        return _to_frame(records, details, budget)
    finally:
        _PRICED_ACTIVE = False
        _PRICED.clear()


def _to_frame(records: list[dict[str, Any]], details: bool, budget: RemodelBudget | None) -> pd.DataFrame:
    infos: dict[int, tuple[Any, str]] = {}  # entry_info JSON by object: the loader attaches one dict per entry
    budget = RemodelBudget() if budget is None else budget
    budget.prefetch(records)
    rows = [_flatten(r, details, infos, budget) for r in records]
    frame = pd.DataFrame(rows)
    if frame.empty:
        return pd.DataFrame(columns=_BASE_COLUMNS)
    # the row and the latest-record rule are the entry model's (suite.results.entries), as the verifier's
    keys = row_keys(records)
    frame["setup"] = [k.setup for k in keys]
    frame["machine"] = [k.machine for k in keys]
    frame["latest"] = latest_flags(records, keys)
    # every profile seen anywhere gets a column (NaN where a record lacks it)
    for p in network_profiles(frame):
        for c in (f"time_to_target_s@{p}", f"total_s@{p}"):
            if c not in frame:
                frame[c] = math.nan
    return frame


_BASE_COLUMNS = [
    *IDENTITY_KEYS,
    "entry",
    "entry_name",
    "submitter",
    "setup",
    *QUALITY_KEYS,
    *[f"{k}_{d}" for k in ("raw_bytes", "wire_bytes", "ratio", "bytes_per_step") for d in BYTE_DIRECTIONS],
    "step_s",
    "compute_s",
    "compress_s",
    "comm_s",
    "total_train_s",
    "wall_s",
    "link",
    "measured_link_step_s",
    "modeled_link_step_s",
    "warnings",
    "n_warnings",
    "latest",
]


# json.dumps(v, separators=(",", ":")) without building an encoder per call; parsed JSON has no cycles to check
_COMPACT = json.JSONEncoder(separators=(",", ":"), check_circular=False)


def inputs_text(timing: Any, *, exact: bool = True) -> str:
    """A record's ``timing_inputs`` as JSON text ("" if it has none): ``json``'s compact text, or
    with ``exact=False`` orjson's where it is installed and loses nothing (json writes floats by
    ``repr``, 0.06 ms a record; orjson 0.005 ms). orjson writes NaN as ``null``: a text holding
    ``null`` anywhere (NaN, None, or the word in a string) is json's. Either text reads back to the
    same object; :func:`canonical_inputs` turns both into json's."""
    if not isinstance(timing, dict):
        return ""
    if not exact and _orjson is not None:
        try:
            text = _orjson.dumps(timing)
        except Exception:  # noqa: BLE001 - what orjson cannot write (a lone surrogate), json writes
            text = b"null"
        if b"null" not in text:
            return text.decode()
    return _COMPACT.encode(timing)


def canonical_inputs(text: str) -> str:
    """``json``'s compact text of an :func:`inputs_text` (the same text whichever wrote it)."""
    # json reads both exactly (orjson would read an integer beyond 64 bits as a float)
    return _COMPACT.encode(json.loads(text)) if text else text


def _flatten(
    r: dict[str, Any],
    details: bool = True,
    infos: dict[int, tuple[Any, str]] | None = None,
    budget: RemodelBudget | None = None,
) -> dict[str, Any]:
    ok = r.get("status") == "ok"
    info = _dict(r.get("entry_info"))
    prov = _dict(r.get("provenance"))
    machine = _dict(prov.get("machine"))
    run = _dict(r.get("run"))
    specs = _dict(r.get("specs"))
    compressor = _str(r.get("compressor"))
    row: dict[str, Any] = {
        "record_id": _str(r.get("record_id")),
        "cell_key": _str(r.get("cell_key")),
        "cell_id": _str(r.get("cell_id")),
        "created": _str(r.get("created")),
        "entry": _str(r.get("entry")) or "local",
        "entry_name": _str(info.get("name")) or _str(r.get("entry")) or "local",
        "submitter": _str(r.get("submitter")),
        "task": _str(r.get("task")),
        "tier": _str(r.get("tier")),
        "compressor": compressor,
        "setup": setup_label(r),
        "seed": int(r["seed"]) if isinstance(r.get("seed"), int) else -1,
        "status": _str(r.get("status")),
        "error": _str(r.get("error")),
        "metric_name": _str(r.get("metric_name")),
        "higher_is_better": r.get("higher_is_better") if isinstance(r.get("higher_is_better"), bool) else True,
        "final_metric": _num(r.get("final_metric")) if ok else math.nan,
        "final_metric_uncompressed": _num(r.get("final_metric_uncompressed")) if ok else math.nan,
        "target": _num(r.get("target")),
        "reached_target_step": _num(r.get("reached_target_step")),
        "warnings": _warning_list(r.get("warnings")),
    }
    row["n_warnings"] = len(row["warnings"])
    # bytes: ratios are recomputed from the measured counts, never taken from the record's claim
    counts = _dict(r.get("bytes"))
    raw_total = wire_total = 0.0
    for d in DIRECTIONS:
        c = _dict(counts.get(d))
        raw, wire = _num(c.get("raw")), _num(c.get("wire"))
        row[f"raw_bytes_{d}"], row[f"wire_bytes_{d}"] = raw, wire
        row[f"ratio_{d}"] = raw / wire if wire > 0 else math.nan
        if wire > 0:
            raw_total += raw
            wire_total += wire
    have_bytes = ok and any(_dict(counts.get(d)) for d in DIRECTIONS)
    row["raw_bytes_total"] = raw_total if have_bytes else math.nan
    row["wire_bytes_total"] = wire_total if have_bytes else math.nan
    row["ratio_total"] = raw_total / wire_total if wire_total > 0 else math.nan
    bps = _dict(r.get("bytes_per_step"))
    vals = []
    for d in DIRECTIONS:
        v = _num(bps.get(d))
        row[f"bytes_per_step_{d}"] = v
        if not math.isnan(v):
            vals.append(v)
    row["bytes_per_step_total"] = sum(vals) if vals else math.nan
    t = _dict(r.get("time"))
    for k in ("step_s", "compute_s", "compress_s", "comm_s", "total_train_s"):
        row[k] = _num(t.get(k))
    row["wall_s"] = _num(r.get("wall_s"))
    # over a real or emulated link: the measured step next to the model's for the same link
    net = _dict(r.get("network"))
    row["link"] = _str(net.get("link"))
    row["measured_link_step_s"] = _num(_dict(net.get("measured")).get("step_s"))
    row["modeled_link_step_s"] = _num(_dict(_dict(net.get("modeled")).get("as_emulated")).get("step_s"))
    revised = board_target(r) if ok else None
    target_step: float | None | str = "stored"
    if revised is not None:
        row["target"], target_step, first = revised
        row["reached_target_step"] = math.nan if first is None else first
    modeled, row["model_version"] = _modeled(r, target_step, budget)
    priced = priced_inputs(r, target_step) if ok else None
    row["time_basis"] = priced[1].describe() if priced else ""
    row["time_calibrated"] = bool(priced and priced[1].calibrated)
    for prof, m in modeled.items():
        m = _dict(m)
        row[f"time_to_target_s@{prof}"] = _num(m.get("time_to_target_s"))
        row[f"total_s@{prof}"] = _num(m.get("total_s"))
    for d in DIRECTIONS:
        row[f"spec_{d}"] = _str(specs.get(d))
    for k in ("n_stages", "dp", "microbatches", "steps"):
        row[k] = _num(run.get(k))
    for k in ("schedule", "mode", "device"):
        row[k] = _str(run.get(k))
    # a verified record's times are its re-run's: the machine, load and plugin hash next to them too
    # (leaderboard.submissions.row_verification); ``prov`` keeps the recorded machine class, the row's key
    shown = {**prov, **_dict(r.get("rerun_provenance"))} if "rerun_provenance" in r else prov
    hashes = _dict(shown.get("plugin_hashes"))
    row.update(
        git_commit=_str(prov.get("git_commit")),
        git_dirty=prov.get("git_dirty") if isinstance(prov.get("git_dirty"), bool) else None,
        mpcbench_version=_str(prov.get("mpcbench_version")),
        plugin_hash=_str(hashes.get(compressor)) or ", ".join(sorted({_str(v) for v in hashes.values()})),
        torch=_str(machine.get("torch")),
        cuda=_str(machine.get("cuda")),
        gpu=_str(machine.get("gpu")),
        cpu=_str(machine.get("cpu")),
    )
    load_1m, load_15m = _load(shown)
    git = _str(prov.get("git_commit"))[:12]
    timed_on = _dict(shown.get("machine"))
    row.update(
        machine="",  # the row key's machine class (to_frame): the one the record was made on
        verified_on=machine_label(shown) if "rerun_provenance" in r else "",
        load_1m=load_1m,
        load_15m=load_15m,
        cpu_count=_num(timed_on.get("cpu_affinity"))
        if _pos_int(timed_on.get("cpu_affinity"))
        else _num(timed_on.get("cpu_count")),
        code_version=(git + ("+dirty" if prov.get("git_dirty") is True else "")) if git else "",
        # the loader's ownership mark (leaderboard.submissions: is_maintainer); records built by hand: the name
        maintainers=r["is_maintainer"] is True if "is_maintainer" in r else row["entry"] == MAINTAINERS,
        # the row's verdict (leaderboard.submissions.row_verification): verified / not verified / failed
        verification=_str(r.get("verification")) or ("not verified" if _str(info.get("verification")) else ""),
        verified_cells=" ".join(_str(r.get("verified_cells")).split())[:120],
        compressor_label=_spec_label(_dict(r.get("specs_resolved")), compressor),
        display=" ".join(_str(r.get("display")).split())[:80],  # with a plugin's declared label (leaderboard.names)
        eval_samples=_num(run.get("eval_samples")),
        # the priced inputs (the time model's, not the record's own seconds): every view that re-models
        # a row at another link (crossover, curves, bandwidth) simulates these, as the columns above do
        timing_inputs=inputs_text(priced[0] if priced else None, exact=details),
    )
    if details:
        row.update(
            curve=r.get("curve") if isinstance(r.get("curve"), list) else [],
            config=_dict(r.get("config")),
            provenance=prov,
            entry_info=info,
        )
    else:
        if infos is None or not isinstance(r.get("entry_info"), dict):
            row["entry_info"] = json.dumps(info, sort_keys=True)
        else:  # by id; the dict is kept in ``infos`` so that its id is not reused
            if id(info) not in infos:
                infos[id(info)] = (info, json.dumps(info, sort_keys=True))
            row["entry_info"] = infos[id(info)][1]
    return row


def view_target(rows: pd.DataFrame) -> float:
    """The quality target of a (task, tier) view: the maintainers' records' target where they have
    rows, else the value most entries give (one vote per entry). A record's own ``target`` field never
    changes the target shown in another entry's view while the maintainers have one."""
    if "target" not in rows or not len(rows):
        return math.nan
    have = rows[rows["target"].notna()]
    if "maintainers" in have:
        own = have[have["maintainers"].astype(bool)]
        have = own if len(own) else have
    if not len(have):
        return math.nan
    by_entry = have.groupby("entry")["target"].agg(lambda t: t.mode().iloc[0]) if "entry" in have else have["target"]
    counts = by_entry.value_counts()
    return float(min(counts[counts == counts.max()].index))
