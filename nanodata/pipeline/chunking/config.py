"""The chunker's settings as one frozen, keyword-only config, checked once in __post_init__: what `nanodata chunk`'s
flags, the corpus DAG's Params and `chunk_to_jsonl`'s keywords all build. Ranges and defaults come from
nanodata.ranges, the one table the three faces share.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from nanodata.errors import NanodataError
from nanodata.pipeline.chunking.modes import MODES
from nanodata.pipeline.chunking.pack import counter_for
from nanodata.pipeline.chunking.reuse import FileCache, settings_digest
from nanodata.pipeline.chunking.sources import CPP_EXTENSIONS
from nanodata.pipeline.cleaning.decontaminate import Decontaminator
from nanodata.pipeline.cleaning.filters import BUILTIN_FILTERS, DEFAULT_FILTERS, make_filters, parse_filter_list
from nanodata.pipeline.cleaning.licenses import parse_license_list
from nanodata.pipeline.cleaning.redact import DEFAULT_REDACT, Redactor, parse_redact_list
from nanodata.pipeline.cleaning.stages import Cleaning
from nanodata.ranges import (
    CACHE_GRACE_HOURS,
    CACHE_KEEP,
    CROSS_DEPTH,
    MAX_FILE_BYTES,
    MAX_TOKENS,
    NEAR_THRESHOLD,
    PARTITION_MB,
    PROCESS_WORKERS,
)
from nanodata.storage import check_uri, is_gcs
from nanodata.storage.auth import Secret, load_secret
from nanodata.storage.files import check_output_dir
from nanodata.tokenizer import load

DEDUPS = ("near", "exact")  # near: near-copy files lose their docs, then exact duplicate docs; exact: only the latter


@dataclass(frozen=True, kw_only=True)
class ChunkConfig:
    """mode: one of MODES. max_tokens: the budget of every doc, counted with `tokenizer` (a tiktoken name or a
    trained tokenizer directory). cross_depth: how far cross-file dependencies are followed. max_file_bytes: larger
    files are skipped and listed (None, the default: no limit). workers: processes (the output is the same for any). partition_mb: global modes
    parse and emit partitions of this much source. extensions: the C++ files of a project directory. dedup: "near"
    (files whose estimated Jaccard with a kept file is >= near_threshold lose their docs, nanodata.pipeline.dedup.near;
    then exact duplicate docs) or "exact" (exact duplicate docs only). filters: what drops a file (names from
    nanodata.pipeline.cleaning.filters, or a comma list; "none"); redact: what is replaced by a placeholder
    ("secrets,emails,ips", or "none"); decontaminate: JSONL files of benchmark items whose text drops a file
    holding it; licenses: the SPDX ids whose projects are kept (None: all). cache: where each file's result is kept
    for later runs (a directory or gs:// prefix; None: no reuse); reuse=False chunks every file again (a clean
    rebuild) and still refreshes the cache; cache_keep_runs: entries no run of the last this many used are deleted
    (once older than cache_grace_hours: a younger one may be a concurrent run's, not recorded yet);
    cache_secret: what authenticates the cache's entries (None: NANODATA_CACHE_SECRET, else the user's secret file:
    nanodata.storage.auth.load_secret; loaded, and checked, only with a cache). `cleaning` is what the workers run."""
    mode: str = "basic"
    max_tokens: int = MAX_TOKENS.default
    tokenizer: str = "cl100k_base"
    cross_depth: int = CROSS_DEPTH.default
    max_file_bytes: int | None = None
    workers: int = PROCESS_WORKERS.default
    partition_mb: float = PARTITION_MB.default
    extensions: tuple[str, ...] = CPP_EXTENSIONS
    dedup: str = "near"
    near_threshold: float = NEAR_THRESHOLD.default
    filters: tuple[str, ...] | str = DEFAULT_FILTERS
    redact: tuple[str, ...] | str = DEFAULT_REDACT
    decontaminate: tuple[str, ...] = ()
    licenses: tuple[str, ...] | str | None = None
    cache: str | None = None
    reuse: bool = True
    cache_keep_runs: int = CACHE_KEEP.default
    cache_grace_hours: float = CACHE_GRACE_HOURS.default
    cache_secret: Secret | str | None = field(default=None, repr=False, compare=False)
    cleaning: Cleaning = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        if self.mode not in MODES:
            raise NanodataError(f"--mode {self.mode!r}: expected one of {', '.join(MODES)}")
        for name, allowed in (("--max-tokens", MAX_TOKENS), ("--cross-depth", CROSS_DEPTH),
                              ("--max-file-bytes", MAX_FILE_BYTES), ("--workers", PROCESS_WORKERS),
                              ("--partition-mb", PARTITION_MB), ("--cache-keep-runs", CACHE_KEEP),
                              ("--cache-grace-hours", CACHE_GRACE_HOURS)):
            value = getattr(self, name[2:].replace("-", "_"))
            if value is not None or name != "--max-file-bytes":  # no file size limit unless one is given
                allowed.check(name, value)
        if self.dedup not in DEDUPS:
            raise NanodataError(f"--dedup {self.dedup!r}: expected one of {', '.join(DEDUPS)}")
        object.__setattr__(self, "near_threshold", NEAR_THRESHOLD.check("--near-threshold", self.near_threshold))
        for name, parse in (("filters", parse_filter_list), ("redact", parse_redact_list)):
            value = getattr(self, name)
            object.__setattr__(self, name, parse(value) if isinstance(value, str) else parse(",".join(value) or "none"))
        if self.licenses is not None:
            licenses = self.licenses if isinstance(self.licenses, str) else ",".join(self.licenses)
            object.__setattr__(self, "licenses", parse_license_list(licenses))
        object.__setattr__(self, "decontaminate", tuple(str(f) for f in self.decontaminate or ()))
        # built (and its inputs checked) here, before any work: a missing benchmark file fails the run at once
        object.__setattr__(self, "cleaning", Cleaning(
            filters=(*BUILTIN_FILTERS, *make_filters(self.filters),
                     *((Decontaminator(self.decontaminate),) if self.decontaminate else ())),
            transforms=(Redactor(self.redact),) if self.redact else ()))
        object.__setattr__(self, "tokenizer", str(self.tokenizer))
        object.__setattr__(self, "extensions", tuple(e.lower() for e in self.extensions))
        counter_for(self.tokenizer)  # a tokenizer that cannot be loaded fails here, before any work
        if self.cache is not None:
            cache = str(self.cache)  # a local one may be relative; gs: URIs (and typos of them) are checked as given
            cache = cache if cache[:3].lower() == "gs:" else os.path.abspath(cache)
            object.__setattr__(self, "cache", check_uri("--cache", cache))
            if not is_gcs(self.cache):  # a file in the way or a read-only place: one line now, not a traceback later
                check_output_dir(self.cache, "--cache")
            object.__setattr__(self, "cache_secret", load_secret(self.cache_secret))  # a bad secret file fails here

    def worker_settings(self) -> dict:
        """What each worker process needs to chunk a file (picklable, recorded in a build's plan)."""
        return {"tokenizer": self.tokenizer, "mode": self.mode, "budget": self.max_tokens,
                "cross_depth": self.cross_depth, "near": self.near_threshold if self.dedup == "near" else None,
                "cleaning": self.cleaning, "licenses": self.licenses, "cache": self.file_cache()}

    def file_cache(self) -> FileCache | None:
        """The run's per-file cache (nanodata.pipeline.chunking.reuse), keyed by what decides a file's result."""
        if self.cache is None:
            return None
        decontaminator = next((f for f in self.cleaning.filters if isinstance(f, Decontaminator)), None)
        salt = settings_digest(mode=self.mode, max_tokens=self.max_tokens, tokenizer_identity=load(self.tokenizer).identity,
                               cross_depth=self.cross_depth, near=self.dedup == "near", filters=self.filters,
                               redact=self.redact, benchmarks_digest=decontaminator and decontaminator.digest)
        return FileCache(self.cache, salt, self.reuse, self.cache_secret)
