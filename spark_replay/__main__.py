"""The replay's entry point: ``spark-submit [--master URL] spark_replay/__main__.py ARGS`` (or ``python -m
spark_replay ARGS``) is the ``keysplit replay`` command inside spark-submit. The one place in ``spark_replay``
that imports the command line: the replay's modules are below it.
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    """``keysplit replay ARGS`` (``argv`` None: the process's arguments)."""
    from keysplit.cli import main as cli_main

    return cli_main(["replay", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
