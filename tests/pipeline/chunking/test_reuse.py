"""`nanodata chunk --cache DIR`: each file's result is reused by later runs, the output byte-identical to a run
without the cache, whatever the worker count; a chunker format bump invalidates every entry; a killed run leaves no
entry a later run trusts; retention keeps the last runs' entries. Nothing read back runs code or changes the output:
a forged, moved or edited entry, or one made with another secret, is a miss, rebuilt."""

import hashlib
import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nanodata.errors import NanodataError
from nanodata.pipeline.chunkbuild import chunk_to_jsonl, reuse
from nanodata.storage import entries
from nanodata.storage.auth import SECRET_ENV as NANODATA_CACHE_SECRET
from nanodata.storage.auth import load_secret
from nanodata.storage.entries import EntryStore
from nanodata.storage.files import content_hash

STD = Path("/usr/include/c++/12/bits")
NANODATA = str(Path(sys.executable).with_name("nanodata"))
SETTINGS = {"max_tokens": 512, "filters": "none", "redact": "none"}


@pytest.fixture
def source(tmp_path):
    tree = tmp_path / "tree"
    for project, names in {"a": ("stl_pair.h", "stl_heap.h"), "b": ("stl_stack.h", "stl_queue.h")}.items():
        (tree / project).mkdir(parents=True)
        for name in names:
            shutil.copy(STD / name, tree / project / name)
    jsonl = tmp_path / "records.jsonl"
    jsonl.write_text("".join(json.dumps({"text": (STD / n).read_text()}) + "\n"
                             for n in ("char_traits.h", "stl_tempbuf.h")))
    return jsonl, tree


def _run(out, source, **settings):
    jsonl, tree = source
    return chunk_to_jsonl(out, inputs=[jsonl], project_dirs=[tree], **{**SETTINGS, **settings})


@pytest.mark.parametrize("mode", ["basic", "compilable"])
def test_cached_runs_equal_an_uncached_run_for_any_worker_count(tmp_path, source, mode):
    reference = _run(tmp_path / "ref.jsonl", source, mode=mode)
    assert reference["reuse"] is None
    first = _run(tmp_path / "one.jsonl", source, mode=mode, cache=tmp_path / "cache", workers=2)
    second = _run(tmp_path / "two.jsonl", source, mode=mode, cache=tmp_path / "cache")
    for out in ("one", "two"):
        assert (tmp_path / f"{out}.jsonl").read_bytes() == (tmp_path / "ref.jsonl").read_bytes()
    assert first["reuse"]["files_reused"] == 0 and first["reuse"]["files_chunked"] == 6
    assert second["reuse"]["files_reused"] == 6 and second["reuse"]["bytes_chunked"] == 0
    assert second["fidelity"] == reference["fidelity"] and second["cleaning"] == reference["cleaning"]


def test_a_chunker_format_bump_invalidates_every_entry(tmp_path, source, monkeypatch):
    _run(tmp_path / "one.jsonl", source, cache=tmp_path / "cache")
    monkeypatch.setattr(reuse, "CHUNK_FORMAT", reuse.CHUNK_FORMAT + 1)
    bumped = _run(tmp_path / "two.jsonl", source, cache=tmp_path / "cache")
    assert bumped["reuse"]["files_reused"] == 0 and bumped["reuse"]["files_chunked"] == 6
    assert (tmp_path / "one.jsonl").read_bytes() == (tmp_path / "two.jsonl").read_bytes()


def test_settings_that_change_the_output_miss_and_the_rest_hit(tmp_path, source):
    _run(tmp_path / "one.jsonl", source, cache=tmp_path / "cache")
    assert _run(tmp_path / "two.jsonl", source, cache=tmp_path / "cache", max_tokens=1024)["reuse"]["files_reused"] == 0
    assert _run(tmp_path / "three.jsonl", source, cache=tmp_path / "cache", workers=2,
                partition_mb=0.01)["reuse"]["files_reused"] == 6


def test_no_reuse_chunks_every_file_and_retention_keeps_the_last_runs(tmp_path, source):
    _run(tmp_path / "one.jsonl", source, cache=tmp_path / "cache", cache_keep_runs=1)
    again = _run(tmp_path / "two.jsonl", source, cache=tmp_path / "cache", reuse=False, cache_keep_runs=1)
    assert again["reuse"]["files_chunked"] == 6 and again["reuse"]["files_reused"] == 0
    other = _run(tmp_path / "three.jsonl", source, cache=tmp_path / "cache", max_tokens=1024, cache_keep_runs=1,
                 cache_grace_hours=0)  # one run at a time: the entries of runs one and two are no one's
    assert other["reuse"]["cache"]["entries_deleted"] == 6 and other["reuse"]["cache"]["entries"] == 6


def test_a_killed_run_leaves_no_entry_a_later_run_trusts(tmp_path):
    tree = tmp_path / "bits"
    shutil.copytree(STD, tree / "std")
    cache = tmp_path / "cache"
    base = [NANODATA, "chunk", "--project-dirs", str(tree), "--max-tokens", "512", "--no-progress", "--filters",
            "none", "--redact", "none", "--dedup", "exact"]
    args = base + ["--cache", str(cache)]
    proc = subprocess.Popen(args + ["--output", str(tmp_path / "killed.jsonl"), "--workers", "2"],
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    entries = cache / "v3" / "entries"
    while time.monotonic() < deadline and sum(1 for p in entries.rglob("*") if p.is_file()) < 20:
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    for child in subprocess.run(["pgrep", "-f", str(cache)], capture_output=True, text=True).stdout.split():
        os.kill(int(child), signal.SIGKILL)  # the pool's workers, orphaned by the kill
    store = EntryStore(str(cache))
    for path in (p for p in entries.rglob("*") if p.is_file() and not p.name.endswith(".tmp")):
        assert store.get(bytes.fromhex(path.name))[1] == "hit", path
    subprocess.run(args + ["--output", str(tmp_path / "after.jsonl")], check=True, capture_output=True)
    subprocess.run(base + ["--output", str(tmp_path / "ref.jsonl")], check=True, capture_output=True)
    assert (tmp_path / "after.jsonl").read_bytes() == (tmp_path / "ref.jsonl").read_bytes()
    summary = json.loads((tmp_path / "after.jsonl.done").read_text())
    assert summary["reuse"]["files_reused"] >= 20 and summary["reuse"]["entries_rebuilt"] == 0


def test_a_bad_cache_is_one_line_naming_the_flag(tmp_path, source):
    with pytest.raises(NanodataError, match=r"^--cache: 'gs:/x': malformed gs:// URI"):
        _run(tmp_path / "out.jsonl", source, cache="gs:/x")
    result = subprocess.run([NANODATA, "chunk", "--inputs", str(source[0]), "--output", str(tmp_path / "o.jsonl"),
                             "--cache", str(tmp_path / "c"), "--cache-keep-runs", "-1"], capture_output=True, text=True)
    assert result.returncode == 2 and "--cache-keep-runs" in result.stderr and "Traceback" not in result.stderr


# ---------------------------------------------------------------- nothing read back runs code or changes the output

class Touch:
    """Unpickling it creates a file: what a forged pickle entry would do."""

    def __init__(self, path: Path):
        self.path = path

    def __reduce__(self):
        return Path.touch, (self.path,)


def _entries(cache: Path) -> list[Path]:
    return sorted(p for p in (cache / "v3" / "entries").rglob("*") if p.is_file())


def _entry(key: bytes, payload: bytes, secret) -> bytes:
    """An entry as the store lays it out, its MAC made with `secret` (an attacker's: not the run's)."""
    size = len(payload).to_bytes(8, "little")
    return entries.MAGIC + size + secret.mac(entries.PURPOSE, key, size, hashlib.sha256(payload).digest()) + payload


@pytest.mark.parametrize("mode", ["basic", "compilable"])
def test_forged_pickle_entries_at_real_keys_run_nothing_and_the_output_is_an_uncached_runs(tmp_path, source, mode):
    live = tmp_path / "live"
    pickle.loads(pickle.dumps(Touch(live)))
    assert live.exists()  # the payload does run code when unpickled
    marker = tmp_path / "marker"
    evil = pickle.dumps(Touch(marker))
    _run(tmp_path / "ref.jsonl", source, mode=mode)
    cache = tmp_path / "cache"
    _run(tmp_path / "one.jsonl", source, mode=mode, cache=cache)
    forged = _entries(cache)
    guess, run_secret = load_secret("an attacker's guess at the secret"), load_secret()
    for i, path in enumerate(forged):
        key = bytes.fromhex(path.name)
        # half under a MAC that does not hold, half (as if the secret had leaked) under one that does: a payload
        # that is a pickle is then still no value of its type
        path.write_bytes(_entry(key, evil, guess if i % 2 else run_secret))
        old = cache / "v1" / "entries" / path.name[:2] / path.name  # the pickled format's layout: never read
        old.parent.mkdir(parents=True, exist_ok=True)
        old.write_bytes(b"nde1" + len(evil).to_bytes(8, "little") + content_hash(evil) + evil)
    second = _run(tmp_path / "two.jsonl", source, mode=mode, cache=cache)
    assert not marker.exists()
    assert (tmp_path / "two.jsonl").read_bytes() == (tmp_path / "ref.jsonl").read_bytes()
    assert second["reuse"]["files_reused"] == 0 and second["reuse"]["entries_rebuilt"] >= 6
    third = _run(tmp_path / "three.jsonl", source, mode=mode, cache=cache)  # rebuilt entries are used again
    assert third["reuse"]["files_reused"] == 6 and third["reuse"]["entries_rebuilt"] == 0


def test_an_entry_copied_to_another_files_key_is_a_miss(tmp_path, source):
    _run(tmp_path / "ref.jsonl", source)
    cache = tmp_path / "cache"
    _run(tmp_path / "one.jsonl", source, cache=cache)
    a, b = _entries(cache)[:2]
    b.write_bytes(a.read_bytes())  # b's file would get a's docs
    second = _run(tmp_path / "two.jsonl", source, cache=cache)
    assert (tmp_path / "two.jsonl").read_bytes() == (tmp_path / "ref.jsonl").read_bytes()
    assert second["reuse"]["files_reused"] == 5 and second["reuse"]["entries_rebuilt"] == 1


def test_an_entry_edited_with_its_checksum_recomputed_is_a_miss(tmp_path, source):
    _run(tmp_path / "ref.jsonl", source)
    cache = tmp_path / "cache"
    _run(tmp_path / "one.jsonl", source, cache=cache)
    path = next(p for p in _entries(cache) if b"namespace std" in p.read_bytes())
    key, data = bytes.fromhex(path.name), path.read_bytes()
    payload = data[entries.HEADER:].replace(b"namespace std", b"namespace evl", 1)  # same length: still decodes
    size = len(payload).to_bytes(8, "little")
    for checksum in (hashlib.blake2b(payload, digest_size=32).digest(),  # unkeyed, as anyone can recompute
                     _entry(key, payload, load_secret("an attacker's guess at the secret"))[entries.HEADER - 32:entries.HEADER]):
        path.write_bytes(entries.MAGIC + size + checksum + payload)
        again = _run(tmp_path / "two.jsonl", source, cache=cache)
        assert (tmp_path / "two.jsonl").read_bytes() == (tmp_path / "ref.jsonl").read_bytes()
        assert again["reuse"]["files_reused"] == 5 and again["reuse"]["entries_rebuilt"] == 1
    # (under the run's own secret the edit would be taken: the MAC, not the checksum, is what guards an entry)
    path.write_bytes(_entry(key, payload, load_secret()))
    _run(tmp_path / "taken.jsonl", source, cache=cache)
    assert b"namespace evl" in (tmp_path / "taken.jsonl").read_bytes()


def test_a_changed_secret_is_a_cold_cache_with_the_same_output(tmp_path, source, monkeypatch):
    _run(tmp_path / "ref.jsonl", source, mode="compilable")
    cache = tmp_path / "cache"
    monkeypatch.setenv(NANODATA_CACHE_SECRET, "the first secret, long enough")
    _run(tmp_path / "one.jsonl", source, mode="compilable", cache=cache)
    monkeypatch.setenv(NANODATA_CACHE_SECRET, "the second secret, long enough")
    cold = _run(tmp_path / "two.jsonl", source, mode="compilable", cache=cache)
    assert cold["reuse"]["files_reused"] == 0 and cold["reuse"]["files_chunked"] == 6
    warm = _run(tmp_path / "three.jsonl", source, mode="compilable", cache=cache)
    assert warm["reuse"]["files_reused"] == 6
    for out in ("one", "two", "three"):
        assert (tmp_path / f"{out}.jsonl").read_bytes() == (tmp_path / "ref.jsonl").read_bytes()


def test_without_a_secret_the_cli_makes_one_in_the_users_config_dir(tmp_path, source):
    env = {k: v for k, v in os.environ.items() if k != NANODATA_CACHE_SECRET}
    env["XDG_CONFIG_HOME"] = str(tmp_path / "config")
    args = [NANODATA, "chunk", "--inputs", str(source[0]), "--cache", str(tmp_path / "cache"), "--no-progress"]
    for out in ("one", "two"):
        subprocess.run(args + ["--output", str(tmp_path / f"{out}.jsonl")], check=True, capture_output=True, env=env)
    secret = tmp_path / "config" / "nanodata" / "cache_secret"
    assert secret.stat().st_mode & 0o777 == 0o600 and len(secret.read_bytes()) == 32
    assert json.loads((tmp_path / "two.jsonl.done").read_text())["reuse"]["files_reused"] == 2
    secret.chmod(0o644)
    result = subprocess.run(args + ["--output", str(tmp_path / "three.jsonl")], capture_output=True, text=True,
                            env=env)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert f"cache secret {secret}: mode 0644 lets others read it" in result.stderr
