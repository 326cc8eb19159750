"""Provenance stored with every record: code version, plugin source hashes, machine.

Like MLPerf's and pytest-benchmark's machine info: enough to tell later whether two
numbers are comparable. Everything degrades to ``None`` rather than failing (no git, no
``/proc``, no GPU).
"""

from __future__ import annotations

import functools
import hashlib
import os
import platform
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from suite import settings
from suite.pipeline.config import CellConfig

__all__ = [
    "provenance",
    "check_signing_key",
    "signing_key_info",
    "consistency_check_on",
    "git_info",
    "machine_info",
    "plugin_hashes",
    "mpcbench_version",
    "REPO_ROOT",
]

REPO_ROOT = Path(__file__).resolve().parents[2]


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(
            ["git", "-C", str(REPO_ROOT), *args],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip()


@functools.lru_cache(maxsize=1)
def git_info() -> dict[str, Any]:
    """``{"git_commit": sha or None, "git_dirty": bool or None}`` of the mpcbench checkout.

    Dirty means tracked files differ from the commit or untracked, non-ignored files exist
    (a new plugin file counts). No git, or not a checkout (installed from a wheel): None.
    A copy of a checkout without ``.git`` (e.g. the tree sent to a borrowed GPU machine) can
    name its commit in ``$MPCBENCH_GIT_COMMIT``; dirtiness is then unknown (None).
    """
    commit = _git("rev-parse", "HEAD")
    if commit is None and settings.git_commit():
        return {"git_commit": settings.git_commit(), "git_dirty": None}
    if not commit:
        return {"git_commit": None, "git_dirty": None}
    status = _git("status", "--porcelain", "--untracked-files=normal")
    return {"git_commit": commit, "git_dirty": None if status is None else bool(status)}


@functools.lru_cache(maxsize=1)
def mpcbench_version() -> str | None:
    try:
        from importlib.metadata import version

        return version("mpcbench")
    except Exception:  # noqa: BLE001 - not installed (running from a bare checkout)
        return None


def _cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.lower().startswith(("model name", "hardware", "cpu model")):
                    return line.split(":", 1)[1].strip() or None
    except OSError:
        pass
    return platform.processor() or None


@functools.lru_cache(maxsize=1)
def machine_info() -> dict[str, Any]:
    """CPU model and cores, GPU model (None without CUDA), torch/CUDA/Python versions, OS, host."""
    import torch

    gpu = None
    gpu_count = 0
    try:
        if torch.cuda.is_available():
            gpu_count = torch.cuda.device_count()
            gpu = torch.cuda.get_device_name(0)
    except Exception:  # noqa: BLE001 - a broken driver must not break provenance
        gpu = None
    try:
        affinity = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        affinity = None
    return {
        "cpu": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpu_affinity": affinity,
        "gpu": gpu,
        "gpu_count": gpu_count,
        "torch": torch.__version__.split("+")[0],
        "torch_build": torch.__version__,
        "cuda": torch.version.cuda if gpu else None,
        "cuda_build": torch.version.cuda,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "hostname": socket.gethostname(),
    }


def _file_hash(path: str) -> str | None:
    """sha256 (first 16 hex) of a plugin file's text, newlines normalized (as the leaderboard checks)."""
    try:
        data = Path(path).read_bytes()
    except OSError:
        return None
    try:
        data = data.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n").encode()
    except UnicodeDecodeError:
        pass
    return hashlib.sha256(data).hexdigest()[:16]


def plugin_hashes(config: CellConfig) -> dict[str, str | None]:
    """Source hash of every compressor spec the cell uses (``compressors.source_hash``) and of
    every plugin file or module it loads (``plugin:<name>``). Unhashable: None."""
    from compressors.registry import source_hash

    out: dict[str, str | None] = {}
    for spec in sorted(set(config.plan.all_specs())):
        try:
            out[spec] = source_hash(spec)
        except Exception:  # noqa: BLE001 - an unknown spec is reported by the cell, not here
            out[spec] = None
    for p in config.plugins:
        if p.endswith(".py") or "/" in p:
            out[f"plugin:{p}"] = _file_hash(p)
        else:
            mod = sys.modules.get(p)
            f = getattr(mod, "__file__", None)
            out[f"plugin:{p}"] = _file_hash(f) if f else None
    return out


def consistency_check_on(config: CellConfig) -> bool:
    """Whether the cell runs with the sender/receiver consistency check (``--check-consistency``
    sets ``config.check_consistency``; ``MPCBENCH_CHECK_CONSISTENCY=1`` in the environment too)."""
    return bool(config.check_consistency) or settings.check_consistency()


def provenance(config: CellConfig) -> dict[str, Any]:
    """The ``provenance`` block of a record (``consistency_check``: whether the debug check of
    ``suite.pipeline.boundary`` was on, by flag or environment)."""
    return {
        **git_info(),
        "mpcbench_version": mpcbench_version(),
        "plugin_hashes": plugin_hashes(config),
        "machine": machine_info(),
        # how busy the machine was when the cell finished (1/5/15-minute load averages): the
        # leaderboard shows it next to every measured time, which load alone can reorder
        "load": {"load_avg": [round(v, 2) for v in os.getloadavg()]} if hasattr(os, "getloadavg") else {},
        "argv": " ".join(sys.argv)[:1000],
        "consistency_check": consistency_check_on(config),
        "resources": resources(),
        **signing_key_info(),
    }


def signing_key_info() -> dict[str, str]:
    """``{"signing_key": <fingerprint>}`` of ``MPCBENCH_SIGNING_KEY``, or {} (the records then bind to no key).
    A copier who takes a pending entry's records and names their own key in entry.yaml finds them
    refused by the loader: re-keying means re-running."""
    from suite.results.signing_key import fingerprint

    key = settings.signing_key()
    if not key:
        return {}
    try:
        return {"signing_key": fingerprint(key)}
    except ValueError as e:
        raise ValueError(f"MPCBENCH_SIGNING_KEY {e}") from None


def check_signing_key() -> None:
    """Once, before a run's first cell (``mpcbench run`` / ``links`` / ``submit``, ``pytest suite``):
    an ``MPCBENCH_SIGNING_KEY`` that names no readable ssh-ed25519 public key stops everything with
    one line (:class:`suite.pipeline.errors.ConfigError`), instead of failing every cell one by one
    when its record is stamped (:func:`signing_key_info`)."""
    from suite.pipeline.errors import ConfigError

    try:
        signing_key_info()
    except ValueError as e:
        raise ConfigError(
            f"{' '.join(str(e).split())}; set MPCBENCH_SIGNING_KEY to the public key your entry.yaml names "
            "(its 'ssh-ed25519 AAAA...' line or its .pub file) or unset it (nothing was run)"
        ) from None


def resources() -> dict[str, Any]:
    """What this cell was given: the executor's pinning (``-j``, ``pytest -n``, Ray: threads, GPUs,
    cells at once) or ``{"executor": "serial"}``, and the torch threads and GPUs it actually sees."""
    out: dict[str, Any] = dict(settings.cell_resources()) or {"executor": "serial", "jobs": 1}
    torch = sys.modules.get("torch")
    if torch is not None:
        out["torch_threads"] = torch.get_num_threads()
    if "CUDA_VISIBLE_DEVICES" in os.environ:
        out["cuda_visible_devices"] = os.environ["CUDA_VISIBLE_DEVICES"]
    return out
