"""`nanodata sync` checks every argument before any work: one line naming the parameter and its value, exit 2,
no request to the storage server, no directory created."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.fault_server import FaultServer

from nanodata import storage
from nanodata.cli import main as cli_main
from nanodata.errors import NanodataError

NANODATA = str(Path(sys.executable).with_name("nanodata"))


@pytest.fixture
def listener(tmp_path):
    """An HTTP server standing in for GCS: it records every request, so a test can show none was made."""
    with FaultServer(tmp_path) as server:
        yield server


@pytest.fixture
def run_sync(listener, monkeypatch, capsys):
    """`nanodata sync ARGS` in this process (the CLI's own main), pointed at the listener."""
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", listener.url)

    def run(*args):
        capsys.readouterr()
        code = cli_main(["sync", *map(str, args)])
        out, err = capsys.readouterr()
        return subprocess.CompletedProcess(args, code, out, err)

    return run


def test_the_reported_commands_as_real_processes(tmp_path, listener):
    """The issue's two reports, run as real `nanodata` processes: a one-line error instead of per-file noise."""
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.parquet").write_bytes(b"data")
    env = dict(os.environ, STORAGE_EMULATOR_HOST=listener.url, GOOGLE_CLOUD_PROJECT="nanodata-test")
    for args, says in ((["--attempts", "0"], "argument --attempts: 0 is out of range: must be a whole number >= 1 "
                                             "and <= 1000 (see nanodata sync --help)"),
                       (["--backoff=-1"], "argument --backoff: -1 is out of range: must be a finite number >= 0 "
                                          "and <= 30 (see nanodata sync --help)")):
        got = subprocess.run([NANODATA, "sync", str(tmp_path / "src"), str(tmp_path / "dst"), *args],
                             capture_output=True, text=True, timeout=120, env=env)
        assert (got.returncode, got.stdout, got.stderr) == (2, "", f"nanodata sync: error: {says}\n")
    got = subprocess.run([NANODATA, "sync", str(tmp_path / "src"), "gs://Corpus_Bucket/c"],
                         capture_output=True, text=True, timeout=120, env=env)
    assert got.returncode == 2 and got.stderr.startswith("nanodata sync: error: 'gs://Corpus_Bucket/c': invalid "
                                                         "bucket name 'Corpus_Bucket'")
    assert listener.requests == [] and not (tmp_path / "dst").exists()


BAD_NUMBERS = [
    (["--attempts", "0"], "--attempts", "0"),
    (["--attempts", "-3"], "--attempts", "-3"),
    (["--backoff", "-1"], "--backoff", "-1"),
    (["--backoff", "nan"], "--backoff", "nan"),
    (["--backoff", "3600"], "--backoff", "3600"),
    (["--deadline", "0"], "--deadline", "0"),
    (["--workers", "0"], "--workers", "0"),
    (["--poll-interval", "0"], "--poll-interval", "0"),
    (["--poll-interval", "inf"], "--poll-interval", "inf"),
]


@pytest.mark.parametrize("direction", ["up", "down"])
@pytest.mark.parametrize("extra, flag, value", BAD_NUMBERS)
def test_bad_number_is_one_line_before_any_work(tmp_path, listener, run_sync, direction, extra, flag, value):
    src = tmp_path / "src"
    src.mkdir()
    (src / "shard_00000.parquet").write_bytes(b"data")
    local = tmp_path / "dst"
    args = [src, "gs://good-bucket/c"] if direction == "up" else ["gs://good-bucket/c", local]
    got = run_sync(*args, *extra)
    assert got.returncode == 2 and got.stdout == ""
    assert len(got.stderr.strip().splitlines()) == 1, got.stderr
    assert flag in got.stderr and value in got.stderr and "Traceback" not in got.stderr
    assert listener.requests == [] and not local.exists()


@pytest.mark.parametrize("uri, says", [
    ("gs://Bad_Bucket/c", "invalid bucket name 'Bad_Bucket'"),
    ("gs://ab/c", "invalid bucket name 'ab'"),
    ("gs://-bucket/c", "invalid bucket name '-bucket'"),
    ("gs://bucket-/c", "invalid bucket name 'bucket-'"),
    ("gs://" + "a" * 64 + "/c", "invalid bucket name"),
    ("gs://bu cket/c", "invalid bucket name 'bu cket'"),
    ("gs:/bucket/c", "malformed gs:// URI"),
    ("GS://bucket/c", "malformed gs:// URI"),
    ("gs://", "no bucket name"),
    ("gs:///c", "no bucket name"),
    ("gs://bucket/a//b", "malformed gs:// URI"),
    ("gs://bucket/a/../b", "malformed gs:// URI"),
])
def test_malformed_uri_or_bucket_name_is_named_before_any_request(tmp_path, listener, run_sync, uri, says):
    (tmp_path / "src").mkdir()
    for args in ([tmp_path / "src", uri], [uri, tmp_path / "dst"]):
        got = run_sync(*args)
        assert got.returncode == 2 and len(got.stderr.strip().splitlines()) == 1, got.stderr
        assert says in got.stderr and uri in got.stderr and "does not exist" not in got.stderr
    assert listener.requests == [] and not (tmp_path / "dst").exists()


def test_local_sides_checked(tmp_path, listener, run_sync):
    (tmp_path / "file").write_bytes(b"x")
    (tmp_path / "src").mkdir()
    got = run_sync(tmp_path / "src", tmp_path / "file")
    assert got.returncode == 2 and "destination is a file" in got.stderr and str(tmp_path / "file") in got.stderr
    got = run_sync(tmp_path / "file", "gs://good-bucket/c")
    assert got.returncode == 2 and "source directory does not exist (it is a file)" in got.stderr
    assert listener.requests == []


def test_valid_names_pass(tmp_path):
    for name in ("abc", "my-bucket_1", "a.b.c", "1" * 63, ".".join(["a" * 63] * 3)):
        assert storage.parse_gs(f"gs://{name}/p/q/") == (name, "p/q/")
    assert storage.parse_gs("gs://bucket") == ("bucket", "")
    assert storage.parse_gs(str(tmp_path)) is None


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.text(), st.text().map(lambda t: "gs://" + t)))
def test_any_uri_parses_or_is_one_line_error(uri):
    try:
        got = storage.parse_gs(uri)
    except NanodataError as exc:
        assert "\n" not in str(exc) and "\r" not in str(exc)
        return
    if got is not None:
        bucket, prefix = got
        assert storage.valid_bucket_name(bucket) and (prefix == "" or prefix.endswith("/"))
        assert "//" not in prefix and not prefix.startswith("/")
