"""nanodata.corpus.sync against a real gcp-storage-emulator process (HTTP on a loopback port)."""

import os
import threading
import time

import pytest
from google.cloud import storage as gcs

from nanodata import corpus, storage
from nanodata.cli import main as cli_main
from nanodata.errors import NanodataError
from nanodata.storage import retry as transfer
from nanodata.storage.files import file_digest
from nanodata.storage.gcs import RESUMABLE_THRESHOLD
from nanodata.storage.sides import LocalSide, safe_relative_name


def make_source(root, n=12, size=3000, seed=0, manifest=True, complete=True):
    """A corpus-like dir: shards, manifest naming them, _COMPLETE, plus work files sync must ignore."""
    root.mkdir(parents=True, exist_ok=True)
    rng = __import__("random").Random(seed)
    names = [f"shard_{i:05d}.parquet" for i in range(n)]
    for name in names:
        (root / name).write_bytes(rng.randbytes(size + rng.randint(0, size)))
    (root / "sub").mkdir(exist_ok=True)
    (root / "sub" / "extra.bin").write_bytes(b"nested")
    (root / "_progress.json").write_text("{}")
    (root / "shard_99999.parquet.tmp").write_bytes(b"partial")
    if manifest:
        import json
        (root / "manifest.json").write_text(json.dumps({"version": 1, "shards": [{"name": n} for n in names]}))
    if complete:
        (root / "_COMPLETE").write_bytes(b"")
    return names


def expected_names(root):
    return sorted(LocalSide(root).list())


def blobs(bucket, prefix):
    client = gcs.Client()
    return {b.name[len(prefix) + 1:]: b for b in client.list_blobs(bucket, prefix=prefix + "/")}


def test_upload_then_second_run_sends_nothing(tmp_path, gcs_bucket):
    src = tmp_path / "src"
    make_source(src)
    first = corpus.sync(src, f"gs://{gcs_bucket}/corpus", workers=4)
    names = expected_names(src)
    assert "_progress.json" not in names and not any(n.endswith(".tmp") for n in names)
    assert first["uploaded"] == len(names) == 15 and first["failed"] == 0 and first["complete"]
    assert first["bytes"] == sum((src / n).stat().st_size for n in names)
    remote = blobs(gcs_bucket, "corpus")
    assert sorted(remote) == names
    for name, blob in remote.items():  # the server's checksum of what it stored
        assert blob.crc32c == file_digest(src / name, "crc32c") and blob.size == (src / name).stat().st_size

    second = corpus.sync(src, f"gs://{gcs_bucket}/corpus", workers=4)
    assert (second["uploaded"], second["bytes"], second["skipped"], second["failed"]) == (0, 0, len(names), 0)

    (src / "shard_00003.parquet").write_bytes(b"changed contents")  # a changed file is sent again
    third = corpus.sync(src, f"gs://{gcs_bucket}/corpus", workers=4)
    assert (third["uploaded"], third["skipped"]) == (1, len(names) - 1)
    assert blobs(gcs_bucket, "corpus")["shard_00003.parquet"].download_as_bytes() == b"changed contents"


def test_cli_prints_summary_line(tmp_path, gcs_bucket, capsys):
    src = tmp_path / "src"
    make_source(src, n=3)
    assert cli_main(["sync", str(src), f"gs://{gcs_bucket}/c", "--workers", "2"]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("uploaded 6 files (")
    assert cli_main(["sync", str(src), f"gs://{gcs_bucket}/c"]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == "uploaded 0 files (0 bytes), skipped 6, failed 0"
    assert cli_main(["sync", str(tmp_path / "missing"), f"gs://{gcs_bucket}/c"]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_download_verified_and_idempotent(tmp_path, gcs_bucket):
    src, dst = tmp_path / "src", tmp_path / "dst"
    make_source(src)
    corpus.sync(src, f"gs://{gcs_bucket}/corpus")
    got = corpus.sync(f"gs://{gcs_bucket}/corpus", dst)
    names = expected_names(src)
    assert got["uploaded"] == len(names) and got["failed"] == 0
    assert expected_names(dst) == names
    assert sorted(storage.list_names(dst)) == names  # no .tmp left behind
    for name in names:
        assert (dst / name).read_bytes() == (src / name).read_bytes()
    assert corpus.sync(f"gs://{gcs_bucket}/corpus", dst)["skipped"] == len(names)

    # same size, different bytes: the crc32c tells them apart and the file is fetched again
    damaged = dst / "shard_00001.parquet"
    damaged.write_bytes(bytes(len(damaged.read_bytes())))
    again = corpus.sync(f"gs://{gcs_bucket}/corpus", dst)
    assert again["uploaded"] == 1 and damaged.read_bytes() == (src / "shard_00001.parquet").read_bytes()


def test_large_file_uses_resumable_upload_and_round_trips(tmp_path, gcs_bucket):
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir()
    big = os.urandom(RESUMABLE_THRESHOLD + 300_000)
    (src / "big.parquet").write_bytes(big)
    assert corpus.sync(src, f"gs://{gcs_bucket}/big")["uploaded"] == 1
    assert corpus.sync(f"gs://{gcs_bucket}/big", dst)["uploaded"] == 1
    assert (dst / "big.parquet").read_bytes() == big


def test_sentinel_is_written_last(tmp_path, gcs_bucket):
    src = tmp_path / "src"
    make_source(src, n=20)
    corpus.sync(src, f"gs://{gcs_bucket}/c", workers=8)
    remote = blobs(gcs_bucket, "c")
    data = [b for n, b in remote.items() if n not in ("manifest.json", "_COMPLETE")]
    assert max(b.generation for b in data) < remote["manifest.json"].generation < remote["_COMPLETE"].generation


def test_sentinel_withheld_when_manifest_names_a_missing_file(tmp_path, gcs_bucket, capsys):
    src = tmp_path / "src"
    make_source(src, n=4)
    (src / "shard_00002.parquet").unlink()  # the manifest still names it
    assert cli_main(["sync", str(src), f"gs://{gcs_bucket}/c"]) == 1
    remote = blobs(gcs_bucket, "c")
    assert "manifest.json" in remote and "shard_00003.parquet" in remote
    assert "_COMPLETE" not in remote
    assert capsys.readouterr().out.strip().endswith("failed 1")


def test_traversal_names_refused(tmp_path, gcs_bucket):
    client = gcs.Client()
    bucket = client.bucket(gcs_bucket)
    bucket.blob("c/ok.parquet").upload_from_string(b"fine")
    bucket.blob("c//etc/evil").upload_from_string(b"absolute after the prefix")
    dst = tmp_path / "dst"
    with pytest.raises(NanodataError, match="would escape the destination"):
        corpus.sync(f"gs://{gcs_bucket}/c", dst)
    assert not dst.exists() or storage.list_names(dst) == []  # refused before anything was written
    for bad in ("../x", "a/../../x", "/etc/passwd", "a//b", "", "a\\..\\b"):
        with pytest.raises(NanodataError):
            safe_relative_name(bad, "gs://b/p")
    assert safe_relative_name("sub/shard_00000.parquet", "gs://b/p") == "sub/shard_00000.parquet"


def test_delete_only_when_asked(tmp_path, gcs_bucket):
    src, dst = tmp_path / "src", tmp_path / "dst"
    make_source(src, n=3)
    corpus.sync(src, f"gs://{gcs_bucket}/c")
    dst.mkdir()
    (dst / "local_only.parquet").write_bytes(b"mine")
    corpus.sync(f"gs://{gcs_bucket}/c", dst)
    assert (dst / "local_only.parquet").exists()
    got = corpus.sync(f"gs://{gcs_bucket}/c", dst, delete=True)
    assert got["deleted"] == 1 and not (dst / "local_only.parquet").exists()
    assert expected_names(dst) == expected_names(src)

    (src / "shard_00000.parquet").unlink()  # upload side: --delete removes the remote copy too
    got = corpus.sync(src, f"gs://{gcs_bucket}/c", delete=True)
    assert got["deleted"] == 1 and "shard_00000.parquet" not in blobs(gcs_bucket, "c")


def test_watch_pipeline_writer_upload_download(tmp_path, gcs_bucket):
    """A writer adds shards over time; a watching upload and a watching download run meanwhile."""
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir()
    uri = f"gs://{gcs_bucket}/live"

    def writer():
        for i in range(8):
            tmp = src / f"shard_{i:05d}.parquet.tmp"
            tmp.write_bytes(os.urandom(2000 + i))
            os.replace(tmp, src / f"shard_{i:05d}.parquet")
            time.sleep(0.15)
        (src / "manifest.json").write_text('{"shards": []}')
        (src / "shard_00008.parquet").write_bytes(b"landed right before the sentinel, written in place")
        (src / "_COMPLETE").write_bytes(b"")

    results = {}
    threads = [threading.Thread(target=writer),
               threading.Thread(target=lambda: results.update(up=corpus.sync(src, uri, watch=True,
                                                                              poll_interval=0.1)))]
    for t in threads:
        t.start()
    down = corpus.sync(uri, dst, watch=True, poll_interval=0.1)
    for t in threads:
        t.join(timeout=60)
    names = expected_names(src)
    assert len(names) == 11
    up = results["up"]
    assert up["complete"] and up["passes"] > 1 and up["failed"] == 0 and up["uploaded"] + up["skipped"] == 11
    assert down["complete"] and down["failed"] == 0 and down["passes"] > 1
    assert expected_names(dst) == names
    for name in names:
        assert (dst / name).read_bytes() == (src / name).read_bytes()


def test_small_object_helpers(tmp_path, gcs_bucket):
    for base in (str(tmp_path / "local"), f"gs://{gcs_bucket}/objs"):
        assert storage.read_bytes(f"{base}/a.json") is None and not storage.exists(f"{base}/a.json")
        storage.write_bytes(f"{base}/a.json", b'{"x": 1}')
        storage.write_bytes(f"{base}/sub/b.txt", b"b")
        assert storage.read_bytes(f"{base}/a.json") == b'{"x": 1}' and storage.exists(f"{base}/a.json")
        assert storage.list_names(base) == ["a.json", "sub/b.txt"]
    assert storage.list_names(tmp_path / "nowhere") == []


def test_missing_bucket_and_two_remote_sides(tmp_path, gcs_emulator):
    (tmp_path / "f").write_bytes(b"x")
    with pytest.raises(NanodataError, match="does not exist"):
        corpus.sync(tmp_path, "gs://no-such-bucket-here/p")
    with pytest.raises(NanodataError, match="must be a local directory"):
        corpus.sync("gs://bucket-a/p", "gs://bucket-b/q")


def test_transient_errors_are_the_retryable_ones():
    import requests
    from google.api_core import exceptions as api

    def http_error(status):
        response = requests.Response()
        response.status_code = status
        return requests.HTTPError(f"{status}", response=response)

    for exc in (api.TooManyRequests("slow down"), api.ServiceUnavailable("503"), api.InternalServerError("500"),
                requests.ConnectionError("reset"), requests.ReadTimeout("slow"), TimeoutError(),
                transfer.CorruptTransfer("crc"), http_error(500), http_error(503), http_error(429), http_error(408)):
        assert transfer.is_transient(exc), exc
    for exc in (api.NotFound("404"), api.Forbidden("403"), ValueError("bug"), http_error(404), http_error(403),
                OSError(28, "No space left on device"), NanodataError("disk full")):
        assert not transfer.is_transient(exc), exc


def test_to_parquet_output_round_trips_through_the_bucket(tmp_path, gcs_bucket):
    """JSONL → to-parquet → sync up → sync down → the shared reader sees every train doc."""
    import json

    from corpus import make_docs

    from nanodata import dataset
    from nanodata.pipeline.to_parquet import jsonl_to_parquet

    docs = [d for d in make_docs(400, seed=4) if d.strip()]
    src = tmp_path / "docs.jsonl"
    src.write_text("".join(json.dumps({"text": d}) + "\n" for d in docs))
    built = tmp_path / "built"
    manifest = jsonl_to_parquet([src], built, rows_per_file=100, row_group_size=16, val_fraction=0.1)
    up = corpus.sync(built, f"gs://{gcs_bucket}/corpus")
    assert up["complete"] and "_progress.json" not in blobs(gcs_bucket, "corpus")
    local = tmp_path / "trainer"
    assert corpus.sync(f"gs://{gcs_bucket}/corpus", local)["complete"]
    assert dataset.read_manifest(local).to_json() == manifest
    train = [t for batch in dataset.parquets_iter_batched("train", data_dir=local) for t in batch]
    val = [t for batch in dataset.parquets_iter_batched("val", data_dir=local) for t in batch]
    assert sorted(train + val) == sorted(docs) and len(val) == manifest["val"]["rows"]


def test_local_to_local_sync(tmp_path):
    src, dst = tmp_path / "src", tmp_path / "dst"
    make_source(src, n=5)
    first = corpus.sync(src, dst, workers=2)
    assert first["complete"] and expected_names(dst) == expected_names(src)
    assert corpus.sync(src, dst)["skipped"] == first["uploaded"]
