"""Bad input: clear errors naming the file and row group, ValueError at call time for bad arguments."""

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from corpus import write_parquet

from nanodata.errors import NanodataError
from nanodata.loader import (
    tokenizing_distributed_data_loader,
    tokenizing_distributed_data_loader_bos_bestfit,
    tokenizing_distributed_data_loader_with_state_bos_bestfit,
)


def _loader(tokenizer, data_dir, B=2, T=16, **kwargs):
    kwargs = {"device": "cpu", "buffer_size": 4, "tokenizer_batch_size": 4, "data_dir": data_dir, **kwargs}
    return tokenizing_distributed_data_loader_bos_bestfit(tokenizer, B, T, "train", **kwargs)


def _two_files(data_dir, first_table):
    data_dir.mkdir(parents=True, exist_ok=True)
    pq.write_table(first_table, data_dir / "shard_00000.parquet", row_group_size=4)
    write_parquet(data_dir / "shard_00001.parquet", ["val doc"])
    return data_dir


def test_empty_texts_become_lone_bos_docs(tokenizer, tmp_path):
    data_dir = _two_files(tmp_path / "d", pa.table({"text": [""] * 12}))
    bos = tokenizer.get_bos_token_id()
    inputs, targets = next(_loader(tokenizer, data_dir, prefetch=0))
    assert (inputs == bos).all() and (targets == bos).all()


@pytest.mark.parametrize("prefetch", [0, 2])
def test_null_text_names_file_and_row_group(tokenizer, tmp_path, prefetch):
    data_dir = _two_files(tmp_path / "d", pa.table({"text": ["a", "b", "c", "d", "e", None, "g", "h"]}))
    with pytest.raises(NanodataError, match=r"shard_00000\.parquet row group 1 row 1: text is NoneType"):
        for _ in range(50):
            next(_loader(tokenizer, data_dir, prefetch=prefetch))


def test_non_string_text_names_file_and_row_group(tokenizer, tmp_path):
    data_dir = _two_files(tmp_path / "d", pa.table({"text": [1, 2, 3, 4, 5]}))
    with pytest.raises(NanodataError, match=r"shard_00000\.parquet row group 0 row 0: text is int"):
        next(_loader(tokenizer, data_dir, prefetch=0))


def test_missing_text_column_names_the_file(tokenizer, tmp_path):
    data_dir = _two_files(tmp_path / "d", pa.table({"content": ["a", "b"]}))
    with pytest.raises(NanodataError, match=r"shard_00000\.parquet: no 'text' column"):
        next(_loader(tokenizer, data_dir, prefetch=1))


def test_unreadable_file_is_named(tokenizer, tmp_path):
    data_dir = tmp_path / "d"
    data_dir.mkdir()
    (data_dir / "shard_00000.parquet").write_bytes(b"this is not parquet")
    write_parquet(data_dir / "shard_00001.parquet", ["val doc"])
    with pytest.raises(NanodataError, match=r"shard_00000\.parquet: not a readable parquet file"):
        next(_loader(tokenizer, data_dir, prefetch=0))


def test_docs_longer_than_a_row_are_cropped(tokenizer, tmp_path):
    long_text = " ".join(f"word{i}" for i in range(200))
    data_dir = _two_files(tmp_path / "d", pa.table({"text": [long_text] * 8}))
    expected = tokenizer.encode(long_text, prepend=tokenizer.get_bos_token_id())[:17]
    inputs, targets = next(_loader(tokenizer, data_dir, prefetch=0))
    assert inputs[0].tolist() == expected[:16] and targets[0].tolist() == expected[1:]


def test_a_rank_without_documents_errors_instead_of_hanging(tokenizer, tmp_path):
    data_dir = _two_files(tmp_path / "d", pa.table({"text": ["a", "b", "c"]}))  # a single row group
    with pytest.raises(NanodataError, match="rank 1 of 2 .* got no documents"):
        next(_loader(tokenizer, data_dir, rank=1, world_size=2, prefetch=0))


@pytest.mark.parametrize("kwargs,match", [
    ({"B": 0}, "B must be"), ({"T": 0}, "T must be"), ({"buffer_size": 0}, "buffer_size must be"),
    ({"rank": 2, "world_size": 2}, "rank must be"), ({"rank": 0, "world_size": 0}, "rank must be"),
    ({"tokenizer_batch_size": 0}, "tokenizer_batch_size"), ({"crop": "truncate"}, "crop must be"),
    ({"prefetch": -1}, "prefetch must be"), ({"split": "test"}, "split must be"),
])
def test_bad_arguments_raise_at_call_time(tokenizer, corpus_dir, kwargs, match):
    args = {"B": 2, "T": 16, "split": "train", "device": "cpu", "data_dir": corpus_dir, **kwargs}
    with pytest.raises(ValueError, match=match):
        tokenizing_distributed_data_loader_with_state_bos_bestfit(tokenizer, **args)  # no next(): at call time


def test_concatenation_loader_checks_arguments_at_call_time(tokenizer, corpus_dir):
    with pytest.raises(ValueError, match="T must be"):
        tokenizing_distributed_data_loader(tokenizer, 2, 0, "train", device="cpu", data_dir=corpus_dir)


def test_missing_data_dir_is_named(tokenizer, tmp_path):
    with pytest.raises(NanodataError, match="does not exist"):
        _loader(tokenizer, tmp_path / "nowhere")


@pytest.mark.parametrize("device,match", [("xla", "torch_xla"), ("cuda", "CUDA is not available")])
def test_unavailable_devices_are_explained(tokenizer, corpus_dir, device, match):
    with pytest.raises(NanodataError, match=match):
        _loader(tokenizer, corpus_dir, device=device)
