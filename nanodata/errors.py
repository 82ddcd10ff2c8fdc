"""One exception type for bad input, so the CLI can print a one-line message instead of a traceback."""


class NanodataError(Exception):
    """A user-facing error: the message names the file, line or parameter at fault."""
