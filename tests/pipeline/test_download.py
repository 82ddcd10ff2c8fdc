"""nanodata.pipeline.download against a real local HTTP server that injects 500s, drops, truncation, garbage."""

import subprocess
import sys
import time

import pytest
from corpus import write_corpus
from hypothesis import given, settings
from hypothesis import strategies as st
from support.fault_server import FaultServer
from support.ports import free_port

from nanodata.errors import NanodataError
from nanodata.pipeline import download
from nanodata.pipeline.download import download_shards, download_single_file


@pytest.fixture
def remote(tmp_path):
    """A server publishing 4 parquet shards shard_00000..3."""
    write_corpus(tmp_path / "remote", n_files=4, docs_per_file=50)
    with FaultServer(tmp_path / "remote") as server:
        yield server


def fast(**kw):
    return dict(backoff_base=0.0, progress=False, **kw)


def assert_same_files(src, dst, n):
    for i in range(n):
        name = f"shard_{i:05d}.parquet"
        assert (dst / name).read_bytes() == (src / name).read_bytes()
    assert not list(dst.glob("*.tmp"))


def test_downloads_all_shards(remote, tmp_path):
    out = tmp_path / "data"
    result = download_shards(remote.url, 4, out, workers=2, **fast())
    assert result["downloaded"] == [f"shard_{i:05d}.parquet" for i in range(4)]
    assert result["failed"] == {} and result["skipped"] == []
    assert_same_files(remote.root, out, 4)


def test_retries_500_drop_truncate_garbage_then_succeeds(remote, tmp_path):
    remote.faults = {"shard_00000.parquet": ["500", "500"], "shard_00001.parquet": ["drop"],
                     "shard_00002.parquet": ["truncate", "garbage"],
                     "shard_00003.parquet": ["truncate", "cut", "cut", "404"]}
    result = download_shards(remote.url, 4, tmp_path / "data", workers=3, attempts=5, **fast())
    assert sorted(result["failed"]) == ["shard_00003.parquet"]  # a 404 is final, not retried
    assert "HTTP 404" in result["failed"]["shard_00003.parquet"]
    assert [remote.hits[f"shard_{i:05d}.parquet"] for i in range(4)] == [3, 2, 3, 4]
    remote.faults = {"shard_00003.parquet": ["cut"] * 4}
    assert download_shards(remote.url, 4, tmp_path / "data", attempts=5, **fast())["downloaded"] == [
        "shard_00003.parquet"]
    assert remote.hits["shard_00003.parquet"] == 9
    assert_same_files(remote.root, tmp_path / "data", 4)


def test_final_failure_named_others_finish(remote, tmp_path):
    remote.faults = {"shard_00001.parquet": ["500"] * 10, "shard_00002.parquet": ["truncate"] * 10}
    result = download_shards(remote.url, 4, tmp_path / "data", workers=2, attempts=3, **fast())
    assert sorted(result["failed"]) == ["shard_00001.parquet", "shard_00002.parquet"]
    assert "HTTP 500" in result["failed"]["shard_00001.parquet"]
    assert "3 attempt" in result["failed"]["shard_00002.parquet"]
    assert result["downloaded"] == ["shard_00000.parquet", "shard_00003.parquet"]
    assert remote.hits["shard_00001.parquet"] == 3 and remote.hits["shard_00002.parquet"] == 3
    names = sorted(p.name for p in (tmp_path / "data").iterdir())
    assert names == ["shard_00000.parquet", "shard_00003.parquet"]  # no partials, no .tmp


def test_bad_url_404_is_not_retried(remote, tmp_path):
    with pytest.raises(NanodataError, match=r"shard_00000\.parquet.*HTTP 404"):
        download_single_file(0, remote.url + "/no/such/dir", tmp_path / "data", backoff_base=0.0)
    assert remote.hits["no/such/dir/shard_00000.parquet"] == 1


@pytest.mark.parametrize("url", ["not a url", "ftp://host/data", "http://"])
def test_malformed_base_url_is_rejected_before_any_attempt(url, tmp_path):
    with pytest.raises(NanodataError, match="--base-url must be an http"):
        download_shards(url, 2, tmp_path / "data", **fast())
    assert not (tmp_path / "data").exists()


def test_backoff_is_exponential_with_jitter_up_to_2_4_8_16(remote, tmp_path, monkeypatch, caplog):
    waits = []
    monkeypatch.setattr(time, "sleep", waits.append)  # the stdlib clock the retry policy sleeps on
    remote.faults = {"shard_00000.parquet": ["500"] * 5}
    with pytest.raises(NanodataError, match="5 attempt"):
        download_single_file(0, remote.url, tmp_path / "data")
    assert len(waits) == 4 and all(0 <= w <= ceiling for w, ceiling in zip(waits, [2, 4, 8, 16], strict=False))
    assert len(set(waits)) == 4  # randomized, so parallel downloads do not retry in lockstep
    retries = [r.getMessage() for r in caplog.records if "retry" in r.getMessage()]
    assert [m.split("; ")[-1] for m in retries] == [f"retry {k}/4 in up to {c:.2f}s" for k, c in
                                                    zip(range(1, 5), [2, 4, 8, 16], strict=False)]
    assert all(m.startswith("shard_00000.parquet: HTTPError") for m in retries)


def test_present_valid_files_skipped_corrupt_ones_replaced(remote, tmp_path):
    out = tmp_path / "data"
    download_shards(remote.url, 4, out, **fast())
    (out / "shard_00002.parquet").write_bytes(b"PAR1 truncated junk")
    (out / "shard_00003.parquet.tmp").write_bytes(b"left over by a crash")
    remote.hits.clear()
    result = download_shards(remote.url, 4, out, **fast())
    assert result["skipped"] == ["shard_00000.parquet", "shard_00001.parquet", "shard_00003.parquet"]
    assert result["downloaded"] == ["shard_00002.parquet"]
    assert dict(remote.hits) == {"shard_00002.parquet": 1}
    assert_same_files(remote.root, out, 4)


def test_name_template_for_other_layouts(tmp_path):
    write_corpus(tmp_path / "remote", n_files=2, docs_per_file=10, names="{:03d}_00000.parquet")
    with FaultServer(tmp_path / "remote") as server:
        result = download_shards(server.url, 2, tmp_path / "data", name_template="{index:03d}_00000.parquet",
                                 **fast())
    assert result["downloaded"] == ["000_00000.parquet", "001_00000.parquet"]
    with pytest.raises(NanodataError, match="name-template"):
        download_shards(server.url, 1, tmp_path / "data", name_template="shard_{i}.parquet", **fast())


def test_unreachable_host_fails_fast_and_leaves_nothing(tmp_path):
    url = f"http://127.0.0.1:{free_port()}"
    result = download_shards(url, 6, tmp_path / "data", workers=1, attempts=3, **fast())
    assert result["unreachable"] and len(result["failed"]) == 6
    first = result["failed"]["shard_00000.parquet"]
    assert first.startswith("cannot reach 127.0.0.1") and "connection refused" in first
    assert "not attempted" in result["failed"]["shard_00005.parquet"]
    assert not (tmp_path / "data").exists()  # not even the directory: nothing arrived


def test_unresolvable_host_name(tmp_path):
    with pytest.raises(download.HostUnreachable, match="cannot reach no-such-host.invalid"):
        download_single_file(0, "http://no-such-host.invalid/data", tmp_path / "data", attempts=1)


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "nanodata.cli", "download", *args],
                          capture_output=True, text=True, timeout=120)


def test_cli_offline_is_one_line_no_traceback(tmp_path):
    proc = run_cli("--base-url", f"http://127.0.0.1:{free_port()}", "--num-shards", "3",
                   "--dir", str(tmp_path / "data"), "--backoff-base", "0")
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1 and "cannot reach 127.0.0.1" in errors[0]
    assert not (tmp_path / "data").exists() or not list((tmp_path / "data").iterdir())


def test_cli_reports_failed_shard_by_name_and_exits_nonzero(remote, tmp_path):
    remote.faults = {"shard_00002.parquet": ["500"] * 10}
    proc = run_cli("--base-url", remote.url, "--num-shards", "4", "--dir", str(tmp_path / "data"),
                   "--workers", "2", "--attempts", "2", "--backoff-base", "0")
    assert proc.returncode == 2
    assert "shard_00002.parquet" in proc.stderr and "Traceback" not in proc.stderr
    assert "3 downloaded" in proc.stdout
    assert len(list((tmp_path / "data").glob("*.parquet"))) == 3


BAD_ARGS = [
    (["--backoff-base", "-1"], "argument --backoff-base: -1 is out of range: must be a finite number >= 0 and <= 30"),
    (["--backoff-base", "nan"], "argument --backoff-base: nan is out of range"),
    (["--attempts", "0"], "argument --attempts: 0 is out of range: must be a whole number >= 1 and <= 1000"),
    (["--timeout", "0"], "argument --timeout: 0 is out of range: must be a finite number > 0 and <= 86400"),
    (["--timeout", "inf"], "argument --timeout: inf is out of range"),
    (["--workers", "0"], "argument --workers: 0 is out of range"),
    (["--num-shards=-2"], "argument --num-shards: -2 is out of range"),
    (["--name-template", "shard.parquet"], "--name-template 'shard.parquet' gives two shards the name 'shard.parquet'"),
    (["--name-template", "../{index}.parquet"], "--name-template '../{index}.parquet' must give a plain file name"),
    (["--name-template", "{index.x}.parquet"], "--name-template '{index.x}.parquet': cannot format with index=0"),
    (["--base-url", "http://host:port/data"], "--base-url must be an http(s) URL"),
]


@pytest.mark.parametrize("extra, says", BAD_ARGS)
def test_cli_bad_argument_is_one_line_before_any_request(remote, tmp_path, extra, says):
    proc = run_cli("--base-url", remote.url, "--num-shards", "3", "--dir", str(tmp_path / "data"), *extra)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith(f"nanodata download: error: {says}") and len(proc.stderr.splitlines()) == 1
    assert remote.requests == [] and not (tmp_path / "data").exists()


def test_cli_dir_that_is_a_file(remote, tmp_path):
    (tmp_path / "data").write_bytes(b"not a dir")
    proc = run_cli("--base-url", remote.url, "--num-shards", "3", "--dir", str(tmp_path / "data"))
    assert proc.returncode == 2 and "exists and is not a directory" in proc.stderr and remote.requests == []
    proc = run_cli("--base-url", remote.url, "--num-shards", "3", "--dir", str(tmp_path / "data" / "under"))
    assert proc.returncode == 2 and "data is not a directory" in proc.stderr and remote.requests == []


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=40), st.text(max_size=40))
def test_any_template_and_url_are_checked_or_one_line_errors(template, url):
    for check in (lambda: download.shard_names(12, template), lambda: download.check_base_url(url)):
        try:
            got = check()
        except NanodataError as exc:
            assert "\n" not in str(exc) and "\r" not in str(exc)
            continue
        if isinstance(got, list):  # distinct plain names
            assert len(set(got)) == 12 and all("/" not in n and n not in (".", "..") for n in got)
