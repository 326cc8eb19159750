"""One row's trusted spread and its held-out check (:mod:`.tolerances`, module docstring).

The spread a comparison that is not exact is held to is the maintainers' (:func:`.tolerances.reference_for`):
nothing the entry does at any seed changes it. The verifier also runs the row's setup at a seed of its
own (:func:`.tolerances.self_seeds`: 0-99, like recorded seeds, drawn from the verification's seed), once
per row and only where the row was compared across seeds or machine classes, and holds that run to the
same spread against the row's re-run: a row whose recorded seeds are better than what its setup does at
another seed (forged, or chosen among many) fails, and a plugin that tells the verifier's seed from a
recorded one and misbehaves there fails its own row. The result never widens a tolerance.
"""

from __future__ import annotations

import copy
import threading
from typing import Any, Callable

from .compare import compare_all
from .errors import VerifyError
from .rerun import Rerun
from .tolerances import Reference, reference_for, self_seeds

__all__ = ["RowReference", "HeldOut", "at_seed"]

RunAt = Callable[[dict[str, Any]], "Rerun | None"]  # a record (at a seed of the verifier's) -> its re-run


def at_seed(record: dict[str, Any], seed: int) -> dict[str, Any]:
    """``record``'s cell at another training seed, as the verifier runs it (never a record of the entry)."""
    out = copy.deepcopy(record)
    out["seed"] = seed
    out["config"] = {**(out.get("config") or {}), "seed": seed}
    out["record_id"] = f"{record.get('record_id')}#verifier-seed-{seed}"
    out["cell_key"] = None  # the seed is part of the key: the re-run's own key is the one that counts
    return out


class HeldOut:
    """The verdict of a row's held-out run: (status, detail, the pseudo record id, its metric)."""

    def __init__(self, status: str, detail: str, record_id: str, seed: int, metric: Any = None) -> None:
        self.status, self.detail, self.record_id, self.seed, self.metric = status, detail, record_id, seed, metric


class RowReference:
    """The reference of one row (``row``: its id; ``taken``: the seeds its records hold)."""

    def __init__(self, row: str, taken: set[int], verification_seed: int, run_at: RunAt) -> None:
        self.row, self.taken, self.seed, self.run_at = row, taken, verification_seed, run_at
        self._lock = threading.Lock()
        self._held_out: HeldOut | None = None
        self.source = ""  # what the row's spread comparisons used, for the report ("" if none was needed)

    def __call__(self, record: dict[str, Any], rerun: Rerun) -> Reference:
        """The reference for ``record`` (a record of the row), or VerifyError; the re-run plays no part."""
        try:
            ref = reference_for(record)
        except VerifyError as e:
            self.source = str(e)
            raise
        self.source = ref.source
        return ref

    def held_out(self, record: dict[str, Any], rerun: Rerun) -> HeldOut:
        """Run the row's setup at the verifier's own seed once and compare it with the row's re-run."""
        with self._lock:
            if self._held_out is None:
                self._held_out = self._run_held_out(record, rerun)
            return self._held_out

    def _run_held_out(self, record: dict[str, Any], rerun: Rerun) -> HeldOut:
        (s,) = self_seeds(self.seed, self.row, self.taken | {int(rerun.record.get("seed") or 0)}, n=1)
        pseudo = at_seed(record, s)
        try:
            ref = reference_for(record)
            new = self.run_at(pseudo)
        except VerifyError as e:
            return HeldOut("cannot verify", f"the verifier's held-out seed {s} could not be judged: {e}", "", s)
        if new is None:
            return HeldOut("cannot verify", f"the verifier's held-out seed {s} was not run", "", s)
        # the row's re-run stands for its record: held to the trusted spread, the held-out run as "another seed"
        status, detail, _ = compare_all(
            rerun.record, new.record, exact=False, std=ref.final_std, field_std=ref.field_std,
            why=f"{ref.source}; the verifier's held-out seed {s}", same_seed=False,
        )  # fmt: skip
        if status == "mismatch":
            detail = f"the verifier's held-out seed {s} of this setup disagrees with the row: {detail}"
        return HeldOut(status, detail, pseudo["record_id"], s, new.record.get("final_metric"))
