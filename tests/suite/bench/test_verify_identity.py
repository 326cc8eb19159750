"""An entry bound to the key its ``entry.yaml`` names on the base branch (issue 35): every commit of a pull
request that touches the entry's folder must be signed with that key (git ssh signing), merge or
fast-forward; a new entry's key binds when it lands. Temporary git repositories, keys from ssh-keygen."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from suite.bench.verify import VerifyError, identity
from suite.results import signing_key

pytestmark = pytest.mark.skipif(
    shutil.which("git") is None or shutil.which("ssh-keygen") is None,
    reason="needs git and ssh-keygen (git ssh signing)",
)


def _key(tmp: Path, name: str) -> Path:
    path = tmp / name
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(path)], check=True)
    return path


def _git(repo: Path, *args: str, key: Path | None = None) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@x", "GIT_COMMITTER_NAME": "t"}
    env.update(GIT_COMMITTER_EMAIL="t@x", GIT_CONFIG_GLOBAL="/dev/null", GIT_CONFIG_NOSYSTEM="1")
    sign = ["-c", "gpg.format=ssh", "-c", f"user.signingkey={key}"] if key else []
    return subprocess.run(
        ["git", "-C", str(repo), *sign, *args], check=True, capture_output=True, text=True, env=env
    ).stdout


def _commit(repo: Path, files: dict[str, str], msg: str, key: Path | None = None) -> None:
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", *(["-S"] if key else []), "-m", msg, key=key)


def _yaml(key: Path | None) -> str:
    text = "name: e\nsubmitter: s\ndate: '2026-01-01'\n"
    return text + (f"key: {(key.with_suffix('.pub')).read_text().strip()}\n" if key else "")


@pytest.fixture
def repo(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A repository whose main holds entry ``e`` keyed to ``owner``; a second key ``other``."""
    owner, other = _key(tmp_path, "owner"), _key(tmp_path, "other")
    r = tmp_path / "repo"
    r.mkdir()
    _git(r, "init", "-q", "-b", "main")
    _commit(r, {"records/e/entry.yaml": _yaml(owner), "records/e/r.jsonl": "{}\n", "README": "x"}, "land e")
    _git(r, "checkout", "-q", "-b", "pr")
    return r, owner, other


def test_commits_touching_a_keyed_entry_must_be_signed_by_the_base_branchs_key(repo):
    r, owner, other = repo
    _commit(r, {"records/e/r.jsonl": "{}\n{}\n"}, "signed by the owner", key=owner)
    assert "signed by" in identity.check_identity(r / "records" / "e", "main")
    _commit(r, {"README": "y"}, "unsigned, outside the entry")  # not the entry's folder: not checked
    identity.check_identity(r / "records" / "e", "main")
    _commit(r, {"records/e/r.jsonl": "{}\n{}\n{}\n"}, "a copier's commit, signed by another key", key=other)
    with pytest.raises(VerifyError) as e:
        identity.check_identity(r / "records" / "e", "main")
    msg = str(e.value)
    assert "\n" not in msg and "records/e" in msg and signing_key.fingerprint(_yaml(owner).split("key: ")[1]) in msg
    assert "git commit -S" in msg


def test_swapping_the_key_in_the_pull_request_does_not_help(repo):
    """The allowed signers come from the base tree: a pull request that names its own key is judged by the old one."""
    r, owner, other = repo
    _commit(r, {"records/e/entry.yaml": _yaml(other), "records/e/r.jsonl": "forged\n"}, "re-keyed", key=other)
    with pytest.raises(VerifyError, match="not signed by its key"):
        identity.check_identity(r / "records" / "e", "main")


def test_an_unsigned_commit_fast_forwarded_under_a_signed_one_is_caught(repo):
    """Every commit on the path, not the first-parent line: a signed tip over an unsigned change is refused."""
    r, owner, _ = repo
    _commit(r, {"records/e/r.jsonl": "forged\n"}, "unsigned change")
    _commit(r, {"records/e/r.jsonl": "{}\n{}\n"}, "signed tip", key=owner)
    with pytest.raises(VerifyError, match="not signed"):
        identity.check_identity(r / "records" / "e", "main")


def test_a_new_entrys_key_binds_when_it_lands(tmp_path):
    owner = _key(tmp_path, "owner")
    r = tmp_path / "repo"
    r.mkdir()
    _git(r, "init", "-q", "-b", "main")
    _commit(r, {"README": "x"}, "base")
    _git(r, "checkout", "-q", "-b", "pr")
    _commit(r, {"records/n/entry.yaml": _yaml(owner), "records/n/r.jsonl": "{}\n"}, "new entry, unsigned")
    assert "names no key" in identity.check_identity(r / "records" / "n", "main")
    _git(r, "checkout", "-q", "main")
    _git(r, "merge", "-q", "--ff-only", "pr")  # landed: from now on its key binds
    _git(r, "checkout", "-q", "-b", "pr2")
    _commit(r, {"records/n/r.jsonl": "{}\n{}\n"}, "unsigned change after landing")
    with pytest.raises(VerifyError, match="not signed"):
        identity.check_identity(r / "records" / "n", "main")


def test_the_key_field_is_one_ssh_ed25519_key(tmp_path):
    from leaderboard.submissions import read_entry_info

    owner = _key(tmp_path, "owner")
    line = owner.with_suffix(".pub").read_text().strip()
    assert signing_key.parse_key(line) == " ".join(line.split()[:2])
    got = subprocess.run(["ssh-keygen", "-lf", str(owner.with_suffix(".pub"))], capture_output=True, text=True)
    assert signing_key.fingerprint(line) == got.stdout.split()[1]  # what ssh-keygen and git print
    d = tmp_path / "records" / "e"
    d.mkdir(parents=True)
    for bad in ("ssh-rsa AAAAB3NzaC1yc2E", "ssh-ed25519 not-base64!", "ssh-ed25519 AAAA"):
        (d / "entry.yaml").write_text(_yaml(None) + f"key: {bad}\n")
        with pytest.raises(ValueError) as e:
            read_entry_info(d)
        assert "'key'" in str(e.value) and "\n" not in str(e.value)
    (d / "entry.yaml").write_text(_yaml(owner))
    assert read_entry_info(d).key == " ".join(line.split()[:2])


def test_verify_refuses_an_entry_whose_path_holds_an_unsigned_commit_before_anything_runs(repo, capsys):
    from suite.bench.verify import main, report

    r, owner, _ = repo
    _commit(r, {"records/e/r.jsonl": "forged\n"}, "unsigned change")
    with pytest.raises(VerifyError, match="not signed"):
        report.verify_entry(r / "records" / "e", base="main", write=False)
    argv = [str(r / "records" / "e"), "--here", "--base", "main", "--signatures-only"]
    assert main(["verify", *argv]) == 2 and "not signed" in capsys.readouterr().err
    shutil.rmtree(r / "records" / "e")
    _commit(r, {}, "the entry deleted, unsigned")
    assert main(["verify", *argv]) == 2  # a deleted folder's commits are checked too


def test_records_made_for_a_key_load_only_into_the_entry_that_names_it(tmp_path, monkeypatch):
    """A copier who takes a pending entry's records and names their own key in entry.yaml: every record was
    made for the first key (``provenance.signing_key``), so none loads; re-keying means re-running."""
    import json

    from leaderboard.submissions import load_entry
    from suite.bench.provenance import signing_key_info

    owner, copier = _key(tmp_path, "owner"), _key(tmp_path, "copier")
    monkeypatch.setenv("MPCBENCH_SIGNING_KEY", str(owner.with_suffix(".pub")))
    stamp = signing_key_info()
    assert stamp == {"signing_key": signing_key.fingerprint(owner.with_suffix(".pub").read_text())}
    baselines = Path(__file__).resolve().parents[3] / "records" / "mpcbench-baselines"
    rec = json.loads(sorted(baselines.glob("*.jsonl"))[0].read_text().splitlines()[0])
    rec["provenance"].update(stamp)
    for who, want in ((owner, 1), (copier, 0)):
        d = tmp_path / f"{who.name}-tree" / "records" / "e"
        d.mkdir(parents=True)
        (d / "entry.yaml").write_text(_yaml(who))
        (d / "r.jsonl").write_text(json.dumps(rec) + "\n")
        records, problems = load_entry(d)
        assert len(records) == want, problems
        if not want:
            assert any("made for key" in p.reason and "MPCBENCH_SIGNING_KEY" in p.reason for p in problems), problems
    monkeypatch.setenv("MPCBENCH_SIGNING_KEY", "ssh-ed25519 AAAA")
    with pytest.raises(ValueError, match="MPCBENCH_SIGNING_KEY"):
        signing_key_info()
