"""The demo's last lines: each grouping's model / measured ratios, and, when the machine was too busy while the runs
ran, a note that it cannot judge the model by them (commands/demo.py print_agreement)."""

from __future__ import annotations

import json

from keysplit.commands.demo import BUSY_LOAD, print_agreement

ROWS = [{"grouping": g, "ratio": {"throughput": t, "latency_p50_ms": 1.0, "latency_p99_ms": 0.72}}
        for g, t in (("kg", 1.0), ("sg", 1.02), ("pkg", 1.27))]


def test_the_agreement_says_when_the_machine_was_too_busy_to_judge(tmp_path, capsys):
    comparison = tmp_path / "comparison.json"
    comparison.write_text(json.dumps({"rows": ROWS}))
    print_agreement(comparison, load=0.5, cores=2)
    quiet = capsys.readouterr().out
    assert "pkg: words/s 1.27 (outside), p50 1.00, p99 0.72 (outside) (held out of the calibration)" in quiet
    assert "too busy" not in quiet
    print_agreement(comparison, load=BUSY_LOAD * 2 + 0.1, cores=2)
    busy = capsys.readouterr().out
    assert busy.startswith(quiet) and busy[len(quiet):].startswith(
        "note: the machine was too busy to judge the model by these runs (load average up to 3.1 on 2 cores")
    print_agreement(comparison, load=None, cores=2)  # no load average on this platform: nothing claimed
    assert capsys.readouterr().out == quiet
