"""The runtime's entry point: ``run(config) -> RunResult`` for one cell.

``mode="single"``: every stage in this process on one device, connected by a
``LocalTransport`` that frames and counts messages exactly as the distributed transport
does (same compressor instances per end, same bytes). ``mode="torchrun"``: one process per
(pipeline rank, replica) under ``torch.distributed.run`` (see ``suite.pipeline.launch``); a
pipeline rank holds one stage, or several for interleaved schedules.

Errors: an invalid config raises ``ConfigError`` before anything runs; a failed torchrun
job raises ``RunError`` (``RunTimeout`` past ``time_limit_s``) with one line naming the
failing rank; in single mode the original exception propagates (e.g. ``CompressorError``).
"""

from __future__ import annotations

import time
from dataclasses import replace

from suite import settings
from suite.schedules import pipeline_ranks

from .accounting import ByteMeter
from .config import CellConfig
from .errors import RunError, RunTimeout
from .placement import Placement
from .result import RunResult
from .summary import summarize
from .trainer import resolve_device, train
from .transport import LocalTransport

__all__ = ["run", "run_single", "RunError", "RunTimeout"]


def run(config: CellConfig) -> RunResult:
    """Validate ``config`` and train the cell it describes; return what was measured.

    ``config.check_consistency`` (or ``MPCBENCH_CHECK_CONSISTENCY=1``, read here once) turns on
    the boundaries' sender/receiver consistency check; the config carries it to every stage
    (and every torchrun worker)."""
    cfg = config.validate()
    cfg = replace(cfg, check_consistency=cfg.check_consistency or settings.check_consistency())
    if cfg.mode == "single":
        return run_single(cfg)
    from .launch import launch

    return launch(cfg)


def run_single(cfg: CellConfig) -> RunResult:
    """All stages in this process (``cfg`` already validated)."""
    device = resolve_device(cfg.device)
    meter = ByteMeter()
    transport = LocalTransport(meter, device)
    S = cfg.n_stages
    deadline = time.perf_counter() + cfg.time_limit_s if cfg.time_limit_s else None
    placement = Placement.all_local(S, pipeline_ranks(cfg.schedule, S), cfg.tp)
    report = train(cfg, placement, device, transport, deadline=deadline)
    if transport.pending():
        raise RuntimeError(f"{transport.pending()} messages were sent but never received (schedule bug)")
    report["meter"] = meter.to_list()
    return summarize(cfg, [report])
