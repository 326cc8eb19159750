"""The training loop of one process: build the stages it owns, train, evaluate, report.

Reads top to bottom: task -> stages (+ boundary ends, DDP) -> optimizers -> for each step:
split the batch into M micro-batches, run the schedule's actions, step the optimizers,
evaluate every ``eval_every`` steps -> a JSON-able report. The same code runs all pipeline
ranks in one process (``LocalTransport``, the executor interleaves the ranks' action lists)
or one pipeline rank per process under torchrun (``DistTransport``, each process runs its
own list with blocking receives); a rank holds one stage, or several for interleaved
schedules (``suite.pipeline.placement``). ``suite.pipeline.summary`` merges the reports into a RunResult.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from typing import Any, Callable, Iterable

import torch

from compressors.api import Compressor
from compressors.registry import private_plugin_modules
from suite import settings
from suite.schedules import Action, Kind, Schedule, build_schedule
from tasks import Batch, build_task, get_task_class
from tasks.api import TaskError

from .accounting import ByteMeter
from .boundary import Micro, ReceiverEnd, SenderEnd
from .config import CellConfig, ConfigError
from .errors import RunTimeout
from .optimizer import parse_optimizer
from .placement import Placement
from .plan import resolve_plan
from .stage import GradSync, Stage, keep_stage_rng
from .tensor_parallel import TPGroup, check_shardable, shard_stage
from .timing import Clock
from .transport import DistTransport, LocalTransport, Transport

# Progress lines ("step 40/120 loss 1.92 accuracy=0.31 ..."): the cell's child process sends
# them to its log (suite.bench.cell), so a cell's log grows while it trains.
progress_log = logging.getLogger("mpcbench.train")

__all__ = ["Placement", "STAGE_METHODS", "train", "execute", "resolve_device"]

# How the executor runs each action kind on a stage: (stage, micro-batch index, its Batch, its Micro).
# A schedule using a kind missing here (e.g. a zero-bubble schedule's I / W) is refused before training.
STAGE_METHODS: dict[Kind, Callable[[Stage, int, Batch, Micro], None]] = {
    Kind.FORWARD: lambda stage, m, batch, micro: stage.forward(m, batch, micro),
    Kind.FULL_BACKWARD: lambda stage, m, batch, micro: stage.backward(m, micro),
}


def resolve_device(name: str, local_rank: int = 0, local_world: int = 1) -> torch.device:
    """``cpu`` / ``cuda`` / ``auto`` -> a device: one GPU per local rank. ``auto`` picks CUDA
    only when there is a GPU for every local process, else the CPU."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() and torch.cuda.device_count() >= local_world else "cpu"
    if name == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError("device=cuda but no CUDA device is available; use device=cpu or auto")
        if local_rank >= torch.cuda.device_count():
            raise ConfigError(
                f"local rank {local_rank} needs GPU {local_rank} but only {torch.cuda.device_count()} are visible; "
                "use fewer stages x dp or device=cpu"
            )
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def compressor_stats(instances: Iterable[Compressor]) -> dict[str, float]:
    """Sum of the counters compressors report through ``Compressor.stats()`` (e.g. AQ-SGD's
    rows sent as deltas vs in full), over every instance of this process."""
    out: dict[str, float] = {}
    for c in instances:
        for k, v in c.stats().items():
            out[k] = out.get(k, 0) + v
    return out


def train(
    config: CellConfig,
    placement: Placement,
    device: torch.device,
    transport: Transport,
    dp_groups: dict[int, Any] | None = None,
    deadline: float | None = None,
) -> dict[str, Any]:
    """Train the stages in ``placement`` for the configured steps; return this process's report."""
    cfg = config
    S = placement.n_stages
    # resolved (parsed, built, checked) by CellConfig.validate in this process: a memo hit, trusted as is
    plan = resolve_plan(
        cfg.plan, get_task_class(cfg.task), S, placement.dp_size, placement.tp_size, outer=cfg.sync.outer
    )

    # --- task, budget, model (identical on every rank) -----------------------------------------
    task = build_task(
        cfg.task,
        cfg.tier,
        seed=cfg.seed,
        data_dir=cfg.data_dir,
        features=plan.features,
        feature_options=plan.feature_options,
        model_size=cfg.model_size,
    )
    if cfg.steps is not None:
        task.budget = replace(task.budget, steps=cfg.steps)
    if cfg.lr is not None:  # the cell's own rate (a sweep's point); the task's schedule shapes it
        task.budget = replace(task.budget, lr=cfg.lr)
    budget = task.budget
    optimizer = None if cfg.optimizer is None else parse_optimizer(cfg.optimizer).for_code(plan.plan.dp)
    try:
        M = budget.resolve_microbatches(cfg.microbatches)
    except TaskError as e:
        raise ConfigError(str(e)) from None
    torch.manual_seed(cfg.seed)
    modules = task.build_stages(S)
    if len(modules) != S:
        raise ConfigError(f"task {cfg.task!r} built {len(modules)} stages, expected {S}")
    features = task.model_features(modules)
    # the whole model's parameters (every rank builds every stage before taking its own; shared ones once)
    model_params = sum(p.numel() for p in {id(p): p for m in modules for p in m.parameters()}.values())
    task.to_device(device)  # tasks that can keep their data on the device build batches there
    meter = transport.meter

    # --- stages this process owns --------------------------------------------------------------
    stages: dict[int, Stage] = {}
    hooks = []
    outer_loops: dict[int, Any] = {}  # stage -> OuterLoop (sync: outer)
    local_syncs: dict[int, Any] = {}  # stage -> LocalSync (one replica, a dp compressor, every step)
    T = placement.tp_size
    for s in placement.stages:
        clock = Clock(device)
        # tensor parallelism: TP rank 0 sends a boundary's tensor to TP rank 0 of the peer stage and to
        # the peer's other TP ranks (fanout); the other TP ranks only receive (None: no sends)
        fanout = None if placement.tp_rank != 0 else ()

        def end(cls, b: int, peer_stage: int, s: int = s):
            # one process holding several stages: each stage gets its own copy of every plugin module,
            # as under torchrun, so a link's sender and receiver share no module state (no byte-free side channel)
            realm = ("stage", s) if len(placement.stages) > 1 else None
            with private_plugin_modules(realm):
                e = cls(
                    b,
                    plan.spec("forward", b),
                    plan.spec("backward", b),
                    transport,
                    placement.rank(peer_stage, tp_rank=0),
                    device,
                    cfg.seed,
                    clock,
                    cfg.check_consistency,
                    None if fanout is None else tuple(placement.rank(peer_stage, tp_rank=t) for t in range(1, T)),
                )
            for c in e.compressors() + e.twin_compressors():  # twins: consistency check only
                c.bind(features)
                c.to(device)
            return e

        tp = None
        if T > 1:  # Megatron-style: this stage's blocks split over its TP ranks (suite.pipeline.tensor_parallel)
            tp = TPGroup(
                s,
                T,
                placement.tp_ranks,
                lambda t, s=s: placement.rank(s, tp_rank=t),
                transport,
                {"forward": plan.spec("tp_forward"), "backward": plan.spec("tp_backward")},
                device,
                cfg.seed,
                clock,
                features,
            )
            check_shardable(shard_stage(modules[s], tp), cfg.task, s)
        module = modules[s].to(device)
        train_module: Any = module
        sync: GradSync | None = None
        if placement.dp_size > 1 and not cfg.sync.outer:  # every step: DDP with the compressed hook
            from .data_parallel import CompressedReduce, wrap_stage

            assert dp_groups is not None
            hook = CompressedReduce(plan.spec("dp"), s, dp_groups[s], meter, clock, cfg.seed, features)
            train_module, sync = wrap_stage(module, dp_groups[s], device, hook)
            hooks.append(hook)
        elif not cfg.sync.outer and plan.plan.dp != "none":  # one replica, its gradient through the code
            from .data_parallel import CompressedReduce, LocalSync

            hook = CompressedReduce(plan.spec("dp"), s, None, meter, clock, cfg.seed, features)
            sync = local_syncs[s] = LocalSync(module, hook)
            hooks.append(hook)
        if cfg.sync.outer:  # DiLoCo-style: H local steps, then the compressed pseudo-gradient
            from compressors.api import TensorRole

            from .data_parallel import CompressedReduce
            from .outer_loop import OuterLoop

            group = dp_groups[s] if placement.dp_size > 1 and dp_groups is not None else None
            hook = CompressedReduce(
                plan.spec("dp"), s, group, meter, clock, cfg.seed, features, role=TensorRole.PSEUDO_GRAD
            )
            outer_loops[s] = OuterLoop(list(module.parameters()), cfg.sync, hook)
            hooks.append(hook)
        stage = Stage(
            s,
            S,
            module,
            task,
            device,
            clock,
            M,
            cfg.seed,
            upstream=end(ReceiverEnd, s - 1, s - 1) if s > 0 else None,
            downstream=end(SenderEnd, s, s + 1) if s < S - 1 else None,
            train_module=train_module,
            sync=sync,
            autocast_dtype=budget.autocast_dtype,
            tp=tp,
        )
        if optimizer is None:
            stage.optimizer = task.make_optimizer(stage.parameters())
        else:
            stage.optimizer = optimizer.build(stage.parameters(), budget.lr)
            stage.clip_norm = optimizer.clip
        stage.scheduler = task.make_scheduler(stage.optimizer)
        stages[s] = stage
    last = stages.get(S - 1)

    # --- training ---------------------------------------------------------------------------------
    schedule = build_schedule(cfg.schedule, S, M)
    if schedule.n_ranks != placement.n_ranks:
        raise ConfigError(
            f"schedule {cfg.schedule!r} runs on {schedule.n_ranks} ranks, the placement has {placement.n_ranks}"
        )
    unsupported = {a.kind for acts in schedule.ranks for a in acts} - set(STAGE_METHODS)
    if unsupported:
        raise ConfigError(
            f"schedule {cfg.schedule!r} uses action kind(s) {sorted(k.value for k in unsupported)} that the executor "
            f"does not run (it runs: {', '.join(k.value for k in STAGE_METHODS)})"
        )
    report: dict[str, Any] = {"losses": [], "curve": [], "step_walls": [], "step_cpus": [], "eval_s": 0.0}
    report["loadavg"] = [load_average()]
    eval_every = max(1, budget.eval_every)
    log_every = max(1, budget.steps // 10)
    done = 0
    t_train = time.perf_counter()
    for step, batch in enumerate(task.train_batches(placement.dp_rank, placement.dp_size)):
        if step >= budget.steps:
            break
        if deadline is not None and time.perf_counter() > deadline:
            raise RunTimeout(f"run exceeded time_limit_s={cfg.time_limit_s} after {step} steps")
        t0, c0 = time.perf_counter(), time.process_time()
        if step == 0 and settings.trace():  # start-up benchmark: when the first step begins (epoch seconds)
            print(f"mpcbench-trace first-step {time.time():.3f}", flush=True)
        meter.step = step
        compressed = step >= cfg.compress_warmup_steps
        for h in hooks:
            h.step, h.compressed = step, compressed
        mbs = batch.to(device).split(M)
        micros = [Micro(step, m, mb.sample_ids, mb.inputs, True, compressed) for m, mb in enumerate(mbs)]

        def run(a: Action) -> None:
            STAGE_METHODS[a.kind](stages[a.stage], a.microbatch, mbs[a.microbatch], micros[a.microbatch])

        with keep_stage_rng():  # one RNG swap per stage and step instead of two per action
            execute(schedule, run, transport, placement)
        for st in stages.values():
            st.finish_step()
        if cfg.sync.due(step, budget.steps):
            for loop in outer_loops.values():
                loop.synchronize(step)
        transport.flush()
        if device.type == "cuda":  # the step ends when its kernels do (the clocks do not sync)
            torch.cuda.synchronize(device)
        wall = time.perf_counter() - t0
        for st in stages.values():
            st.clock.snapshot(wall)
        report["step_walls"].append(wall)
        report["step_cpus"].append(time.process_time() - c0)
        if last is not None:
            report["losses"].append(last.take_loss())
        done = step + 1
        if done % eval_every == 0 or done == budget.steps:
            t_eval = time.perf_counter()
            point = evaluate(cfg, task, stages, transport, placement, device, meter, done, dp_groups)
            report["eval_s"] += time.perf_counter() - t_eval
            if point is not None:
                report["curve"].append(point)
            _log_progress(task, done, budget.steps, report, point, t_train, last is not None)
        elif done % log_every == 0:
            _log_progress(task, done, budget.steps, report, None, t_train, last is not None)
    if done < budget.steps:
        raise ConfigError(f"task {cfg.task!r} yielded only {done} training batches, expected {budget.steps}")

    report.update(
        rank=placement.rank(placement.stages[0]),
        dp_rank=placement.dp_rank,
        tp_rank=placement.tp_rank,
        tp_size=placement.tp_size,
        stages=list(stages),
        device=str(device),
        steps=budget.steps,
        microbatches=M,
        clocks={str(s): st.clock.steps for s, st in stages.items()},
        # the network model's inputs: every rank's action list and each action's costs
        schedule=schedule.to_lists(),
        action_clocks={str(s): st.clock.action_steps for s, st in stages.items()},
        # the same in thread CPU seconds (CPU device), and how many threads torch computed on
        cpu_action_clocks={str(s): st.clock.cpu_action_steps for s, st in stages.items() if st.clock.cpu_clock},
        # each codec site's sampled calls against a copy of the same bytes (Clock.codec)
        codec={str(s): st.clock.codec_totals for s, st in stages.items()},
        codec_samples={str(s): st.clock.codec_samples for s, st in stages.items()},
        torch_threads=torch.get_num_threads(),
        protocol=transport.PROTOCOL,
        loadavg=report["loadavg"] + [load_average()],
        compressor_state_bytes=sum(
            c.state_nbytes()
            for st in stages.values()
            for c in st.compressors() + [c for h in hooks for c in h.compressors()]
        ),
        # seconds of the data-parallel reduction's local work (outer loop or one-replica code) per
        # step it ran on, outside the collectives: the network model's StageCost.sync_s
        sync_clocks={str(s): x.local_s for s, x in {**local_syncs, **outer_loops}.items()},
        sync_steps=[i for i in range(budget.steps) if cfg.sync.due(i, budget.steps)] if outer_loops else None,
        compressor_stats=compressor_stats(
            [c for st in stages.values() for c in st.compressors()] + [c for h in hooks for c in h.compressors()]
        ),
        task=task.describe(),
        model_params=model_params,
    )
    return report


def load_average() -> float | None:
    """The 1-minute load average (Linux /proc/loadavg), None where unavailable."""
    try:
        with open("/proc/loadavg") as f:
            return float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _log_progress(
    task, done: int, steps: int, report: dict[str, Any], point: dict | None, t0: float, owner: bool
) -> None:
    """One progress line from the process that owns the last stage (it has the loss)."""
    if not owner or not progress_log.isEnabledFor(logging.INFO):
        return
    elapsed = time.perf_counter() - t0
    loss = report["losses"][-1] if report["losses"] else None
    parts = [f"step {done}/{steps}"]
    if isinstance(loss, (int, float)):
        parts.append(f"loss {loss:.4g}")
    if point is not None and point.get("metric") is not None:
        parts.append(f"{task.metric.name}={point['metric']:.4g}")
    parts.append(f"{elapsed:.0f} s elapsed, about {elapsed / done * (steps - done):.0f} s to go")
    progress_log.info("  ".join(parts))


def execute(schedule: Schedule, run: Callable[[Action], None], transport: Transport, placement: Placement) -> None:
    """Run the action lists of this process's pipeline ranks, each in order.

    Under torchrun there is one local rank and receives block. In one process the ranks are
    interleaved: each pass runs at most one ready action per rank (an action is ready when
    the message it receives is queued), which keeps queues short. Peers come from the
    placement; ``check_schedule`` has proven that messages between two ranks are received in
    the order they are sent, so the next queued message is the one an action expects.
    """
    S = schedule.n_stages
    lists = {r: schedule.ranks[r] for r in placement.pp_ranks}
    pos = {r: 0 for r in lists}
    local = isinstance(transport, LocalTransport)

    def ready(a: Action) -> bool:
        src = a.receives_from(S)
        if not local or src is None:
            return True
        transport.rank = placement.rank(a.stage)
        return transport.ready(placement.rank(src))

    remaining = sum(len(v) for v in lists.values())
    while remaining:
        progressed = False
        for r, acts in lists.items():
            if pos[r] < len(acts) and ready(acts[pos[r]]):
                if local:
                    transport.rank = placement.rank(acts[pos[r]].stage)
                run(acts[pos[r]])
                pos[r] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            raise RuntimeError(f"pipeline schedule cannot progress at positions {pos} (schedule bug)")


def evaluate(
    cfg: CellConfig,
    task,
    stages: dict[int, Stage],
    transport: Transport,
    placement: Placement,
    device: torch.device,
    meter: ByteMeter,
    done: int,
    dp_groups: dict[int, Any] | None,
) -> dict[str, Any] | None:
    """Metric after ``done`` steps, with compression and (optionally) without.

    Evaluation batches are sharded over data-parallel replicas; the last stage's (sum,
    count) are summed over replicas. Returns the curve point on the last stage, else None.
    """
    S = placement.n_stages
    forward_specs = {cfg.plan.spec_for("forward", b) for b in range(S - 1)}
    modes = [True]
    if cfg.eval_uncompressed and forward_specs - {"none"}:
        modes.append(False)
    for st in stages.values():
        st.module.eval()
    meter.evaluating = True
    results: dict[bool, dict[str, float]] = {}
    try:
        for compressed in modes:
            sums = torch.zeros(task.metric_stats_size(), dtype=torch.float64)
            for i, batch in enumerate(task.eval_batches()):
                if i % placement.dp_size != placement.dp_rank:
                    continue
                batch = batch.to(device)
                micro = Micro(-done, i, batch.sample_ids, batch.inputs, False, compressed)
                for s in sorted(stages):
                    if isinstance(transport, LocalTransport):
                        transport.rank = placement.rank(s)
                    r = stages[s].eval_forward(batch, micro)
                    if r is not None:
                        sums += torch.tensor(r, dtype=torch.float64)
                if isinstance(transport, DistTransport):
                    transport.trim()
            transport.flush()
            if S - 1 in stages and placement.dp_size > 1:
                assert dp_groups is not None
                import torch.distributed as dist

                t = sums.to(device)
                dist.all_reduce(t, group=dp_groups[S - 1])
                meter.record("dp.metric", 0, t.numel() * t.element_size())
                sums = t.cpu()
            if S - 1 in stages:
                results[compressed] = task.metric_values(sums.tolist())
    finally:
        meter.evaluating = False
        for st in stages.values():
            st.module.train()
            st.clock.discard()
    if S - 1 not in stages or placement.dp_rank != 0:
        return None
    values = results[True]
    metric = next(iter(values.values()))  # the primary metric comes first
    uncompressed = None if not cfg.eval_uncompressed else next(iter(results.get(False, values).values()))
    secondary = {k: v for k, v in list(values.items())[1:]} or None
    return {"step": done, "metric": metric, "metric_uncompressed": uncompressed, "metrics": secondary}
