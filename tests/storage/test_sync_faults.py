"""Injected faults: the emulator process is stopped in the middle of a sync and started again."""

import threading
import time

import pytest
import requests

from nanodata import storage
from nanodata.emulator import GcsEmulator


@pytest.fixture
def own_emulator(tmp_path, monkeypatch):
    """A private emulator, so stopping it cannot disturb the session one other tests share."""
    with GcsEmulator(root=tmp_path / "gcs") as emulator:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", emulator.host)
        emulator.create_bucket("faults")
        yield emulator


def make_files(root, n, size):
    root.mkdir(parents=True, exist_ok=True)
    rng = __import__("random").Random(n)
    for i in range(n):
        (root / f"shard_{i:05d}.parquet").write_bytes(rng.randbytes(size))
    (root / "manifest.json").write_text("{}")
    (root / "_COMPLETE").write_bytes(b"")
    return sorted(storage.LocalSide(root).list())


def object_count(emulator, prefix):
    resp = requests.get(f"{emulator.host}/storage/v1/b/faults/o", params={"prefix": prefix}, timeout=5)
    return len(resp.json().get("items", []))


def stop_when(emulator, prefix, at_least):
    deadline = time.monotonic() + 30
    while object_count(emulator, prefix) < at_least and time.monotonic() < deadline:
        time.sleep(0.01)
    emulator.stop()


def test_upload_outage_then_rerun_completes_without_loss_or_duplicates(tmp_path, own_emulator):
    src = tmp_path / "src"
    names = make_files(src, 40, 200_000)
    uri = "gs://faults/c"
    result = {}
    t = threading.Thread(target=lambda: result.update(r=storage.sync(src, uri, workers=2, attempts=2, backoff=0.05)))
    t.start()
    stop_when(own_emulator, "c/", 5)
    t.join(timeout=60)
    first = result["r"]
    assert first["failed"] > 0 and not first["complete"]  # the sentinel is withheld after a failure

    own_emulator.start()
    remote = storage.GcsSide(uri).list()
    assert "_COMPLETE" not in remote and len(remote) < len(names)
    second = storage.sync(src, uri, workers=4)
    assert second["failed"] == 0 and second["complete"]
    assert second["uploaded"] + second["skipped"] == len(names)
    assert second["skipped"] >= first["uploaded"]  # nothing already there was sent twice
    remote = storage.GcsSide(uri).list()
    assert sorted(remote) == names  # nothing lost, nothing extra
    local = storage.LocalSide(src).list()
    assert all(remote[n] == local[n] for n in names)


def test_download_outage_then_rerun_leaves_verified_files_and_no_temps(tmp_path, own_emulator):
    src, dst = tmp_path / "src", tmp_path / "dst"
    names = make_files(src, 30, 300_000)
    storage.sync(src, "gs://faults/d", workers=4)
    result = {}
    t = threading.Thread(target=lambda: result.update(
        r=storage.sync("gs://faults/d", dst, workers=1, attempts=2, backoff=0.05)))
    t.start()
    deadline = time.monotonic() + 30
    while len(list(dst.glob("*.parquet"))) < 3 and time.monotonic() < deadline:
        time.sleep(0.005)
    own_emulator.stop()
    t.join(timeout=60)
    assert result["r"]["failed"] > 0 and not (dst / "_COMPLETE").exists()
    assert not list(dst.rglob("*.tmp"))

    own_emulator.start()
    second = storage.sync("gs://faults/d", dst, workers=4)
    assert second["failed"] == 0 and second["complete"]
    assert sorted(storage.list_names(dst)) == names
    for name in names:
        assert (dst / name).read_bytes() == (src / name).read_bytes()


def test_short_outage_is_bridged_by_retries(tmp_path, own_emulator):
    src = tmp_path / "src"
    names = make_files(src, 20, 100_000)
    own_emulator.stop()
    restart = threading.Timer(0.6, own_emulator.start)
    restart.start()
    got = storage.sync(src, "gs://faults/r", workers=4, attempts=8, backoff=0.1)
    restart.join()
    assert got["failed"] == 0 and got["uploaded"] == len(names) and got["complete"]
