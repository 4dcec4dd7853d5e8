"""Spec strings: ``name`` or ``name:key=value,key=value`` (``pkg:d=4``, ``zipf:z=1.2,keys=1000``).

Groupings and dataset generators declare their parameters as :class:`Param` tables, and
:func:`bind_params` turns the string values of a spec into typed, validated keyword arguments, with a
one-line :class:`~keysplit.errors.SpecError` naming the valid choices when something is wrong.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from keysplit.errors import SpecError


@dataclass(frozen=True)
class Param:
    """One parameter of a spec: its type, default, a validity check and a help line."""

    kind: Callable[[str], Any]
    default: Any
    help: str
    check: Callable[[Any], bool] | None = None
    rule: str = ""  # what ``check`` demands, for the error message ("at least 1")


def parse_spec(spec: str) -> tuple[str, dict[str, str]]:
    """Split ``name:k=v,k=v`` into the name and a dict of raw string values."""
    spec = spec.strip()
    name, _, rest = spec.partition(":")
    name = name.strip().lower()
    if not name:
        raise SpecError(f"empty spec {spec!r}")
    params: dict[str, str] = {}
    if rest.strip():
        for item in rest.split(","):
            k, eq, v = item.partition("=")
            key = k.strip().lower()
            if not eq or not key:
                raise SpecError(f"bad parameter {item!r} in {spec!r}: expected key=value")
            if key in params:  # keeping the last value would hide a typo in a long spec
                raise SpecError(f"{spec} sets {key} twice")
            params[key] = v.strip()
    return name, params


def bind_params(owner: str, table: Mapping[str, Param], raw: Mapping[str, str]) -> dict[str, Any]:
    """Typed keyword arguments from raw strings, defaults filled in, each value checked."""
    unknown = sorted(set(raw) - set(table))
    if unknown:
        valid = ", ".join(table) or "none"
        raise SpecError(f"{owner} has no parameter {unknown[0]!r}; valid parameters: {valid}")
    out: dict[str, Any] = {}
    for key, param in table.items():
        if key in raw:
            try:
                value = param.kind(raw[key])
            except (TypeError, ValueError):
                raise SpecError(
                    f"{owner}: {key}={raw[key]!r} is not a valid {getattr(param.kind, '__name__', 'value')}"
                ) from None
        else:
            value = param.default
        if key in raw and param.check is not None and not param.check(value):
            raise SpecError(f"{owner}: {key}={raw[key]} is out of range ({param.rule or param.help})")
        out[key] = value
    return out


def choice(*options: str) -> Callable[[str], str]:
    """A Param kind that accepts one of ``options`` (case-insensitive)."""

    def parse(text: str) -> str:
        value = text.lower()
        if value not in options:
            raise ValueError(text)
        return value

    parse.__name__ = "choice of " + "|".join(options)
    return parse


def optional_float(text: str) -> float | None:
    """A float, or None for ``none``/``off``/empty."""
    if text.lower() in ("", "none", "off"):
        return None
    return float(text)


optional_float.__name__ = "number (or none)"


def int_or_auto(text: str) -> int | str:
    """An integer, or ``auto`` (the grouping derives the value from its other parameters)."""
    if text.lower() == "auto":
        return "auto"
    return int(text)


int_or_auto.__name__ = "integer (or auto)"


def boolean(text: str) -> bool:
    """``true``/``false`` (also ``1``/``0``, ``yes``/``no``, ``on``/``off``), case-insensitive."""
    value = text.strip().lower()
    if value in ("true", "1", "yes", "on"):
        return True
    if value in ("false", "0", "no", "off"):
        return False
    raise ValueError(text)


boolean.__name__ = "boolean (true or false)"
