"""The `keysplit` command as a user runs it: real subprocesses, JSON for scripts, one-line errors."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import pytest

from keysplit.cli import main as cli_main

KEYSPLIT = [sys.executable, "-m", "keysplit.cli"]
DATASET = "zipf:z=1.0,keys=1000,messages=20000,seed=3"


def keysplit(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run([*KEYSPLIT, *args], capture_output=True, text=True, timeout=300,
                            env={**os.environ, "PYTHONHASHSEED": "random"})
    if check:
        assert result.returncode == 0, result.stderr
    return result


def test_simulate_json_has_the_documented_fields_and_is_reproducible():
    args = ("simulate", "--dataset", DATASET, "-W", "5,10", "-S", "3", "-g", "kg,pkg:d=3,load=global,sg", "--json")
    first, second = (json.loads(keysplit(*args).stdout) for _ in range(2))
    assert set(first["dataset"]) == {"spec", "messages", "keys", "p1"}
    assert first["dataset"]["messages"] == 20000
    assert [r["grouping"] for r in first["runs"]] == ["kg", "pkg:d=3,load=global", "sg"] * 2
    assert set(first["runs"][0]) == {
        "grouping", "workers", "sources", "avg_imbalance_fraction", "final_imbalance_fraction",
        "load_stddev", "dist_cost", "loads", "messages_per_second",
    }
    for run in first["runs"]:
        assert sum(run["loads"]) == 20000 and len(run["loads"]) == run["workers"]
    # Same seeds, same decisions (messages_per_second is the only wall-clock measurement).
    for a, b in zip(first["runs"], second["runs"]):
        a.pop("messages_per_second"), b.pop("messages_per_second")
    assert first == second


def test_simulate_prints_a_table():
    out = keysplit("simulate", "--dataset", DATASET, "-W", "4", "-g", "kg,pkg").stdout
    assert "avg imbalance" in out and "\nkg " in out and "\npkg " in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("simulate", "--dataset", "text:/no/such/file"), "dataset file not found: /no/such/file"),
        (("simulate", "--dataset", DATASET, "-g", "pkg:d=9", "-W", "4"), "d=9 exceeds the number of workers"),
        (("simulate", "--dataset", DATASET, "-g", "magic"), "unknown grouping 'magic'"),
        (("simulate", "--dataset", DATASET, "-W", "0"), "every value must be at least 1"),
        (("datasets", "stats", "zipf:z=abc"), "z='abc' is not a valid float"),
    ],
)
def test_user_mistakes_get_one_line_and_no_traceback(args, message):
    result = keysplit(*args, check=False)
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_empty_and_binary_files(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    result = keysplit("simulate", "--dataset", f"text:{empty}", check=False)
    assert result.returncode == 2 and "dataset file is empty" in result.stderr
    nowords = tmp_path / "punct.txt"
    nowords.write_text("... !!!\n")
    result = keysplit("datasets", "stats", f"text:{nowords}", check=False)
    assert result.returncode == 2 and "has no records" in result.stderr


def test_datasets_generate_then_stats(tmp_path):
    out = tmp_path / "zipf.csv"
    result = keysplit("datasets", "generate", DATASET, "--out", str(out))
    spec = result.stdout.split("--dataset ")[1].strip()
    assert spec == f"csv:{out},key=key"
    stats = json.loads(keysplit("datasets", "stats", spec, "--json").stdout)
    original = json.loads(keysplit("datasets", "stats", DATASET, "--json").stdout)
    assert {k: stats[k] for k in ("messages", "keys", "p1")} == {k: original[k] for k in ("messages", "keys", "p1")}


def test_help_lists_groupings_and_datasets():
    assert "pkg" in keysplit("simulate", "--help").stdout
    assert "lognormal" in keysplit("datasets", "--help").stdout


def test_simulate_draws_the_imbalance_plot(tmp_path):
    png = tmp_path / "imbalance.png"
    keysplit("simulate", "--dataset", DATASET, "-W", "4", "-g", "kg,pkg", "--plot", str(png))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def test_the_demo_runs_end_to_end(tmp_path):
    """`make demo` verbatim: corpus, simulation, three topology runs, calibration, Spark replay and comparison."""
    out = tmp_path / "demo"
    result = subprocess.run([*KEYSPLIT, "demo", "--out", str(out)], capture_output=True, text=True, timeout=900,
                            env={**os.environ, "KEYSPLIT_HOME": str(tmp_path / "home")})
    assert result.returncode == 0, result.stderr[-3000:]
    comparison = json.loads((out / "compare" / "comparison.json").read_text())
    assert [row["grouping"] for row in comparison["rows"]] == ["kg", "sg", "pkg"]
    assert all(row["counts_equal"] for row in comparison["rows"])
    # the routers see the simulator's sub-streams: the run's loads and imbalance are the replay's
    assert all(row["loads_equal"] for row in comparison["rows"])
    assert all(row["final_imbalance_fraction"]["run"] == pytest.approx(row["final_imbalance_fraction"]["replay"])
               for row in comparison["rows"])
    # the replay used the profile the demo fitted to its kg and sg runs; how close the model comes depends on the
    # machine's load while the runs ran, so the agreement is printed (and measured by benchmarks/agreement.py),
    # never asserted here: only its presence is
    assert comparison["calibration"] == "demo"
    assert all(set(row["ratio"]) >= {"throughput", "latency_p50_ms", "latency_p99_ms"} for row in comparison["rows"])
    assert "model / measured" in result.stdout  # the agreement, printed
    assert {p.name for p in (out / "compare").glob("*.png")} == {"throughput_latency.png", "loads.png",
                                                                  "imbalance.png", "agreement.png"}
    assert (out / "simulate.png").stat().st_size > 10_000


# --- bad inputs refused in one line, before the long work (in process: `main` is what the shell runs) ---

SMALL = "zipf:keys=100,messages=6000,seed=1"
PARTITION = ("partition-experiment", "--domain", "1000", "--runs", "1", "--max-workers", "3", "--stream", "0")


def one_line_error(capsys, *argv: str) -> str:
    """stderr of a command refused by a KeysplitError: status 2 and exactly one `keysplit: error:` line."""
    assert cli_main(list(argv)) == 2
    err = capsys.readouterr().err
    assert err.startswith("keysplit: error: ") and err.count("\n") == 1, err
    return err


def usage_error(capsys, *argv: str) -> str:
    """The error line of a command that argparse refuses (an option's type): status 2, usage, one error line."""
    with pytest.raises(SystemExit) as exited:
        cli_main(list(argv))
    err = capsys.readouterr().err
    assert exited.value.code == 2 and "Traceback" not in err
    return err.splitlines()[-1]


@pytest.mark.parametrize("command", [("simulate", "--dataset", "text:/no/such/file"), PARTITION])
@pytest.mark.parametrize(("plot", "message"), [
    ("out.xyz", "--plot out.xyz: format .xyz is not supported; use one of: "),
    ("noext", "--plot noext has no extension (matplotlib would write noext.png)"),
    ("somedir", "--plot somedir is a directory"),
    ("missing/x.png", "--plot missing/x.png: directory missing does not exist"),
    ("", "--plot is an empty path"),
])
def test_a_plot_path_matplotlib_would_refuse_or_rename_is_refused_before_the_runs(capsys, tmp_path, monkeypatch,
                                                                                  command, plot, message):
    # simulate's missing dataset would be reported first if the plot were checked only after the runs
    monkeypatch.chdir(tmp_path)
    (tmp_path / "somedir").mkdir()
    assert message in one_line_error(capsys, *command, "--plot", plot)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["somedir"]


@pytest.mark.parametrize(("command", "name"), [(("simulate", "--dataset", SMALL, "-W", "2", "-g", "kg"), "imb.svg"),
                                               (PARTITION, "fig6.pdf")])
def test_the_plot_is_written_exactly_where_the_message_says(capsys, tmp_path, command, name):
    path = tmp_path / name
    assert cli_main([*command, "--plot", str(path)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == f"plot written to {path}"
    assert path.stat().st_size > 1000 and [p.name for p in tmp_path.iterdir()] == [name]


@pytest.mark.parametrize("command", [("replay", "--dataset", SMALL, "-g", "kg"), ("demo", "--simulate-only")])
@pytest.mark.parametrize(("out", "message"), [
    ("t.txt", "cannot create output directory t.txt: File exists"),
    ("t.txt/sub", "cannot create output directory t.txt/sub: Not a directory"),
])
def test_an_output_directory_that_cannot_be_created_is_refused_before_the_work(capsys, tmp_path, monkeypatch,
                                                                                command, out, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.txt").write_text("a file\n")
    assert message in one_line_error(capsys, *command, "--out", out)
    assert [p.name for p in tmp_path.iterdir()] == ["t.txt"]


def test_demo_refuses_an_empty_output_path(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # Path("") is the current directory: the demo would write there
    assert "--out is an empty path" in one_line_error(capsys, "demo", "--out", "", "--simulate-only")
    assert list(tmp_path.iterdir()) == []


def test_demo_refuses_too_few_workers_before_writing_the_corpus(capsys, tmp_path):
    out = tmp_path / "demo"
    err = one_line_error(capsys, "demo", "-W", "1", "--out", str(out), "--simulate-only")
    assert "demo -W 1 -S 4: pkg: d=2 exceeds the number of workers (1)" in err
    assert not out.exists()
    assert "must be at least 1, got 0" in usage_error(capsys, "demo", "-W", "0")


@pytest.mark.parametrize("argv", [
    ("simulate", "--dataset", SMALL, "--rate", "nan"),
    ("simulate", "--dataset", SMALL, "--rate", "inf"),
    ("replay", "--dataset", SMALL, "--rate", "nan"),
    ("partition-experiment", "--z", "nan"),
    ("partition-experiment", "--alpha", "inf"),
    ("demo", "--cpu-delay", "nan"),
])
def test_nan_and_inf_are_not_numbers_an_option_accepts(capsys, argv):
    assert "expected a finite number, got " in usage_error(capsys, *argv)


def test_a_checkpoint_past_the_end_is_refused_instead_of_an_average_of_zero(capsys):
    err = one_line_error(capsys, "simulate", "--dataset", SMALL, "-g", "kg", "--checkpoint", "100000000")
    assert "--checkpoint 100000000 exceeds the dataset's 6,000 messages" in err
    assert cli_main(["simulate", "--dataset", SMALL, "-W", "2", "-g", "kg", "--checkpoint", "6000", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["runs"][0]["avg_imbalance_fraction"] > 0


@pytest.mark.parametrize(("option", "message"), [
    (("--checkpoint", "6001"), "--checkpoint 6001 exceeds the dataset's 6,000 messages"),
    (("--resize", "6000:5"), "--resize at message 6,000 is past the stream's last message (6,000 messages)"),
])
def test_replay_of_a_generator_checks_its_length_before_spark(capsys, tmp_path, option, message):
    out = tmp_path / "replay"
    assert message in one_line_error(capsys, "replay", "--dataset", SMALL, "-W", "3", "-g", "fish", *option,
                                     "--out", str(out))
    assert not out.exists()  # the replay writes the generator to OUT/dataset.csv once Spark has started


def test_a_spec_parameter_given_twice_is_refused(capsys):
    assert "pkg:d=2,d=3 sets d twice" in one_line_error(capsys, "simulate", "--dataset", SMALL, "-g", "pkg:d=2,d=3")


@pytest.mark.parametrize(("option", "value", "message"), [
    ("-W", "4,", "empty item in '4,'"),
    ("-W", "2,,4", "empty item in '2,,4'"),
    ("-g", "kg,", "empty item in 'kg,'"),
    ("-g", "", "expected at least one value, got ''"),
])
def test_an_empty_item_in_a_list_option_is_refused(capsys, option, value, message):
    assert message in usage_error(capsys, "simulate", "--dataset", SMALL, option, value)


def test_capacities_are_checked_for_every_worker_count_before_the_first_run(capsys, tmp_path):
    nowords = tmp_path / "punct.txt"  # its emptiness shows only when read: this error must come first
    nowords.write_text("... !!!\n")
    err = one_line_error(capsys, "simulate", "--dataset", f"text:{nowords}", "-W", "3,4", "-g", "fish",
                         "--capacities", "1,2,3")
    assert "--capacities needs 1 or 4 positive values, got 3" in err


def test_a_reader_closing_the_pipe_ends_the_command_quietly_with_141():
    read_end, write_end = os.pipe()
    os.close(read_end)  # like `| head` having exited: every write to stdout fails with EPIPE
    try:
        result = subprocess.run([*KEYSPLIT, "datasets", "stats", SMALL, "--json"], stdout=write_end,
                                stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write_end)
    assert (result.returncode, result.stderr) == (141, "")


def test_the_lazy_command_list_shows_each_modules_own_help():
    """`keysplit --help` lists the subcommands without importing them (keysplit.cli.listed_command reads each
    module's docstring); each one-liner is what the subcommand's module registers, and every subcommand's own
    --help still works."""
    from keysplit.cli import COMMANDS, build_parser, listed_command

    def helps(parser) -> dict[str, str]:
        [sub] = [a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction"]
        return {a.dest: a.help for a in sub._choices_actions}

    eager = helps(build_parser([], eager=True))
    assert len(eager) == len(COMMANDS)
    assert dict(listed_command(module) for module in COMMANDS) == eager
    assert helps(build_parser(["--help"])) == eager
    code = ("import sys; from keysplit.cli import build_parser; build_parser(['--help']); "
            "print(sorted(m for m in sys.modules if m.startswith('keysplit')))")
    listing = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert listing.strip() == "['keysplit', 'keysplit.cli', 'keysplit.errors']", listing
    for name, option in (("simulate", "--dataset"), ("advise", "--memory"), ("partition-experiment", "--domain")):
        assert option in keysplit(name, "--help").stdout


def test_the_state_folder_is_found_from_a_subfolder_as_git_finds_its_repository(tmp_path, monkeypatch):
    from keysplit.home import keysplit_home

    monkeypatch.delenv("KEYSPLIT_HOME", raising=False)
    monkeypatch.setenv("KEYSPLIT_CEILING", str(tmp_path))  # nothing above the test's folder counts
    project = tmp_path / "project"
    deep = project / "data" / "2026"
    deep.mkdir(parents=True)
    monkeypatch.chdir(deep)
    assert keysplit_home() == deep / ".keysplit"  # none anywhere: the current folder's, as before
    (project / ".keysplit").mkdir(mode=0o700)
    assert keysplit_home() == project / ".keysplit"
    (project / "data" / ".keysplit").symlink_to(tmp_path)  # not a real folder: passed over
    assert keysplit_home() == project / ".keysplit"
    (deep / ".keysplit").mkdir(mode=0o700)  # the nearest wins
    assert keysplit_home() == deep / ".keysplit"
    monkeypatch.setenv("KEYSPLIT_CEILING", str(deep))
    (deep / ".keysplit").rmdir()
    assert keysplit_home() == deep / ".keysplit"  # the project's folder is above the ceiling


def test_logs_prints_each_tasks_last_lines_and_says_an_empty_stderr(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("KEYSPLIT_HOME", str(tmp_path / "home"))
    folder = tmp_path / "home" / "logs" / "r1"
    folder.mkdir(parents=True)
    (folder / "counter-10.log").write_text("".join(f"line {i}\n" for i in range(50)))
    (folder / "counter-10.stderr").write_text("Traceback (most recent call last):\nValueError: boom\n")
    (folder / "counter-3.log").write_text("started\n")
    (folder / "counter-3.stderr").write_text("")
    (folder / "router-2.log").write_text("routing\n")
    (folder / "counter-3.handshake.json").write_text("{}")
    assert cli_main(["logs", "r1", "--task", "counter", "-n", "2"]) == 0
    out = capsys.readouterr().out
    assert out.index("== counter-3") < out.index("== counter-10") and "router" not in out  # task order, not text
    assert "  line 48\n  line 49\n" in out and "line 47" not in out
    assert "stderr: empty" in out and "  ValueError: boom" in out
    assert cli_main(["logs", "latest"]) == 0 and "== router-2" in capsys.readouterr().out
    assert "has no logs" in one_line_error(capsys, "logs", "r2")
    assert "components: counter, router" in one_line_error(capsys, "logs", "r1", "--task", "spout")


def test_runs_in_a_folder_without_a_store_says_where_runs_live_and_creates_none(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("KEYSPLIT_HOME", raising=False)
    monkeypatch.setenv("KEYSPLIT_CEILING", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    assert cli_main(["runs"]) == 0
    assert f"no runs stored in {tmp_path / '.keysplit'} (the nearest .keysplit/ from here up" in capsys.readouterr().out
    assert list(tmp_path.iterdir()) == []



def test_a_default_run_and_a_default_replay_model_the_same_topology():
    # compare refuses a pair whose topology knobs differ (keysplit.topology_model.KNOBS): with one default each, a
    # default run and a default replay are a pair; the run's closed loop is the replay's default arrivals
    from keysplit.cli import build_parser
    from keysplit.topology_model import KNOBS

    parser = build_parser(eager=True)
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    defaults = {name: {o: a.default for a in commands.choices[name]._actions for o in a.option_strings}
                for name in ("run", "replay")}
    options = [option for name, option in KNOBS.items() if name != "rate"]
    assert "--cpu-delay" in options and "--max-pending" in options
    assert {o: defaults["run"][o] for o in options} == {o: defaults["replay"][o] for o in options}
    assert defaults["run"]["--rate"] is None and defaults["replay"]["--arrivals"] == "closed"
