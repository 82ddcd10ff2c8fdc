"""The loaders' settings as one frozen, keyword-only config, checked once in __post_init__ (as torchtitan's data
configs are). The runtime objects (tokenizer, device, a resume state) are not settings: they are passed beside it.

A bad setting is one NanodataError (a ValueError) naming it. The nanochat-compatible functions in loader.py build a
LoaderConfig from their keyword arguments, so upstream
training scripts work unchanged; new code can build one config and pass it around.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from nanodata.errors import NanodataError, check_path
from nanodata.loader.packing import CROP_POLICIES
from nanodata.loader.remote import DEFAULT_CACHE_BYTES, check_cache_args
from nanodata.ranges import (
    BATCH_ROWS,
    BUFFER_DOCS,
    CACHE_BYTES,
    LOADER_THREADS,
    LOGICAL_STREAMS,
    POLL_INTERVAL_S,
    PREFETCH,
    SEQ_LEN,
    TOKENIZER_BATCH,
)

SPLITS = ("train", "val")


@dataclass(frozen=True, kw_only=True)
class Source:
    """One corpus of a weighted mixture."""
    data_dir: str | os.PathLike
    weight: float

    @classmethod
    def parse(cls, obj, where: str) -> Source:
        if isinstance(obj, Source):
            return obj
        if not isinstance(obj, dict) or set(obj) != {"data_dir", "weight"}:
            raise NanodataError(f"{where} must be a dict with exactly the keys data_dir and weight, not {obj!r}")
        weight = obj["weight"]
        if type(weight) not in (int, float) or not 0 < weight < math.inf:
            raise NanodataError(f"{where}['weight'] must be a number > 0, not {weight!r}")
        check_path(f"{where}['data_dir']", obj["data_dir"])
        return cls(data_dir=obj["data_dir"], weight=float(weight))


@dataclass(frozen=True, kw_only=True)
class LoaderConfig:
    """What a loader reads and how it packs. B, T: batch rows and tokens per row. data_dir or sources (a weighted
    mixture, best-fit only): local directories or gs://bucket/prefix. rank/world_size: None takes them from
    torch.distributed, else RANK/WORLD_SIZE. logical_streams (best-fit): fixed for a run, lets it resume on up to
    that many ranks. See README "The loader" for the rest."""
    B: int
    T: int
    split: str = "train"
    data_dir: str | os.PathLike | None = None
    sources: tuple[Source, ...] | None = None
    tokenizer_threads: int = LOADER_THREADS.default
    tokenizer_batch_size: int = TOKENIZER_BATCH.default
    buffer_size: int = BUFFER_DOCS.default
    logical_streams: int | None = None
    reweight: bool = False
    crop: str = "discard"
    rank: int | None = None
    world_size: int | None = None
    streaming: bool = False
    prefetch: int = PREFETCH.default
    poll_interval: float = 30.0
    return_doc_info: bool = False
    cache_dir: str | os.PathLike | None = None
    cache_bytes: int = DEFAULT_CACHE_BYTES

    def __post_init__(self):
        """Every setting in its range (nanodata.ranges, the one table the CLI and DAG Params share too)."""
        for name, allowed in (("B", BATCH_ROWS), ("T", SEQ_LEN), ("buffer_size", BUFFER_DOCS),
                              ("tokenizer_threads", LOADER_THREADS), ("tokenizer_batch_size", TOKENIZER_BATCH),
                              ("prefetch", PREFETCH), ("poll_interval", POLL_INTERVAL_S),
                              ("cache_bytes", CACHE_BYTES)):
            allowed.check(name, getattr(self, name))
        if self.logical_streams is not None:
            LOGICAL_STREAMS.check("logical_streams", self.logical_streams)
        if self.split not in SPLITS:
            raise NanodataError(f"split must be 'train' or 'val', not {self.split!r}")
        if self.crop not in CROP_POLICIES:
            raise NanodataError(f"crop must be one of {CROP_POLICIES}, not {self.crop!r}")
        check_path("data_dir", self.data_dir, allow_none=True)
        check_path("cache_dir", self.cache_dir, allow_none=True)
        if self.sources is not None:
            if self.data_dir is not None:
                raise NanodataError("pass data_dir or sources, not both")
            if not isinstance(self.sources, (list, tuple)) or not self.sources:
                raise NanodataError(f"sources must be a non-empty list of {{'data_dir': ..., 'weight': ...}}, "
                                    f"not {self.sources!r}")
            object.__setattr__(self, "sources", tuple(Source.parse(s, f"sources[{i}]")
                                                      for i, s in enumerate(self.sources)))
        check_cache_args(self.cache_dir, self.cache_bytes)

    @property
    def data_dirs(self) -> list:
        """The corpora read, in order: data_dir alone, or each source's."""
        return [self.data_dir] if self.sources is None else [s.data_dir for s in self.sources]

    @property
    def weights(self) -> list[float] | None:
        """A mixture's weights; None for one data_dir."""
        return None if self.sources is None else [s.weight for s in self.sources]

    @property
    def files(self) -> dict:
        """How sources reach a bucket's files."""
        return {"cache_dir": self.cache_dir, "cache_bytes": self.cache_bytes}
