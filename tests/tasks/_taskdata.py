"""Helpers for the task tests: which built-in tasks have their data here (imported by the test modules)."""

from __future__ import annotations

import pytest

from tasks import default_data_dir

# the file each built-in task reads (relative to the data dir)
DATA_FILES = {
    "cifar10": "cifar10-jpg.tar.gz",
    "sst2": "sst2/train.tsv",
    "shakespeare": "tinyshakespeare/input.txt",
    "cola": "cola/train.tsv",
    "mrpc": "mrpc/train.tsv",
    "rte": "rte/train.tsv",
    "stsb": "stsb/train.tsv",
    "wikitext2": "wikitext2/train.txt",
}
ENCODER_TASKS = ("sst2", "cola", "mrpc", "rte", "stsb")  # they need the pretrained encoder too


def require_data(task: str) -> None:
    """Skip (with the reason) when a built-in task's data is not in the data dir."""
    if task in DATA_FILES and not (default_data_dir() / DATA_FILES[task]).exists():
        pytest.skip(f"{task}: {default_data_dir() / DATA_FILES[task]} not found (set MPCBENCH_DATA_DIR)")
    if task in ENCODER_TASKS:  # the pretrained encoder is data too (a package, or $MPCBENCH_SST2_MODEL)
        from tasks import DataMissingError
        from tasks.sst2 import default_model

        try:
            default_model()
        except DataMissingError as e:
            pytest.skip(str(e))


def task_params(names):
    """pytest params for task names, marking the built-in (real-data) ones ``data``."""
    return [pytest.param(n, marks=pytest.mark.data) if n in DATA_FILES else n for n in names]
