"""Every setting of a C++ corpus build, declared once: `ChunkSettings`, a frozen keyword-only dataclass whose fields
carry their type, default, range or choices, help, form title and *scope*.

Everything else is derived from these fields, never typed again:
- `nanodata chunk`'s flags (`add_flags`: --name-with-dashes, the help, the default, the range check);
- the corpus DAG's Params and their trigger form (`param_specs`: type, default, bounds or enum, title, help);
- the worker's checked copy (`nanodata.pipeline.chunkbuild.config.ChunkConfig`, a subclass that builds the
  cleaning stages and the cache from them);
- what keys the output (`decisive`): a setting of scope FILE decides each file's result, so it is in the cache's
  settings digest and in the build key; one of scope CORPUS decides the corpus but not a file's result (which files
  are kept, dedup's threshold), so it is in the build key only; one of scope RUN (workers, partition size, the
  cache's housekeeping) changes how the work is done, never the bytes, and is in neither.

Adding a setting is one field here plus the code that uses it; tests/test_settings.py fails when a setting that
changes the output is declared RUN, or when the CLI, the DAG and the config disagree on a name or a default. A
light module (dataclasses and ranges only): the DAG file imports it at parse time.
"""

from __future__ import annotations

import argparse
from dataclasses import MISSING, dataclass, field, fields

from nanodata.errors import NanodataError
from nanodata.ranges import (
    CACHE_GRACE_HOURS,
    CACHE_KEEP,
    CLANG_TIMEOUT_S,
    CROSS_DEPTH,
    MAX_FILE_BYTES,
    MAX_TOKENS,
    NEAR_THRESHOLD,
    PARTITION_MB,
    PROCESS_WORKERS,
    Range,
    flag,
)

FILE, CORPUS, RUN = "file", "corpus", "run"  # what a setting decides: see the module's docstring

MODES = ("basic", "dep-aware", "cross-file", "project", "compilable")
# the modes that pull definitions from other files (a resolver finds them): every file is parsed before any is emitted
GLOBAL_MODES = MODES[2:]
RESOLVERS = ("names", "clang")
DEDUPS = ("near", "exact")  # near: near-copy files lose their docs, then exact duplicate docs; exact: only the latter
FILTER_NAMES = ("generated", "long-lines", "alpha", "encoded")  # nanodata.pipeline.cleaning.filters
REDACT_NAMES = ("secrets", "emails", "ips")  # nanodata.pipeline.cleaning.redact
CPP_EXTENSIONS = (".h", ".hh", ".hpp", ".hxx", ".c", ".cc", ".cpp", ".cxx", ".ipp", ".tcc")
# a partition of a byte: every input its own partition (the tests' and the curious' setting); the form enforces
# `minimum` at the field, not exclusiveMinimum
PARTITION_MB_MIN = 1e-6


def setting(default, *, scope: str, title: str, help: str, range: Range | None = None,
            choices: tuple[str, ...] | None = None, metavar: str | None = None, flag: bool = True,
            param: bool = True):
    """A field of ChunkSettings with what the CLI, the DAG and the keys read off it. flag/param: whether
    `nanodata chunk` has a flag / the DAG a Param for it (the cache's own settings are the CLI's: the DAG keeps its
    cache under the destination)."""
    assert scope in (FILE, CORPUS, RUN), scope
    meta = {"scope": scope, "title": title, "help": help, "range": range, "choices": choices, "metavar": metavar,
            "flag": flag, "param": param}
    if isinstance(default, (list, tuple)):
        return field(default_factory=lambda: tuple(default), metadata=meta)
    return field(default=default, metadata=meta)


@dataclass(frozen=True, kw_only=True)
class ChunkSettings:
    """The settings of a build, checked in __post_init__ (ranges and choices; what needs the build side, such as a
    tokenizer that loads or a benchmark file that exists, is ChunkConfig's)."""
    mode: str = setting(
        "basic", scope=FILE, choices=MODES, title="Chunking mode",
        help="basic: a file that fits is one doc, else its units in source order; dep-aware: callees first; "
             "cross-file: each function carries its callees from other files; project: cross-file over projects in "
             "#include order; compilable: the types a function needs in dependency order, then its callees")
    max_tokens: int = setting(
        MAX_TOKENS.default, scope=FILE, range=MAX_TOKENS, title="Max tokens per doc",
        help="the token budget of every doc, counted with --tokenizer; longer files are cut at function boundaries")
    tokenizer: str = setting(
        "cl100k_base", scope=FILE, title="Tokenizer",
        help="counts the tokens: a tiktoken name or a `nanodata tokenizer train` directory")
    cross_depth: int = setting(
        CROSS_DEPTH.default, scope=FILE, range=CROSS_DEPTH, title="Cross-file depth",
        help="cross-file, project, compilable: how many calls deep other files' functions are pulled, breadth-first")
    resolver: str = setting(
        "names", scope=FILE, choices=RESOLVERS, title="Resolver",
        help="cross-file, project, compilable: how a use finds the definition it pulls; names: by its name, scoped to "
             "the project and what the file includes (a name defined twice is never pulled); clang: by the USR "
             "libclang binds it to (project trees on local disk; a file clang cannot use falls back to names)")
    clang_timeout_s: float = setting(
        CLANG_TIMEOUT_S.default, scope=FILE, range=CLANG_TIMEOUT_S, metavar="S", title="Clang timeout (s)",
        help="--resolver clang: a file whose parse and walk take longer falls back to the names resolver")
    max_file_bytes: int | None = setting(
        None, scope=CORPUS, range=MAX_FILE_BYTES, metavar="N", title="Max file bytes",
        help="skip files larger than N bytes, each named with its size in the log, the summary and the report "
             "(default: no limit; a file is parsed whole, a big one is just more docs)")
    extensions: tuple[str, ...] = setting(
        CPP_EXTENSIONS, scope=CORPUS, metavar="LIST", param=False, title="C++ file extensions",
        help="comma-separated extensions of the C++ files of a project directory")
    dedup: str = setting(
        "near", scope=FILE, choices=DEDUPS, title="Deduplication",
        help="near: a file whose 5-gram shingles have an estimated Jaccard >= the near threshold with a kept file "
             "loses its docs (MinHash LSH, every candidate pair verified on its full signature; a copy under "
             "third_party/, vendor/, ... loses to one that is not, then the later in input order), then exact "
             "duplicate docs are dropped; exact: only exact duplicate docs")
    near_threshold: float = setting(
        NEAR_THRESHOLD.default, scope=CORPUS, range=NEAR_THRESHOLD, metavar="J", title="Near-duplicate threshold",
        help="dedup near: the estimated Jaccard at which two files are near-copies (the default is BigCode's)")
    filters: tuple[str, ...] = setting(
        FILTER_NAMES, scope=FILE, metavar="LIST", title="File filters",
        help="files dropped before chunking (StarCoder2's rules), each named in the summary with the figure that "
             "decided it: generated (a generator's notice or header), long-lines (over 100,000 lines, a line over "
             "1,000 characters or a mean over 100), alpha (under 25% alphabetic), encoded (base64, hex or \\uXXXX data over 1,024 "
             "characters or half the file); comma-separated, or none")
    redact: tuple[str, ...] = setting(
        REDACT_NAMES, scope=FILE, metavar="LIST", title="Redaction",
        help="replaced before chunking by <KEY>, <PASSWORD>, <EMAIL>, <IP_ADDRESS> and counted by kind, never shown: "
             "secrets (cloud, CI, registry, chat, payment and AI tokens, private keys, URI and keyword passwords), "
             "emails, ips (public ones); comma-separated, or none")
    decontaminate: tuple[str, ...] = setting(
        (), scope=FILE, metavar="FILE", title="Benchmark files",
        help='JSONL files of benchmark items ({"text": ...} per line, local or gs://): a source file holding an '
             "item's text (whitespace ignored) loses its docs, counted by item; their contents key the output")
    licenses: tuple[str, ...] | None = setting(
        None, scope=CORPUS, metavar="LIST", title="Allowed licenses",
        help="keep only projects whose license (an SPDX id found in its LICENSE/COPYING files, or a JSONL record's "
             '"license") is listed, e.g. MIT,Apache-2.0,BSD-3-Clause (default: all; every project\'s license is in '
             "the summary)")
    workers: int = setting(
        PROCESS_WORKERS.default, scope=RUN, range=PROCESS_WORKERS, param=False, title="Worker processes",
        help="processes; the output is identical for any value")
    partition_mb: float = setting(
        PARTITION_MB.default, scope=RUN, range=PARTITION_MB, title="Partition size (MB)",
        help="work is cut into partitions of about this many MB of source (staged on disk; one mapped task each in "
             "the DAG), so memory stays bounded; the output is identical for any value")
    reuse: bool = setting(
        True, scope=RUN, title="Reuse unchanged files",
        help="read each unchanged file's result from the cache instead of chunking it again; the output is "
             "byte-identical either way; off chunks every file again (a clean rebuild) and refreshes the cache")
    cache_keep_runs: int = setting(
        CACHE_KEEP.default, scope=RUN, range=CACHE_KEEP, metavar="N", title="Cache: runs kept",
        help="after a run, delete the cache entries none of the last N runs used (N >= 1: the run's own are kept)")
    cache_grace_hours: float = setting(
        CACHE_GRACE_HOURS.default, scope=RUN, range=CACHE_GRACE_HOURS, metavar="H", title="Cache: grace hours",
        help="the cleanup never deletes an entry younger than H hours: it may be one a run still going wrote (runs "
             "sharing a cache each clean up at their end), so H should exceed the longest run; 0 only when one run "
             "at a time uses the cache")

    def __post_init__(self):
        for f in fields(ChunkSettings):
            value, meta = getattr(self, f.name), f.metadata
            if isinstance(_default(f), tuple) and not isinstance(value, tuple):  # one form, whatever gave it:
                if isinstance(value, str):  # a comma list (a flag, a Param): empty is the default, as a cleared field
                    value = (_default(f) if not value.strip() else () if value.strip() == "none"
                             else tuple(v.strip() for v in value.split(",") if v.strip()))
                else:  # a JSON list, or null for none
                    value = tuple(value or ())
                object.__setattr__(self, f.name, value)
            if meta["choices"] and value not in meta["choices"]:
                raise NanodataError(f"{_flag_name(f.name)} {value!r}: expected one of {', '.join(meta['choices'])}")
            if meta["range"] is not None and value is not None:
                object.__setattr__(self, f.name, meta["range"].check(_flag_name(f.name), value))
        # settings that mean nothing in this run are refused, not ignored: each is in the build's keys, so an ignored
        # one would only cost a rebuild and a cold cache
        if self.resolver != "names" and self.mode not in GLOBAL_MODES:
            raise NanodataError(f"--resolver {self.resolver}: applies to the modes that pull definitions from other "
                                f"files ({', '.join(GLOBAL_MODES)}), not --mode {self.mode}")
        if self.resolver != "clang" and self.clang_timeout_s != CLANG_TIMEOUT_S.default:
            raise NanodataError(f"--clang-timeout-s {self.clang_timeout_s:g}: applies only with --resolver clang")

    def decisive(self, scopes: tuple[str, ...] = (FILE, CORPUS)) -> dict:
        """The settings of these scopes, by name: FILE alone keys a file's cached result, FILE and CORPUS the build."""
        return {f.name: getattr(self, f.name) for f in fields(ChunkSettings) if f.metadata["scope"] in scopes}


SETTINGS = fields(ChunkSettings)


def _flag_name(name: str) -> str:
    return "--" + name.replace("_", "-")


def _default(f):
    return f.default_factory() if f.default is MISSING else f.default


def _listed(value) -> str:
    return ",".join(value) if value else "none"


def add_flags(parser: argparse.ArgumentParser) -> None:
    """`nanodata chunk`'s flags of the settings, each with its default in its help. List settings take a comma list
    (`none` for empty) or, for files, several values; `reuse` is the flag --no-reuse."""
    for f in SETTINGS:
        meta, default = f.metadata, _default(f)
        if not meta["flag"]:
            continue
        if f.name == "reuse":
            # the flag turns the setting off, so its help says what off does, not what the setting is
            parser.add_argument("--no-reuse", dest="reuse", action="store_false",
                                help="--cache: chunk every file again (a clean rebuild) and refresh its entry, "
                                     "instead of reading each unchanged file's result from the cache; the output "
                                     "is byte-identical either way")
            continue
        kw = {"dest": f.name, "metavar": meta["metavar"], "help": meta["help"].replace("%", "%%")}
        if meta["choices"]:
            kw.update(choices=meta["choices"], metavar=None)
        if meta["range"] is not None:
            kw["type"] = flag(meta["range"])
        if f.name == "decontaminate":
            kw.update(nargs="+", default=[])
        elif isinstance(default, tuple):
            kw["default"] = _listed(default)
            kw["help"] += f" (default: {kw['default']})"
        else:
            kw["default"] = default
            kw["help"] += "" if default is None else f" (default: {default:g})" if isinstance(default, float) \
                else f" (default: {default})"
        parser.add_argument(_flag_name(f.name), **kw)


def from_flags(args: argparse.Namespace, **extra) -> dict:
    """The keyword arguments of a ChunkConfig from parsed flags (a setting without a flag keeps its default)."""
    values = {f.name: getattr(args, f.name) for f in SETTINGS if f.metadata["flag"]}
    if "extensions" in values:
        values["extensions"] = tuple(e if e.startswith(".") else "." + e for e in values["extensions"].split(",") if e)
    return {**values, **extra}


def param_specs() -> dict[str, dict]:
    """The DAG's Params of the settings: name -> keyword arguments of `airflow.sdk.Param` (default, JSON-schema
    type and bounds or enum, title, description). Empty values are null, as the trigger form refuses an empty field
    of a non-null type; list settings are comma-separated text, benchmark files an array of strings."""
    specs = {}
    for f in SETTINGS:
        meta, default = f.metadata, _default(f)
        if not meta["param"]:
            continue
        spec = {"title": meta["title"], "description": meta["help"][0].upper() + meta["help"][1:] + "."}
        bounds = meta["range"].param() if meta["range"] is not None else {}
        if bounds:  # the form says the rule in words too: its number field enforces it only at the field
            spec["description"] += f" Allowed: {meta['range'].describe()}."
        if f.name == "partition_mb":
            bounds = {"minimum": PARTITION_MB_MIN, "maximum": bounds["maximum"]}
        if f.name == "decontaminate":
            spec.update(default=None, type=["null", "array"], items={"type": "string"})
        elif f.name == "licenses":
            spec.update(default=None, type=["null", "string"])
        elif isinstance(default, tuple):
            spec.update(default=_listed(default), type="string")
        elif isinstance(default, bool):
            spec.update(default=default, type="boolean")
        elif meta["range"] is not None:
            kind = "integer" if meta["range"].integer else "number"
            spec.update(default=default, type=kind if default is not None else ["null", kind], **bounds)
        else:
            spec.update(default=default, type="string", **({"enum": list(meta["choices"])} if meta["choices"]
                                                           else {"minLength": 1}))
        specs[f.name] = spec
    return specs


def from_params(params) -> dict:
    """The keyword arguments of a ChunkConfig from the DAG's Params (a setting without a Param keeps its default)."""
    return {f.name: params[f.name] for f in SETTINGS if f.metadata["param"]}
