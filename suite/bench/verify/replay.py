"""Replay from the wire: every process of a re-run, alone, from the bytes the run counted.

During a torchrun re-run every process records what its transport sent and received
(:mod:`suite.pipeline.wire_log`); the re-run's runner hands the recordings out with the record. The
verifier then checks that the recordings are the wire the run counted (:func:`check_wire`): what a
process recorded receiving from a peer is, message for message, what that peer recorded sending; the
recorded messages add up to the wire bytes the record counted; and the network namespace's loopback
carried at least that much (a recording cannot claim bytes that never crossed). Then each process is run
again **alone** (:func:`replay_all`), in a fresh sandbox and stage jail, with nothing but the recorded
commit's code, its config (seed, plugin) and data, and the messages its peers recorded sending to it,
handed over in order by a transport with no peers. It must send exactly the recorded bytes, and the
process that evaluates must report exactly the recorded curve. A process that does computed only from
the counted bytes: whatever a side channel (locks, files, sockets, timing) carried, its outputs did not
depend on it; whatever state its compressor keeps (error feedback, caches, a learned decoder) is rebuilt
from the same bytes. Otherwise the row is "not reproducible from its bytes".

Not replayed: data-parallel collectives (several replicas; their reduction is not a message of one
process), and code trees from before the recording existed: such a re-run says so, and a row with a
submitted compressor cannot be verified then (:func:`needs_replay`). What replay proves and does not:
docs/reliability.md, "Replay from the wire".
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from .errors import VerifyError
from .loopback import POINT_TO_POINT, processes, replicas
from .sandbox import Containment, Loopback, contained_run, sanitise

__all__ = ["WIRE_TAG", "REPLAY_TAG", "NotReproducible", "needs_replay", "check_wire", "replay_all", "wire_lines"]

WIRE_TAG = "mpcbench-verify-wire: "
REPLAY_TAG = "mpcbench-verify-replay: "
MAX_WIRE_BYTES = 2 * 2**30  # what a re-run may hand out as its recording (base64 on its output)
# The runner's addition (suite.bench.verify.rerun.RUNNER): each process's recording, one line each.
RUNNER_WIRE = f"""
import base64, glob
for _p in sorted(glob.glob(os.path.join(os.path.dirname(os.path.abspath(sys.argv[1])), "**", "wire-rank*.log"),
                           recursive=True)):
    print({WIRE_TAG!r} + os.path.basename(_p)[len("wire-rank"):-len(".log")] + " "
          + base64.b64encode(open(_p, "rb").read()).decode(), flush=True)
"""
# One process alone, in the recorded code tree (argv: its config .json; RANK in the environment).
REPLAYER = f"""
import base64, json, os, sys
tree = os.path.realpath(os.getcwd())
try:
    from suite.pipeline import wire_log
except ImportError:
    sys.exit("mpcbench-replay: the recorded code has no wire replay")
from suite.pipeline.accounting import ByteMeter
from suite.pipeline.config import CellConfig
from suite.pipeline.placement import Placement
from suite.pipeline.trainer import resolve_device, train
from suite.pipeline.transport import DistTransport
from suite.schedules import pipeline_ranks
for m in (wire_log, sys.modules[train.__module__], sys.modules[DistTransport.__module__]):
    if not os.path.realpath(m.__file__).startswith(tree + os.sep):
        sys.exit("the replay would import a module outside the recorded code's tree")
cfg = CellConfig.from_dict(json.load(open(sys.argv[1]))).validate()
rank = int(os.environ["RANK"])
S = cfg.n_stages
placement = Placement.of_rank(rank, S, pipeline_ranks(cfg.schedule, S), cfg.dp, cfg.tp)
device = resolve_device(cfg.device, 0, 1)
transport = DistTransport(ByteMeter(), device, rank)
report = train(cfg, placement, device, transport, None)
transport.flush()
curve = [{{k: p.get(k) for k in ("step", "metric", "metric_uncompressed")}} for p in report.get("curve") or []]
sent = open(os.path.join(os.environ["TMPDIR"], f"wire-rank{{rank}}.replay"), "rb").read()
print({REPLAY_TAG!r} + json.dumps({{"curve": curve, "sent": base64.b64encode(sent).decode()}}), flush=True)
"""


class NotReproducible(VerifyError):
    """A process of the re-run did not compute only from the bytes the run counted (module docstring)."""


def needs_replay(record: dict[str, Any]) -> str:
    """Why the re-run of ``record`` is not replayed ("" if it is): one process, or data-parallel collectives."""
    if str((record.get("run") or {}).get("mode") or (record.get("config") or {}).get("mode")) != "torchrun":
        return "one process (single mode): no wire between processes"
    if replicas(record) > 1:
        return "data-parallel collectives over several replicas are not replayed"
    return ""


def wire_lines(stdout: str) -> dict[int, bytes]:
    """The recordings a re-run's output holds, by rank (VerifyError for a malformed or oversized one)."""
    out: dict[int, bytes] = {}
    total = 0
    for line in stdout.splitlines():
        if not line.startswith(WIRE_TAG):
            continue
        rank, _, data = line[len(WIRE_TAG) :].partition(" ")
        total += len(data)
        if total > MAX_WIRE_BYTES * 4 // 3 + 4096:
            raise VerifyError(f"the re-run's recorded wire is over {MAX_WIRE_BYTES // 2**20} MiB: not replayed")
        try:
            out[int(rank)] = base64.b64decode(data, validate=True)
        except (ValueError, binascii.Error):
            raise NotReproducible("not reproducible from its bytes: a process's recorded wire is malformed") from None
    return out


def _records(raw: bytes, what: str) -> tuple[dict[str, Any], list[tuple[bytes, int, bytes]]]:
    from suite.pipeline.wire_log import read_log

    try:
        header, records = read_log(raw)
        return header, list(records)
    except (ValueError, TypeError) as e:
        raise NotReproducible(f"not reproducible from its bytes: {what} is malformed ({type(e).__name__})") from None


def _first_difference(a: list[Any], b: list[Any]) -> int | None:
    """The index of the first message where two sequences differ (None: equal)."""
    if a == b:
        return None
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def _counted_p2p(record: dict[str, Any]) -> int:
    sets = dict(record.get("bytes") or {})
    sets["eval"] = record.get("eval_bytes") or {}
    total = 0
    for name, b in sets.items():
        if isinstance(b, dict) and (name in POINT_TO_POINT or name.startswith("tp_")):
            w = b.get("wire")
            total += int(w) if isinstance(w, (int, float)) and not isinstance(w, bool) and w > 0 else 0
    return total


def check_wire(record: dict[str, Any], wire: dict[int, bytes], lo: Loopback | None) -> dict[int, bytes]:
    """The replay input of each rank (its peers' recorded sends to it), once the recordings are the counted
    wire (module docstring); NotReproducible (one line) where they are not."""
    from suite.pipeline.wire_log import RECEIVED, SENT, write_log

    world = processes(record)
    if sorted(wire) != list(range(world)):
        raise NotReproducible(
            f"not reproducible from its bytes: the re-run recorded the wire of ranks {sorted(wire)[:8]}, "
            f"it had {world} processes"
        )
    parsed = {r: _records(raw, f"rank {r}'s recorded wire") for r, raw in wire.items()}
    sent: dict[tuple[int, int], list[bytes]] = {}
    got: dict[tuple[int, int], list[bytes]] = {}
    for r, (_, recs) in parsed.items():
        for kind, peer, data in recs:
            (sent if kind == SENT else got).setdefault((r, peer) if kind == SENT else (peer, r), []).append(data)
    for pair in sorted(set(sent) | set(got)):
        i = _first_difference(sent.get(pair, []), got.get(pair, []))
        if i is not None:
            raise NotReproducible(
                f"not reproducible from its bytes: rank {pair[1]} recorded receiving other bytes from rank {pair[0]} "
                f"than rank {pair[0]} recorded sending (message {i})"
            )
    total = sum(len(d) for msgs in sent.values() for d in msgs)
    counted = _counted_p2p(record)
    if total != counted:
        raise NotReproducible(
            f"not reproducible from its bytes: the recorded messages hold {total} bytes, the run counted {counted}"
        )
    if lo is not None and lo.tx_bytes < total:
        raise NotReproducible(
            f"not reproducible from its bytes: lo carried {lo.tx_bytes} bytes, fewer than the {total} the "
            "recording says crossed"
        )
    inputs: dict[int, bytes] = {}
    for r, (header, _) in parsed.items():
        buf = io.BytesIO()
        t = header.get("threads")
        threads = t if isinstance(t, int) else 1
        buf.write((json.dumps({"rank": r, "threads": max(1, min(256, threads))}) + "\n").encode())
        for (src, dst), msgs in sorted(sent.items()):
            if dst == r:
                for d in msgs:
                    write_log(buf, RECEIVED, src, d)
        inputs[r] = buf.getvalue()
    return inputs


def _digests(records: list[tuple[bytes, int, bytes]]) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    for _, peer, data in records:
        out.setdefault(peer, []).append(hashlib.sha256(data).hexdigest())
    return out


def replay_all(
    record: dict[str, Any],
    wire: dict[int, bytes],
    inputs: dict[int, bytes],
    cfg: dict[str, Any],
    tree: Path,
    commit: str,
    threads: int,
    box: Containment,
    time_limit_s: float,
    log: Path | None = None,
) -> dict[str, Any]:
    """Replay every rank alone (module docstring); what the report keeps, or NotReproducible."""
    from suite.pipeline.wire_log import SENT

    from .rerun import _jail_reads, rerun_environment

    want_curve = [
        (p.get("step"), p.get("metric"), p.get("metric_uncompressed"))
        for p in record.get("curve") or []
        if isinstance(p, dict)
    ]
    evaluated = False
    for r in sorted(inputs):
        sent_rec = _digests([x for x in _records(wire[r], f"rank {r}'s recorded wire")[1] if x[0] == SENT])
        with tempfile.TemporaryDirectory(prefix="mpcbench-verify-replay-") as tmp:
            work = Path(tmp)
            os.chmod(work, 0o755)
            home, feed = work / "home", work / "in"
            home.mkdir()
            feed.mkdir()
            (feed / f"rank{r}.log").write_bytes(inputs[r])
            cfg_path = work / "config.json"
            cfg_path.write_text(json.dumps(cfg))
            plugin_dirs = sorted({str(Path(p).parent) for p in cfg.get("plugins") or []})
            jail = (
                {"read": [*_jail_reads(tree), *plugin_dirs, str(feed)], "work": str(work)} if box.stage_jail else None
            )
            env = rerun_environment(tree, commit, threads, home, jail)
            env.update(RANK=str(r), LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1")
            env["MPCBENCH_WIRE_REPLAY"] = str(feed / f"rank{r}.log")
            proc = contained_run(
                [sys.executable, "-c", REPLAYER, str(cfg_path)], cwd=tree, env=env, box=box,
                timeout_s=time_limit_s + 600, cpu_s=(time_limit_s + 600) * max(1, threads) * 2, writable=(work,),
            )  # fmt: skip
        line = next((x for x in proc.stdout.splitlines() if x.startswith(REPLAY_TAG)), None)
        if line is None:
            if "mpcbench-replay: the recorded code has no wire replay" in (proc.stderr or ""):
                raise VerifyError(
                    "the recorded commit's code cannot replay a process from its wire (it predates the recording)"
                )
            raise NotReproducible(
                sanitise(f"not reproducible from its bytes: rank {r} alone, fed its recorded input, did not finish "
                         f"(exit {proc.returncode})", proc.stderr, log)
            )  # fmt: skip
        try:
            out = json.loads(line[len(REPLAY_TAG) :])
            replayed = _digests(
                [x for x in _records(base64.b64decode(out["sent"]), "a replay's sends")[1] if x[0] == SENT]
            )
            curve = [(p.get("step"), p.get("metric"), p.get("metric_uncompressed")) for p in out["curve"]]
        except (ValueError, KeyError, TypeError, AttributeError, binascii.Error):
            raise NotReproducible(f"not reproducible from its bytes: rank {r}'s replay said nothing readable") from None
        for peer in sorted(set(sent_rec) | set(replayed)):
            i = _first_difference(sent_rec.get(peer, []), replayed.get(peer, []))
            if i is not None:
                raise NotReproducible(
                    f"not reproducible from its bytes: rank {r} alone, fed what its peers sent it, sent other bytes "
                    f"to rank {peer} (message {i} of {len(sent_rec.get(peer, []))})"
                )
        if curve:
            evaluated = True
            if curve != want_curve:
                raise NotReproducible(
                    f"not reproducible from its bytes: rank {r} alone, fed what its peers sent it, evaluated "
                    f"{curve[-1][1]!r} at step {curve[-1][0]}, the run {want_curve[-1][1] if want_curve else None!r}"
                )
    if want_curve and not evaluated:
        raise NotReproducible("not reproducible from its bytes: no process, replayed alone, evaluated the model")
    return {"replayed": True, "processes": len(inputs)}
