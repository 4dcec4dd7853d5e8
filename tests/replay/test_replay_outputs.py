"""Where a replay writes and how it ends, built for real: an --out folder holding a user's files is refused (and
replaced only with --force), a link another user planted in a sticky shared folder is never followed, a SIGTERM
leaves no staging folder, a full disk and a line longer than 16 MiB are one line each.

The full disk is a small tmpfs mounted for the test (this machine runs as root); where mounting is not allowed the
same test runs under a real file size limit instead (``RLIMIT_FSIZE`` with SIGXFSZ ignored, so writes past it fail
with EFBIG as on a full disk): never skipped."""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from cli_process import start, wait_for

from keysplit.cli import main as cli_main
from keysplit.datasets.readers import MAX_LINE_BYTES
from keysplit.errors import KeysplitError
from keysplit.outputs import atomic_file, foreign_link, refuse_foreign_links

USER_FILES = {"dataset.csv": "key\nmine\n", "summary.json": '{"mine": true}\n'}


def user_folder(path: Path) -> Path:
    path.mkdir()
    for name, text in USER_FILES.items():
        (path / name).write_text(text)
    return path


def test_a_folder_of_the_users_files_is_refused_before_spark_starts(tmp_path, capsys):
    out = user_folder(tmp_path / "mine")
    code = cli_main(["replay", "--dataset", "zipf:messages=100,keys=5", "-g", "kg", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2
    assert err == (f"keysplit: error: --out {out} holds files that are not a replay's (dataset.csv, summary.json); a "
                   "replay writes into a new or empty folder or one holding a replay: choose another, or add --force "
                   "to replace its dataset.csv, counts.parquet, results.parquet, timeseries.parquet, summary.json\n")
    assert {p.name: p.read_text() for p in out.iterdir()} == USER_FILES  # untouched, nothing added
    file_out = tmp_path / "file"
    file_out.write_text("x")
    assert cli_main(["replay", "--dataset", "zipf:messages=100", "--out", str(file_out)]) == 2
    assert capsys.readouterr().err == f"keysplit: error: cannot create output directory {file_out}: File exists\n"


def test_force_replaces_the_outputs_only_and_marks_the_folder_as_a_replays(spark, tmp_path, capsys):
    out = user_folder(tmp_path / "mine")
    (out / "notes.txt").write_text("kept\n")
    assert cli_main(["replay", "--dataset", "zipf:messages=300,keys=20,seed=2", "-g", "kg", "-W", "3", "-S", "1",
                     "--out", str(out), "--force", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert sorted(os.listdir(out)) == [".keysplit-replay", "counts.parquet", "dataset.csv", "notes.txt",
                                       "summary.json", "timeseries.parquet"]
    assert (out / "notes.txt").read_text() == "kept\n"
    assert json.loads((out / "summary.json").read_text()) == summary
    # the folder now holds a replay: the next one replaces it without --force
    assert cli_main(["replay", "--dataset", "zipf:messages=200,keys=10,seed=3", "-g", "sg", "-W", "3", "-S", "1",
                     "--out", str(out)]) == 0
    assert json.loads((out / "summary.json").read_text())["runs"][0]["grouping"] == "sg"


@pytest.fixture
def planted(tmp_path):
    """A sticky world-writable folder (as /tmp) holding a directory symlink that user ``nobody`` planted, pointing
    at a folder of this user's: ``(the link, its target)``. Needs root (to give the link another owner)."""
    if os.geteuid() != 0:
        pytest.skip("giving a symlink another owner needs root")
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "summary.json").write_text("root's\n")
    link = shared / "out"
    link.symlink_to(victim, target_is_directory=True)
    os.lchown(link, 65534, 65534)
    return link, victim


def test_outputs_never_follow_a_link_another_user_planted_in_a_sticky_folder(planted, tmp_path, capsys):
    link, victim = planted
    assert foreign_link(link / "replay")[:2] == (str(link), 65534)
    with pytest.raises(KeysplitError, match=f"^--counts-out {link}/c.tsv goes through {link}, a symlink that "
                       "another user \\(uid 65534\\) owns in a shared sticky folder"):
        refuse_foreign_links("--counts-out", link / "c.tsv")
    with pytest.raises(KeysplitError, match="a symlink that another user"), atomic_file(link / "c.tsv", "--counts-out"):
        pytest.fail("atomic_file opened a file through the planted link")
    for argv in (["replay", "--dataset", "zipf:messages=100", "--out", str(link / "replay")],
                 ["replay", "--dataset", "zipf:messages=100", "--out", str(link), "--force"],
                 ["jar", "--out", str(link / "t.jar")]):
        assert cli_main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "a symlink that another user (uid 65534) owns" in err, err
    assert sorted(os.listdir(victim)) == ["summary.json"] and (victim / "summary.json").read_text() == "root's\n"
    # this user's own link there, and a link in a folder that is not shared, are followed as usual
    os.lchown(link, os.geteuid(), os.getegid())
    assert foreign_link(link / "replay") is None
    mine = tmp_path / "private-link"
    mine.symlink_to(victim, target_is_directory=True)
    os.lchown(mine, 65534, 65534)
    assert foreign_link(mine / "x") is None


def test_outputs_never_follow_a_link_in_a_folder_another_user_owns_below_a_sticky_one(tmp_path, capsys):
    """One level below the sticky folder the kernel's rule no longer applies: /tmp/theirs/out, a link of theirs
    (or of this user's: they own the folder and can replace it) to this user's folder, is not followed."""
    if os.geteuid() != 0:
        pytest.skip("giving a folder another owner needs root")
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    theirs = shared / "theirs"
    theirs.mkdir()
    victim = tmp_path / "victim"
    victim.mkdir()
    link = theirs / "out"
    link.symlink_to(victim, target_is_directory=True)
    os.chown(theirs, 65534, 65534)
    assert foreign_link(link / "c.tsv")[:2] == (str(link), 65534)
    for owner in (65534, os.geteuid()):
        os.lchown(link, owner, owner)
        assert cli_main(["jar", "--out", str(link / "t.jar")]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"goes through {link}, a symlink that another user (uid 65534) controls: " \
            "it is in their folder" in err, err
    assert os.listdir(victim) == []
    os.chown(theirs, os.geteuid(), os.getegid())  # the folder is this user's again: the link is theirs to follow
    assert foreign_link(link / "c.tsv") is None


def test_a_line_longer_than_runs_bound_is_one_line_before_spark(tmp_path, capsys):
    path = tmp_path / "long.txt"
    with open(path, "wb") as fh:
        fh.write(b"a b c\n" * 3)
        fh.write(b"x" * (MAX_LINE_BYTES + 1))  # no line end for 16 MiB + 1 byte: the reader's bound
        fh.write(b"\nd e\n")
    assert cli_main(["replay", "--dataset", f"text:{path}", "--out", str(tmp_path / "o")]) == 2
    assert capsys.readouterr().err == (f"keysplit: error: {path} line 4: a line longer than 16 MiB (a line is one "
                                       "record, one spout tuple); is it a text file with line ends?\n")
    assert not (tmp_path / "o").exists()
    with open(path, "r+b") as fh:  # the same file with a line of exactly 16 MiB is taken
        fh.seek(18 + MAX_LINE_BYTES)
        fh.write(b"\n")
    from keysplit.datasets import open_dataset
    from spark_replay.sparkinput import check_lines

    check_lines(open_dataset(f"text:{path}"))


def test_sigterm_stops_a_replay_without_leaving_its_staging_folder(tmp_path):
    home, out = tmp_path / "home", tmp_path / "o"
    proc = start("replay", "--dataset", "zipf:messages=400000,keys=5000,seed=4", "-g", "kg,pkg,dkg", "-W", "8",
                 "--out", str(out), home=home, cwd=tmp_path)
    try:
        staging = lambda: [p for p in tmp_path.iterdir() if p.name.startswith(".o.replay-")]  # noqa: E731
        wait_for(lambda: any((p / "dataset.csv").exists() for p in staging()), 600, "the replay to stage its outputs")
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=300)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert err.splitlines()[-1] == f"keysplit: replay stopped by SIGTERM; nothing was written to {out}"
    assert "Traceback" not in err
    assert staging() == [] and not out.exists()


def _mount_tmpfs(folder: Path, size: str) -> bool:
    if os.environ.get("KEYSPLIT_TEST_DISK", "tmpfs") != "tmpfs" or os.geteuid() != 0:
        return False
    return subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(folder)],
                          capture_output=True, check=False).returncode == 0


def _limit_file_size() -> None:  # in the child: writes past 1 MiB fail with EFBIG instead of killing it
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))


def test_a_full_disk_is_one_line_and_leaves_nothing(tmp_path):
    """A dataset of 300,000 distinct words (its counts.parquet alone is several MiB) replayed into a 1 MiB disk:
    the executors' Parquet writer (Java) fails; a generator of as many written there first: the driver's own write
    (Python) fails. Either way one line after the progress lines, and nothing left on the disk."""
    words = tmp_path / "words.txt"
    with open(words, "w", encoding="utf-8") as fh:
        for i in range(30_000):
            fh.write(" ".join(f"w{i * 10 + j:07d}" for j in range(10)) + "\n")
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = _mount_tmpfs(disk, "1m")
    cause = "No space left on device" if mounted else "File too large"
    env = {**os.environ, "KEYSPLIT_HOME": str(tmp_path / "home")}
    env.pop("PYSPARK_GATEWAY_PORT", None)
    try:
        for dataset, says in ((f"text:{words}", "a Spark task could not write: "),
                              ("zipf:messages=300000,keys=200000", "cannot write ")):
            proc = subprocess.run([sys.executable, "-m", "keysplit.cli", "replay", "--dataset", dataset, "-g", "kg",
                                   "-W", "4", "-S", "1", "--out", str(disk / "o")], env=env, capture_output=True,
                                  text=True, timeout=600, check=False,
                                  **({} if mounted else {"preexec_fn": _limit_file_size, "restore_signals": False}))
            *progress, last = proc.stderr.splitlines()
            assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
            assert all(line.startswith("replay: ") for line in progress), proc.stderr[-3000:]
            assert last.startswith(f"keysplit: error: {says}") and cause in last, last
            assert os.listdir(disk) == []  # no staging folder, no half-written output
    finally:
        if mounted:
            subprocess.run(["umount", "--lazy", str(disk)], check=False)


def test_a_dead_replays_staging_folder_does_not_make_out_look_foreign(tmp_path):
    from spark_replay.storage import check_out

    out = tmp_path / "o"
    out.mkdir()
    (out / ".replay-999999999-x").mkdir()  # what a kill -9 left inside a folder (the next replay removes it)
    check_out(None, str(out))
    (out / "mine.txt").write_text("x")
    with pytest.raises(KeysplitError, match=r"holds files that are not a replay's \(mine\.txt\)"):
        check_out(None, str(out))
