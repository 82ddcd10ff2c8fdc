"""The public loaders: parquet documents -> tokens -> rows -> one staging buffer -> the device.

    DocumentSource ─ slices of texts + ids ─► tokenizer ─► BestFitPacker (or a flat token stream)
        ─► (B, T+1) rows ─► [optional prefetch thread] ─► staging [inputs | targets] ─► one copy to device

Everything before the staging buffer is plain numpy and runs in the prefetch thread when prefetch > 0, so
tokenization overlaps the training step. The state yielded with batch k is the producer's exact position
after batch k: the source cursor plus the buffered docs named by (file slot, row group, row[, offset]), with
what the batches depend on (settings, tokenizer, file fingerprints: see state.py). Resuming from it checks
those, re-reads and re-tokenizes the buffered docs and continues bit-identically.

Yielded tensors are reused buffers, overwritten when the next batch is requested: clone them to keep them.
"""

from __future__ import annotations

import os
import queue
import threading
from collections import deque

import numpy as np
import torch

from nanodata.errors import NanodataError
from nanodata.loader.packing import CROP_POLICIES, BestFitPacker
from nanodata.loader.source import DocumentSource, LoaderClosed
from nanodata.loader.state import STATE_VERSION, check_state, tokenizer_identity

READ_AHEAD = 2  # tokenized slices kept ready when prefetching


def tokenizing_distributed_data_loader_with_state_bos_bestfit(
        tokenizer, B, T, split, tokenizer_threads=4, tokenizer_batch_size=128, device="cuda",
        resume_state_dict=None, buffer_size=1000, *, data_dir=None, rank=None, world_size=None, crop="discard",
        streaming=False, prefetch=2, poll_interval=30.0, return_doc_info=False):
    """BOS-aligned best-fit packing, nanochat-exact by default. Yields (inputs, targets, state_dict), plus a
    doc_info dict {"cu_seqlens", "position_ids"} when return_doc_info=True. inputs and targets are views of one
    reused buffer, overwritten by the next batch. Bad arguments raise ValueError here, before the first batch."""
    _check_positive(B=B, T=T, buffer_size=buffer_size)
    if crop not in CROP_POLICIES:
        raise ValueError(f"crop must be one of {CROP_POLICIES}, not {crop!r}")
    settings = {"loader": "bestfit", "B": B, "T": T, "buffer_size": buffer_size, "crop": crop,
                "tokenizer_batch_size": tokenizer_batch_size}
    docs = _Documents(tokenizer, split, data_dir, rank, world_size, tokenizer_threads, tokenizer_batch_size,
                      streaming, poll_interval, prefetch, settings)
    restored = docs.resume(resume_state_dict)
    return _deliver(lambda: _bestfit_batches(docs, B, T, buffer_size, crop, restored),
                    docs, B, T, device, return_doc_info)


def tokenizing_distributed_data_loader_bos_bestfit(*args, **kwargs):
    """As the _with_state variant, without the state: yields (inputs, targets[, doc_info])."""
    return _without_state(tokenizing_distributed_data_loader_with_state_bos_bestfit(*args, **kwargs))


def tokenizing_distributed_data_loader_with_state(
        tokenizer, B, T, split, tokenizer_threads=4, tokenizer_batch_size=128, device="cuda",
        resume_state_dict=None, *, data_dir=None, rank=None, world_size=None, streaming=False, prefetch=2,
        poll_interval=30.0, return_doc_info=False):
    """The published fallback for scarce data or very long docs: BOS-prefixed docs concatenated into one stream,
    cut into windows of B*T+1 tokens; a window's last token is the next window's first input. Nothing is
    cropped; rows may start mid-document. Yields (inputs, targets, state_dict[, doc_info])."""
    _check_positive(B=B, T=T)
    docs = _Documents(tokenizer, split, data_dir, rank, world_size, tokenizer_threads, tokenizer_batch_size,
                      streaming, poll_interval, prefetch, {"loader": "concat", "B": B, "T": T})
    restored = docs.resume(resume_state_dict)
    return _deliver(lambda: _concat_batches(docs, B, T, restored), docs, B, T, device, return_doc_info)


def tokenizing_distributed_data_loader(*args, **kwargs):
    """As tokenizing_distributed_data_loader_with_state, without the state: yields (inputs, targets[, doc_info])."""
    return _without_state(tokenizing_distributed_data_loader_with_state(*args, **kwargs))


# -- producers: plain numpy, exact state ---------------------------------------------------------------------
def _bestfit_batches(docs, B, T, buffer_size, crop, restored):
    packer = BestFitPacker(T + 1, buffer_size, docs.bos, crop)
    for tokens, doc_id, offset in restored:
        packer.add([docs.bos, *tokens[offset:]] if offset else tokens, doc_id, offset)

    def refill():
        for tokens, doc_id in docs.next_slice():
            packer.add(tokens, doc_id)
        return True

    while True:
        rows = np.empty((B, T + 1), dtype=np.int64)
        for row in rows:
            packer.fill_row(row, refill)
        yield rows[:, :-1], rows[:, 1:], docs.state_dict(packer.buffered_ids())


def _concat_batches(docs, B, T, restored):
    need = B * T + 1
    pending = deque((tokens, doc_id) for tokens, doc_id, _ in restored)
    head = restored[0][2] if restored else 0  # tokens of pending[0] used up
    have = sum(len(tokens) for tokens, _ in pending) - head
    while True:
        while have < need:
            for tokens, doc_id in docs.next_slice():
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
        yield window[:-1].reshape(B, T), window[1:].reshape(B, T), docs.state_dict(ids)


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


# -- documents, tokenized, with resume ------------------------------------------------------------------------
class _Documents:
    """The source plus the duck-typed tokenizer (get_bos_token_id(); encode(list, prepend=, num_threads=)), and
    the settings a state records: the loader's own (kind first) and the documents'."""

    def __init__(self, tokenizer, split, data_dir, rank, world_size, threads, batch_size, streaming,
                 poll_interval, prefetch, loader_settings: dict):
        if split not in ("train", "val"):
            raise ValueError(f"split must be 'train' or 'val', not {split!r}")
        _check_positive(tokenizer_threads=threads, tokenizer_batch_size=batch_size)
        if not isinstance(prefetch, int) or prefetch < 0:
            raise ValueError(f"prefetch must be an integer >= 0, not {prefetch!r}")
        if poll_interval <= 0:
            raise ValueError(f"poll_interval must be > 0 seconds, not {poll_interval!r}")
        self.rank, self.world_size = resolve_rank(rank, world_size)
        self.tokenizer, self.threads, self.prefetch = tokenizer, threads, prefetch
        self.bos = tokenizer.get_bos_token_id()
        self.source = DocumentSource(data_dir, split, self.rank, self.world_size, batch_size,
                                     streaming=streaming, poll_interval=poll_interval)
        self.settings = {**loader_settings, "split": split, "streaming": streaming, "rank": self.rank,
                         "world_size": self.world_size, "tokenizer": tokenizer_identity(tokenizer)}
        self._slices = None  # started on first use, after any resume has positioned the source
        self._position = None  # the source's state right after the last slice handed out

    def next_slice(self) -> list[tuple[list[int], tuple]]:
        if self._slices is None:
            slices = self._read_and_tokenize()
            # with prefetch, the next slices are read and tokenized while this thread packs
            self._slices = _prefetched(slices, READ_AHEAD, self.source.stop) if self.prefetch else slices
        token_lists, ids, self._position = next(self._slices)
        return list(zip(token_lists, ids))

    def _read_and_tokenize(self):
        while True:
            texts, ids = self.source.next_slice()
            yield self._tokenize(texts), ids, self.source.state_dict()

    def tokenize_ids(self, ids) -> list[list[int]]:
        return self._tokenize(self.source.read_docs(ids)) if ids else []

    def _tokenize(self, texts) -> list[list[int]]:
        return self.tokenizer.encode(texts, prepend=self.bos, num_threads=self.threads)

    def state_dict(self, buffered_ids: list[tuple]) -> dict:
        """JSON-serialisable (ids are tuples, which json writes as lists); about 16 bytes per buffered doc."""
        position = self._position if self._slices is not None else self.source.state_dict()
        slots = {doc_id[0] for doc_id in buffered_ids}
        if position["cursor_file"] is not None:
            slots.add(self.source.slot(position["cursor_file"]))
        return {"version": STATE_VERSION, **self.settings, **position, "files": self.source.file_records(slots),
                "buffer": buffered_ids}

    def resume(self, state) -> list[tuple[list[int], tuple, int]]:
        """Check a state and position the source from it; returns the buffered docs to rebuild, as
        (tokens, id, offset): a best-fit requeued tail is BOS + tokens[offset:]; concatenation has used up the
        first doc's tokens[:offset]."""
        if state is None:
            return []
        if check_state(state, self.settings):
            self.source.seek_nanochat(state)
            return []
        slots = self.source.load_state_dict(state)
        ids = [(slots[saved[0]], *saved[1:3]) for saved in state["buffer"]]
        offsets = [saved[3] if len(saved) > 3 else 0 for saved in state["buffer"]]
        restored = list(zip(self.tokenize_ids(ids), ids, offsets))
        for i, (tokens, _, offset) in enumerate(restored):
            if offset >= len(tokens):
                raise ValueError(f"resume_state_dict: buffer[{i}][3] must be below the document's {len(tokens)} "
                                 f"tokens, not {offset}")
        return restored


# -- delivery: prefetch, staging, device ----------------------------------------------------------------------
def _deliver(produce, docs: _Documents, B: int, T: int, device, return_doc_info: bool):
    device = resolve_device(device)
    use_cuda = device.type == "cuda"
    staging = torch.empty(2 * B * T, dtype=torch.long, pin_memory=use_cuda)  # [inputs | targets]
    on_device = staging if device.type == "cpu" else torch.empty(2 * B * T, dtype=torch.long, device=device)
    staged = staging.numpy().reshape(2, B, T)
    inputs, targets = on_device.view(2, B, T).unbind(0)
    copied = torch.cuda.Event() if use_cuda else None

    def batches():
        items = produce()
        if return_doc_info:
            items = ((*item, doc_info(item[0], docs.bos)) for item in items)
        if docs.prefetch:
            items = _prefetched(items, docs.prefetch, docs.source.stop)
        try:
            for inputs_np, targets_np, state, *info in items:
                if copied is not None:
                    copied.synchronize()  # the previous async copy must have read staging before we overwrite it
                staged[0], staged[1] = inputs_np, targets_np
                if on_device is not staging:
                    on_device.copy_(staging, non_blocking=use_cuda)
                    if copied is not None:
                        copied.record()
                extra = [{k: torch.from_numpy(v).to(device) for k, v in info[0].items()}] if info else []
                yield inputs, targets, state, *extra
        except LoaderClosed:
            return
        finally:
            docs.source.stop.set()

    return batches()


class _Failure:
    def __init__(self, exc: BaseException):
        self.exc = exc


def _prefetched(items, depth: int, stop: threading.Event):
    """The same items, produced by a daemon thread that keeps up to `depth` of them ready."""
    ready: queue.Queue = queue.Queue(maxsize=depth)

    def put(item) -> bool:
        while not stop.is_set():
            try:
                ready.put(item, timeout=0.1)
                return True
            except queue.Full:
                pass
        return False

    def work():
        try:
            for item in items:
                if not put(item):
                    return
        except LoaderClosed:
            return
        except BaseException as exc:  # re-raised in the consumer, where the trainer can see it
            put(_Failure(exc))

    threading.Thread(target=work, name="nanodata-loader-prefetch", daemon=True).start()
    while True:
        try:
            item = ready.get(timeout=0.1)
        except queue.Empty:
            if stop.is_set():
                raise LoaderClosed() from None
            continue
        if isinstance(item, _Failure):
            raise item.exc
        yield item


def _without_state(loader):
    for inputs, targets, _state, *extra in loader:
        yield inputs, targets, *extra


# -- arguments ------------------------------------------------------------------------------------------------
def _check_positive(**values) -> None:
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1, not {value!r}")


def resolve_rank(rank: int | None, world_size: int | None) -> tuple[int, int]:
    """Explicit arguments win, then torch.distributed if initialised, then RANK/WORLD_SIZE, then 0/1."""
    if rank is None or world_size is None:
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            found = torch.distributed.get_rank(), torch.distributed.get_world_size()
        else:
            found = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
        rank = found[0] if rank is None else rank
        world_size = found[1] if world_size is None else world_size
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"rank must be in [0, world_size); got rank={rank}, world_size={world_size}")
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
