"""nanodata.pipeline.pretokenize: exact shard sizes, doc stream order, dtype, determinism, atomic output, errors."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from corpus import make_docs, write_corpus, write_parquet

from nanodata.dataset import parquets_iter_batched
from nanodata.errors import NanodataError
from nanodata.lite import DataLoaderLite
from nanodata.pipeline.pretokenize import pretokenize, shard_dtype
from nanodata.pipeline.tokenizer_train import train_tokenizer
from nanodata.storage.files import file_digest
from nanodata.tokenizer import load

NANODATA = str(Path(sys.executable).with_name("nanodata"))


def reference_stream(data_dir, tok):
    """The expected token stream, built independently: val docs then train docs, each [BOS] + tokens."""
    docs = [d for split in ("val", "train") for batch in parquets_iter_batched(split, data_dir=data_dir) for d in batch]
    stream = [t for d in docs for t in [tok.get_bos_token_id(), *tok.encode(d)]]
    return np.array(stream, dtype=np.int64), len(docs)


def read_shards(out_dir, meta):
    return [np.load(out_dir / s["name"]) for s in meta["shards"]]


def test_exact_shards_val_first_cl100k_is_uint32(corpus_dir, tmp_path, tokenizer):
    meta = pretokenize(corpus_dir, "cl100k_base", tmp_path / "out", shard_tokens=9_000, workers=2, progress=False)
    expected, n_docs = reference_stream(corpus_dir, tokenizer)
    shards = read_shards(tmp_path / "out", meta)
    assert meta["dtype"] == "uint32" and all(s.dtype == np.uint32 for s in shards)
    assert [len(s) for s in shards[:-1]] == [9_000] * (len(shards) - 1) and 0 < len(shards[-1]) <= 9_000
    np.testing.assert_array_equal(np.concatenate(shards).astype(np.int64), expected)
    assert expected.max() > 65535  # ids beyond uint16 survived: nothing wrapped
    names = [s["name"] for s in meta["shards"]]
    assert names[0] == "tokens_val_000000.npy"
    assert names[1:] == [f"tokens_train_{i:06d}.npy" for i in range(1, len(names))]
    assert meta["docs"] == n_docs == 1200 and meta["tokens"] == len(expected)
    assert meta["val_tokens"] + meta["train_tokens"] == meta["tokens"]
    described = {split: [(f.name, f.stat().st_size) for f in files]
                 for split, files in (("val", [corpus_dir / "shard_00003.parquet"]),
                                      ("train", [corpus_dir / f"shard_{i:05d}.parquet" for i in range(3)]))}
    assert {split: [(f["name"], f["bytes"]) for f in files] for split, files in meta["inputs"].items()} == described
    assert meta["tokenizer_identity"] == tokenizer.identity and meta["shard_tokens"] == 9_000
    for shard in meta["shards"]:  # what a loader checks the directory against
        path = tmp_path / "out" / shard["name"]
        assert shard["bytes"] == path.stat().st_size and shard["sha256"] == file_digest(path)
    assert json.loads((tmp_path / "out" / "meta.json").read_text()) == meta
    # docs straddle shard boundaries: some shard after the first does not start with BOS
    assert any(s[0] != tokenizer.get_bos_token_id() for s in shards[1:])


def test_small_vocab_is_uint16(corpus_dir, tmp_path):
    tok_dir = train_tokenizer(corpus_dir, 400, tmp_path / "bpe")
    meta = pretokenize(corpus_dir, str(tok_dir), tmp_path / "out", shard_tokens=50_000, workers=2, progress=False)
    shards = read_shards(tmp_path / "out", meta)
    assert meta["dtype"] == "uint16" and meta["n_vocab"] == 400 and all(s.dtype == np.uint16 for s in shards)
    expected, _ = reference_stream(corpus_dir, load(str(tok_dir)))
    np.testing.assert_array_equal(np.concatenate(shards).astype(np.int64), expected)
    assert meta["bos_token_id"] == 391 and shards[0][0] == 391


def test_dtype_boundary():
    assert shard_dtype(65536) == np.uint16  # largest id 65535 still fits
    assert shard_dtype(65537) == np.uint32


def test_output_identical_for_any_worker_count(corpus_dir, tmp_path):
    outs = []
    for workers in (1, 2, 3):
        out = tmp_path / f"w{workers}"
        pretokenize(corpus_dir, "cl100k_base", out, shard_tokens=7_777, workers=workers, progress=False)
        outs.append({p.name: p.read_bytes() for p in sorted(out.iterdir())})
    assert outs[0] == outs[1] == outs[2]
    assert "meta.json" in outs[0] and len(outs[0]) > 5


def test_rerun_replaces_old_shards_and_leaves_no_partials(corpus_dir, tmp_path):
    out = tmp_path / "out"
    first = pretokenize(corpus_dir, "cl100k_base", out, shard_tokens=5_000, workers=2, progress=False)
    second = pretokenize(corpus_dir, "cl100k_base", out, shard_tokens=50_000, workers=2, progress=False)
    assert len(first["shards"]) > len(second["shards"])
    on_disk = sorted(p.name for p in out.iterdir())
    assert on_disk == sorted([s["name"] for s in second["shards"]] + ["meta.json"])


def test_single_file_goes_to_val_then_train(tmp_path, tokenizer):
    docs = make_docs(200, seed=3) + ["special text is ordinary text: <|endoftext|> <|bos|> <|fim_prefix|>"]
    write_parquet(tmp_path / "in" / "data.parquet", docs, row_group_size=16)
    meta = pretokenize(tmp_path / "in", "cl100k_base", tmp_path / "out", shard_tokens=4_000, workers=2,
                       progress=False)
    expected = [t for d in docs for t in [tokenizer.get_bos_token_id(), *tokenizer.encode(d)]]
    np.testing.assert_array_equal(np.concatenate(read_shards(tmp_path / "out", meta)), expected)


def test_all_in_one_partial_val_shard(corpus_dir, tmp_path):
    meta = pretokenize(corpus_dir, "cl100k_base", tmp_path / "out", shard_tokens=10**7, workers=1, progress=False)
    assert [s["name"] for s in meta["shards"]] == ["tokens_val_000000.npy"] and meta["train_tokens"] == 0


def test_val_file_tokens_gives_an_exact_split(corpus_dir, tmp_path, tokenizer):
    probe = pretokenize(corpus_dir, "cl100k_base", tmp_path / "probe", shard_tokens=10**7, workers=2, progress=False)
    meta = pretokenize(corpus_dir, "cl100k_base", tmp_path / "out", shard_tokens=probe["val_file_tokens"],
                       workers=2, progress=False)
    val_docs = [d for batch in parquets_iter_batched("val", data_dir=corpus_dir) for d in batch]
    expected = [t for d in val_docs for t in [tokenizer.get_bos_token_id(), *tokenizer.encode(d)]]
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "tokens_val_000000.npy"), expected)
    assert np.load(tmp_path / "out" / "tokens_train_000001.npy")[0] == tokenizer.get_bos_token_id()
    assert meta["val_tokens"] == meta["val_file_tokens"]


def test_no_documents_is_an_error(tmp_path):
    write_parquet(tmp_path / "in" / "a.parquet", [])
    with pytest.raises(NanodataError, match="hold no documents"):
        pretokenize(tmp_path / "in", "cl100k_base", tmp_path / "out", progress=False)


def test_prefix(corpus_dir, tmp_path):
    meta = pretokenize(corpus_dir, "cl100k_base", tmp_path / "out", shard_tokens=50_000, workers=1,
                       prefix="edufineweb", progress=False)
    assert meta["shards"][1]["name"] == "edufineweb_train_000001.npy"
    with pytest.raises(NanodataError, match="--prefix"):
        pretokenize(corpus_dir, "cl100k_base", tmp_path / "out", prefix="../evil", progress=False)


def test_errors_name_file_or_parameter(tmp_path, corpus_dir):
    (tmp_path / "empty").mkdir()
    with pytest.raises(NanodataError, match="empty: no .parquet files"):
        pretokenize(tmp_path / "empty", "cl100k_base", tmp_path / "out", progress=False)
    with pytest.raises(NanodataError, match="does not exist"):
        pretokenize(tmp_path / "missing", "cl100k_base", tmp_path / "out", progress=False)
    with pytest.raises(NanodataError, match="--shard-tokens"):
        pretokenize(corpus_dir, "cl100k_base", tmp_path / "out", shard_tokens=0, progress=False)
    with pytest.raises(NanodataError, match="--workers"):
        pretokenize(corpus_dir, "cl100k_base", tmp_path / "out", workers=0, progress=False)
    bad = corpus_dir / "shard_00002.parquet"
    bad.write_bytes(b"PAR1" + b"\0" * 100)
    with pytest.raises(NanodataError, match=r"shard_00002\.parquet: not a readable parquet"):
        pretokenize(corpus_dir, "cl100k_base", tmp_path / "out", progress=False)
    assert not (tmp_path / "out").exists()  # checked before anything is written


def test_bad_row_in_worker_is_reported_with_its_file(tmp_path):
    write_corpus(tmp_path / "in", n_files=2, docs_per_file=100)
    pretokenize(tmp_path / "in", "cl100k_base", tmp_path / "out", shard_tokens=500, workers=2, progress=False)
    import pyarrow as pa
    import pyarrow.parquet as pq
    pq.write_table(pa.table({"text": ["fine"] * 70 + [None]}), tmp_path / "in" / "shard_00000.parquet",
                   row_group_size=64)
    with pytest.raises(NanodataError, match=r"shard_00000\.parquet row group 1 row 6"):
        pretokenize(tmp_path / "in", "cl100k_base", tmp_path / "out", shard_tokens=100, workers=2, progress=False)
    assert not (tmp_path / "out" / "meta.json").exists()
    assert not list((tmp_path / "out").glob("*.tmp"))
    # the failed run's shards and the earlier run's set are never served as one
    with pytest.raises(NanodataError, match="out: no meta.json.*re-run 'nanodata pretokenize'"):
        DataLoaderLite(1, 8, 0, 1, "val", tmp_path / "out")


def test_rerun_with_another_prefix_leaves_only_its_own_shards(corpus_dir, tmp_path):
    out = tmp_path / "out"
    pretokenize(corpus_dir, "cl100k_base", out, shard_tokens=5_000, workers=1, prefix="old", progress=False)
    (out / "old_train_000007.npy.tmp").write_bytes(b"a killed run's partial shard")
    meta = pretokenize(corpus_dir, "cl100k_base", out, shard_tokens=40_000, workers=1, prefix="new", progress=False)
    assert sorted(p.name for p in out.iterdir()) == sorted([s["name"] for s in meta["shards"]] + ["meta.json"])
    loader = DataLoaderLite(2, 64, 0, 1, "train", out)
    assert [p.name for p in loader.shards] == [s["name"] for s in meta["shards"][1:]]


def one_line_error(*args) -> str:
    proc = subprocess.run([NANODATA, *map(str, args)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    return proc.stderr


def test_every_argument_is_checked_before_any_work(corpus_dir, tmp_path):
    taken = tmp_path / "taken"
    taken.write_text("a file the user keeps")
    assert f"--out {taken}: exists and is not a directory" in one_line_error(
        "pretokenize", "--input", corpus_dir, "--out", taken)
    assert taken.read_text() == "a file the user keeps"
    out = tmp_path / "out"
    with pytest.raises(NanodataError, match=f"--out {taken / 'sub'}: {taken} is not a directory"):
        pretokenize(corpus_dir, "cl100k_base", taken / "sub", progress=False)
    with pytest.raises(NanodataError, match=r"--workers must be a whole number >= 1 and <= \d+ \(4 processes per CPU.*, not 100000"):
        pretokenize(corpus_dir, "cl100k_base", out, workers=100_000, progress=False)
    with pytest.raises(NanodataError, match="--shard-tokens 100000000000: one shard buffer is .* GiB of uint32, "
                                            "more than this machine's"):
        pretokenize(corpus_dir, "cl100k_base", out, shard_tokens=10**11, progress=False)
    with pytest.raises(NanodataError, match="tokenizer 'no_such_encoding'"):
        pretokenize(corpus_dir, "no_such_encoding", out, progress=False)
    assert not out.exists()


def test_work_in_flight_is_bounded(tmp_path):
    """Constant memory: the parent never has more than workers*WINDOW_PER_WORKER row groups pending."""
    from nanodata.pipeline.pretokenize import WINDOW_PER_WORKER, tokenize_in_order

    path = write_parquet(tmp_path / "a.parquet", make_docs(400, seed=5), row_group_size=4)
    consumed = []

    def tasks():
        for rg in range(100):
            consumed.append(rg)
            yield str(path), rg

    seen = 0
    with tokenize_in_order(2, ("cl100k_base", "<u4")) as tokenized:
        for tokens, docs in tokenized(tasks()):
            seen += 1
            assert docs == 4 and len(tokens) >= 4
            assert len(consumed) - seen <= 2 * WINDOW_PER_WORKER
    assert seen == len(consumed) == 100
