"""Re-modeling older records on every core: the cold index build's hot spot.

A record written by an older network model is re-modeled from its stored timing inputs when rows are
built (:class:`leaderboard.frame.RemodelBudget`): a discrete-event simulation of every distinct step at
every network profile. On the committed records that was 88 % of a cold build (95 records, 14,472
simulated steps; docs/performance.md). The simulations are independent, so they are shared out to
fresh interpreters (torch- and pandas-free: ``suite.results.network`` only) when there are enough to
pay for starting them. Each worker stops at its share of the CPU seconds the budget has left and skips
inputs over :data:`suite.results.network.MAX_MODEL_COST`; the parent counts each result's CPU seconds
against the budget as if it had simulated it, so the bounds on untrusted inputs are the serial ones.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import time
from typing import Any

from suite import settings

__all__ = ["remodel_in_workers", "MIN_REQUESTS"]

MIN_REQUESTS = 8  # fewer re-models than this run in the caller's process (a worker costs ~0.1 s to start)
Request = tuple[str, tuple[str, ...]]  # (timing inputs as compact sorted JSON, profile names)
Result = tuple[dict[str, dict[str, float | None]], float]  # (times per profile, CPU seconds)

_WORKER = (
    "import pickle, sys; path, todo, limit = pickle.load(sys.stdin.buffer); sys.path[:0] = path; "
    "from leaderboard.remodel_pool import _serve; _serve(todo, limit)"
)


def _serve(todo: list[Request], limit: float) -> None:
    """A worker: simulate ``todo`` in order until its CPU time passes ``limit``; pickle the results
    (a request over the cost cap or that fails is left out: the parent meets it again)."""
    import json

    from suite.results import network as model

    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # nothing printed by accident can corrupt the result stream
    done: dict[Request, Result] = {}
    start = time.process_time()
    for text, profiles in todo:
        if time.process_time() - start >= limit:
            break
        try:
            inputs = model.TimingInputs.from_dict(json.loads(text))
            if model.model_cost(inputs, len(profiles)) > model.MAX_MODEL_COST:
                continue
            t0 = time.process_time()
            times = model.model_run(inputs, {p: model.PROFILES[p] for p in profiles})
            done[(text, profiles)] = (times, time.process_time() - t0)
        except (ValueError, TypeError, KeyError, AttributeError, RecursionError):  # untrusted stored inputs
            continue
    pickle.dump(done, out, protocol=pickle.HIGHEST_PROTOCOL)
    out.flush()


def remodel_in_workers(requests: list[Request], seconds_left: float) -> dict[Request, Result]:
    """What the workers re-modeled of ``requests`` within ``seconds_left`` CPU seconds in all ({} when
    there are too few to pay for workers, one CPU, or ``MPCBENCH_INDEX_WORKERS=1``)."""
    workers = min(settings.usable_cpus(), len(requests) // MIN_REQUESTS or 1)
    try:
        asked = settings.index_workers()
    except ValueError:  # the index build names a bad value; re-modeling just stays in this process
        asked = 1
    if asked is not None:
        workers = min(workers, asked)
    if workers < 2 or seconds_left <= 0:
        return {}
    shares = [requests[i::workers] for i in range(workers)]  # interleaved: similar records spread out
    limit = seconds_left / workers
    procs = []
    for share in shares:
        p = subprocess.Popen(
            [sys.executable, "-c", _WORKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
        )
        assert p.stdin is not None
        p.stdin.write(pickle.dumps((sys.path, share, limit)))
        p.stdin.close()
        procs.append(p)
    out: dict[Request, Result] = {}
    for p in procs:
        try:
            assert p.stdout is not None
            got: Any = pickle.load(p.stdout)  # our own worker's stream: it pickles only plain floats and strings
            if isinstance(got, dict):
                out.update(got)
        except (EOFError, pickle.UnpicklingError, OSError):
            pass  # the worker failed: the parent re-models those records itself
        finally:
            p.wait()
    return out
