"""User-facing errors: the CLI prints their message on one line and exits non-zero, never a traceback."""


class KeysplitError(Exception):
    """A mistake in what the user asked for (bad spec, missing file, unreachable service)."""


class SpecError(KeysplitError, ValueError):
    """A grouping or dataset spec string that names nothing valid or carries bad parameters."""


class DatasetError(KeysplitError):
    """A dataset that cannot be read: missing, a directory, empty, or without the named column."""
