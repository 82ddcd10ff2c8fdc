"""`nanodata sync` under faults, against the real GCS emulator: kill -9 at seeded random moments of an upload
and of a download, then a re-run must leave exactly what a clean sync leaves; and a local disk that fills up
during a download: one line naming the file, nothing partial under a final name, a re-run with space is clean."""

import json
import random
import shutil

import pytest
from faults import kill_at, kill_moments, nanodata_cmd, run, run_on_small_disk, same_tree, timed_run
from google.cloud import storage as gcs

from nanodata.corpus.layout import COMPLETE, MANIFEST
from nanodata.storage.gcs import RESUMABLE_THRESHOLD

SEED = 10
KILLS = 6


def make_corpus(root, seed=SEED):
    """Shards of mixed sizes, one big enough for a chunked resumable upload, a manifest naming them, _COMPLETE."""
    rng = random.Random(seed)
    root.mkdir(parents=True)
    names = [f"shard_{i:05d}.parquet" for i in range(30)]
    for name in names:
        (root / name).write_bytes(rng.randbytes(rng.randint(20_000, 300_000)))
    names.append("val_shard.parquet")
    (root / names[-1]).write_bytes(rng.randbytes(RESUMABLE_THRESHOLD + 500_000))
    (root / MANIFEST).write_text(json.dumps({"shards": [{"name": n} for n in names]}))
    (root / COMPLETE).write_bytes(b"")
    return root


def objects(bucket, prefix):
    """name -> (size, crc32c, md5) of every object under gs://bucket/prefix/."""
    return {b.name[len(prefix) + 1:]: (b.size, b.crc32c, b.md5_hash)
            for b in gcs.Client().list_blobs(bucket, prefix=prefix + "/")}


def sentinel_honest(listing: dict, expected: dict) -> bool:
    """_COMPLETE is only ever there with every file complete and correct."""
    return COMPLETE not in listing or listing == expected


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return make_corpus(tmp_path_factory.mktemp("corpus") / "src")


def test_upload_killed_at_random_moments_then_rerun_equals_clean(corpus, gcs_bucket):
    clean_seconds = timed_run(nanodata_cmd("sync", corpus, f"gs://{gcs_bucket}/clean"))
    clean = objects(gcs_bucket, "clean")
    assert len(clean) == 33
    interrupted = 0
    for i, moment in enumerate(kill_moments(SEED, clean_seconds, KILLS)):
        cmd = nanodata_cmd("sync", corpus, f"gs://{gcs_bucket}/killed{i}", "--workers", "4")
        kill_at(cmd, moment)
        after = objects(gcs_bucket, f"killed{i}")
        assert sentinel_honest(after, clean), moment
        assert all(after[n] == clean[n] for n in after), moment  # nothing partial under a final name
        interrupted += after != clean
        assert run(cmd).returncode == 0
        assert objects(gcs_bucket, f"killed{i}") == clean, moment
    assert interrupted >= KILLS // 2  # the kills did land in the middle of uploads
    bucket = gcs.Client().bucket(gcs_bucket)
    for name in clean:  # and the bytes themselves
        assert bucket.blob(f"killed0/{name}").download_as_bytes() == (corpus / name).read_bytes(), name


def test_download_killed_at_random_moments_then_rerun_equals_clean(tmp_path, corpus, gcs_bucket):
    assert run(nanodata_cmd("sync", corpus, f"gs://{gcs_bucket}/c")).returncode == 0
    clean_seconds = timed_run(nanodata_cmd("sync", f"gs://{gcs_bucket}/c", tmp_path / "clean"))
    assert same_tree(tmp_path / "clean", corpus) == []
    interrupted = 0
    for i, moment in enumerate(kill_moments(SEED + 1, clean_seconds, KILLS)):
        killed = tmp_path / f"killed{i}"
        cmd = nanodata_cmd("sync", f"gs://{gcs_bucket}/c", killed, "--workers", "4")
        kill_at(cmd, moment)
        final = [p for p in killed.rglob("*") if p.is_file() and not p.name.endswith(".tmp")]
        for path in final:  # a kill leaves at most a .tmp behind, never a partial file under its name
            assert path.read_bytes() == (corpus / path.name).read_bytes(), (moment, path.name)
        assert (killed / COMPLETE).exists() <= (len(final) == 33), moment
        interrupted += len(final) < 33
        assert run(cmd).returncode == 0
        assert same_tree(killed, tmp_path / "clean") == [], moment  # no .tmp left either
    assert interrupted >= KILLS // 2  # the kills did land in the middle of downloads


def test_full_disk_during_download_one_line_nothing_partial_rerun_clean(tmp_path, corpus, gcs_bucket):
    """The emulator listens on 127.0.0.1 outside the mount namespace; the namespace shares the network."""
    assert run(nanodata_cmd("sync", corpus, f"gs://{gcs_bucket}/c")).returncode == 0
    disk, keep = tmp_path / "disk", tmp_path / "keep"
    cmd = " ".join(nanodata_cmd("sync", f"gs://{gcs_bucket}/c", "dst", "--workers", "2"))
    done = run_on_small_disk(cmd, disk, "2m", keep)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and "retry" not in done.stderr  # a full disk is not transient
    errors = [line for line in done.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1, done.stderr
    assert errors[0].startswith("nanodata sync: error: dst/") and "no space left on the device" in errors[0]
    left = [p for p in (keep / "dst").rglob("*") if p.is_file()]
    assert left and not any(p.name.endswith(".tmp") for p in left)
    assert COMPLETE not in {p.name for p in left} and MANIFEST not in {p.name for p in left}
    for path in left:  # what is there under a final name is whole
        assert path.read_bytes() == (corpus / path.name).read_bytes(), path.name

    shutil.copytree(keep / "dst", tmp_path / "again")
    assert run(nanodata_cmd("sync", f"gs://{gcs_bucket}/c", tmp_path / "again")).returncode == 0
    assert same_tree(tmp_path / "again", corpus) == []
