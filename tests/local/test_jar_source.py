"""`keysplit jar --src` of a hostile ``src/``: links out of it, loops of links, a dangling link, a FIFO, keys and
credential files. The jar holds the files under ``src/`` itself and no key unless named, is readable by its owner
alone, says what it left out, and a SIGTERM while it is written leaves nothing behind."""

from __future__ import annotations

import os
import signal
import stat
import zipfile

from cli_process import start, wait_for

from keysplit.cli import main


def hostile_src(tmp_path):
    outside = tmp_path / "outside"
    (outside / "folder").mkdir(parents=True)
    (outside / "shadow").write_text("root:$6$not-for-the-jar\n")
    (outside / "folder" / "leak.py").write_text("LEAK = 1\n")
    src = tmp_path / "project" / "src"
    (src / "app" / "certs").mkdir(parents=True)
    (src / "app" / "__init__.py").write_text("")
    (src / "app" / "spouts.py").write_text("SPOUT = 1\n")
    (src / "app" / "alias.py").symlink_to("spouts.py")  # a link to a file inside src/: its content ships
    (src / "app" / "shadow").symlink_to(outside / "shadow")  # out of src/
    (src / "app" / "more").symlink_to(outside / "folder")  # a folder out of src/
    (src / "app" / "up").symlink_to("..")  # a loop through a folder
    (src / "app" / "loop1").symlink_to("loop2")  # two links into each other
    (src / "app" / "loop2").symlink_to("loop1")
    (src / "app" / "gone").symlink_to("nowhere.py")  # dangling
    os.mkfifo(src / "app" / "pipe")  # reading it would block for ever
    (src / "app" / "id_rsa").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    (src / "app" / "certs" / "server.pem").write_text("-----BEGIN PRIVATE KEY-----\n")
    (src / "app" / "secrets.yaml").write_text("password: hunter2\n")
    (src / "app" / ".env").write_text("TOKEN=x\n")
    return src


def test_the_jar_holds_src_itself_and_no_key_and_says_what_it_left_out(tmp_path, monkeypatch, capsys):
    src = hostile_src(tmp_path)
    monkeypatch.chdir(tmp_path)
    os.umask(0o022)  # a usual umask: the jar must still be private
    assert main(["jar", "--src", str(src), "--out", "build/app.jar", "--include", "app/secrets.yaml"]) == 0
    out, err = capsys.readouterr()
    jar = tmp_path / "build" / "app.jar"
    assert stat.S_IMODE(jar.stat().st_mode) == 0o600 and "readable by you alone" in out
    with zipfile.ZipFile(jar) as z:
        names = {n[len("resources/"):] for n in z.namelist() if n.startswith("resources/app/")}
        assert z.read("resources/app/alias.py") == b"SPOUT = 1\n"
        assert not any(b"not-for-the-jar" in z.read(n) or b"PRIVATE KEY" in z.read(n) for n in z.namelist())
    assert names == {"app/__init__.py", "app/spouts.py", "app/alias.py", "app/secrets.yaml"}  # named: shipped
    said = {line.split(": ")[2].removeprefix(str(src) + "/"): line for line in err.splitlines()
            if line.startswith("keysplit: left out of the jar: ")}
    assert set(said) == {"app/shadow", "app/more", "app/up", "app/loop1", "app/loop2", "app/gone", "app/pipe",
                         "app/id_rsa", "app/certs/server.pem", "app/.env"}
    assert "out of src/" in said["app/shadow"] and "out of src/" in said["app/more"]
    assert "loop of symlinks" in said["app/loop1"] and "dangling" in said["app/gone"]
    assert "a folder inside src/" in said["app/up"] and "FIFO" in said["app/pipe"]
    assert "credentials" in said["app/id_rsa"] and "credentials" in said["app/certs/server.pem"]
    assert "--include PATH" in err and "Traceback" not in err
    assert sorted(p.name for p in (tmp_path / "build").iterdir()) == ["app.jar"]


def test_a_sigterm_while_the_jar_is_written_leaves_nothing_behind(tmp_path):
    src = tmp_path / "src"
    (src / "app").mkdir(parents=True)
    with open(src / "app" / "big.bin", "wb") as fh:  # sparse: 64 GiB of zeros to deflate, no disk taken
        fh.truncate(64 << 30)
    proc = start("jar", "--src", str(src), "--out", "app.jar", home=tmp_path / "home", cwd=tmp_path)
    try:
        wait_for(lambda: any(p.name.startswith(".app.jar.") for p in tmp_path.iterdir()), 120, "the jar's temp file")
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143 and "jar stopped by SIGTERM; nothing was written to app.jar" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src"]
