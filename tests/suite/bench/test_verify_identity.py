"""An entry bound to the key its ``entry.yaml`` names on the base branch (issue 35), or the maintainers' list
names: since issue 45 a signed *state*, not signed commits. A pull request may change a keyed folder only
with a manifest of its new state signed by that key, version above the base's; a replayed older state,
a commit the owner signed elsewhere, a deleted or ``git mv``-renamed folder are refused; a new third-party
entry is keyed and signed. Temporary git repositories, keys from ssh-keygen."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from suite.bench.verify import VerifyError, identity, manifest
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


def _sign(r: Path, key: Path, folder: str = "records/e", base: str = "main") -> None:
    identity.sign(r / folder, key, base)


def test_a_keyed_entry_changes_only_with_its_new_state_signed_by_its_key(repo):
    r, owner, other = repo
    _commit(r, {"records/e/r.jsonl": "{}\n{}\n"}, "an unsigned change")
    with pytest.raises(VerifyError) as e:
        identity.check_identity(r / "records" / "e", "main")
    assert "without a signed manifest" in str(e.value) and "--sign" in str(e.value) and "\n" not in str(e.value)
    _sign(r, other)  # a copier's key
    with pytest.raises(VerifyError, match="not signed by the entry's key"):
        identity.check_identity(r / "records" / "e", "main")
    from suite.bench.verify import main

    assert main(["verify", str(r / "records" / "e"), "--sign", str(owner), "--base", "main"]) == 0  # the CLI
    assert "signed by" in identity.check_identity(r / "records" / "e", "main")
    (r / "records" / "e" / "r.jsonl").write_text("x\n")  # a change after signing: not the signed state
    with pytest.raises(VerifyError, match="not the state manifest.json signed"):
        identity.check_identity(r / "records" / "e", "main")
    _commit(r, {"README": "y"}, "outside the entry: not its business")


def test_a_commit_the_owner_signed_elsewhere_proves_nothing(repo):
    """Before: git commit signatures were checked; a commit the owner signed on an abandoned branch
    (dropping two of three records), replayed in someone else's pull request, passed."""
    r, owner, _ = repo
    _commit(r, {"records/e/r.jsonl": "dropped\n"}, "signed by the owner, abandoned", key=owner)
    with pytest.raises(VerifyError, match="without a signed manifest"):
        identity.check_identity(r / "records" / "e", "main")


def test_a_replayed_older_signed_state_is_refused(repo):
    r, owner, _ = repo
    _commit(r, {"records/e/r.jsonl": "a\n"}, "one record")
    _sign(r, owner)  # version 1: a state the owner signed once
    old = {n: (r / "records" / "e" / n).read_bytes() for n in ("r.jsonl", "manifest.json", "manifest.json.sig")}
    assert "version 1" in identity.check_identity(r / "records" / "e", "main")
    _commit(r, {"records/e/r.jsonl": "a\nb\nc\n"}, "three records")
    _sign(r, owner, base="main")
    _git(r, "add", "-A")
    _git(r, "commit", "-q", "-m", "signed v1 then v2")
    _git(r, "checkout", "-q", "main")
    _git(r, "merge", "-q", "--ff-only", "pr")  # landed: main holds version 2
    landed = manifest.manifest_at(r, _git(r, "rev-parse", "HEAD").strip(), "records/e")
    assert landed is not None and landed.version == 2
    _git(r, "checkout", "-q", "-b", "attacker")
    for n, b in old.items():  # the older signed state, bytes as the owner signed them
        (r / "records" / "e" / n).write_bytes(b)
    _commit(r, {}, "replay the older signed state")
    with pytest.raises(VerifyError, match="not above the base branch's"):
        identity.check_identity(r / "records" / "e", "main")


def test_swapping_the_key_in_the_pull_request_does_not_help(repo):
    """The key comes from the base tree: a pull request that names its own key is judged by the old one."""
    r, owner, other = repo
    _commit(r, {"records/e/entry.yaml": _yaml(other), "records/e/r.jsonl": "forged\n"}, "re-keyed", key=other)
    _sign(r, other)
    with pytest.raises(VerifyError, match="not signed by the entry's key"):
        identity.check_identity(r / "records" / "e", "main")


def test_a_renamed_or_deleted_keyed_folder_is_refused(repo):
    """Before: CI listed changed folders with ``git diff --name-only``, which follows renames: a ``git mv``
    of a keyed entry's folder into a new unkeyed one showed only the new path, and the thief owned its records."""
    r, owner, other = repo
    _commit(r, {"records/e/r.jsonl": "".join(f'{{"record": {i}}}\n' for i in range(40))}, "the victim's records")
    _sign(r, owner)
    _commit(r, {}, "signed")
    _git(r, "checkout", "-q", "main")
    _git(r, "merge", "-q", "--ff-only", "pr")
    _git(r, "checkout", "-q", "-b", "thief")
    (r / "records" / "thief").mkdir()
    _git(r, "mv", "records/e/r.jsonl", "records/thief/r.jsonl")
    (r / "records" / "thief" / "entry.yaml").write_text(_yaml(other))
    _sign(r, other, folder="records/thief")
    _commit(r, {}, "moved")
    renames_on = _git(r, "diff", "--name-only", "-M", "main...HEAD", "--", "records/")
    assert "records/e/" not in renames_on  # what CI used to see: the victim's folder never checked
    assert identity.changed_folders(r, "main") == ["records/e", "records/thief"]
    with pytest.raises(VerifyError, match="records/e: its files are not the state manifest.json signed"):
        identity.check_identity(r / "records" / "e", "main")
    assert "new entry keyed" in identity.check_identity(r / "records" / "thief", "main")
    _git(r, "mv", "records/e", "records/gone")  # the whole folder moved
    _commit(r, {}, "moved the folder")
    assert "records/e" in identity.changed_folders(r, "main")
    with pytest.raises(VerifyError, match="may not be deleted or moved"):
        identity.check_identity(r / "records" / "e", "main")
    ci = (Path(__file__).resolve().parents[3] / ".github" / "workflows" / "ci.yml").read_text()
    diffs = [line for line in ci.splitlines() if "git" in line and " diff " in line and "--name-only" in line]
    assert diffs and all("--no-renames" in line for line in diffs)
    assert "suite.bench.verify.identity" in ci  # the records' folders: changed_folders


def test_a_new_third_party_entry_must_be_keyed_and_signed(tmp_path):
    owner = _key(tmp_path, "owner")
    r = tmp_path / "repo"
    r.mkdir()
    _git(r, "init", "-q", "-b", "main")
    _commit(r, {"README": "x"}, "base")
    _git(r, "checkout", "-q", "-b", "pr")
    _commit(r, {"records/n/entry.yaml": _yaml(None), "records/n/r.jsonl": "{}\n"}, "unkeyed")
    with pytest.raises(VerifyError, match="a new entry must name its key"):
        identity.check_identity(r / "records" / "n", "main")
    _commit(r, {"records/n/entry.yaml": _yaml(owner)}, "keyed, unsigned")
    with pytest.raises(VerifyError, match="without a signed manifest"):
        identity.check_identity(r / "records" / "n", "main")
    _sign(r, owner, folder="records/n")
    assert "new entry keyed" in identity.check_identity(r / "records" / "n", "main")


def test_removing_seeds_from_the_plateau_entry_needs_the_maintainers_key(tmp_path):
    """Before: records/mpcbench-plateau was judged as the maintainers' (claims read it) but had no key and no
    CODEOWNERS line: deleting 4 of 5 seeds of one arm turned a plateau verdict from contradicted to not testable."""
    from suite.results.maintainers import MAINTAINER_KEYS, MAINTAINERS_KEY

    other = _key(tmp_path, "other")
    real = Path(__file__).resolve().parents[3] / "records" / "mpcbench-plateau"
    r = tmp_path / "repo"
    r.mkdir()
    _git(r, "init", "-q", "-b", "main")
    files = {f"records/mpcbench-plateau/{p.name}": p.read_text() for p in real.iterdir() if p.is_file()}
    _commit(r, files, "the maintainers' plateau entry")
    _git(r, "checkout", "-q", "-b", "pr")
    jsonl = next(n for n in files if n.endswith(".jsonl"))
    lines = files[jsonl].splitlines(keepends=True)
    _commit(r, {jsonl: "".join(lines[: len(lines) // 5])}, "drop most seeds")
    assert MAINTAINER_KEYS["mpcbench-plateau"] == MAINTAINERS_KEY
    with pytest.raises(VerifyError, match="without a signed manifest"):
        identity.check_identity(r / "records" / "mpcbench-plateau", "main")
    _sign(r, other, folder="records/mpcbench-plateau")
    with pytest.raises(VerifyError, match=r"not signed by the entry's key SHA256:"):
        identity.check_identity(r / "records" / "mpcbench-plateau", "main")


def test_verify_refuses_an_entry_changed_without_its_signed_state_before_anything_runs(repo, capsys):
    from suite.bench.verify import main, report

    r, owner, _ = repo
    _commit(r, {"records/e/r.jsonl": "forged\n"}, "unsigned change")
    with pytest.raises(VerifyError, match="without a signed manifest"):
        report.verify_entry(r / "records" / "e", base="main", write=False)
    argv = [str(r / "records" / "e"), "--here", "--base", "main", "--signatures-only"]
    assert main(["verify", *argv]) == 2 and "without a signed manifest" in capsys.readouterr().err
    shutil.rmtree(r / "records" / "e")
    _commit(r, {}, "the entry deleted")
    assert main(["verify", *argv]) == 2  # a deleted folder is checked too
    assert "may not be deleted" in capsys.readouterr().err


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
    # an unstamped record (a copy of an unkeyed run's) loads into no keyed entry (issue 45)
    rec["provenance"].pop("signing_key")
    (d / "r.jsonl").write_text(json.dumps(rec) + "\n")
    records, problems = load_entry(d)
    assert not records and any("no key stamp" in p.reason for p in problems), problems
    monkeypatch.setenv("MPCBENCH_SIGNING_KEY", "ssh-ed25519 AAAA")
    with pytest.raises(ValueError, match="MPCBENCH_SIGNING_KEY"):
        signing_key_info()
