"""Sizes a topology file asks for are checked before any process starts, naming the component: by check_topology,
which keysplit runs when it loads a topology file (more tasks than keysplit starts or submits, a router's grouping
state beyond memory), and when a run loads it (more task processes than this machine can start, as the word count
refuses them)."""

from __future__ import annotations

import resource
import time

import pytest
from cli_process import keysplit

from keysplit.sizes import available_bytes
from keysplit.toolkit import Aggregate, FeedSpout, KeyRouter, Sum, Topology, TopologyBuildError, check_topology


def test_a_partial_of_100000_tasks_is_refused_when_the_topology_is_checked():
    class Pages(Topology):
        views = FeedSpout.spec(fields=["page", "bytes"])
        route = KeyRouter.spec(inputs=[views], key="page", grouping="pkg", par=2)
        partial = Aggregate.partial(inputs=route, accumulator=Sum("bytes"), par=100000)
        total = Aggregate.merge(inputs=partial, par=2)

    started = time.process_time()
    with pytest.raises(TopologyBuildError) as refused:
        check_topology(Pages)
    message = str(refused.value)
    assert message.startswith("component 'partial': par=100,000 makes 100,005 tasks") and "lower its par" in message
    assert "\n" not in message and time.process_time() - started < 5  # refused before any work, not after


def test_a_routers_grouping_state_beyond_memory_is_refused_naming_it():
    assert available_bytes() is not None and available_bytes() < 100 << 30  # gedik: 9,000 x 900 x 16 KB = 132 GB
    class Pages(Topology):
        views = FeedSpout.spec(fields=["page", "bytes"])
        route = KeyRouter.spec(inputs=[views], key="page", grouping="gedik", par=900)
        partial = Aggregate.partial(inputs=route, accumulator=Sum("bytes"), par=9000)
        total = Aggregate.merge(inputs=partial, par=1)

    with pytest.raises(TopologyBuildError, match=r"^KeyRouter route: gedik in front of 9,000 tasks from 900 sources "
                                                 r"needs about .* GB of memory, more than"):
        check_topology(Pages)  # before build_grouping would allocate it


TOPOLOGY = '''
from keysplit.toolkit import Aggregate, FeedSpout, KeyRouter, Sum, Topology


class Pages(Topology):
    views = FeedSpout.spec(fields=["page", "bytes"])
    route = KeyRouter.spec(inputs=[views], key="page", grouping="pkg", par=2)
    partial = Aggregate.partial(inputs=route, accumulator=Sum("bytes"), par=1000)
    total = Aggregate.merge(inputs=partial, par=2)
'''


def test_more_task_processes_than_the_machine_can_start_are_refused_before_any_starts(tmp_path):
    (tmp_path / "pages.py").write_text(TOPOLOGY)
    (tmp_path / "views.csv").write_text("page,bytes\n/a,1\n")

    def few_files() -> None:  # 256 open files: about 64 task processes, whatever this machine's memory
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))

    done = keysplit("run", "pages.py", "--dataset", "csv:views.csv,key=page", home=tmp_path / "home", cwd=tmp_path,
                    timeout=120, preexec_fn=few_files)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("keysplit: error: this topology needs 1,005 task processes (partial x1,000, ")
    assert "ulimit -n 256" in done.stderr and "lower the par of 'partial'" in done.stderr
    assert not (tmp_path / "home").exists()  # refused before the managed Redis (or any task) started
