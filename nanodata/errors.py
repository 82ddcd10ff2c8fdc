"""One exception type for user mistakes, so the CLI can print a one-line message instead of a traceback.

Every mistake a user can make (a bad path, argument, state, config or tokenizer name) raises NanodataError
or a subclass, whatever the entry point: the CLI, a loader, DataLoaderLite, tokenizer.load, a DAG task.
It is a ValueError too, so callers that caught the loaders' ValueError before keep working.
"""


class NanodataError(ValueError):
    """A user-facing error: the message (one line) names the file, line or parameter at fault."""
