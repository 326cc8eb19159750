"""Missing data: a one-line DataMissingError saying where to put the file and how to get it."""

from __future__ import annotations

import pytest

from tasks import DataMissingError, build_task

# task -> (what the message must name, how to get it)
EXPECT = {
    "cifar10": ("cifar10-jpg.tar.gz", "MPCBENCH_OFFLINE"),
    "sst2": ("sst2/train.tsv", "dl.fbaipublicfiles.com/glue"),
    "shakespeare": ("tinyshakespeare/input.txt", "karpathy/char-rnn"),
    "cola": ("cola/train.tsv", "glue/data/CoLA.zip"),
    "mrpc": ("mrpc/train.tsv", "msr_paraphrase_train.txt"),
    "rte": ("rte/train.tsv", "glue/data/RTE.zip"),
    "stsb": ("stsb/train.tsv", "glue/data/STS-B.zip"),
    "wikitext2": ("wikitext2/train.txt", "wikitext-2-v1.zip"),
}


@pytest.mark.parametrize("name", sorted(EXPECT))
def test_missing_data_says_where_and_how(name, tmp_path, monkeypatch):
    monkeypatch.setenv("MPCBENCH_OFFLINE", "1")  # no download attempt
    monkeypatch.setenv("MPCBENCH_CACHE_DIR", str(tmp_path / "cache"))
    task = build_task(name, tier="smoke", data_dir=tmp_path / "nodata")
    with pytest.raises(DataMissingError) as err:
        next(iter(task.train_batches()))
    msg = str(err.value)
    where, how = EXPECT[name]
    assert str(tmp_path / "nodata") in msg and where in msg and how in msg
    assert "MPCBENCH_DATA_DIR" in msg
    assert "\n" not in msg


def test_sst2_unknown_model_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("MPCBENCH_SST2_MODEL", str(tmp_path / "no-model"))
    task = build_task("sst2", tier="smoke")
    assert task.describe()["model"] == str(tmp_path / "no-model")
    with pytest.raises(DataMissingError, match="MPCBENCH_SST2_MODEL"):
        task.build_stages(2)


def test_failed_download_is_a_data_missing_error(tmp_path, monkeypatch):
    import urllib.error

    import tasks.shakespeare as sh

    monkeypatch.delenv("MPCBENCH_OFFLINE", raising=False)

    def unreachable(url, dest):
        raise urllib.error.URLError("Name or service not known")

    monkeypatch.setattr(sh, "fetch", unreachable)
    with pytest.raises(DataMissingError, match="automatic download failed: URLError"):
        sh.load_text(tmp_path)


def test_download_puts_the_file_in_the_data_dir(tmp_path, monkeypatch):
    import tasks.shakespeare as sh

    monkeypatch.delenv("MPCBENCH_OFFLINE", raising=False)
    fetched = []

    def fake_fetch(url, dest):
        fetched.append(url)
        dest.parent.mkdir(parents=True)
        dest.write_text("ab\nba\n")

    monkeypatch.setattr(sh, "fetch", fake_fetch)
    ids, vocab = sh.load_text(tmp_path)
    assert fetched == [sh.URL] and vocab == ["\n", "a", "b"] and ids.tolist() == [1, 2, 0, 2, 1, 0]
