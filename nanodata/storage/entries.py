"""A content-addressed store of entries that cannot lie: what an incremental build reuses (DEST/.cache/).

An entry is bytes under a 16-byte key (the caller's digest of everything that decides them). It is written whole
(local: its own temp name, then a rename, never fsynced: one a power cut loses or tears is a miss; GCS: one upload)
and read back only when its MAC holds: a keyed blake2b-256 (nanodata.storage.auth: the secret lives outside the
store) over the entry's key, length and the payload's sha256 (as a staged file's seal covers its pieces' sha256).
A missing, truncated or corrupt entry, one edited (even with a checksum recomputed), one copied to another key or
one written with another secret is a miss the caller rebuilds (`get` says which), never bytes handed on. This is
how build caches (Bazel's CAS, ccache) stay correct: a key names its output, a MAC guards where and what it is.
A run of lookups (`get_many`) fetches entries from gs:// a window ahead on threads: round trips overlap.

Retention: each successful build records the keys it used (`record_use`); `retain(keep)` keeps the newest `keep`
records and deletes every entry none of them names, unless it is younger than a grace period: builds sharing a
store each retain at their end, and one still going has written entries it has not recorded yet. Layout under
the root, with its own format version:
  v3/entries/ab/<32 hex>   MAGIC, payload length (8 bytes, little-endian), MAC (32 bytes), payload
  v3/used/<name>.keys      the sorted 16-byte keys one build used
"""

from __future__ import annotations

import hashlib
import logging
import time

import numpy as np

from nanodata.ranges import CACHE_GRACE_HOURS
from nanodata.storage.auth import MAC_BYTES, Secret, load_secret
from nanodata.storage.files import atomic_output
from nanodata.storage.uri import (
    delete_files,
    in_order,
    is_gcs,
    iter_sizes,
    iter_stats,
    join_uri,
    read_bytes,
    read_unchecked,
    write_bytes,
)

log = logging.getLogger(__name__)

# bump when the entry layout changes: a new version starts empty beside the old one. 3: the MAC over the payload's
# sha256, not the payload (sha256 has CPU instructions: ~2.5x keyed blake2b's speed, on every entry a rebuild reads);
# 2: a keyed MAC over key and payload; 1: an unkeyed checksum of the payload, and pickled payloads
STORE_FORMAT = 3
MAGIC = b"nde3"
HEADER = len(MAGIC) + 8 + MAC_BYTES
PURPOSE = b"nanodata-entry"
KEY_BYTES = 16
# a key as its 16 bytes: numpy sorts and searches them as memcmp orders them, ~15x faster than as a record of two
# big-endian words (the same order)
KEY = np.dtype(f"S{KEY_BYTES}")
SWEEP_BATCH = 65_536  # entry names the sweep holds at a time
# entries fetched ahead from gs:// (get_many): with a GET taking ~30 ms and ~0.5 ms of CPU, 64 in flight keep one
# core busy; 10,000 entries then take ~5 s, not 10,000 round trips
WINDOW = 64
ENTRIES, USED = "entries", "used"


class EntryStore:
    """Entries under `root`. secret: what get and put authenticate entries with (a Secret, or text; None: the
    user's, nanodata.storage.auth.load_secret, loaded on first use). Retention and sizes need none."""

    def __init__(self, root: str, secret: Secret | str | None = None):
        self.base = root
        self.root = join_uri(root, f"v{STORE_FORMAT}")
        self._secret = secret if isinstance(secret, Secret) else None
        self._given = secret

    @property
    def secret(self) -> Secret:
        if self._secret is None:
            self._secret = load_secret(self._given)
        return self._secret

    @staticmethod
    def _signed(key: bytes, size: bytes, payload: bytes | memoryview) -> tuple:
        """What an entry's MAC covers: its key, its length and its payload's sha256."""
        return key, size, hashlib.sha256(payload).digest()

    def _uri(self, key: bytes) -> str:
        name = key.hex()
        return join_uri(self.root, ENTRIES, name[:2], name)

    def get(self, key: bytes) -> tuple[bytes | None, str]:
        """(payload, "hit"), or (None, "miss") when there is no entry, (None, "corrupt") when its bytes are truncated
        or not an entry, (None, "forged") when its MAC does not hold: edited, copied from another key, or written
        with another secret (both logged; the caller rebuilds it)."""
        data = read_unchecked(self._uri(key))  # the MAC checks the bytes: no checksum of the transfer besides
        if data is None:
            return None, "miss"
        view = memoryview(data)
        size = int.from_bytes(view[len(MAGIC):len(MAGIC) + 8], "little") if len(data) >= HEADER else -1
        payload = view[HEADER:]
        if view[:len(MAGIC)] != MAGIC or size != len(payload):
            log.warning("cache entry %s is corrupt or truncated (%d bytes): rebuilt", self._uri(key), len(data))
            return None, "corrupt"
        if not self.secret.holds(bytes(view[len(MAGIC) + 8:HEADER]), PURPOSE,
                                 *self._signed(key, view[len(MAGIC):len(MAGIC) + 8], payload)):
            log.warning("cache entry %s fails its MAC (edited, moved from another key, or written with another "
                        "secret): rebuilt", self._uri(key))
            return None, "forged"
        return bytes(payload), "hit"

    def get_many(self, keys, window: int = WINDOW):
        """get(key) of each key (None for a None key: nothing looked up), in order. From gs:// the entries are
        fetched up to `window` ahead on threads, so a run of lookups costs about one round trip per `window`
        entries, not one each; memory holds `window` entries. A local store reads them in turn (as fast: a
        local read is no round trip). The keys are taken from their iterable in the caller's thread."""
        def get(key: bytes | None):
            return None if key is None else self.get(key)

        if not is_gcs(self.root):
            return map(get, keys)
        _ = self.secret  # loaded once here, not by the first threads at the same moment
        return in_order(get, keys, window)

    def put(self, key: bytes, payload: bytes) -> int:
        """Write an entry whole (replacing a corrupt one); returns its size. Writers racing on one key write equal
        bytes, each through its own temp name."""
        size = len(payload).to_bytes(8, "little")
        data = b"".join((MAGIC, size, self.secret.mac(PURPOSE, *self._signed(key, size, payload)), payload))
        uri = self._uri(key)
        if is_gcs(uri):
            write_bytes(uri, data)
        else:  # not fsynced: an entry a power cut loses or tears is a miss (its length and MAC say so)
            with atomic_output(uri, shared=True, durable=False) as f:
                f.write(data)
        return len(data)

    def record_use(self, name: str, keys: bytes) -> int:
        """Record the keys (16 bytes each, any order, repeats allowed) a successful build used, as `name` (names
        sort by age: give a time-ordered one). Returns how many distinct keys."""
        unique = np.unique(np.frombuffer(keys, dtype=KEY))
        write_bytes(join_uri(self.root, USED, name + ".keys"), unique.tobytes())
        return len(unique)

    def recorded(self) -> frozenset[bytes]:
        """The keys the builds still on record used (what retention keeps): a cheap guess of what the store holds,
        read from the records, without listing the entries."""
        names = [name for name, _ in iter_sizes(join_uri(self.root, USED)) if name.endswith(".keys")]
        data = b"".join(read_bytes(join_uri(self.root, USED, name)) or b"" for name in names)
        return frozenset(data[i:i + KEY_BYTES] for i in range(0, len(data) - KEY_BYTES + 1, KEY_BYTES))

    def retain(self, keep: int, grace_hours: float = CACHE_GRACE_HOURS.default) -> dict:
        """Delete the usage records older than the newest `keep`, then every entry no kept record names (and
        temp files a killed writer left) that is older than `grace_hours`: a younger one may be a run's still
        going, written but not recorded yet (or a temp file it is writing). Returns what was kept and deleted."""
        grace_hours = CACHE_GRACE_HOURS.check("grace_hours", grace_hours)
        cutoff = time.time() - grace_hours * 3600
        records = sorted(name for name, _ in iter_sizes(join_uri(self.root, USED)) if name.endswith(".keys"))
        cut = max(0, len(records) - keep)
        old, kept = records[:cut], records[cut:]
        delete_files(join_uri(self.root, USED, name) for name in old)
        used = np.unique(np.concatenate([np.empty(0, dtype=KEY)] + [
            np.frombuffer(read_bytes(join_uri(self.root, USED, name)) or b"", dtype=KEY) for name in kept]))
        totals = {"builds_kept": len(kept), "records_deleted": len(old), "entries": 0, "bytes": 0,
                  "entries_deleted": 0}
        batch: list[tuple[str, int, float]] = []

        def sweep() -> None:
            keys = np.frombuffer(b"".join(_key_of(name) for name, _, _ in batch), dtype=KEY)
            at = np.minimum(np.searchsorted(used, keys), max(len(used) - 1, 0))
            keep_it = (used[at] == keys) if len(used) else np.zeros(len(keys), dtype=bool)
            keep_it |= np.array([modified > cutoff for _, _, modified in batch], dtype=bool)
            flags = list(zip(batch, keep_it.tolist(), strict=True))
            doomed = [join_uri(self.root, ENTRIES, name) for (name, _, _), kept in flags if not kept]
            totals["entries_deleted"] += delete_files(doomed)
            totals["entries"] += len(batch) - len(doomed)
            totals["bytes"] += sum(nbytes for (_, nbytes, _), kept in flags if kept)
            batch.clear()

        for entry in iter_stats(join_uri(self.root, ENTRIES)):  # streamed: memory holds one batch of names
            batch.append(entry)
            if len(batch) >= SWEEP_BATCH:
                sweep()
        sweep()
        totals["earlier_formats_deleted"] = self._sweep_earlier_formats(cutoff)
        log.info("cache %s: kept %d entries (%d bytes) used by the last %d builds or younger than %g hours, "
                 "deleted %d", self.root, totals["entries"], totals["bytes"], len(kept), grace_hours,
                 totals["entries_deleted"])
        return totals

    def _sweep_earlier_formats(self, cutoff: float) -> int:
        """Delete the files of the store's earlier formats (v1 .. v{STORE_FORMAT - 1}: never read by this version,
        so never named by its records) once older than the cutoff: a build of the older version sharing the store
        may still be going. Streamed in batches, as the sweep of entries is."""
        deleted = 0
        for version in range(1, STORE_FORMAT):
            old = join_uri(self.base, f"v{version}")
            batch: list[str] = []
            for name, _, modified in iter_stats(old):
                if modified <= cutoff:
                    batch.append(join_uri(old, name))
                if len(batch) >= SWEEP_BATCH:
                    deleted += delete_files(batch)
                    batch = []
            deleted += delete_files(batch)
        return deleted

    def size(self) -> dict:
        """{"entries", "bytes"} of the store as it is now (one listing)."""
        entries = size = 0
        for _, nbytes in iter_sizes(join_uri(self.root, ENTRIES)):
            entries += 1
            size += nbytes
        return {"entries": entries, "bytes": size}


def _key_of(name: str) -> bytes:
    """The key an entry's file name holds; 16 bytes of 0xff (named by no record) for a stray file, such as the
    temp file of a killed writer, so the sweep deletes it."""
    leaf = name.rsplit("/", 1)[-1]
    try:
        key = bytes.fromhex(leaf)
    except ValueError:
        key = b""
    return key if len(key) == KEY_BYTES else b"\xff" * KEY_BYTES
