"""Ranks read disjoint documents that together cover the split; rank/world_size resolution order."""

import pyarrow.parquet as pq
import pytest

from nanodata.loader import tokenizing_distributed_data_loader_bos_bestfit
from nanodata.loader.loader import resolve_rank
from nanodata.loader.source import DocumentSource


def _one_epoch_ids(data_dir, rank, world_size):
    source = DocumentSource(data_dir, "train", rank, world_size, slice_size=16)
    ids = []
    while True:
        _, slice_ids = source.next_slice()
        if source.last_read[2] > 1:
            return [(source.name_of(slot), rg, row) for slot, rg, row in ids]
        ids += slice_ids


@pytest.mark.parametrize("world_size", [1, 2, 3, 5])
def test_ranks_partition_every_epoch(corpus_dir, world_size):
    per_rank = [_one_epoch_ids(corpus_dir, rank, world_size) for rank in range(world_size)]
    everything = [doc for ids in per_rank for doc in ids]
    assert len(everything) == len(set(everything)), "a document was read by two ranks"
    expected = set()
    for path in sorted(corpus_dir.glob("*.parquet"))[:-1]:
        metadata = pq.ParquetFile(path).metadata
        for rg in range(metadata.num_row_groups):
            expected |= {(path.name, rg, row) for row in range(metadata.row_group(rg).num_rows)}
    assert set(everything) == expected
    for rank, ids in enumerate(per_rank):
        assert all(rg % world_size == rank for _, rg, _ in ids)


class RecordingTokenizer:
    """Duck-typed tokenizer (only get_bos_token_id and encode) that remembers the texts it encoded."""

    def __init__(self, inner):
        self.inner, self.texts = inner, []

    def get_bos_token_id(self):
        return self.inner.get_bos_token_id()

    def encode(self, texts, prepend=None, num_threads=4):
        self.texts += texts
        return self.inner.encode(texts, prepend=prepend, num_threads=num_threads)


def test_loader_ranks_see_disjoint_documents(tokenizer, corpus_dir):
    seen = []
    for rank in range(2):
        recording = RecordingTokenizer(tokenizer)
        loader = tokenizing_distributed_data_loader_bos_bestfit(recording, 2, 32, "train", device="cpu",
                                                                buffer_size=100, data_dir=corpus_dir, rank=rank,
                                                                world_size=2, prefetch=0)
        for _ in range(20):
            next(loader)
        seen.append({text for text in recording.texts if text})  # empty texts repeat across files
    assert seen[0] and seen[1] and not seen[0] & seen[1]


def test_rank_resolution(monkeypatch):
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("WORLD_SIZE", "4")
    assert resolve_rank(None, None) == (2, 4)
    assert resolve_rank(1, None) == (1, 4)
    assert resolve_rank(0, 2) == (0, 2)
    monkeypatch.delenv("RANK")
    monkeypatch.delenv("WORLD_SIZE")
    assert resolve_rank(None, None) == (0, 1)
    with pytest.raises(ValueError, match="rank"):
        resolve_rank(4, 4)
