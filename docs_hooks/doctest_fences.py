"""Griffe extension for the API page: a docstring's doctest lines (``>>>``, ``...`` and their output) become a
fenced Python block, so markdown shows them as code instead of reading ``[0, 1, 2, 0]`` as a link."""

from __future__ import annotations

import griffe


def fence_doctests(text: str) -> str:
    out: list[str] = []
    inside = False
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith(">>>") and not inside:
            out.append("```python")
            inside = True
        elif inside and not stripped:
            out.append("```")
            inside = False
        out.append(line.strip() if inside else line)
    if inside:
        out.append("```")
    return "\n".join(out)


class DoctestFences(griffe.Extension):
    def on_instance(self, *, obj: griffe.Object, **kwargs: object) -> None:
        if obj.docstring is not None:
            obj.docstring.value = fence_doctests(obj.docstring.value)
