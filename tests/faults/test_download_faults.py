"""`nanodata download` when the local disk fills up: one line naming the file, no retries of a full disk, no
later shard attempted, nothing partial under a final name; a re-run with space ends as a clean download."""

import shutil

from corpus import write_corpus
from faults import nanodata_cmd, run, run_on_small_disk, same_tree
from support.fault_server import FaultServer


def test_full_disk_stops_with_one_line_and_rerun_is_clean(tmp_path):
    write_corpus(tmp_path / "remote", n_files=6, docs_per_file=400)  # ~100 KB each
    disk, keep = tmp_path / "disk", tmp_path / "keep"
    with FaultServer(tmp_path / "remote") as server:  # on 127.0.0.1, reachable from the mount namespace
        cmd = nanodata_cmd("download", "--base-url", server.url, "--num-shards", 6, "--dir", "data",
                           "--workers", 1, "--backoff-base", 0)
        done = run_on_small_disk(" ".join(cmd), disk, "256k", keep)
        assert done.returncode == 2, done.stderr
        assert done.stderr.startswith("nanodata download: error: data/shard_0000")
        assert "no space left on the device" in done.stderr and len(done.stderr.splitlines()) == 1, done.stderr
        full_at = done.stderr.split("data/")[1].split(":")[0]
        assert server.hits[full_at] == 1  # a full disk is not retried
        later = [f"shard_{i:05d}.parquet" for i in range(int(full_at[6:11]) + 1, 6)]
        assert later and not any(server.hits[name] for name in later)  # nor is any later shard started
        left = sorted(p.name for p in (keep / "data").iterdir())
        assert left and full_at not in left and not any(n.endswith(".tmp") for n in left)
        for name in left:  # whole files only
            assert (keep / "data" / name).read_bytes() == (tmp_path / "remote" / name).read_bytes()

        shutil.copytree(keep / "data", tmp_path / "again")
        rerun = run(nanodata_cmd("download", "--base-url", server.url, "--num-shards", 6, "--dir",
                                 tmp_path / "again"))
        assert rerun.returncode == 0, rerun.stderr
        assert f"{6 - len(left)} downloaded, {len(left)} already present" in rerun.stdout
    assert same_tree(tmp_path / "again", tmp_path / "remote") == []
