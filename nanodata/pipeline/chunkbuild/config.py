"""The chunker's settings checked and built for the work: `ChunkConfig`, what `nanodata chunk`'s flags, the corpus
DAG's Params and `chunk_to_jsonl`'s keywords all make. Its fields are `nanodata.settings.ChunkSettings`'s, declared
once there with their ranges, defaults, help and scope; this subclass adds what needs the build side: the list
settings parsed, the cleaning stages built, the tokenizer and the benchmark files loaded, the cache checked.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from nanodata.pipeline.chunkbuild.reuse import FileCache, settings_digest
from nanodata.pipeline.chunking.pack import counter_for
from nanodata.pipeline.cleaning.decontaminate import Decontaminator
from nanodata.pipeline.cleaning.filters import BUILTIN_FILTERS, make_filters, parse_filter_list
from nanodata.pipeline.cleaning.licenses import parse_license_list
from nanodata.pipeline.cleaning.redact import Redactor, parse_redact_list
from nanodata.pipeline.cleaning.stages import Cleaning
from nanodata.settings import FILE, ChunkSettings
from nanodata.storage import check_uri, is_gcs
from nanodata.storage.auth import Secret, load_secret
from nanodata.storage.files import check_output_dir
from nanodata.tokenizer import load


@dataclass(frozen=True, kw_only=True)
class ChunkConfig(ChunkSettings):
    """The settings (nanodata.settings.ChunkSettings: what each one means) plus: cache, where each file's result is
    kept for later runs (a directory or gs:// prefix; None: no reuse); cache_secret, what authenticates its entries
    (None: NANODATA_CACHE_SECRET, else the user's secret file: nanodata.storage.auth.load_secret; loaded, and
    checked, only with a cache). filters, redact and licenses may be given as comma lists; `cleaning` is what the
    workers run."""
    cache: str | None = None
    cache_secret: Secret | str | None = field(default=None, repr=False, compare=False)
    cleaning: Cleaning = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        super().__post_init__()
        for name, parse in (("filters", parse_filter_list), ("redact", parse_redact_list)):
            # ChunkSettings gave the list as a tuple (a comma list split, "none" empty): checked against the kinds here
            object.__setattr__(self, name, parse(",".join(getattr(self, name)) or "none"))
        if self.licenses is not None:
            licenses = self.licenses if isinstance(self.licenses, str) else ",".join(self.licenses)
            object.__setattr__(self, "licenses", parse_license_list(licenses))
        object.__setattr__(self, "decontaminate", tuple(str(f) for f in self.decontaminate))
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
                "cross_depth": self.cross_depth, "resolver": self.resolver, "clang_timeout_s": self.clang_timeout_s,
                "near": self.near_threshold if self.dedup == "near" else None,
                "cleaning": self.cleaning, "licenses": self.licenses, "cache": self.file_cache()}

    def file_cache(self) -> FileCache | None:
        """The run's per-file cache (nanodata.pipeline.chunkbuild.reuse), keyed by what decides a file's result."""
        if self.cache is None:
            return None
        decontaminator = next((f for f in self.cleaning.filters if isinstance(f, Decontaminator)), None)
        salt = settings_digest({**self.decisive((FILE,)), "tokenizer": load(self.tokenizer).identity,
                                "decontaminate": decontaminator and decontaminator.digest})
        return FileCache(self.cache, salt, self.reuse, self.cache_secret)
