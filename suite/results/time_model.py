"""The one home for time on the board: a row's modeled step time from parts that belong to it.

    modeled step = compute of the setup  +  the compressor's codec work  +  the wire

simulated over the schedule the run executed (:mod:`suite.results.network`):

* **compute** (each stage's forward/backward per micro-batch, optimizer, outer-loop work) is the
  setup's reference on a hardware class (:class:`suite.results.calibration.SetupCompute`), measured
  in quiet, repeated, interleaved calibration runs; never what one cell happened to see under load.
  A compressor that adds work to the model (a learned code) multiplies it by its extra-work ratio,
  measured against ``none`` in the same calibration rounds.
* **codec** (compress and decompress at every site: pipeline boundaries, data-parallel buckets,
  tensor-parallel collectives) is each site's *multiple of a copy of the same bytes* times the
  hardware's copy time of those bytes. The multiple is measured beside a copy on the same thread
  (``Clock.codec``), so it carries across loads and machines. The calibration's multiple of a
  (setup, compressor) row is used where it exists (the maintainers' measurement), else the record's
  own (every cell measures it since this model).
* **wire**: the record's counted bytes and messages per step, over the link (the event simulation).

Where the calibration has no reference for a record's setup, the record's own measured costs are
used and the row's :class:`Basis` says so ("own run"): the page marks such times.

The score, the ranking's time columns, time-to-quality curves, the crossover plot, the bandwidth
for 50/90/99 % utilization, ``mpcbench report`` and ``mpcbench compare`` all read times through
:func:`priced_timing` / :func:`model_times` (the frame's priced inputs, which every view re-models). Verification re-runs never replace a
record's times: a record's time is a function of its bytes, its schedule and the calibration.

Torch-free; pure functions of (record, calibration, link), cached per process.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping

from . import network as net
from .calibration import Calibration, CopyCost, RowCalibration, SiteCost, compute_key
from .model_sizes import ModelCost, ModelSizeError, get_model_cost
from .network.timing_inputs import ActionCost, CodecSample, StageCost, TimingInputs
from .projection import OPTIMIZER_COPY_BYTES_PER_PARAM, NotProjectable, Projection, copy_s, project_compute_s

__all__ = [
    "TIME_MODEL_VERSION",
    "Basis",
    "RowModel",
    "row_model",
    "priced_timing",
    "model_times",
    "codec_seconds",
    "Projection",
    "NotProjectable",
]

# Bump when the same records and calibration give other times (part of the board's cache keys).
TIME_MODEL_VERSION = 1


@dataclass(frozen=True)
class Basis:
    """Where a row's modeled time comes from: ``compute`` and ``codec`` are ``"calibrated"`` (the
    hardware class's calibration), ``"own run"`` (the record's own measurement: its codec
    multiples, or for older records its seconds) or ``"none"``; ``hardware`` the calibration's name."""

    compute: str
    codec: str
    extra_work: float
    hardware: str
    projection: str = ""  # Projection.describe() of a projected row; "" for a measured one

    @property
    def calibrated(self) -> bool:
        return self.compute == "calibrated" and self.codec in ("calibrated", "own multiples")

    def describe(self) -> str:
        parts = [f"compute: {self.compute}", f"codec: {self.codec}"]
        if self.extra_work != 1.0:
            parts.append(f"extra work x{self.extra_work:.3g}")
        out = f"{self.hardware}: " + ", ".join(parts)
        return f"{out}; {self.projection}" if self.projection else out


@dataclass(frozen=True)
class RowModel:
    """A record's inputs as the time model prices them, and where each part came from."""

    inputs: TimingInputs
    basis: Basis


def codec_seconds(sites: Mapping[str, SiteCost], copy: CopyCost, prefix: str, per: float = 1.0) -> float:
    """Seconds of the codec sites whose name starts with ``prefix`` in one step of one replica,
    divided by ``per`` (the micro-batches, for a per-action cost)."""
    total = 0.0
    for site, c in sites.items():
        if site.startswith(prefix):
            total += c.multiple * copy.seconds(c.nbytes) * c.calls_per_step
    return total / per


def _own_sites(codec: Mapping[str, CodecSample], tp: int) -> dict[str, SiteCost]:
    out = {}
    for site, c in codec.items():
        m = c.multiple
        if m is None or not math.isfinite(m):
            continue
        calls = c.calls_per_step / (tp if site.startswith("tp.") else 1)
        out[site] = SiteCost(m, c.nbytes, calls)
    return out


def _priced_stages(
    own: TimingInputs,
    compute: tuple[StageCost, ...] | None,
    sites: Mapping[str, SiteCost] | None,
    copy: CopyCost,
    extra: float,
) -> list[StageCost]:
    """Per stage the action costs the simulation runs: compute from the reference (else the
    record's own), pre/post from the codec sites (else the record's own seconds)."""
    S, M = len(own.stages), max(1, own.microbatches)
    out = []
    for s in range(S):
        mine = own.stages[s]
        base = compute[s] if compute is not None else mine
        kinds = set(base.actions) | set(mine.actions)
        acts = {}
        for kind in sorted(kinds):
            c = base.of(kind).compute_s * (extra if compute is not None else 1.0)
            if sites is None:
                pre, post = mine.of(kind).pre_s, mine.of(kind).post_s
            else:
                if kind == "F":
                    pre = codec_seconds(sites, copy, f"b{s - 1}.forward.decompress", M) if s > 0 else 0.0
                    post = codec_seconds(sites, copy, f"b{s}.forward.compress", M)
                    c += codec_seconds(sites, copy, f"tp.s{s}.forward.", M)
                elif kind == "B":
                    pre = codec_seconds(sites, copy, f"b{s}.backward.decompress", M)
                    post = codec_seconds(sites, copy, f"b{s - 1}.backward.compress", M) if s > 0 else 0.0
                    # the backward's collectives: tensor-parallel gradients, and the data-parallel
                    # hook (it fires inside the backward; per step, spread over the micro-batches)
                    c += codec_seconds(sites, copy, f"tp.s{s}.backward.", M) + codec_seconds(
                        sites, copy, f"dp.s{s}.", M
                    )
                else:
                    pre = post = 0.0
            acts[kind] = ActionCost(pre, c, post)
        out.append(StageCost(acts, base.optimizer_s, base.sync_s))
    return out


# The most distinct step loads per phase (warm-up, then the rest) the board simulates: a run whose
# payload size varies from step to step (top-k, AQ-SGD's first visits) is stored as up to 256 chunk
# means; the board averages them further, over contiguous chunks of equal step counts. The modeled
# total and time-to-target move by <= 0.2 % on the committed records (docs/ARCHITECTURE.md, "Time").
BOARD_LOADS = 16


def coarsen_steps(
    steps: list[Any], counts: list[Any], warmup: int, most: int = BOARD_LOADS
) -> tuple[list[Any], list[int]]:
    """Run-length encoded step loads (JSON form) with at most ``most`` runs per phase: runs merged
    into contiguous groups of about equal step counts, each group's loads averaged field by field
    weighted by steps (bytes and messages per step are additive, so the group's total is kept)."""
    counts = [int(c) for c in counts] if counts else [1] * len(steps)
    if len(steps) <= most:
        return list(steps), counts
    out_s: list[Any] = []
    out_c: list[int] = []
    i, done = 0, 0
    for phase_end in (warmup, sum(counts)):
        phase: list[tuple[Any, int]] = []
        while i < len(steps) and done < phase_end:
            phase.append((steps[i], counts[i]))
            done += counts[i]
            i += 1
        if len(phase) <= most:
            out_s += [p[0] for p in phase]
            out_c += [p[1] for p in phase]
            continue
        total = sum(c for _, c in phase)
        group: list[tuple[Any, int]] = []
        filled, k = 0, 1
        for j, (load, c) in enumerate(phase):
            group.append((load, c))
            filled += c
            if filled >= total * k / most or j == len(phase) - 1:
                out_s.append(_mean_load(group))
                out_c.append(sum(n for _, n in group))
                group, k = [], k + 1
    return out_s, out_c


def _mean_load(group: list[tuple[Any, int]]) -> Any:
    """Step-weighted mean of equally shaped step loads (JSON form)."""
    if len(group) == 1:
        return group[0][0]
    n = sum(c for _, c in group)

    def mean(objs: list[tuple[Any, int]]) -> Any:
        first = objs[0][0]
        if isinstance(first, dict):
            return {k: mean([(o[k], c) for o, c in objs]) for k in first}
        if isinstance(first, list):
            return [mean([(o[j], c) for o, c in objs]) for j in range(len(first))]
        return sum(float(o) * c for o, c in objs) / n

    return mean(group)


def _boundary_ratio(base: ModelCost, target: ModelCost, s: int) -> float:
    """Raw boundary bytes of stage ``s`` at the target size over the measured size's (the last
    stage sends nothing: its input's ratio, the previous boundary's, stands for its activations)."""
    i = s if base.stages[s].boundary_bytes else max(0, s - 1)
    b = base.stages[i].boundary_bytes
    return target.stages[i].boundary_bytes / b if b else 1.0


def _params_ratio(base: ModelCost, target: ModelCost, s: int | None) -> float:
    if s is None or s >= len(base.stages):
        return target.model_params / base.model_params
    return target.stages[s].params / base.stages[s].params if base.stages[s].params else 1.0


def _site_ratio(site: str, base: ModelCost, target: ModelCost) -> float:
    """How a codec site's raw bytes grow from the measured size to the target: boundary sites
    (``b{s}.``) and tensor-parallel collectives (``tp.s{s}.``) with stage s's activations, the
    data-parallel buckets (``dp.s{s}.``) with stage s's parameters."""
    head = site.split(".")
    try:
        if head[0].startswith("b") and head[0][1:].isdigit():
            return _boundary_ratio(base, target, int(head[0][1:]))
        if head[0] in ("tp", "dp") and len(head) > 1 and head[1][1:].isdigit():
            s = int(head[1][1:])
            if s < len(base.stages):
                return _boundary_ratio(base, target, s) if head[0] == "tp" else _params_ratio(base, target, s)
    except (ValueError, IndexError):
        pass
    return _params_ratio(base, target, None)


def _projected_codec_s(
    sites: Mapping[str, SiteCost],
    prefix: str,
    per: float,
    base: ModelCost,
    target: ModelCost,
    copy_of: Callable[[float], float],
    harness: Mapping[str, tuple[float, Callable[[float], float] | None]] | None = None,
) -> float:
    """:func:`codec_seconds` on the profile, per ``per`` micro-batches: each site's calls a step x
    (its fixed part + its own multiple x ``copy_of`` (the profile's copy time) of its raw bytes at
    the target size).

    ``harness``: per site, (``none``'s multiple, this machine's copy time where its seconds stay a fixed
    cost per call, None on an accelerator): the benchmark's own checks of every payload and decoded
    tensor, in every row's codec section.
    They are not the compressor's work: its own multiple is what it costs beyond ``none`` there, and
    ``none``'s seconds stay a fixed cost per call where given (this machine) instead of growing with
    the bytes (docs/performance.md: per-call costs do not scale with a tensor's size)."""
    total = 0.0
    for site, c in sites.items():
        if not site.startswith(prefix) or c.nbytes <= 0:
            continue
        grown = copy_of(c.nbytes * _site_ratio(site, base, target))
        m0, here = (harness or {}).get(site, (0.0, None))
        # this machine: none's seconds stay fixed at the row's measured bytes and only the rest grows
        # (at the measured size: m x copy, exactly); an accelerator: only what it costs beyond none
        fixed = m0 * here(c.nbytes) if here is not None else 0.0
        total += max(0.0, fixed + (c.multiple - m0) * grown) * c.calls_per_step
    return total / per


def _projected_stages(
    own: TimingInputs,
    sites: Mapping[str, SiteCost],
    extra: float,
    base: ModelCost,
    target: ModelCost,
    projection: Projection,
    tp: int,
    copy: CopyCost,
    compute: tuple[StageCost, ...] | None = None,
    none_sites: Mapping[str, SiteCost] | None = None,
) -> list[StageCost]:
    """Per stage the action costs on the projection's hardware.

    A datasheet profile: F and B from the target size's counted FLOPs at peak x MFU (split over the
    tensor-parallel ranks; a zero-bubble W takes half of B's), at least the counted kernels x the
    profile's ``kernel_launch_s`` (a small model on an accelerator is launch-bound), the codec sites from their multiples
    on the profile's copy, the optimizer as a copy of OPTIMIZER_COPY_BYTES_PER_PARAM a parameter.
    This machine (a calibrated profile): the setup's calibrated compute (``compute``) grown by the
    counted FLOPs' ratio per stage and action, the codec on the calibrated copy, the calibrated
    optimizer step grown with the parameters. An outer loop's local work (``sync_s``) scales with
    the copy time of the target's parameters over the measured size's here."""
    hw = projection.profile()
    S, M = len(own.stages), max(1, own.microbatches)
    if hw.measured and compute is None:
        raise NotProjectable("a projection on this machine needs the setup's calibrated compute; it has none")

    def copy_of(nbytes: float) -> float:
        return copy.seconds(nbytes) if hw.measured else copy_s(nbytes, hw)

    # none's multiple at each site: the harness's share of every row's codec (kept as a fixed cost
    # per call on this machine, where it ran; left out on an accelerator, which runs the compressor)
    harness = {site: (c.multiple, copy.seconds if hw.measured else None) for site, c in (none_sites or {}).items()}

    def codec(prefix: str) -> float:
        return _projected_codec_s(sites, prefix, M, base, target, copy_of, harness)

    out = []
    for s in range(S):
        mine, tc, bc = own.stages[s], target.stages[s], base.stages[s]
        kinds = set(mine.actions)
        back = tc.backward_flops / tp
        flops = {"F": tc.forward_flops / tp, "B": back / 2 if "W" in kinds else back, "W": back / 2}
        grow_b = tc.backward_flops / bc.backward_flops if bc.backward_flops else 1.0
        grow = {"F": tc.forward_flops / bc.forward_flops if bc.forward_flops else 1.0, "B": grow_b, "W": grow_b}
        # every rank launches each kernel of its stage (tensor parallelism splits the FLOPs, not the ops)
        back_k = tc.backward_kernels
        kernels = {"F": tc.forward_kernels, "B": back_k / 2 if "W" in kinds else back_k, "W": back_k / 2}
        acts = {}
        for kind in sorted(kinds):
            if compute is not None and hw.measured:
                c = compute[s].of(kind).compute_s * grow.get(kind, 1.0) * extra
            else:  # the FLOPs at peak x MFU, but never under the kernels' launch floor
                c = project_compute_s(flops.get(kind, 0.0), hw, projection.mfu)
                c = max(c, kernels.get(kind, 0) * (hw.kernel_launch_s or 0.0)) * extra
            pre = post = 0.0
            if kind == "F":
                pre = codec(f"b{s - 1}.forward.decompress") if s > 0 else 0.0
                post = codec(f"b{s}.forward.compress")
                c += codec(f"tp.s{s}.forward.")
            elif kind == "B":
                pre = codec(f"b{s}.backward.decompress")
                post = codec(f"b{s - 1}.backward.compress") if s > 0 else 0.0
                c += codec(f"tp.s{s}.backward.") + codec(f"dp.s{s}.")
            acts[kind] = ActionCost(pre, c, post)
        params = tc.params / tp
        if compute is not None and hw.measured:
            opt = compute[s].optimizer_s * (tc.params / bc.params if bc.params else 1.0)
        else:
            opt = copy_s(params * OPTIMIZER_COPY_BYTES_PER_PARAM, hw) if params else 0.0
        sync = 0.0
        if mine.sync_s > 0 and params:  # fp32 parameters: the measured size's here, the target's there
            sync = mine.sync_s * copy_of(4.0 * params) / max(copy.seconds(4.0 * bc.params / tp), 1e-12)
        out.append(StageCost(acts, opt, sync))
    return out


def _scaled_loads(steps: list[Any], base: ModelCost, target: ModelCost) -> list[Any]:
    """Step loads (JSON form) at the target size: pipeline links and tensor-parallel collectives
    with the boundary's raw bytes, data-parallel reductions with the stage's parameters (a
    compressor is taken to keep its measured ratio; messages unchanged)."""
    if target is base:
        return steps
    out = []
    for load in steps:
        links = [
            {
                **l,
                "fwd_bytes": l["fwd_bytes"] * _boundary_ratio(base, target, i),
                "bwd_bytes": l["bwd_bytes"] * _boundary_ratio(base, target, i),
            }
            for i, l in enumerate(load.get("links", []))
        ]
        dps = load.get("dp", [])
        dp = [
            {
                k: (
                    v * _params_ratio(base, target, i if len(dps) == len(base.stages) else None)
                    if k.endswith("_bytes")
                    else v
                )
                for k, v in d.items()
            }
            for i, d in enumerate(dps)
        ]
        tps = [
            {
                k: (v * _boundary_ratio(base, target, min(i, len(base.stages) - 1)) if k.endswith("_bytes") else v)
                for k, v in t.items()
            }
            for i, t in enumerate(load.get("tp", []))
        ]
        out.append({**load, "links": links, "dp": dp, "tp": tps})
    return out


def _model_costs(
    record: Mapping[str, Any], n_stages: int, microbatches: int, model_size: str | None
) -> tuple[ModelCost, ModelCost]:
    """(the measured size's FLOP count, the target size's) for the record's setup, or NotProjectable."""
    task, tier = str(record.get("task") or ""), str(record.get("tier") or "")
    cfg = record.get("config")
    measured = cfg.get("model_size") if isinstance(cfg, Mapping) else None  # None: the tier's own model
    try:
        base = get_model_cost(task, measured, tier, n_stages)
        target = base if model_size in (None, measured) else get_model_cost(task, model_size, tier, n_stages)
    except ModelSizeError:
        size = model_size or measured or "its measured size"
        raise NotProjectable(
            f"no FLOP count for {task}/{tier} with {n_stages} stage(s) at {size} (suite/results/model_sizes.json)"
        ) from None
    if base.microbatches != microbatches:
        raise NotProjectable(
            f"{task}/{tier}: the run used {microbatches} micro-batches, the FLOP count {base.microbatches}"
        )
    return base, target


def _stage_dict(st: StageCost) -> dict[str, Any]:
    return {
        "actions": {k: {"pre_s": a.pre_s, "compute_s": a.compute_s, "post_s": a.post_s} for k, a in st.actions.items()},
        "optimizer_s": st.optimizer_s,
        "sync_s": st.sync_s,
    }


def priced_timing(
    record: Mapping[str, Any], calibration: Calibration | None, projection: Projection | None = None
) -> tuple[dict[str, Any], Basis] | None:
    """The record's ``timing_inputs`` (JSON form) with compute and codec priced by the time model,
    and where each part came from; None when the record has no usable ``timing_inputs``. Only the
    stage costs change: schedule, counted bytes and messages, target step stay the record's.

    With a ``projection`` the costs are the hardware profile's at the projection's model size
    (:func:`_projected_stages`; the codec multiples are the same ones the measured view uses) and
    the step loads scale to that size; :class:`NotProjectable` when the setup has no FLOP count or
    the row no codec multiples."""
    timing = record.get("timing_inputs")
    if not isinstance(timing, Mapping):
        return None
    if "schedule" not in timing:  # version-1 inputs (closed-form era): their version-2 form
        timing = TimingInputs.from_dict(timing).to_dict()
    own = TimingInputs.from_dict({**timing, "steps": [], "counts": []})  # the costs only: cheap
    cfg_v = record.get("config")
    cfg: Mapping[str, Any] = cfg_v if isinstance(cfg_v, Mapping) else {}
    tp_v = cfg.get("tp")
    tp = tp_v if isinstance(tp_v, int) and not isinstance(tp_v, bool) and tp_v > 0 else 1
    comp_v = record.get("compressor")
    compressor = comp_v if isinstance(comp_v, str) else ""
    key = compute_key(record)
    ref = calibration.compute.get(key) if calibration else None
    compute = ref.stages if ref is not None and len(ref.stages) == len(own.stages) else None
    row: RowCalibration | None = calibration.row(key, compressor) if calibration else None
    extra = row.extra_work if (row is not None and compute is not None) else 1.0
    sites: dict[str, SiteCost] | None
    if calibration is None:
        sites, codec_basis = None, "own run"
    elif row is not None:  # measured; no sites at all (one stage, a plain reduction) is no codec work
        sites, codec_basis = dict(row.sites), "calibrated"
    elif own.codec:
        sites, codec_basis = _own_sites(own.codec, tp), "own multiples"
    else:
        sites, codec_basis = None, "own run"
    copy = calibration.copy if calibration else CopyCost(0.0, math.inf)
    steps, counts = coarsen_steps(
        timing.get("steps") or [], timing.get("counts") or [], int(timing.get("warmup_steps") or 0)
    )
    if projection is not None:
        if sites is None:
            raise NotProjectable("the row has no codec multiples (a run from before the time model)")
        base, target = _model_costs(record, len(own.stages), own.microbatches, projection.model_size)
        extra = row.extra_work if row is not None else 1.0
        none_row = calibration.row(key, "none") if calibration else None
        none_sites = dict(none_row.sites) if none_row is not None else None
        stages = _projected_stages(own, sites, extra, base, target, projection, tp, copy, compute, none_sites)
        steps = _scaled_loads(steps, base, target)
    else:
        stages = _priced_stages(own, compute, sites, copy, extra)
    priced = {
        **timing,
        "stages": [_stage_dict(st) for st in stages],
        "mean_stages": [],
        "steps": steps,
        "counts": counts,
    }
    if projection is not None:
        basis = Basis(
            compute="projected", codec=f"projected ({codec_basis} multiples)", extra_work=extra,
            hardware=projection.hardware, projection=projection.describe(),
        )  # fmt: skip
        return priced, basis
    basis = Basis(
        compute="calibrated" if compute is not None else "own run",
        codec=codec_basis,
        extra_work=extra,
        hardware=calibration.name if calibration else "own run",
    )
    return priced, basis


def row_model(
    record: Mapping[str, Any], calibration: Calibration | None, projection: Projection | None = None
) -> RowModel | None:
    """The record's timing inputs priced by the time model (:func:`priced_timing`), parsed."""
    got = priced_timing(record, calibration, projection)
    if got is None:
        return None
    return RowModel(TimingInputs.from_dict(got[0]), got[1])


def model_times(
    record: Mapping[str, Any],
    profiles: Mapping[str, net.NetworkProfile],
    calibration: Calibration | None,
    target_step: float | None | str = "stored",
    projection: Projection | None = None,
) -> tuple[dict[str, dict[str, float | None]], Basis] | None:
    """Per profile ``step_s``, ``total_s``, ``time_to_target_s``, ``comm_s_per_step`` of a record
    (``target_step``: the step the target was met at; ``"stored"``: the inputs' own), and the basis."""
    rm = row_model(record, calibration, projection)
    if rm is None:
        return None
    inputs = rm.inputs if isinstance(target_step, str) else replace(rm.inputs, target_step=target_step)
    return net.model_run(inputs, profiles), rm.basis
