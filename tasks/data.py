"""Shared data helpers for the tasks: finding files, caching decoded arrays, sampling.

Three things every task needs and should do the same way:

* ``require(path, how, download)``: a missing data file is downloaded into the data dir when
  there is internet (not with ``$MPCBENCH_OFFLINE=1``), else raises :class:`DataMissingError`
  naming the path, the data directory setting (``--data-dir`` / ``$MPCBENCH_DATA_DIR``) and
  how to get it.
* ``cached_arrays(name, source, build)``: decode / tokenize a data set once into ``.npy``
  files under :func:`cache_dir` (``$MPCBENCH_CACHE_DIR``, else ``~/.cache/mpcbench``) and
  memory-map them afterwards (well under a second, shared page cache across ranks). The
  cache is keyed on the source file's name, size and mtime, so a changed source rebuilds it;
  concurrent ranks take a file lock so only one decodes.
* ``SampleOrder``: the training order. The sample pool (the whole training set, or a fixed
  ``train_samples`` subset of it that does not depend on the seed) is shuffled once per epoch
  by a generator seeded from the run's seed; step ``s`` takes the next ``batch_size * dp_size``
  indices of that stream and replica ``r`` gets slice ``r``. So the data order is a pure
  function of (seed, step), and the replicas of a step partition one global batch.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
from pathlib import Path
from typing import Callable, Iterator, Mapping

import numpy as np
import torch
from torch import Tensor

from .api import DataMissingError

__all__ = [
    "cache_dir",
    "require",
    "fetch",
    "offline",
    "source_key",
    "cached_arrays",
    "SampleOrder",
    "fixed_subset",
    "step_generator",
    "SUBSET_SEED",
]

SUBSET_SEED = 20240601
"""Seed of the fixed training / evaluation subsets: the same samples for every run seed, so
seeds differ only in order, augmentation and initialization."""


def cache_dir() -> Path:
    """Where decoded arrays are cached: ``$MPCBENCH_CACHE_DIR``, else ``~/.cache/mpcbench``."""
    env = os.environ.get("MPCBENCH_CACHE_DIR")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "mpcbench"


def offline() -> bool:
    """``$MPCBENCH_OFFLINE=1``: never try to download (tests, air-gapped machines)."""
    return os.environ.get("MPCBENCH_OFFLINE") == "1"


def require(path: Path, how: str, download: Callable[[], None] | None = None) -> Path:
    """Return ``path`` if it exists; else run ``download`` (unless offline) to put it there;
    else raise a one-line :class:`DataMissingError` saying where to put it and how to get it."""
    if path.exists():
        return path
    where = (
        f"data file {path} not found; put it there (the data directory is set by --data-dir or "
        f"$MPCBENCH_DATA_DIR, default ../shared/data next to the checkout), or {how}"
    )
    if download is None or offline():
        raise DataMissingError(where)
    try:
        download()
    except Exception as e:  # offline, proxy, read-only data dir...
        raise DataMissingError(f"{where} (automatic download failed: {type(e).__name__}: {e})") from None
    if not path.exists():
        raise DataMissingError(f"{where} (the download did not produce it)")
    return path


def fetch(url: str, dest: Path, timeout_s: float = 60.0) -> Path:
    """Download ``url`` to ``dest`` (atomically: a partial download never looks complete)."""
    import urllib.request

    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.part")
    with urllib.request.urlopen(url, timeout=timeout_s) as r, open(tmp, "wb") as f:
        while chunk := r.read(1 << 20):
            f.write(chunk)
    os.replace(tmp, dest)
    return dest


def source_key(*parts: object) -> str:
    """A short hash of files (name, size, mtime) and settings: the cache entry's identity."""
    items = []
    for p in parts:
        if isinstance(p, Path):
            st = p.stat()
            items.append(f"{p.name}:{st.st_size}:{st.st_mtime_ns}")
        else:
            items.append(repr(p))
    return hashlib.sha1("|".join(items).encode()).hexdigest()[:12]


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def cached_arrays(name: str, key: str, build: Callable[[], Mapping[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Arrays ``build()`` returns, computed once and memory-mapped from the cache afterwards.

    Stored as ``<cache_dir>/<name>-<key>/<array>.npy`` plus ``meta.json`` written last (a
    directory without it is incomplete and is rebuilt). The returned arrays are read-only.
    """
    folder = cache_dir() / f"{name}-{key}"
    meta = folder / "meta.json"

    def load() -> dict[str, np.ndarray]:
        names = json.loads(meta.read_text())["arrays"]
        return {n: np.load(folder / f"{n}.npy", mmap_mode="r") for n in names}

    if meta.exists():
        return load()
    with _locked(cache_dir() / f".{name}-{key}.lock"):
        if meta.exists():  # another rank built it while we waited
            return load()
        arrays = dict(build())
        folder.mkdir(parents=True, exist_ok=True)
        for n, a in arrays.items():
            tmp = folder / f".{n}.tmp.npy"
            np.save(tmp, np.ascontiguousarray(a))
            os.replace(tmp, folder / f"{n}.npy")
        meta.write_text(json.dumps({"arrays": list(arrays), "key": key}))
    return load()


def fixed_subset(n_total: int, n: int | None, salt: int = 0) -> Tensor:
    """Indices of a fixed random subset of ``range(n_total)`` of size ``n`` (None = all, in order).

    Independent of the run seed (see :data:`SUBSET_SEED`); ``salt`` separates train and eval.
    """
    if n is None or n >= n_total:
        return torch.arange(n_total)
    g = torch.Generator().manual_seed(SUBSET_SEED + salt)
    return torch.randperm(n_total, generator=g)[:n].sort().values


def step_generator(seed: int, step: int, salt: int = 0) -> torch.Generator:
    """A CPU generator for the randomness of one training step (e.g. augmentation), a pure
    function of (seed, step, salt)."""
    return torch.Generator().manual_seed((seed * 1_000_003 + step * 7919 + salt) % (2**63 - 1))


class SampleOrder:
    """Deterministic, epoch-shuffled order of a sample pool, sharded over replicas.

    ``pool``: the candidate sample indices (B,) int64. ``indices(step, dp_rank, dp_size)``
    returns the (batch_size,) pool entries replica ``dp_rank`` trains on at ``step``.
    """

    def __init__(self, pool: Tensor, batch_size: int, seed: int) -> None:
        self.pool = pool.to(torch.int64)
        self.batch_size = batch_size
        self.seed = seed
        self._epochs: dict[int, Tensor] = {}

    def _epoch(self, e: int) -> Tensor:
        if e not in self._epochs:
            g = torch.Generator().manual_seed((self.seed * 1_000_003 + e) % (2**63 - 1))
            self._epochs = {e: self.pool[torch.randperm(len(self.pool), generator=g)]}  # keep one epoch
        return self._epochs[e]

    def indices(self, step: int, dp_rank: int = 0, dp_size: int = 1) -> Tensor:
        if not 0 <= dp_rank < dp_size:
            raise ValueError(f"dp_rank={dp_rank} must be in [0, dp_size={dp_size})")
        n = len(self.pool)
        start = (step * dp_size + dp_rank) * self.batch_size  # position in the endless stream
        pos = torch.arange(start, start + self.batch_size)
        epochs, offsets = pos // n, pos % n
        out = torch.empty(self.batch_size, dtype=torch.int64)
        for e in epochs.unique().tolist():  # at most two epochs per batch unless the pool is tiny
            sel = epochs == e
            out[sel] = self._epoch(e)[offsets[sel]]
        return out
