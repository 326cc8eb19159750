"""The trusted spread of one row, made once per row: the maintainers' multi-seed run of its setup, else
seeds the verifier runs itself (:mod:`.tolerances`, module docstring).

The self-run seeds are drawn from the verification's seed and the row (:func:`.tolerances.self_seeds`),
run lazily (only a comparison that is not exact needs a spread) and only once per row, whichever of the
row's cells asks first; the report names the reference each row used.
"""

from __future__ import annotations

import copy
import threading
from typing import Any, Callable

from .errors import VerifyError
from .rerun import Rerun
from .tolerances import Reference, maintainers_reference, self_run_reference, self_seeds

__all__ = ["RowReference", "at_seed"]

RunAt = Callable[[dict[str, Any]], "Rerun | None"]  # a record (at a seed of the verifier's) -> its re-run


def at_seed(record: dict[str, Any], seed: int) -> dict[str, Any]:
    """``record``'s cell at another training seed, as the verifier runs it (never a record of the entry)."""
    out = copy.deepcopy(record)
    out["seed"] = seed
    out["config"] = {**(out.get("config") or {}), "seed": seed}
    out["record_id"] = f"{record.get('record_id')}#verifier-seed-{seed}"
    out["cell_key"] = None  # the seed is part of the key: the re-run's own key is the one that counts
    return out


class RowReference:
    """The reference of one row (``row``: its id; ``taken``: the seeds its records hold)."""

    def __init__(self, row: str, taken: set[int], verification_seed: int, run_at: RunAt) -> None:
        self.row, self.taken, self.seed, self.run_at = row, taken, verification_seed, run_at
        self._lock = threading.Lock()
        self._made: Reference | VerifyError | None = None
        self.source = ""  # what the row's spread comparisons used, for the report ("" if none was needed)

    def __call__(self, record: dict[str, Any], rerun: Rerun) -> Reference:
        """The reference for ``record`` (a record of the row) given the row's re-run, or VerifyError."""
        ref = maintainers_reference(record)
        if ref is not None:
            self.source = ref.source
            return ref
        with self._lock:  # the row's cells may be judged in parallel: its seeds run once
            if self._made is None:
                self._made = self._self_run(record, rerun)
            made = self._made
        if isinstance(made, VerifyError):
            self.source = str(made)
            raise made
        self.source = made.source
        return made

    def _self_run(self, record: dict[str, Any], rerun: Rerun) -> Reference | VerifyError:
        runs = [rerun.record]
        for s in self_seeds(self.seed, self.row, self.taken | {int(rerun.record.get("seed") or 0)}):
            try:
                new = self.run_at(at_seed(record, s))
            except VerifyError as e:
                return VerifyError(f"the verifier's own seed {s} of this setup could not be run: {e}")
            if new is not None:
                runs.append(new.record)
        try:
            return self_run_reference(record, runs)
        except VerifyError as e:
            return e
