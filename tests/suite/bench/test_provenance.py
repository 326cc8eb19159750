"""Provenance: git state (or None without git), machine, and plugin source hashes."""

from __future__ import annotations

import json
import platform
import re
import subprocess

import pytest
import torch

import suite.bench.provenance as prov
from suite.bench.record_builder import failed_record
from suite.pipeline.config import CellConfig, CompressionPlan

pytestmark = pytest.mark.usefixtures("restore_registry")


@pytest.fixture(autouse=True)
def _fresh_caches():
    prov.git_info.cache_clear()
    yield
    prov.git_info.cache_clear()


def test_git_info_in_a_checkout(tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run([*git[:3], "init", "-q"], check=True)
    (repo / "a.txt").write_text("a")
    subprocess.run([*git, "add", "a.txt"], check=True)
    subprocess.run([*git, "commit", "-qm", "x"], check=True)
    monkeypatch.setattr(prov, "REPO_ROOT", repo)
    info = prov.git_info()
    assert re.fullmatch(r"[0-9a-f]{40}", info["git_commit"])
    assert info["git_dirty"] is False
    prov.git_info.cache_clear()
    (repo / "new_plugin.py").write_text("x = 1")  # an untracked plugin file makes it dirty
    assert prov.git_info()["git_dirty"] is True


def test_no_git_degrades_to_none(tmp_path, monkeypatch):
    monkeypatch.setattr(prov, "REPO_ROOT", tmp_path)  # not a repository
    assert prov.git_info() == {"git_commit": None, "git_dirty": None}
    prov.git_info.cache_clear()
    monkeypatch.setenv("PATH", str(tmp_path))  # no git executable at all
    assert prov.git_info() == {"git_commit": None, "git_dirty": None}
    prov.git_info.cache_clear()
    monkeypatch.setenv("MPCBENCH_GIT_COMMIT", "0123abcd")  # a copied tree that says its commit
    assert prov.git_info() == {"git_commit": "0123abcd", "git_dirty": None}
    prov.git_info.cache_clear()


def test_machine_info():
    m = prov.machine_info()
    assert m["cpu_count"] >= 1
    assert m["python"] == platform.python_version()
    assert m["torch"] == torch.__version__.split("+")[0]
    if torch.cuda.is_available():
        assert isinstance(m["gpu"], str) and m["cuda"]
    else:
        assert m["gpu"] is None and m["cuda"] is None
    assert m["hostname"] and m["platform"]


def test_plugin_hashes_follow_the_source(tmp_path):
    path = tmp_path / "hashme_plugin.py"
    src = (
        "from compressors import Compressor, register\n"
        "@register('hashme_cc')\n"
        "class H(Compressor):\n"
        "    def compress(self, x, info): return (x,)\n"
        "    def decompress(self, p, info): return p[0]\n"
    )
    path.write_text(src)
    from compressors.registry import load_plugin

    load_plugin(str(path))
    cfg = CellConfig(task="tiny", plan=CompressionPlan(forward="hashme_cc", backward="fp16"), plugins=(str(path),))
    h1 = prov.plugin_hashes(cfg)
    assert set(h1) == {"hashme_cc", "fp16", "none", f"plugin:{path}"}
    assert all(re.fullmatch(r"[0-9a-f]{16}", v) for v in h1.values())
    path.write_text(src + "# changed\n")
    load_plugin(str(path))
    h2 = prov.plugin_hashes(cfg)
    assert h2["hashme_cc"] != h1["hashme_cc"] and h2[f"plugin:{path}"] != h1[f"plugin:{path}"]
    assert h2["fp16"] == h1["fp16"]


def test_provenance_fits_a_record():
    cfg = CellConfig(task="cifar10", plan=CompressionPlan(forward="topk(ratio=0.1)", backward="topk(ratio=0.1)"))
    p = prov.provenance(cfg)
    for k in ("git_commit", "git_dirty", "mpcbench_version", "plugin_hashes", "machine"):
        assert k in p
    json.dumps(p)
    rec = failed_record(cfg, "x", p)
    assert rec["provenance"]["plugin_hashes"]["topk(ratio=0.1)"]
