"""The subcommands of ``keysplit``, one module each. A command's module docstring opens with ``keysplit NAME``:
and its one-line help (streamparse's ``description=__doc__``): the module registers that text, and ``keysplit
--help`` reads it from the file without importing the module (keysplit.cli), so each text is written once."""

from __future__ import annotations


def command_summary(doc: str | None) -> tuple[str, str]:
    """The command name and one-line help in a command module's docstring, whose first paragraph reads
    ``keysplit NAME``: HELP.

    >>> command_summary("``keysplit jar``: build the jar for `sparse submit -j`.\\n\\nMore.")
    ('jar', 'build the jar for `sparse submit -j`')
    """
    first = " ".join((doc or "").split("\n\n", 1)[0].split())
    prefix, sep, text = first.partition("``: ")
    if not prefix.startswith("``keysplit ") or not sep:
        raise ValueError(f"a command's docstring opens with ``keysplit NAME``: HELP, not {first[:40]!r}")
    return prefix[len("``keysplit "):], text.removesuffix(".")
