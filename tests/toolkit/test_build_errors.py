"""What can be seen before a process starts is refused before one starts, in one line naming the component: each
spec's own arguments when the class body runs, the whole topology when keysplit loads it (check_topology, which
`keysplit run`, `submit` and `replay` call on the class streamparse's loader finds): the issue's list (an unknown
downstream component, a key field the upstream does not declare, a spec that does not parse, more choices than
downstream tasks, an accumulator without merge behind a grouping that splits keys) and the toolkit's own rules."""

from __future__ import annotations

import pytest
from streamparse import Bolt, Grouping, Spout
from streamparse import Topology as PlainTopology

from keysplit.toolkit import (
    Accumulator,
    Aggregate,
    Count,
    FeedSpout,
    KeyRouter,
    Sum,
    TopK,
    Topology,
    TopologyBuildError,
    check_topology,
    splits_keys,
)


class ViewSpout(Spout):  # a user's spout: the fields it declares are what the checks see
    outputs = ["time", "page", "bytes"]


class Store(Bolt):  # a user's bolt behind a router
    outputs = ["page", "total"]


class NoMerge(Accumulator):
    """A last-value accumulator: it cannot merge two partial states."""

    def zero(self):
        return None

    def add(self, state, record):
        return record["page"]


def build(route_kwargs=None, partial_kwargs=None, merge_kwargs=None, partial_par=4):
    route_kwargs = {"key": "page", "grouping": "pkg:d=2", "par": 2, **(route_kwargs or {})}

    class Pages(Topology):
        views = ViewSpout.spec()
        route = KeyRouter.spec(inputs=[views], **route_kwargs)
        partial = Aggregate.partial(inputs=route, **{"accumulator": Sum("bytes"), "par": partial_par,
                                                     **(partial_kwargs or {})})
        total = Aggregate.merge(inputs=partial, **(merge_kwargs or {}))

    check_topology(Pages)
    return Pages


def refused(match: str, *args, **kwargs) -> str:
    with pytest.raises(TopologyBuildError, match=match) as caught:
        build(*args, **kwargs)
    assert "\n" not in str(caught.value)
    return str(caught.value)


def test_a_well_formed_topology_builds():
    assert sorted(s.name for s in build().specs) == ["partial", "route", "total", "views"]


def test_a_key_field_the_upstream_does_not_declare():
    refused(r"KeyRouter: its input declares no field 'user' \(fields: time, page, bytes\)", {"key": "user"})


def test_a_grouping_spec_that_does_not_parse():
    refused("unknown grouping 'pgk'", {"grouping": "pgk"})
    refused("load=global", {"grouping": "pkg:load=global"})


def test_more_choices_than_downstream_tasks():
    message = refused("d=5 exceeds the number of workers", {"grouping": "pkg:d=5"})
    assert "KeyRouter route in front of 4 tasks of 'partial'" in message


def test_an_accumulator_without_merge_behind_a_grouping_that_splits_keys():
    refused("NoMerge has no merge, but grouping pkg:d=2 splits keys across tasks", None,
            {"accumulator": NoMerge()})
    assert splits_keys("pkg") and splits_keys("dchoices") and not splits_keys("kg")


def test_an_accumulator_reading_a_field_nobody_declares():
    refused("Sum\\(field='size'\\) reads field 'size'", None, {"accumulator": Sum("size")})


def test_top_needs_a_result_that_ranks():
    refused("top=3 ranks keys by their result", None, {"accumulator": TopK("bytes")}, {"top": 3})


def test_an_unknown_downstream_component():
    class UserBolt(Topology):
        views = ViewSpout.spec()
        route = KeyRouter.spec(inputs=[views], key="page", grouping="pkg", to="sink")
        sink = Store.spec(inputs=route.into(), par=3)

    check_topology(UserBolt)  # a router may name its downstream with to=, which must then exist

    class Typo(Topology):
        views = ViewSpout.spec()
        route = KeyRouter.spec(inputs=[views], key="page", grouping="pkg", to="stores")
        sink = Store.spec(inputs=route.into(), par=3)

    with pytest.raises(TopologyBuildError, match="its downstream component 'stores' does not exist"):
        check_topology(Typo)


def test_a_bolt_behind_a_router_must_subscribe_on_the_route_field():
    class Shuffled(Topology):
        views = ViewSpout.spec()
        route = KeyRouter.spec(inputs=[views], key="page", grouping="pkg")
        sink = Store.spec(inputs={route: Grouping.SHUFFLE}, par=3)

    with pytest.raises(TopologyBuildError, match=r"expected one component behind it subscribed with inputs=route.into"):
        check_topology(Shuffled)


def test_keysplits_topology_is_streamparses_own_class():
    # streamparse's loader deploys the first TopologyType in the module that is not streamparse.Topology: a base
    # class of keysplit's own there would be deployed instead of the user's (an empty topology on Storm)
    assert Topology is PlainTopology


def test_a_plain_streamparse_topology_is_checked_by_keysplit_run():
    class Plain(PlainTopology):  # streamparse's own class builds it; keysplit run checks it before starting
        views = ViewSpout.spec()
        route = KeyRouter.spec(inputs=[views], key="page", grouping="pkg:d=4")
        sink = Store.spec(inputs=route.into(), par=3)

    with pytest.raises(TopologyBuildError, match="d=4 exceeds the number of workers"):
        check_topology(Plain)


def test_two_merges_need_at_least_once():
    def two(settings):
        class Two(Topology):
            config = settings
            views = FeedSpout.spec(fields=["time", "page", "bytes"])
            route = KeyRouter.spec(inputs=[views], key="page", grouping="pkg")
            partial = Aggregate.partial(inputs=route, accumulator=Count(), par=2)
            total = Aggregate.merge(inputs=partial)
            route2 = KeyRouter.spec(inputs=[views], key="page", grouping="kg")
            partial2 = Aggregate.partial(inputs=route2, accumulator=Count())
            total2 = Aggregate.merge(inputs=partial2)
        check_topology(Two)
        return Two

    with pytest.raises(TopologyBuildError, match="an exactly-once merge marks each feed record once"):
        two({})
    assert two({"keysplit.delivery": "at-least-once"}).specs


def test_the_feed_spout_refuses_keysplits_own_field_names():
    with pytest.raises(TopologyBuildError, match=r"fields \['keysplit_route'\] are keysplit's own"):
        FeedSpout.spec(fields=["page", "keysplit_route"])
