"""The entry store an incremental build trusts (nanodata.storage.entries): an entry is read back only whole and
unchanged, under the key it was written for and the secret it was written with; writers racing on one key never
corrupt it, a killed writer leaves nothing a reader takes, and retention keeps exactly what the last N records name."""

import hashlib
import multiprocessing
import os
import signal
import subprocess
import sys
import time

from nanodata.storage.auth import load_secret
from nanodata.storage.entries import HEADER, MAGIC, EntryStore
from nanodata.storage.files import content_hash


def _key(i: int) -> bytes:
    return content_hash(f"entry {i}".encode())


def test_an_entry_is_read_back_only_when_it_is_whole(tmp_path):
    store = EntryStore(str(tmp_path))
    assert store.get(_key(0)) == (None, "miss")
    store.put(_key(0), b"payload" * 100)
    assert store.get(_key(0)) == (b"payload" * 100, "hit")
    path = tmp_path / "v3" / "entries" / _key(0).hex()[:2] / _key(0).hex()
    whole = path.read_bytes()
    for broken in (whole[:-1], whole[:10], b"", b"nde1" + whole[4:], whole + b"x"):
        path.write_bytes(broken)
        assert store.get(_key(0)) == (None, "corrupt")
    path.write_bytes(whole[:-1] + bytes([whole[-1] ^ 1]))  # one bit of the payload: the MAC no longer holds
    assert store.get(_key(0)) == (None, "forged")
    store.put(_key(0), b"again")  # a rebuilt entry replaces the corrupt one
    assert store.get(_key(0)) == (b"again", "hit")


def _path(root, key: bytes):
    return root / "v3" / "entries" / key.hex()[:2] / key.hex()


def test_an_entry_copied_to_another_key_is_a_miss(tmp_path):
    store = EntryStore(str(tmp_path))
    store.put(_key(0), b"the docs of file 0")
    store.put(_key(1), b"the docs of file 1")
    _path(tmp_path, _key(1)).write_bytes(_path(tmp_path, _key(0)).read_bytes())
    assert store.get(_key(1)) == (None, "forged") and store.get(_key(0)) == (b"the docs of file 0", "hit")


def test_an_entry_edited_with_its_checksum_recomputed_is_a_miss(tmp_path):
    store = EntryStore(str(tmp_path))
    store.put(_key(0), b"int f() { return 1; }")
    edited = b"int f() { return 2; }"
    size = len(edited).to_bytes(8, "little")
    wrong = load_secret("an attacker's guess at the secret")
    for checksum in (hashlib.blake2b(edited, digest_size=32).digest(),  # an unkeyed checksum, as v1 had
                     wrong.mac(b"nanodata-entry", _key(0), size, edited)):  # a MAC under another key
        _path(tmp_path, _key(0)).write_bytes(MAGIC + size + checksum + edited)
        assert len(MAGIC + size + checksum) == HEADER
        assert store.get(_key(0)) == (None, "forged")


def test_another_secret_reads_every_entry_as_a_miss(tmp_path):
    EntryStore(str(tmp_path), "the first secret, long enough").put(_key(0), b"payload")
    assert EntryStore(str(tmp_path), "the second secret, long enough").get(_key(0)) == (None, "forged")
    assert EntryStore(str(tmp_path), "the first secret, long enough").get(_key(0)) == (b"payload", "hit")


def test_entries_of_the_pickled_format_are_not_read(tmp_path):
    old = tmp_path / "v1" / "entries" / _key(0).hex()[:2] / _key(0).hex()
    old.parent.mkdir(parents=True)
    payload = b"\x80\x05pickled"
    old.write_bytes(b"nde1" + len(payload).to_bytes(8, "little") + content_hash(payload) + payload)
    assert EntryStore(str(tmp_path)).get(_key(0)) == (None, "miss")


def test_retention_deletes_earlier_formats_once_past_the_grace_period(tmp_path):
    store = EntryStore(str(tmp_path))
    store.put(_key(0), b"current")
    store.record_use("1", _key(0))
    old, young = tmp_path / "v1" / "entries" / "ab" / "old", tmp_path / "v2" / "used" / "young.keys"
    for path in (old, young):
        path.parent.mkdir(parents=True)
        path.write_bytes(b"an earlier format's file")
    os.utime(old, (time.time() - 7200, time.time() - 7200))
    result = store.retain(1, grace_hours=1)  # a build of the older version may still be writing the young one
    assert result["earlier_formats_deleted"] == 1 and not old.exists() and young.exists()
    assert store.get(_key(0)) == (b"current", "hit")


def _write_many(root: str, start: int) -> None:
    store = EntryStore(root)
    for _ in range(200):
        store.put(_key(start), b"same bytes " * 5000)


def test_writers_racing_on_one_key_leave_a_whole_entry(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_write_many, args=(str(tmp_path), 7)) for _ in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
        assert p.exitcode == 0
    assert EntryStore(str(tmp_path)).get(_key(7)) == (b"same bytes " * 5000, "hit")
    assert [p.name for p in (tmp_path / "v3" / "entries").rglob("*") if p.is_file()] == [_key(7).hex()]


WRITER = """
import sys
from nanodata.storage.entries import EntryStore
from nanodata.storage.files import content_hash
store = EntryStore(sys.argv[1])
print("ready", flush=True)
i = 0
while True:
    store.put(content_hash(str(i).encode()), bytes(range(256)) * 4096 * (1 + i % 4))
    i += 1
"""


def test_a_killed_writer_leaves_no_entry_a_reader_trusts(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path)], stdout=subprocess.PIPE)
    assert proc.stdout.readline() == b"ready\n"
    time.sleep(1.0)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    store = EntryStore(str(tmp_path))
    files = [p for p in (tmp_path / "v3" / "entries").rglob("*") if p.is_file()]
    named = [p for p in files if not p.name.endswith(".tmp")]
    assert len(named) > 3
    for path in named:  # every file under an entry's name is whole
        payload, status = store.get(bytes.fromhex(path.name))
        assert status == "hit" and len(payload) % (256 * 4096) == 0
    store.record_use("0001", b"".join(bytes.fromhex(p.name) for p in named))
    kept = store.retain(1, grace_hours=0)  # a killed writer's temp file is swept (once past the grace period)
    assert kept["entries"] == len(named) and kept["entries_deleted"] == len(files) - len(named)


def test_retention_keeps_what_the_last_records_name(tmp_path):
    store = EntryStore(str(tmp_path))
    for i in range(6):
        store.put(_key(i), b"x" * i)
    store.record_use("20260101-a", _key(0) + _key(1))
    store.record_use("20260102-b", _key(1) + _key(2) + _key(2))
    store.record_use("20260103-c", _key(3))
    result = store.retain(2, grace_hours=0)
    assert result == {"builds_kept": 2, "records_deleted": 1, "entries": 3, "bytes": result["bytes"],
                      "entries_deleted": 3, "earlier_formats_deleted": 0}
    assert [store.get(_key(i))[1] for i in range(6)] == ["miss", "hit", "hit", "hit", "miss", "miss"]
    assert store.retain(0, grace_hours=0)["entries"] == 0 and store.size() == {"entries": 0, "bytes": 0}


def test_keys_with_trailing_zero_bytes_are_kept(tmp_path):
    store = EntryStore(str(tmp_path))
    zero = bytes(15) + b"\x00"
    store.put(zero, b"z")
    store.record_use("1", zero)
    assert store.retain(1)["entries"] == 1 and store.get(zero) == (b"z", "hit")


def test_an_entry_store_in_a_bucket(gcs_bucket):
    store = EntryStore(f"gs://{gcs_bucket}/cache")
    store.put(_key(1), b"remote")
    store.put(_key(2), b"gone")
    assert store.get(_key(1)) == (b"remote", "hit") and store.get(_key(3)) == (None, "miss")
    store.record_use("1", _key(1))
    assert store.retain(1, grace_hours=0)["entries_deleted"] == 1 and store.size()["entries"] == 1
