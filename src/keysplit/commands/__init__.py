"""The subcommands of ``keysplit``, one module each. A command's module docstring opens with ``keysplit NAME``:
and its one-line help (streamparse's ``description=__doc__``): the module registers that text, and ``keysplit
--help`` reads it from the file without importing the module (``keysplit.cli.command_summary``), so each text is
written once."""
