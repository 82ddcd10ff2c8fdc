"""to-parquet's output bytes are pinned: digests of the files the converter writes for one fixed JSONL and several
shard shapes. A faster converter must write them again. (Pinned when the `lines` column came: the files held, with
that column dropped, the very rows, row groups and files the converter wrote before it, each checked table by
table; the converter before that, which parsed each line twice, wrote the same files less the column.)"""

import hashlib
import json

import pyarrow
import pytest
from jsonl_corpus import make_records

from nanodata.pipeline.to_parquet import jsonl_to_parquet

# Parquet files name the writer (parquet-cpp-arrow version N), so these bytes hold for the locked pyarrow only.
GOLDEN_PYARROW = "26.0.1"

CASES = {  # rows_per_file, row_group_size, compression, val_fraction, row_group_bytes, shard_bytes → digest
    (50_000, 1024, "zstd", 0.01, 4 << 20, 512 << 20):
        "673e8e71c118de0bb3d51da300031cecc5d8435814fc465a5c90d5b48548d69b",
    (97, 16, "snappy", 0.1, 4 << 20, 512 << 20):
        "0fa7628b20cae57dec82c43fb3ea31669e4d4ba6c2716b25abdf66997f1693a8",
    (40, 7, "none", 0.2, 20_000, 60_000):  # row groups and shards closed by bytes, one doc above both
        "0e32a0fc22981879a7635d9d939c3566a5216e96b2061c8ae452292d39cfd141",
    (5, 2, "zstd", 0.0, 4 << 20, 512 << 20):  # no val
        "de5965448f7d5c04e5b4dbd04b3100572c561a28797dbd6cf54f15a9bd3500ed",
    (250, 64, "gzip", 0.05, 100_000, 512 << 20):
        "34d0045451ad18a4a449c6c553f7d8bfaaae640eacd519760c83ad5c42e90500",
}


def golden_lines(seed: int, bad: bool) -> list[bytes]:
    """Chunker-like docs with what a parser can get wrong: escapes, non-ASCII text, absent, null and extra
    fields, a number too long for Python's int(), equal texts (equal sort keys), a doc larger than a row
    group's byte bound; with `bad`, bad lines in between (so the block is parsed line by line) and a byte
    order mark first."""
    records = make_records(300, seed=seed)
    for i, r in enumerate(records):
        if i % 7 == 0:
            r["text"] += ' "quoted" \\ back\tslash é ü 中文 😀 \u2028'
        if i % 11 == 0:
            del r["n_tokens"]
        if i % 13 == 0:
            r["mode"] = None
        if i % 17 == 0:
            del r["source"]
        if i % 19 == 0:
            r["extra"] = {"nested": [1, 2.5, None], "flag": True}
        if i % 23 == 0:
            r["text"] = records[i - 1]["text"] if i else r["text"]
    records[150]["text"] = "int main() { return 0; }\n" * 12_000  # ~300 KB
    lines = [json.dumps(r, ensure_ascii=i % 2 == 0).encode() for i, r in enumerate(records)]
    lines[9] = lines[9][:-1] + b', "big": ' + b"9" * 5000 + b"}"
    if bad:
        for at, line in ((5, b"{not json"), (50, b'{"text": ""}'), (200, b'{"text": "ok", "n_tokens": -3}'),
                         (250, b"\xff bad utf-8"), (280, b"")):
            lines.insert(at, line)
        lines[0] = b"\xef\xbb\xbf" + lines[0]
    return lines


def write_inputs(tmp_path) -> list:
    """A clean input (Arrow's reader takes its block whole), then one with bad lines and no newline last."""
    clean, mixed = tmp_path / "clean.jsonl", tmp_path / "mixed.jsonl"
    clean.write_bytes(b"".join(line + b"\n" for line in golden_lines(31, bad=False)))
    mixed.write_bytes(b"\n".join(golden_lines(32, bad=True)))
    return [clean, mixed]


def output_digest(out, inputs_dir) -> str:
    """sha256 over every parquet file's name and bytes and the manifest, less its version line and the
    temporary directory its bad lines are named in."""
    h = hashlib.sha256()
    for path in sorted(out.glob("*.parquet")):
        h.update(path.name.encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest())
    manifest = json.loads((out / "manifest.json").read_text())
    del manifest["created_by"]
    h.update(json.dumps(manifest, sort_keys=True).replace(f"{inputs_dir}/", "").encode())
    return h.hexdigest()


@pytest.mark.skipif(pyarrow.__version__ != GOLDEN_PYARROW, reason=f"golden bytes are pyarrow {GOLDEN_PYARROW}'s")
@pytest.mark.parametrize("case", list(CASES))
def test_output_bytes_are_the_pinned_ones(tmp_path, case):
    rows_per_file, row_group_size, compression, val_fraction, row_group_bytes, shard_bytes = case
    jsonl_to_parquet(write_inputs(tmp_path), tmp_path / "out", rows_per_file=rows_per_file, row_group_size=row_group_size,
                     compression=compression, val_fraction=val_fraction, row_group_bytes=row_group_bytes,
                     shard_bytes=shard_bytes)
    assert output_digest(tmp_path / "out", tmp_path) == CASES[case]
