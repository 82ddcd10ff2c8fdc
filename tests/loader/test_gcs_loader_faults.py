"""The loader on gs:// when things go wrong, against the real emulator process (and the fault proxy in front of it):
the local cache stays within cache_bytes, deletes only its own files and never writes to the bucket; 5xx, 429, a
404 for a moment and dropped connections during footer and row-group reads are retried, and the batches equal a
clean run's; an object replaced, truncated or deleted while the loader reads it is one line naming it, and every
batch before that error equals a clean run's."""

import json
import os
import subprocess
import sys
import threading
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from batches import take
from corpus import make_docs, write_parquet
from loader_helpers import assert_same_batches, small_bestfit, write_manifest, write_manifest_corpus
from support.fault_server import FaultServer

from nanodata import corpus, dataset, storage
from nanodata.errors import NanodataError
from nanodata.loader import remote
from nanodata.storage.files import file_digest
from nanodata.storage.gcs import gcs_client


def upload(local, uri):
    corpus.sync(local, uri)
    return local, uri


def bucket_snapshot(bucket: str) -> dict:
    return {blob.name: (blob.md5_hash, blob.generation, blob.size) for blob in gcs_client().list_blobs(bucket)}


def text_chunks(uri: str, names) -> dict[str, int]:
    """{"read URI/NAME bytes A-B": size} of every row group's text column chunk: how a retried read is named."""
    chunks = {}
    for name in names:
        handle = dataset.open_object(f"{uri}/{name}")
        for rg_idx in range(handle.num_row_groups):
            start, stop = handle.chunk(rg_idx)
            chunks[f"read {uri}/{name} bytes {start}-{stop - 1}"] = stop - start
    return chunks


TRAIN = [f"shard_{i:05d}.parquet" for i in range(3)]


# -- the local cache ------------------------------------------------------------------------------------------
class DirSizeSampler:
    """Samples, in a thread, the bytes of the files under `root` minus the ones in `foreign`; keeps the largest."""

    def __init__(self, root, foreign):
        self.root, self.foreign = root, {os.fspath(path) for path in foreign}
        self.largest, self.samples = 0, 0
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def size(self) -> int:
        seen, total = set(), 0
        for directory, _, files in os.walk(self.root):
            for name in files:
                path = os.path.join(directory, name)
                try:
                    st = os.stat(path)
                except FileNotFoundError:  # renamed or evicted while we walked
                    continue
                if path not in self.foreign and (st.st_dev, st.st_ino) not in seen:  # a rename can show a file twice
                    seen.add((st.st_dev, st.st_ino))
                    total += st.st_size
        return total

    def _run(self):
        while not self.done.is_set():
            self.largest = max(self.largest, self.size())
            self.samples += 1

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.done.set()
        self.thread.join()


def replace_object(local, uri, name, docs):
    """A new version of one object of a manifest corpus, in the directory and the bucket (manifest included)."""
    write_parquet(local / name, docs, row_group_size=8)
    manifest = json.loads((local / "manifest.json").read_text())
    for entry in [*manifest["shards"], manifest["val"]]:
        if entry["name"] == name:
            entry["crc32c"] = file_digest(local / name, "crc32c")
    (local / "manifest.json").write_text(json.dumps(manifest))
    corpus.sync(local, uri)


def cache_files(cache_dir) -> set[str]:
    return {os.fspath(path.relative_to(cache_dir)) for path in cache_dir.rglob("*") if path.is_file()}


@pytest.mark.parametrize("layout", ["one source", "two sources x two logical streams"])
def test_the_cache_stays_within_cache_bytes_and_deletes_only_its_own_files(tokenizer, tmp_path, gcs_bucket, layout):
    corpora = [upload(write_manifest_corpus(tmp_path / f"local{i}", seed=70 + 10 * i), f"gs://{gcs_bucket}/c{i}")
               for i in range(1 if layout == "one source" else 2)]
    locals_, uris = [local for local, _ in corpora], [uri for _, uri in corpora]
    if layout == "one source":
        def make(where, **kwargs):
            return small_bestfit(tokenizer, where[0], **kwargs)
    else:
        def make(where, **kwargs):
            return small_bestfit(tokenizer, None, sources=[{"data_dir": d, "weight": 1} for d in where],
                                 logical_streams=2, **kwargs)
    bound = sum(sum(text_chunks(uri, TRAIN).values()) for uri in uris) // 3  # every reader together keeps to it
    cache_dir = tmp_path / "cache"
    foreign = {cache_dir / "mine.bin": os.urandom(5000),
               cache_dir / f"{'0' * 16}-{'0' * 24}-0-00000000.rg": b"not the cache's: outside its subdirectory",
               cache_dir / remote.CACHE_SUBDIR / "notes.txt": b"a user's file in the cache's own subdirectory"}
    for path, data in foreign.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)

    def run():
        in_bucket = bucket_snapshot(gcs_bucket)
        with DirSizeSampler(cache_dir, foreign) as sampler:
            got = take(make(uris, cache_dir=cache_dir, cache_bytes=bound), 40)
        final = sampler.size()
        assert sampler.samples > 10 and sampler.largest <= bound and 0 < final <= bound
        assert_same_batches(take(make(locals_, prefetch=0), 40), got)  # epochs wrap: cached chunks are read back
        assert bucket_snapshot(gcs_bucket) == in_bucket  # nothing written to the bucket, nothing deleted
        return cache_files(cache_dir)

    first = run()
    # a new version of an object cached in the first run: the next loader reads and caches the new version
    # (the batches equal the changed directory's) and evicts the old one's entries, and only those
    replace_object(*corpora[0], TRAIN[0], make_docs(40, seed=999, max_words=80))
    second = run()
    evicted = first - second
    assert evicted and all(name.startswith(remote.CACHE_SUBDIR) and name.endswith(".rg") for name in evicted)
    for path, data in foreign.items():
        assert path.read_bytes() == data


def test_a_second_process_on_the_same_cache_dir_is_refused(tmp_path):
    held = remote.RowGroupCache.shared(tmp_path, 1 << 20)
    code = ("import sys; from pathlib import Path; from nanodata.loader import remote\n"
            "remote.RowGroupCache.shared(Path(sys.argv[1]), 1 << 20)")
    result = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert f"cache_dir {tmp_path}: in use by another process" in result.stderr.strip().splitlines()[-1]
    assert held is remote.RowGroupCache.shared(tmp_path, 1 << 20)  # one per directory in this process


# -- faults through the proxy ---------------------------------------------------------------------------------
class DownloadFaults(FaultServer):
    """The fault proxy with its faults spent on object downloads only (footer and row-group reads), not on
    listings or stats."""

    def _next_fault(self, name):
        return super()._next_fault(name) if "alt=media" in name else None


def retried_reads(caplog, uri) -> list[tuple[str, str]]:
    """(what, error type) of each retry of a read under uri that the retry policy logged."""
    lines = [r.getMessage() for r in caplog.records if "; retry " in r.getMessage()]
    return [tuple(line.split(": ")[:2]) for line in lines if line.startswith(f"read {uri}/")]


def test_5xx_429_dropped_connections_and_a_passing_404_are_retried(tokenizer, tmp_path, gcs_emulator, gcs_bucket,
                                                                  monkeypatch, caplog):
    local, uri = upload(write_manifest_corpus(tmp_path / "local"), f"gs://{gcs_bucket}/c")
    chunks = text_chunks(uri, TRAIN)
    faults = ["503", "drop", "404", "500", "429", "drop"]
    with DownloadFaults(upstream=gcs_emulator.host) as proxy:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", proxy.url)
        proxy.next_faults = [step for fault in faults for step in ("", fault)]  # every other download fails
        got = take(small_bestfit(tokenizer, uri, prefetch=2), 30)
        assert proxy.next_faults == []
    assert_same_batches(take(small_bestfit(tokenizer, local, prefetch=0), 30), got)
    retried = retried_reads(caplog, uri)
    # every fault was retried (the proxy's own listen backlog of 5 may refuse a burst of connections: more retries)
    kinds = {"503": "ServiceUnavailable", "drop": "ConnectionError", "404": "ObjectMissing",
             "500": "InternalServerError", "429": "TooManyRequests"}
    assert Counter(kinds[fault] for fault in faults) <= Counter(kind for _, kind in retried)
    assert any(what in chunks for what, _ in retried)  # row-group reads among them, not only footers


# -- objects that change under the loader ---------------------------------------------------------------------
@pytest.fixture
def long_files(tmp_path, gcs_bucket, monkeypatch):
    """(local dir, gs:// URI) of 3 train objects of 25 row groups each, read with one row group of read-ahead: an
    object changed while it is being read still has row groups to fetch."""
    monkeypatch.setattr(remote, "READ_AHEAD_BYTES", 1)
    local = tmp_path / "local"
    local.mkdir()
    for name in [*TRAIN, "val_shard.parquet"]:  # uncompressed: texts appear in the file as they are
        pq.write_table(pa.table({"text": long_docs(name)}), local / name, row_group_size=8, compression="none")
    write_manifest(local, TRAIN, "val_shard.parquet")  # so that local states name the same crc32c
    return upload(local, f"gs://{gcs_bucket}/long")


def long_docs(name: str) -> list[str]:
    return make_docs(200, seed=300 + sum(map(ord, name)), max_words=60)


def same_size_other_texts(name: str, data: bytes) -> bytes:
    """The file with the documents of its last row groups swapped in case: another valid parquet file of exactly
    the same size, which pyarrow decodes without complaint."""
    for text in long_docs(name)[120:]:
        assert text.encode() in data
        data = data.replace(text.encode(), text.swapcase().encode(), 1)
    return data


def read_until_error(loader, got: list, most: int):
    for _ in range(most):
        got += take(loader, 1)


@pytest.mark.parametrize("change", ["same size, other texts", "truncated", "re-uploaded as it was"])
def test_an_object_replaced_while_read_is_one_line_naming_it(tokenizer, long_files, change):
    local, uri = long_files
    loader = small_bestfit(tokenizer, uri, prefetch=2)
    got = take(loader, 2)
    name = got[-1][2]["cursor_file"]  # the object being read: most of its row groups are still to be fetched
    data = (local / name).read_bytes()
    new = {"same size, other texts": lambda: same_size_other_texts(name, data),
           "truncated": lambda: data[:len(data) // 2], "re-uploaded as it was": lambda: data}[change]()
    storage.write_bytes(f"{uri}/{name}", new)
    with pytest.raises(NanodataError) as caught:
        read_until_error(loader, got, 200)
    message = str(caught.value)
    assert "\n" not in message and message.startswith(f"{uri}/{name} was replaced while the loader read the corpus")
    assert_same_batches(take(small_bestfit(tokenizer, local, prefetch=0), len(got)), got)  # never other data


def test_an_object_deleted_while_read_is_retried_then_one_line_naming_it(tokenizer, long_files, caplog):
    local, uri = long_files
    loader = small_bestfit(tokenizer, uri, prefetch=2)
    got = take(loader, 2)
    name = got[-1][2]["cursor_file"]
    gcs_client().bucket(uri.split("/")[2]).blob(f"long/{name}").delete()
    with pytest.raises(NanodataError) as caught:
        read_until_error(loader, got, 200)
    message = str(caught.value)
    assert "\n" not in message and message.startswith(f"{uri}/{name}: the object is gone from the bucket")
    retried = [kind for what, kind in retried_reads(caplog, uri) if name in what]
    assert len(retried) >= 4 and set(retried) == {"ObjectMissing"}  # 5 attempts of each read, then the error
    assert_same_batches(take(small_bestfit(tokenizer, local, prefetch=0), len(got)), got)
