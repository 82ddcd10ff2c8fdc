"""Injected faults: the emulator process is stopped in the middle of a sync and started again; a proxy in front of
the emulator answers with 5xx, 429, 408 or a dropped connection, which the one retry policy must bridge or bound."""

import threading
import time

import pytest
import requests
from support.fault_server import FaultServer

from nanodata import corpus, storage
from nanodata.errors import NanodataError
from nanodata.pipeline.chunkbuild.sources import tree_files
from nanodata.storage.sides import GcsSide, LocalSide


@pytest.fixture
def own_emulator(own_gcs_emulator):
    """A private emulator (stopping it cannot disturb the session one other tests share) with bucket "faults"."""
    own_gcs_emulator.create_bucket("faults")
    return own_gcs_emulator


def make_files(root, n, size):
    root.mkdir(parents=True, exist_ok=True)
    rng = __import__("random").Random(n)
    for i in range(n):
        (root / f"shard_{i:05d}.parquet").write_bytes(rng.randbytes(size))
    (root / "manifest.json").write_text("{}")
    (root / "_COMPLETE").write_bytes(b"")
    return sorted(LocalSide(root).list())


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
    t = threading.Thread(target=lambda: result.update(r=corpus.sync(src, uri, workers=2, attempts=2, backoff=0.05)))
    t.start()
    stop_when(own_emulator, "c/", 5)
    t.join(timeout=60)
    first = result["r"]
    assert first["failed"] > 0 and not first["complete"]  # the sentinel is withheld after a failure

    own_emulator.start()
    remote = GcsSide(uri).list()
    assert "_COMPLETE" not in remote and len(remote) < len(names)
    second = corpus.sync(src, uri, workers=4)
    assert second["failed"] == 0 and second["complete"]
    assert second["uploaded"] + second["skipped"] == len(names)
    assert second["skipped"] >= first["uploaded"]  # nothing already there was sent twice
    remote = GcsSide(uri).list()
    assert sorted(remote) == names  # nothing lost, nothing extra
    local = LocalSide(src).list()
    assert all(remote[n] == local[n] for n in names)


def test_download_outage_then_rerun_leaves_verified_files_and_no_temps(tmp_path, own_emulator):
    src, dst = tmp_path / "src", tmp_path / "dst"
    names = make_files(src, 30, 300_000)
    corpus.sync(src, "gs://faults/d", workers=4)
    result = {}
    t = threading.Thread(target=lambda: result.update(
        r=corpus.sync("gs://faults/d", dst, workers=1, attempts=2, backoff=0.05)))
    t.start()
    deadline = time.monotonic() + 30
    while len(list(dst.glob("*.parquet"))) < 3 and time.monotonic() < deadline:
        time.sleep(0.005)
    own_emulator.stop()
    t.join(timeout=60)
    assert result["r"]["failed"] > 0 and not (dst / "_COMPLETE").exists()
    assert not list(dst.rglob("*.tmp"))

    own_emulator.start()
    second = corpus.sync("gs://faults/d", dst, workers=4)
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
    got = corpus.sync(src, "gs://faults/r", workers=4, attempts=8, backoff=0.1)
    restart.join()
    assert got["failed"] == 0 and got["uploaded"] == len(names) and got["complete"]


# ---------------------------------------------------------------- the one retry policy, through a faulty proxy

@pytest.fixture
def proxy(gcs_emulator, monkeypatch):
    """A proxy in front of the session emulator that answers the next requests with `next_faults`."""
    with FaultServer(upstream=gcs_emulator.host) as server:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", server.url)
        yield server


def retry_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "; retry " in r.getMessage()]


def test_streamed_listing_pages_are_retried(gcs_bucket, proxy, caplog):
    """A tree listing's pages are requested while it is iterated: those requests retry too."""
    for name in ("p/a.cpp", "p/sub/b.h", "p/notes.txt"):
        storage.write_bytes(f"gs://{gcs_bucket}/{name}", b"int x;\n")
    proxy.requests.clear()
    proxy.next_faults = ["503", "drop"]
    assert list(tree_files(f"gs://{gcs_bucket}/p", (".cpp", ".h"))) == [("a.cpp", 7), ("sub/b.h", 7)]
    assert len(proxy.requests) == 3
    lines = retry_lines(caplog)
    assert [line.split("; ")[-1] for line in lines] == ["retry 1/4 in up to 0.50s", "retry 2/4 in up to 1.00s"]
    assert lines[0].startswith(f"list gs://{gcs_bucket}/p: ServiceUnavailable")
    assert lines[1].startswith(f"list gs://{gcs_bucket}/p: ConnectionError")


def test_sync_retries_429_408_5xx_and_drops_and_logs_each(tmp_path, gcs_bucket, proxy, caplog):
    src = tmp_path / "src"
    names = make_files(src, 4, 20_000)
    proxy.next_faults = ["503", "429", "drop", "408", "500"]
    got = corpus.sync(src, f"gs://{gcs_bucket}/c", workers=1, attempts=6, backoff=0.01)
    assert got["failed"] == 0 and got["complete"] and got["uploaded"] == len(names)
    lines = retry_lines(caplog)
    assert len(lines) == 5 and all(" in up to " in line for line in lines)
    assert [line.split(": ")[1] for line in lines] == ["ServiceUnavailable", "TooManyRequests", "ConnectionError",
                                                       "GoogleAPICallError", "InternalServerError"]
    remote, local = GcsSide(f"gs://{gcs_bucket}/c").list(), LocalSide(src).list()
    assert remote == local


def test_attempts_and_deadline_bound_the_retries(tmp_path, gcs_bucket, proxy):
    src = tmp_path / "src"
    make_files(src, 2, 1000)
    proxy.next_faults = ["503"] * 1000
    with pytest.raises(NanodataError, match=rf"gs://{gcs_bucket}/c: cannot list the objects: ServiceUnavailable"):
        corpus.sync(src, f"gs://{gcs_bucket}/c", attempts=3, backoff=0.01)
    assert len(proxy.requests) == 3
    proxy.requests.clear()
    started = time.monotonic()
    with pytest.raises(NanodataError, match="cannot list the objects: RetryError: Timeout of 0.5s exceeded"):
        corpus.sync(src, f"gs://{gcs_bucket}/c", attempts=1000, backoff=0.05, deadline=0.5)
    assert time.monotonic() - started < 2.5 and 2 <= len(proxy.requests) < 30
