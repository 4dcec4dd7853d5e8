"""Every grouping keysplit knows, by spec name, and :func:`build_grouping` to make them from a spec string.

The registry maps a spec name to ``module:Class``; modules are imported on first use so that a Storm
worker running ``kg`` never imports numpy-heavy modules it does not need.
"""

from __future__ import annotations

import importlib

from keysplit.errors import SpecError
from keysplit.groupings.base import BaseGrouping, Grouping, least_loaded
from keysplit.specs import bind_params, parse_spec

REGISTRY: dict[str, str] = {
    "kg": "keysplit.groupings.basic:KeyGrouping",
    "sg": "keysplit.groupings.basic:ShuffleGrouping",
    "pkg": "keysplit.groupings.pkg:PartialKeyGrouping",
    "potc": "keysplit.groupings.greedy:PowerOfTwoChoices",
    "ongreedy": "keysplit.groupings.greedy:OnlineGreedy",
    "offgreedy": "keysplit.groupings.greedy:OfflineGreedy",
    "dchoices": "keysplit.groupings.choices:DChoices",
    "wchoices": "keysplit.groupings.choices:WChoices",
    "dkg": "keysplit.groupings.dkg:DynamicKeyGrouping",
    "fish": "keysplit.groupings.fish:Fish",
    "gedik": "keysplit.groupings.gedik:GedikPartitioning",
    "salt": "keysplit.groupings.salt:Salting",
}


def grouping_class(name: str) -> type[BaseGrouping]:
    """The class registered under ``name``; a SpecError naming the valid choices otherwise."""
    target = REGISTRY.get(name)
    if target is None:
        raise SpecError(f"unknown grouping {name!r}; valid groupings: {', '.join(available())}")
    module, _, cls = target.partition(":")
    try:
        return getattr(importlib.import_module(module), cls)
    except (ImportError, AttributeError) as exc:  # a registered grouping whose module is not written yet
        raise SpecError(f"grouping {name!r} is not available in this build ({exc})") from None


def available() -> list[str]:
    """Names of the groupings whose modules import (the ones a user can actually run)."""
    names = []
    for name, target in REGISTRY.items():
        module, _, cls = target.partition(":")
        try:
            getattr(importlib.import_module(module), cls)
        except (ImportError, AttributeError):
            continue
        names.append(name)
    return names


def parse_grouping(spec: str) -> tuple[type[BaseGrouping], dict]:
    """The class and typed parameters of a spec string such as ``pkg:d=4,load=global``."""
    name, raw = parse_spec(spec)
    cls = grouping_class(name)
    return cls, bind_params(name, cls.PARAMS, raw)


def build_grouping(spec: str, workers: int, sources: int = 1) -> list[BaseGrouping]:
    """One prepared instance per source for ``spec``; raises SpecError on any bad part."""
    if workers < 1:
        raise SpecError(f"the number of workers must be at least 1, got {workers}")
    if sources < 1:
        raise SpecError(f"the number of sources must be at least 1, got {sources}")
    cls, params = parse_grouping(spec)
    return cls.build(params, workers, sources)


def paper_setting(spec: str) -> str:
    """``spec`` with the papers' independent hash choices (``distinct=false``) when its grouping draws hash
    choices and the spec does not say; the paper-reproduction tests and tables run in this setting.

    >>> paper_setting("pkg:d=4"), paper_setting("kg"), paper_setting("salt:distinct=true")
    ('pkg:d=4,distinct=false', 'kg', 'salt:distinct=true')
    """
    name, raw = parse_spec(spec)
    if "distinct" not in grouping_class(name).PARAMS or "distinct" in raw:
        return spec
    return spec + ("," if ":" in spec else ":") + "distinct=false"


def check_grouping(spec: str, workers: int, sources: int = 1) -> str:
    """Validate ``spec`` for this many workers and sources; return its canonical form."""
    return build_grouping(spec, workers, sources)[0].describe()


__all__ = [
    "REGISTRY",
    "BaseGrouping",
    "Grouping",
    "available",
    "build_grouping",
    "check_grouping",
    "grouping_class",
    "least_loaded",
    "paper_setting",
    "parse_grouping",
]
