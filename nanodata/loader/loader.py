"""The public loaders: parquet documents -> tokens -> rows -> one staging buffer -> the device.

    DocumentSource(s) ─ slices of texts + ids ─► tokenizer ─► BestFitPacker per logical stream (or a flat stream)
        ─► (B, T+1) rows ─► [optional prefetch thread] ─► staging [inputs | targets] ─► one copy to device

Everything before the staging buffer is plain numpy and runs in the prefetch thread when prefetch > 0, so
tokenization overlaps the training step. The state yielded with batch k is the producer's exact position
after batch k: the source cursors plus the buffered docs named by (file slot, row group, row[, offset]), with
what the batches depend on (settings, tokenizer, file fingerprints: see state.py). Resuming from it checks
those, re-reads and re-tokenizes the buffered docs and continues bit-identically. Best-fit runs with logical
streams or several sources (streams.py) also resume at another world size, from the list of all ranks' states.

Each batch is a new tensor that the loader never writes again: a caller may keep it, or hand it to a
wrapper that reads ahead (torch_xla's MpDeviceLoader), without a clone. Only the pinned staging buffer of a
CUDA device is reused, and only after the copy that read it has finished.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from operator import itemgetter

import numpy as np
import torch

from nanodata.errors import NanodataError
from nanodata.loader.config import LoaderConfig
from nanodata.loader.lifecycle import Loader
from nanodata.loader.packing import BestFitPacker
from nanodata.loader.remote import DEFAULT_CACHE_BYTES
from nanodata.loader.source import DocumentSource, LoaderClosed
from nanodata.loader.state import STATE_VERSION, STREAMS_VERSION, plan_resume, tokenizer_identity
from nanodata.loader.streams import Feed, Stream, prefetched, restore_docs
from nanodata.loader.tokenize import batch_encoder
from nanodata.ranges import WORLD_SIZE


def bestfit_loader(config: LoaderConfig, tokenizer, *, device="cuda", resume_state_dict=None):
    """BOS-aligned best-fit packing, nanochat-exact by default. Yields (inputs, targets, state_dict), plus a
    doc_info dict {"cu_seqlens", "position_ids"} when config.return_doc_info. Each batch is a new tensor the
    loader never writes again (see _deliver).

    config.sources (a weighted mixture) replaces data_dir; logical_streams=N (fixed for a run) lets it resume on up
    to N ranks. resume_state_dict: one state, or the list of all ranks' states (gather_states), which resumes at
    any world size the run allows. reweight=True accepts other weights at resume (a curriculum): buffered docs
    stay, the new weights apply from the next document. A gs://bucket/prefix is read in place; cache_dir keeps up
    to cache_bytes of the row groups fetched from a bucket on local disk (nanodata.loader.remote)."""
    c = config
    settings = {"loader": "bestfit", "B": c.B, "T": c.T, "buffer_size": c.buffer_size, "crop": c.crop,
                "tokenizer_batch_size": c.tokenizer_batch_size}
    device = resolve_device(device)
    docs = _Documents(tokenizer, c, settings, device)
    plan = plan_resume(resume_state_dict, docs.settings, c.logical_streams, c.weights, bool(c.reweight))
    rows = _BestFitRows(docs, c.data_dirs, c.weights, plan, c.B, c.T, c.buffer_size, c.crop)
    return _deliver(rows.batches, docs, c.B, c.T, device, c.return_doc_info)


def concat_loader(config: LoaderConfig, tokenizer, *, device="cuda", resume_state_dict=None):
    """The published fallback for scarce data or very long docs: BOS-prefixed docs concatenated into one stream,
    cut into windows of B*T+1 tokens; a window's last token is the next window's first input. Nothing is
    cropped; rows may start mid-document. Yields (inputs, targets, state_dict[, doc_info]). It resumes at the
    world size it was saved at (one state, or the list of all ranks' states). One data_dir: no mixtures."""
    c = config
    if c.sources is not None or c.logical_streams is not None:
        raise NanodataError("sources and logical_streams are settings of the best-fit loader, not the concatenating one")
    device = resolve_device(device)
    docs = _Documents(tokenizer, c, {"loader": "concat", "B": c.B, "T": c.T}, device)
    plan = plan_resume(resume_state_dict, docs.settings)
    feed = docs.feed(c.data_dir, docs.rank, docs.world_size)
    restored = []
    if plan.nanochat is not None:
        feed.source.seek_nanochat(plan.nanochat)
    elif plan.streams:
        saved = plan.streams[docs.rank]
        slot_maps = [feed.source.load_state_dict(saved["sources"][0])]
        restored = restore_docs([feed], slot_maps, saved["buffer"], "buffer", False)
    return _deliver(lambda: _concat_batches(docs, feed, c.B, c.T, restored), docs, c.B, c.T, device,
                    c.return_doc_info)


# -- the nanochat-compatible signatures: thin wrappers over a LoaderConfig -----------------------------------
def tokenizing_distributed_data_loader_with_state_bos_bestfit(
        tokenizer, B, T, split, tokenizer_threads=4, tokenizer_batch_size=128, device="cuda",
        resume_state_dict=None, buffer_size=1000, *, data_dir=None, sources=None, logical_streams=None,
        reweight=False, rank=None, world_size=None, crop="discard", streaming=False, prefetch=2, poll_interval=30.0,
        return_doc_info=False, cache_dir=None, cache_bytes=DEFAULT_CACHE_BYTES):
    """nanochat's best-fit loader signature (bestfit_loader with a LoaderConfig of these arguments). Bad
    arguments raise here, before the first batch."""
    config = LoaderConfig(B=B, T=T, split=split, tokenizer_threads=tokenizer_threads,
                          tokenizer_batch_size=tokenizer_batch_size, buffer_size=buffer_size, data_dir=data_dir,
                          sources=sources, logical_streams=logical_streams, reweight=reweight, rank=rank,
                          world_size=world_size, crop=crop, streaming=streaming, prefetch=prefetch,
                          poll_interval=poll_interval, return_doc_info=return_doc_info, cache_dir=cache_dir,
                          cache_bytes=cache_bytes)
    return bestfit_loader(config, tokenizer, device=device, resume_state_dict=resume_state_dict)


def tokenizing_distributed_data_loader_bos_bestfit(*args, **kwargs):
    """As the _with_state variant, without the state: yields (inputs, targets[, doc_info])."""
    return _without_state(tokenizing_distributed_data_loader_with_state_bos_bestfit(*args, **kwargs))


def tokenizing_distributed_data_loader_with_state(
        tokenizer, B, T, split, tokenizer_threads=4, tokenizer_batch_size=128, device="cuda",
        resume_state_dict=None, *, data_dir=None, rank=None, world_size=None, streaming=False, prefetch=2,
        poll_interval=30.0, return_doc_info=False, cache_dir=None, cache_bytes=DEFAULT_CACHE_BYTES):
    """nanochat's concatenating loader signature (concat_loader with a LoaderConfig of these arguments)."""
    config = LoaderConfig(B=B, T=T, split=split, tokenizer_threads=tokenizer_threads,
                          tokenizer_batch_size=tokenizer_batch_size, data_dir=data_dir, rank=rank,
                          world_size=world_size, streaming=streaming, prefetch=prefetch, poll_interval=poll_interval,
                          return_doc_info=return_doc_info, cache_dir=cache_dir, cache_bytes=cache_bytes)
    return concat_loader(config, tokenizer, device=device, resume_state_dict=resume_state_dict)


def tokenizing_distributed_data_loader(*args, **kwargs):
    """As tokenizing_distributed_data_loader_with_state, without the state: yields (inputs, targets[, doc_info])."""
    return _without_state(tokenizing_distributed_data_loader_with_state(*args, **kwargs))


def gather_states(state: dict, group=None) -> list[dict]:
    """Every rank's loader state, in rank order, on every rank: a torch.distributed collective, so call it on
    all ranks with the states of the same step. Save the list once; pass it as resume_state_dict on any world
    size the run allows (the states must be JSON-serialisable, as the loader's are)."""
    states = [None] * torch.distributed.get_world_size(group)
    torch.distributed.all_gather_object(states, state, group=group)
    return states


# -- producers: plain numpy, exact state ---------------------------------------------------------------------
class _BestFitRows:
    """This rank's logical streams (r, r+W, ... of N), each a packer fed by the sources; rows are taken from
    them in turn, and the state is version 2 (a default run: one stream, one source) or version 3."""

    def __init__(self, docs, data_dirs, weights, plan, B, T, buffer_size, crop):
        self.docs, self.plan, self.weights, self.B, self.T = docs, plan, weights, B, T
        tagged = plan.layout == STREAMS_VERSION
        self.streams = []
        for s in range(docs.rank, plan.logical_streams, docs.world_size):
            feeds = [docs.feed(data_dir, s, plan.logical_streams, tag=i if tagged else None)
                     for i, data_dir in enumerate(data_dirs)]
            stream = Stream(s, feeds, weights or [1.0], BestFitPacker(T + 1, buffer_size, docs.bos, crop), tagged,
                            docs.batch_size)
            if s in plan.streams:
                stream.restore(plan.streams[s], plan.reweighted)
            self.streams.append(stream)
        if plan.nanochat is not None:
            self.streams[0].feeds[0].source.seek_nanochat(plan.nanochat)

    def batches(self):
        streams, B, T = self.streams, self.B, self.T
        current = self.plan.next_stream
        while True:
            rows = np.empty((B, T + 1), dtype=np.int64)
            for row in rows:
                stream = streams[current]
                stream.packer.fill_row(row, stream.refill)
                current = (current + 1) % len(streams)
            yield rows[:, :-1], rows[:, 1:], self.state_dict(current)

    def state_dict(self, next_stream: int) -> dict:
        """JSON-serialisable (ids are tuples, which json writes as lists); about 16 bytes per buffered doc."""
        if self.plan.layout == STATE_VERSION:
            stream = self.streams[0]
            buffered = stream.packer.buffered_ids()
            position = stream.feeds[0].state_dict(set(map(itemgetter(0), buffered)))  # per batch: in C
            return {"version": STATE_VERSION, **self.docs.settings, **position, "buffer": buffered}
        return {"version": STREAMS_VERSION, **self.docs.settings, "logical_streams": self.plan.logical_streams,
                "weights": self.weights, "next_stream": next_stream,
                "streams": [stream.state_dict() for stream in self.streams]}


def _concat_batches(docs, feed, B, T, restored):
    need = B * T + 1
    pending = deque((tokens, doc_id[1:]) for tokens, doc_id, _ in restored)
    head = restored[0][2] if restored else 0  # tokens of pending[0] used up
    have = sum(len(tokens) for tokens, _ in pending) - head
    while True:
        while have < need:
            for tokens, doc_id in feed.next_slice():
                pending.append((tokens, doc_id))
                have += len(tokens)
        window = np.empty(need, dtype=np.int64)
        pos, skip = 0, head
        for tokens, _ in pending:
            take = min(len(tokens) - skip, need - pos)
            window[pos:pos + take] = tokens[skip:skip + take]
            pos, skip = pos + take, 0
            if pos == need:
                break
        head, have = head + B * T, have - B * T  # advance B*T: the window's last token is carried over
        while head >= len(pending[0][0]):
            head -= len(pending.popleft()[0])
        ids = [doc_id for _, doc_id in pending]
        ids[0] = ids[0] + (head,) if head else ids[0]
        position = feed.state_dict({doc_id[0] for doc_id in ids})
        yield (window[:-1].reshape(B, T), window[1:].reshape(B, T),
               {"version": STATE_VERSION, **docs.settings, **position, "buffer": ids})


def doc_info(inputs: np.ndarray, bos: int) -> dict[str, np.ndarray]:
    """Varlen-attention boundaries: a sequence starts at every BOS and at every row start.

    cu_seqlens (int32) indexes the flattened B*T inputs and is padded to B*T+1 entries by repeating B*T (empty
    sequences), so its shape never changes; position_ids (int64, B x T) restart at 0 at every sequence start."""
    B, T = inputs.shape
    starts = inputs == bos
    starts[:, 0] = True
    first = np.flatnonzero(starts)
    cu_seqlens = np.full(B * T + 1, B * T, dtype=np.int32)
    cu_seqlens[:len(first)] = first
    sequence = np.cumsum(starts.ravel()) - 1
    position_ids = (np.arange(B * T) - first[sequence]).reshape(B, T)
    return {"cu_seqlens": cu_seqlens, "position_ids": position_ids}


# -- documents, tokenized --------------------------------------------------------------------------------------
class _Documents:
    """What every feed of this rank shares: the encoder of the duck-typed tokenizer (get_bos_token_id();
    encode(list, prepend=, num_threads=); see tokenize.py), the source settings, the stop event, and the settings
    a state records: the loader's own (kind first) and the documents'. `files`: how sources reach a bucket's
    files (cache_dir, cache_bytes); `device` (resolved) decides where a default rank and world size come from."""

    def __init__(self, tokenizer, config: LoaderConfig, loader_settings: dict, device: torch.device):
        if not callable(getattr(tokenizer, "get_bos_token_id", None)) or not callable(getattr(tokenizer, "encode", None)):
            raise NanodataError(f"tokenizer must be a tokenizer object (nanodata.tokenizer.load(NAME), or one with "
                                f"get_bos_token_id() and encode()), not {tokenizer!r}")
        self.files = config.files
        self.rank, self.world_size = resolve_rank(config.rank, config.world_size, device)
        self.prefetch = config.prefetch
        self.split, self.batch_size = config.split, config.tokenizer_batch_size
        self.streaming, self.poll_interval = config.streaming, config.poll_interval
        self.bos = tokenizer.get_bos_token_id()
        self.stop = threading.Event()  # every thread of this loader ends when it is set (lifecycle.py)
        self.encode = batch_encoder(tokenizer, self.bos, config.tokenizer_threads, self.stop)
        self.settings = {**loader_settings, "split": self.split, "streaming": self.streaming, "rank": self.rank,
                         "world_size": self.world_size, "tokenizer": tokenizer_identity(tokenizer)}

    def feed(self, data_dir, stream: int, n_streams: int, tag: int | None = None) -> Feed:
        """Row groups stream, stream + n_streams, ... of each of data_dir's files of this split (ids tagged with
        `tag`, the source's index, in a version 3 state)."""
        source = DocumentSource(data_dir, self.split, stream, n_streams, self.batch_size, streaming=self.streaming,
                                poll_interval=self.poll_interval, stop=self.stop, **self.files)
        return Feed(source, self.encode, bool(self.prefetch), tag)


# -- delivery: prefetch, staging, device ----------------------------------------------------------------------
def _deliver(produce, docs: _Documents, B: int, T: int, device: torch.device, return_doc_info: bool):
    """Each batch is a new buffer on the device, never written again by the loader, so a caller may keep it and a
    wrapper may read ahead (MpDeviceLoader) without a clone. CPU: the rows are copied once into a new [inputs |
    targets] tensor. XLA: a new host tensor goes to the runtime (PJRT may read it after the call returns, so it is
    never refilled), sent from the prefetch thread when there is one, so batch k+1 is on its way while step k
    runs. CUDA: a pinned staging buffer is reused, each fill waiting for the copy that read the last one, into a
    new device tensor."""
    use_cuda, on_xla = device.type == "cuda", device.type == "xla"
    staging = torch.empty((2, B, T), dtype=torch.long, pin_memory=True) if use_cuda else None
    copied = torch.cuda.Event() if use_cuda else None
    if on_xla:
        import torch_xla.core.xla_model as xm  # only here: the package imports without torch_xla

    def place(item):
        inputs_np, targets_np, state, *info = item
        if use_cuda:
            copied.synchronize()  # the previous async copy must have read staging before we overwrite it
        host = staging if use_cuda else torch.empty((2, B, T), dtype=torch.long)
        staged = host.numpy()
        staged[0], staged[1] = inputs_np, targets_np
        if device.type == "cpu":
            inputs, targets = host.unbind(0)
        elif on_xla:
            # two device buffers in one transfer: as views of one, inputs and targets would be slice ops in every
            # graph that reads them (and a compile of its own for a .cpu() of either)
            inputs, targets = xm.send_cpu_data_to_device(list(host.unbind(0)), device)
        elif use_cuda:
            on_device = torch.empty((2, B, T), dtype=torch.long, device=device)
            on_device.copy_(host, non_blocking=True)
            copied.record(torch.cuda.current_stream(device))  # the stream the copy went to: the target's, not cuda:0's
            inputs, targets = on_device.unbind(0)
        else:
            inputs, targets = host.to(device).unbind(0)
        extra = [{k: torch.from_numpy(v).to(device) for k, v in info[0].items()}] if info else []
        return inputs, targets, state, *extra

    def batches():
        items = produce()
        if return_doc_info:
            items = ((*item, doc_info(item[0], docs.bos)) for item in items)
        if on_xla:  # placed where they are made: in the prefetch thread, as MpDeviceLoader would
            items = map(place, items)
        if docs.prefetch:
            items = prefetched(items, docs.prefetch, docs.stop)
        try:
            for item in items:
                # CUDA's copy stays in the caller's thread: it is queued on the caller's current stream
                yield item if on_xla else place(item)
        except LoaderClosed:
            return
        finally:
            docs.stop.set()

    return Loader(batches(), docs.stop)


def _without_state(loader: Loader) -> Loader:
    def batches():
        with loader:
            for inputs, targets, _state, *extra in loader:
                yield inputs, targets, *extra

    return Loader(batches(), loader.stop)


# -- arguments ------------------------------------------------------------------------------------------------
def resolve_rank(rank: int | None, world_size: int | None, device: torch.device | None = None) -> tuple[int, int]:
    """Explicit arguments win; then, on an XLA device, the XLA runtime, as torch.distributed on GPU (under
    torch_xla.launch replicas may be threads of one process, sharing its environment, and torch.distributed is
    optional: only the runtime knows each one's ordinal); then torch.distributed if initialised, then
    RANK/WORLD_SIZE, then 0/1."""
    if rank is None or world_size is None:
        if device is not None and device.type == "xla":
            import torch_xla.runtime as xr  # only here: the package imports without torch_xla

            found = xr.global_ordinal(), xr.world_size()
        elif torch.distributed.is_available() and torch.distributed.is_initialized():
            found = torch.distributed.get_rank(), torch.distributed.get_world_size()
        else:
            found = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
        rank = found[0] if rank is None else rank
        world_size = found[1] if world_size is None else world_size
    if (not WORLD_SIZE.contains(world_size) or isinstance(rank, bool) or not isinstance(rank, int)
            or not 0 <= rank < world_size):
        raise NanodataError(f"rank must be in [0, world_size), world_size in [1, {WORLD_SIZE.hi}]; got rank={rank!r}, "
                            f"world_size={world_size!r}")
    return rank, world_size


def resolve_device(device) -> torch.device:
    """A string or torch.device: cpu, cuda[:n] or xla[:n] (torch_xla's device)."""
    device = device if isinstance(device, torch.device) else torch.device(device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise NanodataError(f"device {str(device)!r}: CUDA is not available here (pass device='cpu')")
    if device.type == "xla":
        try:
            import torch_xla
            import torch_xla.core.xla_model as xm
        except ImportError:
            raise NanodataError(f"device {str(device)!r} needs torch_xla, which is not installed "
                                f"(pip install torch_xla)") from None
        return torch_xla.device(device.index) if hasattr(torch_xla, "device") else xm.xla_device(device.index)
    return device
