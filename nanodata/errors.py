"""One exception type for user mistakes, so the CLI can print a one-line message instead of a traceback.

Every mistake a user can make (a bad path, argument, state, config or tokenizer name) raises NanodataError
or a subclass, whatever the entry point: the CLI, a loader, DataLoaderLite, tokenizer.load, a DAG task.
It is a ValueError too, so callers that caught the loaders' ValueError before keep working.
"""


class NanodataError(ValueError):
    """A user-facing error: the message (one line) names the file, line or parameter at fault."""


def check_path(name: str, value, *, allow_none: bool = False):
    """`value` if it can name a file (a non-empty str or os.PathLike), else a NanodataError naming `name`:
    a number or None where a path goes would otherwise surface as a TypeError deep inside."""
    import os

    if value is None and allow_none:
        return value
    if isinstance(value, os.PathLike) or (isinstance(value, str) and value):
        return value
    raise NanodataError(f"{name} must be a path (a non-empty str or os.PathLike), not {value!r}")
