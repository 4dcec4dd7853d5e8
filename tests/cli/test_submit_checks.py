"""`keysplit submit`'s checks that need no cluster: a loopback Redis is never sent to remote workers."""

from __future__ import annotations

import pytest

from keysplit.commands.submit import refuse_loopback_for_a_cluster
from keysplit.errors import KeysplitError

PROD = {"nimbus": "nimbus.example.org", "workers": ["w1.example.org", "w2.example.org"]}
LOCAL = {"nimbus": "localhost", "workers": ["localhost"]}


@pytest.mark.parametrize("url", ["redis://127.0.0.1:51365/0", "redis://localhost:6379", "redis://[::1]:6379/0"])
def test_a_loopback_redis_is_refused_for_remote_workers(url, monkeypatch):
    monkeypatch.delenv("STREAMPARSE_NIMBUS", raising=False)
    with pytest.raises(KeysplitError) as refused:
        refuse_loopback_for_a_cluster(url, PROD, "prod")
    assert "a loopback address of this machine, but env 'prod' runs on nimbus.example.org, w1.example.org, " \
        "w2.example.org; " in str(refused.value) and "--workers-redis URL" in str(refused.value)


def test_a_reachable_redis_or_a_local_cluster_is_accepted(monkeypatch):
    monkeypatch.delenv("STREAMPARSE_NIMBUS", raising=False)
    refuse_loopback_for_a_cluster("redis://redis-host:6379/0", PROD, "prod")
    refuse_loopback_for_a_cluster("redis://10.0.0.5:6379/0", PROD, "prod")
    refuse_loopback_for_a_cluster("redis://127.0.0.1:6379/0", LOCAL, "local")
    monkeypatch.setenv("STREAMPARSE_NIMBUS", "127.0.0.1:6627")  # what sparse itself reads first
    refuse_loopback_for_a_cluster("redis://127.0.0.1:6379/0", {"nimbus": "nimbus.example.org"}, "prod")
    monkeypatch.setenv("STREAMPARSE_NIMBUS", "nimbus.example.org:6627")
    with pytest.raises(KeysplitError) as refused:
        refuse_loopback_for_a_cluster("redis://127.0.0.1:6379/0", LOCAL, "local")
    assert "runs on nimbus.example.org:6627;" in str(refused.value)


def test_a_unix_socket_is_refused_for_remote_workers_and_warned_about_for_a_local_cluster(monkeypatch):
    monkeypatch.delenv("STREAMPARSE_NIMBUS", raising=False)
    socket = "unix:///work/.keysplit/redis/redis.sock?db=0"  # the project-managed server's
    with pytest.raises(KeysplitError) as refused:
        refuse_loopback_for_a_cluster(socket, PROD, "prod")
    assert str(refused.value).startswith("the workers would reach Redis through the Unix socket "
                                         "/work/.keysplit/redis/redis.sock, a file of this machine, but env 'prod'")
    warning = refuse_loopback_for_a_cluster(socket, LOCAL, "local")
    assert warning.startswith("the workers will reach Redis through the Unix socket /work/.keysplit/redis/redis.sock:"
                              " only a Storm supervisor on this machine") and "--workers-redis URL" in warning
    assert refuse_loopback_for_a_cluster("redis://127.0.0.1:6379/0", LOCAL, "local") is None


def test_submit_and_jar_make_the_default_build_folder_on_a_fresh_clone(tmp_path, monkeypatch):
    from keysplit.commands.jar import DEFAULT_OUT, jar_folder
    from keysplit.commands.submit import DEFAULT_JAR

    monkeypatch.chdir(tmp_path)
    assert DEFAULT_JAR == DEFAULT_OUT
    jar_folder(DEFAULT_JAR)
    assert (tmp_path / "_build").is_dir()
    assert jar_folder("nope/x.jar") == "nope" and (tmp_path / "nope").is_dir()  # as `sparse jar` makes _build/
    (tmp_path / "plain").write_text("")
    with pytest.raises(KeysplitError, match="cannot create its folder plain/x"):
        jar_folder("plain/x/y.jar")
