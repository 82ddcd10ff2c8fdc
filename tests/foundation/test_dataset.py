"""nanodata.dataset: file listing, split rules, row-group striding and every bad-input path."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from corpus import make_docs, write_corpus, write_parquet

from nanodata.dataset import (
    files_for_split,
    list_parquet_files,
    open_parquet,
    parquets_iter_batched,
    read_texts,
    split_files,
)
from nanodata.errors import NanodataError


def test_list_parquet_files_sorted_and_ignores_partials(tmp_path):
    write_corpus(tmp_path, n_files=3, docs_per_file=5)
    (tmp_path / "shard_00003.parquet.tmp").write_bytes(b"partial")
    (tmp_path / "notes.txt").write_text("x")
    (tmp_path / "sub.parquet").mkdir()
    assert [p.name for p in list_parquet_files(tmp_path)] == [f"shard_{i:05d}.parquet" for i in range(3)]


def test_nanochat_convention_last_file_is_val(corpus_dir):
    train, val = split_files(corpus_dir)
    assert [p.name for p in train] == ["shard_00000.parquet", "shard_00001.parquet", "shard_00002.parquet"]
    assert [p.name for p in val] == ["shard_00003.parquet"]


def test_val_named_file_decides(tmp_path):
    write_corpus(tmp_path, n_files=3, docs_per_file=5)
    write_parquet(tmp_path / "val_shard.parquet", make_docs(5))
    train, val = split_files(tmp_path)
    assert [p.name for p in val] == ["val_shard.parquet"]
    assert len(train) == 3


def test_manifest_decides(tmp_path):
    write_corpus(tmp_path, n_files=3, docs_per_file=5)
    manifest = {"version": 1, "shards": [{"name": "shard_00002.parquet"}, {"name": "shard_00000.parquet"}],
                "val": {"name": "shard_00001.parquet"}}
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    assert [p.name for p in files_for_split("train", tmp_path)] == ["shard_00000.parquet", "shard_00002.parquet"]
    assert [p.name for p in files_for_split("val", tmp_path)] == ["shard_00001.parquet"]


def test_malformed_manifest_names_the_file(tmp_path):
    write_corpus(tmp_path, n_files=2, docs_per_file=5)
    (tmp_path / "manifest.json").write_text(json.dumps({"version": 1}))
    with pytest.raises(NanodataError, match="manifest.json: malformed"):
        split_files(tmp_path)
    (tmp_path / "manifest.json").write_text("{not json")
    with pytest.raises(NanodataError, match="manifest.json: invalid JSON"):
        split_files(tmp_path)


def test_iter_batched_yields_row_groups_in_order(corpus_dir):
    batches = list(parquets_iter_batched("train", data_dir=corpus_dir))
    expected = [t for i in range(3) for t in pq.read_table(corpus_dir / f"shard_{i:05d}.parquet")["text"].to_pylist()]
    assert [t for b in batches for t in b] == expected
    assert len(batches) == 3 * 5 and all(len(b) <= 64 for b in batches)  # 300 docs / 64 = 5 row groups


def test_start_step_partition_row_groups_across_ranks(corpus_dir):
    world = 3
    per_rank = [list(parquets_iter_batched("val", start=r, step=world, data_dir=corpus_dir)) for r in range(world)]
    all_groups = list(parquets_iter_batched("val", data_dir=corpus_dir))
    assert sum(len(g) for g in per_rank) == len(all_groups)
    for r, groups in enumerate(per_rank):
        assert groups == all_groups[r::world]


def test_single_file_train_split_is_a_clear_error(tmp_path):
    write_parquet(tmp_path / "shard_00000.parquet", make_docs(10))
    with pytest.raises(NanodataError, match="no train files .*1 parquet file"):
        list(parquets_iter_batched("train", data_dir=tmp_path))
    assert sum(len(b) for b in parquets_iter_batched("val", data_dir=tmp_path)) == 10


def test_empty_and_missing_dirs(tmp_path):
    with pytest.raises(NanodataError, match="no .parquet files"):
        list(parquets_iter_batched("train", data_dir=tmp_path))
    with pytest.raises(NanodataError, match="does not exist"):
        list(parquets_iter_batched("train", data_dir=tmp_path / "missing"))


def test_bad_split_name(corpus_dir):
    with pytest.raises(NanodataError, match="split must be"):
        files_for_split("test", corpus_dir)


def test_corrupt_parquet_error_names_the_file(corpus_dir):
    bad = corpus_dir / "shard_00001.parquet"
    bad.write_bytes(bad.read_bytes()[: bad.stat().st_size // 2])
    with pytest.raises(NanodataError, match=r"shard_00001\.parquet: not a readable parquet"):
        list(parquets_iter_batched("train", data_dir=corpus_dir))


def test_missing_text_column_and_null_text(tmp_path):
    pq.write_table(pa.table({"content": ["a", "b"]}), tmp_path / "a.parquet")
    with pytest.raises(NanodataError, match=r"a\.parquet: no 'text' column"):
        read_texts(open_parquet(tmp_path / "a.parquet"), tmp_path / "a.parquet", 0)
    pq.write_table(pa.table({"text": ["ok", None]}), tmp_path / "b.parquet")
    with pytest.raises(NanodataError, match=r"b\.parquet row group 0 row 1: text is NoneType"):
        read_texts(open_parquet(tmp_path / "b.parquet"), tmp_path / "b.parquet", 0)


def test_default_data_dir_env(monkeypatch, corpus_dir):
    monkeypatch.setenv("NANODATA_DATA_DIR", str(corpus_dir))
    assert len(list_parquet_files()) == 4
