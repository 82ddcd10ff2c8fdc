"""nanodata to-parquet: every doc lands in exactly one file, shuffled, deterministic, with a true manifest."""

import collections
import hashlib
import json
import math

import pyarrow.parquet as pq
import pytest
from jsonl_corpus import file_bytes, make_records, read_rows, write_jsonl

from nanodata import dataset
from nanodata.cli import main as cli_main
from nanodata.errors import NanodataError
from nanodata.pipeline.to_parquet import jsonl_to_parquet
from nanodata.storage.files import file_digest


@pytest.fixture
def records():
    return make_records(1500, seed=1)


@pytest.fixture
def jsonl(tmp_path, records):
    return write_jsonl(tmp_path / "docs.jsonl", records)


def convert(jsonl, out, **kw):
    kw = {"rows_per_file": 400, "row_group_size": 64, "val_fraction": 0.1, **kw}
    return jsonl_to_parquet([jsonl], out, **kw)


def test_every_doc_in_exactly_one_file_with_its_metadata(tmp_path, jsonl, records):
    out = tmp_path / "out"
    manifest = convert(jsonl, out)
    rows = read_rows(out, manifest)
    got = collections.Counter(json.dumps(r, sort_keys=True) for rs in rows.values() for r in rs)
    assert got == collections.Counter(json.dumps(r, sort_keys=True) for r in records)
    assert manifest["total_rows"] == len(records) == sum(len(rs) for rs in rows.values())
    assert pq.read_schema(out / "shard_00000.parquet").names == ["text", "n_tokens", "mode", "source", "lines", "kind"]
    assert 100 < manifest["val"]["rows"] < 210  # ~10% of 1500
    assert [s["rows"] for s in manifest["shards"]][:-1] == [400] * (len(manifest["shards"]) - 1)


def test_manifest_matches_files_and_contract(tmp_path, jsonl):
    out = tmp_path / "out"
    manifest = convert(jsonl, out)
    assert json.loads((out / "manifest.json").read_text()) == manifest
    assert (out / "_COMPLETE").is_file()
    assert (out / "_COMPLETE").stat().st_mtime_ns >= (out / "manifest.json").stat().st_mtime_ns
    assert set(manifest) == {"version", "shards", "val", "bad_lines", "total_rows", "created_by"}
    assert manifest["version"] == 1 and manifest["created_by"].startswith("nanodata ")
    rows = read_rows(out, manifest)
    for entry in manifest["shards"] + [manifest["val"]]:
        path = out / entry["name"]
        assert entry["rows"] == pq.ParquetFile(path).metadata.num_rows == len(rows[entry["name"]])
        assert entry["bytes"] == path.stat().st_size
        assert entry["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
        assert entry["crc32c"] == file_digest(path, "crc32c")
    for entry in manifest["shards"]:
        assert entry["tokens"] == sum(r["n_tokens"] for r in rows[entry["name"]])
    assert set(manifest["val"]) == {"name", "rows", "bytes", "sha256", "crc32c"}
    assert not list(out.glob("*.tmp")) and not (out / "_val_rows.jsonl").exists()
    # the shared reader takes train/val from the manifest
    train, val = dataset.split_files(out)
    assert [p.name for p in train] == [s["name"] for s in manifest["shards"]]
    assert [p.name for p in val] == ["val_shard.parquet"]


def test_row_groups_and_seeded_shuffle(tmp_path, jsonl, records):
    out = tmp_path / "out"
    manifest = convert(jsonl, out, rows_per_file=300, row_group_size=64)
    md = pq.ParquetFile(out / "shard_00000.parquet").metadata
    assert md.num_row_groups == math.ceil(300 / 64)
    assert [md.row_group(i).num_rows for i in range(md.num_row_groups)] == [64, 64, 64, 64, 44]
    shard0 = [r["text"] for r in read_rows(out, manifest)["shard_00000.parquet"]]
    in_order = [r["text"] for r in records if r["text"] in set(shard0)]
    assert sorted(shard0) == sorted(in_order) and shard0 != in_order  # same docs, shuffled

    again = convert(jsonl, tmp_path / "again", rows_per_file=300, row_group_size=64)
    assert again == manifest and file_bytes(tmp_path / "again") == file_bytes(out)
    other_seed = convert(jsonl, tmp_path / "seed7", rows_per_file=300, row_group_size=64, seed=7)
    assert other_seed["shards"][0]["sha256"] != manifest["shards"][0]["sha256"]
    assert other_seed["val"]["sha256"] != manifest["val"]["sha256"]  # val: a seeded function of the text


def test_row_groups_close_at_a_byte_cap(tmp_path, records):
    big = [{**r, "text": r["text"] * 200} for r in records[:200]]  # docs of several KB
    out = tmp_path / "out"
    convert(write_jsonl(tmp_path / "big.jsonl", big), out, rows_per_file=1000, row_group_size=1024,
            row_group_bytes=64 << 10, shard_bytes=1 << 20)
    shards = sorted(out.glob("shard_*.parquet"))
    assert len(shards) >= 2  # closed at the byte cap, not at 1000 rows
    for shard in shards:
        md = pq.ParquetFile(shard).metadata
        assert md.num_row_groups >= 2 and max(md.row_group(i).num_rows for i in range(md.num_row_groups)) < 200


def test_val_is_stable_under_rows_per_file_and_row_order(tmp_path, records):
    a = convert(write_jsonl(tmp_path / "a.jsonl", records), tmp_path / "a", rows_per_file=97)
    b = convert(write_jsonl(tmp_path / "b.jsonl", records), tmp_path / "b", rows_per_file=1000)
    val_a = [r["text"] for r in read_rows(tmp_path / "a", a)["val_shard.parquet"]]
    val_b = [r["text"] for r in read_rows(tmp_path / "b", b)["val_shard.parquet"]]
    assert val_a == val_b and len(val_a) > 100
    assert len(a["shards"]) == math.ceil((len(records) - len(val_a)) / 97) and len(b["shards"]) == 2
    # a different split of the same docs into two inputs, in another order: same val set
    half = len(records) // 2
    c = jsonl_to_parquet([write_jsonl(tmp_path / "c2.jsonl", records[half:]),
                          write_jsonl(tmp_path / "c1.jsonl", records[:half])], tmp_path / "c", val_fraction=0.1)
    val_c = [r["text"] for r in read_rows(tmp_path / "c", c)["val_shard.parquet"]]
    assert sorted(val_c) == sorted(val_a)


def test_multiple_inputs_and_cli(tmp_path, records, capsys):
    inputs = [write_jsonl(tmp_path / f"part{i}.jsonl", records[i * 500:(i + 1) * 500]) for i in range(3)]
    out = tmp_path / "out"
    code = cli_main(["to-parquet", "--input", *map(str, inputs), "--out", str(out), "--rows-per-file", "700",
                     "--row-group-size", "100", "--val-fraction", "0.05", "--compression", "snappy"])
    assert code == 0
    assert "1500 rows, 0 bad line(s)" in capsys.readouterr().out
    manifest = dataset.read_manifest(out).to_json()
    texts = [r["text"] for rs in read_rows(out, manifest).values() for r in rs]
    assert sorted(texts) == sorted(r["text"] for r in records)
    assert pq.ParquetFile(out / "shard_00000.parquet").metadata.row_group(0).column(0).compression == "SNAPPY"


def test_rerun_of_a_complete_dir_changes_nothing(tmp_path, jsonl):
    out = tmp_path / "out"
    manifest = convert(jsonl, out)
    before = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    assert convert(jsonl, out) == manifest
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == before


def test_changed_parameters_refused_on_resume(tmp_path, jsonl):
    out = tmp_path / "out"
    convert(jsonl, out)
    with pytest.raises(NanodataError, match="--rows-per-file 400, not 500"):
        convert(jsonl, out, rows_per_file=500)


@pytest.mark.parametrize("kw, flag", [({"rows_per_file": 0}, "--rows-per-file"),
                                      ({"row_group_size": 0}, "--row-group-size"),
                                      ({"val_fraction": 1.0}, "--val-fraction"),
                                      ({"compression": "xz"}, "--compression"),
                                      ({"on_error": "ignore"}, "--on-error")])
def test_bad_parameters(tmp_path, jsonl, kw, flag):
    with pytest.raises(NanodataError, match=flag):
        convert(jsonl, tmp_path / "out", **kw)


def test_missing_input_is_a_one_line_error(tmp_path, capsys):
    assert cli_main(["to-parquet", "--input", str(tmp_path / "nope.jsonl"), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert "nope.jsonl: input file does not exist" in err and "\n" not in err


def test_no_val_when_fraction_is_zero(tmp_path, jsonl):
    manifest = convert(jsonl, tmp_path / "out", val_fraction=0.0)
    assert manifest["val"] is None and not (tmp_path / "out" / "val_shard.parquet").exists()
    assert manifest["total_rows"] == 1500


def test_refuses_a_dir_with_shards_it_did_not_write(tmp_path, jsonl):
    out = tmp_path / "out"
    out.mkdir()
    (out / "shard_00000.parquet").write_bytes(b"someone else's")
    with pytest.raises(NanodataError, match="no _progress.json"):
        convert(jsonl, out)


def test_lost_complete_marker_is_restored_without_rework(tmp_path, jsonl):
    out = tmp_path / "out"
    manifest = convert(jsonl, out)
    (out / "_COMPLETE").unlink()
    shard_mtime = (out / "shard_00000.parquet").stat().st_mtime_ns
    assert convert(jsonl, out) == manifest and (out / "_COMPLETE").is_file()
    assert (out / "shard_00000.parquet").stat().st_mtime_ns == shard_mtime


def cli_error(capsys, *argv) -> str:
    """Run `nanodata to-parquet`; it must fail with exit 2 and one line on stderr, which is returned."""
    assert cli_main(["to-parquet", *map(str, argv)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("argv, expected", [
    (["--out", "{file}"], "--out {file}: {file} is a file, not a directory"),
    (["--out", "{file}/sub"], "--out {file}/sub: {file} is a file, not a directory"),
    (["--input", "{dir}"], "--input {dir}: is a directory"),
    (["--input", "{dir}", "--follow"], "--input {dir}: is a directory"),
    (["--seed", "-1"], "argument --seed: -1 is out of range: must be a whole number >= 0"),
    (["--idle-timeout", "nan"], "argument --idle-timeout: nan is out of range: must be a finite number >= 0"),
])
def test_bad_arguments_are_one_line_errors_before_any_work(tmp_path, jsonl, capsys, argv, expected):
    (tmp_path / "a_file").write_text("not a dir")
    (tmp_path / "a_dir").mkdir()
    names = {"file": tmp_path / "a_file", "dir": tmp_path / "a_dir"}
    args = {"--input": str(jsonl), "--out": str(tmp_path / "out")}
    for flag, value in zip(argv[::2], argv[1::2], strict=False):
        args[flag] = value.format(**names)
    argv = [a for flag, value in args.items() for a in (flag, value)] + [a for a in argv if a == "--follow"]
    assert expected.format(**names) in cli_error(capsys, *argv)
    assert not (tmp_path / "out").exists() and (tmp_path / "a_file").read_text() == "not a dir"


@pytest.mark.parametrize("content, n_bad", [(b"", 0),
                                            (b"{oops\n\n" + '{"text": "caf\u00e9"}'.encode("latin-1") + b'\n{"text": ""}', 4)])
def test_a_corpus_without_a_good_doc_is_an_error_not_complete(tmp_path, capsys, content, n_bad):
    src = tmp_path / "nothing.jsonl"
    src.write_bytes(content)
    out = tmp_path / "out"
    for _ in range(2):  # a re-run resumes and fails the same way
        err = cli_error(capsys, "--input", src, "--out", out)
        assert f"--input {src}: no good doc, {n_bad} bad line(s)" in err
        assert not (out / "_COMPLETE").exists() and not (out / "manifest.json").exists()
        assert not list(out.glob("*.parquet"))
    if content:
        assert "(1 empty_text, 2 invalid_json, 1 not_utf8)" in err
