"""Network profiles and the pipeline time model: "how long would this run take over link X?".

The model is a small discrete-event simulation of one training step, run over the very
per-stage action lists the runtime executed (stored in the record), with:

* **per-action costs** measured in the run: for every stage and action kind (``F``/``B``)
  the seconds spent decompressing what it received (``pre_s``), computing (``compute_s``)
  and compressing what it sends (``post_s``), taken as a low quantile over the measured
  steps and micro-batches (robust to a shared, loaded machine; the mean is kept too);
* **messages** as the transport sends them: a payload of ``n`` wire bytes is
  ``protocol.messages`` messages (``header_bytes`` each, the last one carrying the rest);
  a message costs ``latency + 8 * bytes / bandwidth``;
* **receiver-posted sends** (gloo's TCP pair, NCCL alike): a message leaves only after the
  receiver has posted the matching receive and that notice (a zero-byte control message)
  reached the sender; the receiver posts message ``i + 1`` only when message ``i`` arrived
  (a length prefix, then the body), the first one when the action starts (or, with
  ``protocol.post_ahead``, when the previous action starts);
* **streams** between two ranks that carry one message at a time per direction (FIFO in the
  order messages become ready; control messages queue like data: one TCP connection);
* **hosts**: every pipeline rank is a host with one full-duplex NIC of the profile's bandwidth
  each way. The messages on the wire at one moment share the NICs they cross, max-min fairly:
  a middle stage that sends activations forward while it sends gradients back sends each at
  half the rate (on the emulated links of ``--link`` this took the 4-stage cell's error from
  1.08-1.13 to 1.02-1.06; docs/ARCHITECTURE.md).

A stage runs its actions in order; a send does not block it (asynchronous sends). After its
last action a rank reduces its stages' gradients across the data-parallel replicas, ring step
by ring step on the same NICs (so the reduction shares the wire with the pipeline's last
gradients still in flight), and steps its optimizer; the step ends when the slowest rank does.
Alone on the wire a reduction costs the ring formula (:func:`.ring.dp_time`).
``comm_s`` of a step is its modeled time minus the same step on an infinitely fast network.

Re-modeling a stored record (any bandwidth / latency, e.g. the leaderboard's slider)::

    from suite.results.network import NetworkProfile, model_record
    model_record(record["timing_inputs"], NetworkProfile("x", 20e6, 2e-3))
    # -> {"step_s", "total_s", "time_to_target_s", "comm_s_per_step"}

The package is pure Python (no torch): the leaderboard imports it. One module per job:

- :mod:`.profiles`: the named networks (``PROFILES``, ``IDEAL``);
- :mod:`.timing_inputs`: what a record stores for the model, its JSON form and migration;
- :mod:`.simulation`: the event simulator of one step;
- :mod:`.ring`: data-parallel ring collectives (closed form and steps);
- :mod:`.model`: modeled times of a whole run (``model_run``, ``model_record``, ``MODEL_VERSION``).

The names below are the package's public API (``from suite.results.network import ...``).
"""

from __future__ import annotations

from .model import MAX_MODEL_COST, MODEL_VERSION, model_cost, model_record, model_run, run_step_times
from .profiles import IDEAL, INTRA_HOST, PROFILES, IntraHostLink, NetworkProfile, get_profile, with_intra
from .ring import dp_time
from .simulation import simulate_step, step_time
from .timing_inputs import (
    PROTOCOLS,
    ActionCost,
    DPLoad,
    LinkLoad,
    Protocol,
    StageCost,
    StepLoad,
    TimingInputs,
    TPLoad,
    encode_steps,
    interpolate_target_step,
    quantile,
)

__all__ = [
    "MODEL_VERSION",
    "NetworkProfile",
    "PROFILES",
    "IDEAL",
    "get_profile",
    "IntraHostLink",
    "INTRA_HOST",
    "with_intra",
    "TPLoad",
    "ActionCost",
    "StageCost",
    "Protocol",
    "PROTOCOLS",
    "LinkLoad",
    "DPLoad",
    "StepLoad",
    "TimingInputs",
    "encode_steps",
    "simulate_step",
    "dp_time",
    "step_time",
    "model_run",
    "model_cost",
    "MAX_MODEL_COST",
    "model_record",
    "run_step_times",
    "interpolate_target_step",
    "quantile",
]
