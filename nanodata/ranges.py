"""The allowed range of every number a user gives nanodata: CLI flags, DAG Params, job configs.

One table so the three faces cannot drift apart. Upper bounds exist where a value sizes an
allocation, a process count, a sleep or a file (a huge one is a MemoryError, an OverflowError
or a machine out of processes long before it is a useful setting); floats must be finite.
`flag(RANGE)` is an argparse `type=` that rejects a bad value before any work starts, with one
line naming the flag, the value and the range; `RANGE.check(name, value)` is the same check for
library entry points; `RANGE.param()` gives the JSON-schema bounds of an Airflow Param.
`local_path(what)` is the same kind of `type=` for a flag that names a local file or directory.
"""

from __future__ import annotations

import argparse
import math
import os
from dataclasses import dataclass
from pathlib import Path

from nanodata.errors import NanodataError

# Worker processes beyond a few per core only add memory and start-up time; the cap is what
# keeps `--workers 10**9` from forking until the machine runs out of processes.
CPUS = os.cpu_count() or 1
PROCESS_WORKERS_PER_CPU = 4
# Threads waiting on the network (downloads, transfers) may outnumber the cores more.
THREAD_WORKERS_PER_CPU = 16


@dataclass(frozen=True)
class Range:
    lo: float
    hi: float
    integer: bool = True
    lo_open: bool = False  # lo itself not allowed (a float that must be > 0)
    hi_open: bool = False  # hi itself not allowed (a fraction < 1)
    why: str = ""  # said after the range in the error, e.g. where a cap comes from
    default: float | None = None  # the value when none is given: the CLI flag's, the DAG Param's, the config's

    def describe(self) -> str:
        what = "a whole number" if self.integer else "a finite number"
        lo = f"{'>' if self.lo_open else '>='} {_number(self.lo)}"
        hi = f"{'<' if self.hi_open else '<='} {_number(self.hi)}"
        return f"{what} {lo} and {hi}" + (f" ({self.why})" if self.why else "")

    def contains(self, value) -> bool:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        if self.integer and not isinstance(value, int):  # 2.0 is a float: a caller mixing them up is told
            return False
        if not math.isfinite(value):
            return False
        above = value > self.lo if self.lo_open else value >= self.lo
        below = value < self.hi if self.hi_open else value <= self.hi
        return above and below

    def check(self, name: str, value):
        """`value` if it is in range, else a NanodataError naming `name` (e.g. "--workers")."""
        if not self.contains(value):
            raise NanodataError(f"{name} must be {self.describe()}, not {value!r}")
        return int(value) if self.integer else float(value)

    def parse(self, text: str):
        """A command-line string to a number in range; ValueError with the range otherwise."""
        try:
            value = int(text, 10) if self.integer else float(text)
        except ValueError:
            raise ValueError(f"{text!r} is not {self.describe()}") from None
        if not self.contains(value):
            raise ValueError(f"{text} is out of range: must be {self.describe()}")
        return value

    def param(self) -> dict:
        """JSON-schema bounds for an Airflow Param (the form enforces minimum/maximum at the field)."""
        bounds = {"exclusiveMinimum" if self.lo_open else "minimum": self.lo,
                  "exclusiveMaximum" if self.hi_open else "maximum": self.hi}
        return {k: (int(v) if self.integer else v) for k, v in bounds.items()}


def _number(value: float) -> str:
    """1048576 rather than 1.04858e+06: a user copies the bound into the next try."""
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def flag(allowed: Range):
    """An argparse `type=`: a bad value exits 2 with `argument --x: VALUE is out of range: must be ...`."""

    def parse(text: str):
        try:
            return allowed.parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    parse.__name__ = "number"  # argparse names the type in some messages
    parse.allowed = allowed  # so a test (and --help tooling) can find every ranged flag
    return parse


def not_local(value, what: str, hint: str = "") -> str | None:
    """What is wrong with `value` where a local `what` ("file", "directory") goes: a gs:// URI, or a typo of one
    (gs:/b, GS://b), is no local path; pathlib would fold 'gs://b/x' into a folder 'gs:' in the working directory.
    None when it is not one of those."""
    text = os.fspath(value) if isinstance(value, (str, os.PathLike)) else ""
    if text[:3].lower() != "gs:":
        return None
    return f"{text}: a local {what} is needed, not a bucket" + (f" ({hint})" if hint else "")


SYNC_HINT = "copy it with `nanodata sync`"  # how a local directory reaches a bucket


def local_path(what: str = "directory", hint: str = SYNC_HINT):
    """An argparse `type=` for a local file or directory: a gs:// value exits 2 with `argument --x: VALUE: a local
    directory is needed, ...` before any work (nothing created); else the value as a Path."""

    def parse(text: str) -> Path:
        problem = not_local(text, what, hint) if text else f"empty; give a local {what}"
        if problem is not None:
            raise argparse.ArgumentTypeError(problem)
        return Path(text)

    parse.__name__ = what
    return parse


# --- the ranges, by what they size ---------------------------------------------------------------
PROCESS_WORKERS = Range(1, max(8, PROCESS_WORKERS_PER_CPU * CPUS), default=1,
                        why=f"{PROCESS_WORKERS_PER_CPU} processes per CPU, {CPUS} CPUs here, at least 8")
THREAD_WORKERS = Range(1, max(64, THREAD_WORKERS_PER_CPU * CPUS),
                       why=f"{THREAD_WORKERS_PER_CPU} threads per CPU, {CPUS} CPUs here, at least 64")

# download
NUM_SHARDS = Range(1, 100_000)  # fineweb-edu-100b has 1,823; the shard list is built in memory
ATTEMPTS = Range(1, 1000)  # beyond this a retry loop is a hang, not a policy
BACKOFF_S = Range(0, 30, integer=False)  # the first wait between two attempts; waits double up to this
TIMEOUT_S = Range(0, 86_400, integer=False, lo_open=True)  # socket timeouts overflow past C's range

# chunk
MIN_TOKENS = 16  # a doc must hold a preamble line and a function signature
MAX_TOKENS = Range(MIN_TOKENS, 1 << 20, default=2048)  # per-doc budget; the report allocates one bin per token
REPORT_MAX_TOKENS = Range(1, MAX_TOKENS.hi)  # a report may bin a corpus by any budget
CROSS_DEPTH = Range(0, 64, default=3)
# clang's parse and walk of one file (the clang resolver); past it the file falls back to the names rule
CLANG_TIMEOUT_S = Range(0, 3600, integer=False, lo_open=True, default=60.0)
MAX_FILE_BYTES = Range(1, 1 << 30)  # a limit a user sets (none by default): a file is read and parsed whole
PARTITION_MB = Range(0, 1 << 20, integer=False, lo_open=True, default=256)
# near-dedup: files at or above this estimated Jaccard are near-copies (BigCode: 0.7); below 0.5 LSH needs bands
# of a few rows, and most pairs of files in one language share that much boilerplate
NEAR_THRESHOLD = Range(0.5, 1.0, integer=False, default=0.7)
# the per-file cache keeps the entries the last N successful builds (or --cache runs) used; at least the run's own
CACHE_KEEP = Range(1, 1000, default=3)
# ... and never sweeps an entry younger than this: it may be one a run still going (sharing the cache) wrote but has
# not recorded yet. Past the longest run; 0 only where one run at a time uses the cache
CACHE_GRACE_HOURS = Range(0, 24 * 366, integer=False, default=24)

# to-parquet
ROWS_PER_FILE = Range(1, 10_000_000, default=50_000)  # a shard is shuffled in memory
# the DAG's shard size cap: a shard file holds at most this many MB of docs (as JSON text, about 4x less in parquet),
# and the train shards are as many as hold the corpus under it (and under ROWS_PER_FILE docs each)
SHARD_MB = Range(1, 1 << 20, integer=False, default=512)
ROW_GROUP_SIZE = Range(1, 1_000_000, default=1024)
VAL_FRACTION = Range(0, 1, integer=False, hi_open=True, default=0.01)
SEED = Range(0, 2**32 - 1, default=42)
IDLE_TIMEOUT_S = Range(0, 7 * 86_400, integer=False)

# pretokenize, tokenizer train
SHARD_TOKENS = Range(1, 10**12)  # past this no machine holds the shard buffer (pretokenize also checks this one's memory)
MIN_VOCAB = 265  # 256 bytes + the special tokens
VOCAB_SIZE = Range(MIN_VOCAB, 1 << 20)
MAX_CHARS = Range(1, 10**12)
DOC_CAP = Range(1, 1 << 30)

# the loaders (trainer-facing keyword arguments; each sizes a buffer, a thread count or a wait)
BATCH_ROWS = Range(1, 1 << 20)  # B
SEQ_LEN = Range(1, 1 << 24)  # T
BUFFER_DOCS = Range(1, 10**7, default=1000)  # buffer_size
TOKENIZER_BATCH = Range(1, 1 << 20, default=128)  # tokenizer_batch_size: docs per slice
LOADER_THREADS = Range(1, max(8, PROCESS_WORKERS_PER_CPU * CPUS), default=4,
                       why=f"{PROCESS_WORKERS_PER_CPU} threads per CPU, {CPUS} CPUs here, at least 8")
LOGICAL_STREAMS = Range(1, 1 << 16)
WORLD_SIZE = Range(1, 1 << 20)
PREFETCH = Range(0, 1024, default=2)  # batches kept ready
CACHE_BYTES = Range(0, 1 << 50, default=4 << 30)

# sync
POLL_INTERVAL_S = Range(0, 86_400, integer=False, lo_open=True)  # sync --poll-interval, a streaming loader's
DEADLINE_S = Range(0, 30 * 86_400, integer=False, lo_open=True)
