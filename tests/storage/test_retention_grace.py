"""Retention never sweeps an entry younger than its grace period: runs sharing a store each retain at their end, and
one still going has written entries (and temp files) it has not recorded yet. The age is the listing's: a local
file's mtime, an object's `updated` time."""

import os
import time

import pytest

from nanodata.errors import NanodataError
from nanodata.storage.entries import EntryStore
from nanodata.storage.files import content_hash
from nanodata.storage.uri import iter_sizes, iter_stats

DAY = 86_400


def _key(i: int) -> bytes:
    return content_hash(str(i).encode())


def _age(root, seconds: float) -> None:
    """Every file of a local store made `seconds` older than now."""
    for directory, _, files in os.walk(root):
        for name in files:
            os.utime(os.path.join(directory, name), (time.time() - seconds,) * 2)


def test_young_unrecorded_entries_and_temp_files_survive_until_past_the_grace(tmp_path):
    store = EntryStore(str(tmp_path))
    for i in range(4):
        store.put(_key(i), b"x" * (10 + i))
    store.record_use("1", _key(0))  # a finished run: it used entry 0; 1-3 are another run's, still going
    temp = next(tmp_path.glob("v*")) / "entries" / "ff" / "writing.tmp"  # that run's entry being written
    temp.parent.mkdir(parents=True, exist_ok=True)
    temp.write_bytes(b"half")
    kept = store.retain(1)  # the default grace: nothing of the run still going is touched
    assert kept["entries_deleted"] == 0 and kept["entries"] == 5 and temp.exists()
    assert [store.get(_key(i))[1] for i in range(4)] == ["hit"] * 4
    _age(tmp_path, 2 * 3600)
    assert store.retain(1, grace_hours=3)["entries_deleted"] == 0  # 2 hours old, 3 of grace
    swept = store.retain(1, grace_hours=1)  # past it: nothing names them, so they go
    assert swept["entries_deleted"] == 4 and swept["entries"] == 1 and not temp.exists()
    assert [store.get(_key(i))[1] for i in range(4)] == ["hit", "miss", "miss", "miss"]


def test_an_old_entry_that_a_new_one_joined_goes_alone(tmp_path):
    store = EntryStore(str(tmp_path))
    store.put(_key(0), b"old")
    _age(tmp_path, 2 * DAY)
    store.put(_key(1), b"new")
    store.record_use("1", b"")
    result = store.retain(1)  # default grace: 24 hours
    assert result["entries_deleted"] == 1 and result["entries"] == 1
    assert store.get(_key(0))[1] == "miss" and store.get(_key(1))[1] == "hit"


@pytest.mark.parametrize("grace", [-1, float("nan"), float("inf"), "1"])
def test_a_bad_grace_is_one_line(tmp_path, grace):
    with pytest.raises(NanodataError, match="^grace_hours must be a finite number >= 0"):
        EntryStore(str(tmp_path)).retain(1, grace_hours=grace)


def test_the_listing_gives_each_file_its_change_time(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "b").write_bytes(b"12345")
    (tmp_path / "c").write_bytes(b"1")
    os.utime(tmp_path / "c", (1_000_000_000, 1_000_000_000))
    stats = {name: (size, modified) for name, size, modified in iter_stats(tmp_path)}
    assert stats["c"] == (1, 1_000_000_000)
    assert stats["a/b"][0] == 5 and abs(stats["a/b"][1] - time.time()) < 60
    assert sorted(iter_sizes(tmp_path)) == [("a/b", 5), ("c", 1)]


def test_in_a_bucket_the_age_is_the_objects_updated_time(gcs_bucket):
    root = f"gs://{gcs_bucket}/cache"
    store = EntryStore(root)
    store.put(_key(1), b"used")
    store.put(_key(2), b"another run's")
    modified = [m for _, _, m in iter_stats(root)]
    assert len(modified) == 2 and all(abs(m - time.time()) < 300 for m in modified)
    store.record_use("1", _key(1))
    assert store.retain(1)["entries_deleted"] == 0 and store.size()["entries"] == 2
    assert store.retain(1, grace_hours=0)["entries_deleted"] == 1 and store.get(_key(2))[1] == "miss"
