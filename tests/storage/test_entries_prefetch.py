"""A run of entry lookups fetched ahead (EntryStore.get_many, over uri.in_order) answers exactly what one get after
another answers, hits, misses, corrupt and forged entries alike, in order, holding a bounded window; on gs:// (the
real emulator, behind a proxy adding latency to every request) as on disk. Cache entries are written without an
fsync each, still whole or not at all."""

import os
import threading
import time

import pytest

from nanodata.storage import files
from nanodata.storage.auth import load_secret
from nanodata.storage.entries import EntryStore
from nanodata.storage.files import atomic_output, content_hash
from nanodata.storage.uri import in_order, read_bytes, write_bytes
from nanodata.testing.latency import LatencyProxy

STATUSES = ["hit", "corrupt", "forged", "miss", "forged", "hit", "forged", "miss", *["hit"] * 6]


def _key(i: int) -> bytes:
    return content_hash(f"entry {i}".encode())


def _entry_path(store: EntryStore, key: bytes) -> str:
    return store._uri(key)


def _stock(store: EntryStore, overwrite) -> list[bytes | None]:
    """Keys of every kind an entry can be in: hits, misses, a truncated one, a bit flipped, one copied from another
    key, one written with another secret; and None (no lookup). overwrite(uri, data) replaces an entry's bytes."""
    for i in range(12):
        store.put(_key(i), f"payload {i} ".encode() * (i + 1))
    whole = {i: _read(store, _key(i)) for i in (2, 3, 4)}
    overwrite(_entry_path(store, _key(2)), whole[2][:-3])  # truncated
    overwrite(_entry_path(store, _key(3)), whole[3][:-1] + bytes([whole[3][-1] ^ 1]))  # edited: the MAC fails
    overwrite(_entry_path(store, _key(4)), _read(store, _key(5)))  # another key's entry
    EntryStore(store.root.rsplit("/v", 1)[0], "another secret, long enough").put(_key(6), b"made elsewhere")
    return [_key(0), None, _key(2), _key(3), _key(100), _key(4), _key(1), _key(6), None, _key(101),
            *(_key(i) for i in range(7, 12)), _key(0)]


def _read(store: EntryStore, key: bytes) -> bytes:
    return read_bytes(_entry_path(store, key))


def _local_overwrite(uri: str, data: bytes) -> None:
    with open(uri, "wb") as f:
        f.write(data)


def test_fetched_ahead_equals_one_get_after_another_on_disk(tmp_path):
    store = EntryStore(str(tmp_path), "the test's secret, long enough")
    keys = _stock(store, _local_overwrite)
    expected = [None if k is None else store.get(k) for k in keys]
    assert [status for _, status in filter(None, expected)] == STATUSES
    assert list(store.get_many(iter(keys), window=3)) == expected


def test_fetched_ahead_equals_one_get_after_another_in_a_bucket_far_away(gcs_emulator, gcs_bucket, monkeypatch):
    store = EntryStore(f"gs://{gcs_bucket}/cache", "the test's secret, long enough")
    keys = _stock(store, write_bytes)
    expected = [None if k is None else store.get(k) for k in keys]
    assert [status for _, status in filter(None, expected)] == STATUSES
    with LatencyProxy(gcs_emulator.port, 0.02) as proxy:  # the requests of a window overlap their round trips
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", proxy.host)
        for window in (1, 4, 64):
            assert list(store.get_many(iter(keys), window=window)) == expected


def test_in_order_holds_at_most_a_window_and_keeps_the_order():
    taken = 0
    running = peak = 0
    lock = threading.Lock()

    def items():
        nonlocal taken
        for i in range(200):
            taken += 1
            yield i

    def work(i: int) -> int:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
        time.sleep(0.002 * (i % 5))  # later items often finish first
        with lock:
            running -= 1
        return i * i

    results = in_order(work, items(), window=8)
    for n, value in enumerate(results):
        assert value == n * n
        assert taken <= n + 8  # never more than a window of items taken ahead of the consumer
    assert peak <= 8 and peak > 1


def test_in_order_raises_the_first_error_on_its_turn_and_stops_taking_items():
    taken = []

    def items():
        for i in range(1000):
            taken.append(i)
            yield i

    def work(i: int) -> int:
        if i == 5:
            raise ValueError("item 5")
        return i

    got = []
    with pytest.raises(ValueError, match="item 5"):
        for value in in_order(work, items(), window=4):
            got.append(value)
    assert got == [0, 1, 2, 3, 4] and len(taken) <= 5 + 4


def test_an_entry_is_written_whole_without_an_fsync(tmp_path, monkeypatch):
    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(files.os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd)))
    store = EntryStore(str(tmp_path), "the test's secret, long enough")
    for i in range(5):
        store.put(_key(i), b"x" * 1000 * i)
    assert synced == []
    assert [store.get(_key(i)) for i in range(5)] == [(b"x" * 1000 * i, "hit") for i in range(5)]
    assert not [p for p in tmp_path.rglob("*.tmp")]
    with atomic_output(tmp_path / "durable") as f:  # the default still syncs the file and its directory
        f.write(b"kept")
    assert len(synced) == 2


def test_an_entry_write_that_fails_leaves_nothing(tmp_path):
    target = tmp_path / "entry"
    with pytest.raises(RuntimeError), atomic_output(target, shared=True, durable=False) as f:
        f.write(b"half")
        raise RuntimeError("killed mid-write")
    assert list(tmp_path.iterdir()) == []


def test_another_secret_is_forged_through_get_many_too(tmp_path):
    EntryStore(str(tmp_path), "the first secret, long enough").put(_key(0), b"payload")
    other = EntryStore(str(tmp_path), load_secret("the second secret, long enough"))
    assert list(other.get_many([_key(0), None])) == [(None, "forged"), None]
