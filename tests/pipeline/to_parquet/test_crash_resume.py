"""kill -9 a to-parquet run at random points, re-run it: the shards are byte-identical to an uninterrupted run."""

import json
import os
import random
import signal
import subprocess
import sys
import time

from jsonl_corpus import file_bytes, make_records, write_jsonl

from nanodata.pipeline.to_parquet import jsonl_to_parquet

PARAMS = {"rows_per_file": 500, "row_group_size": 128, "val_fraction": 0.05, "seed": 3}


def shards_done(out):
    try:
        return len(json.loads((out / "_progress.json").read_text())["state"]["shards"])
    except FileNotFoundError:
        return 0


def test_kill_9_at_random_points_then_rerun_gives_identical_shards(tmp_path):
    records = make_records(30000, seed=11)
    bad = ["{torn line", '{"text": ""}', '{"no_text": 1}']
    src = write_jsonl(tmp_path / "docs.jsonl", records[:15000], extra_lines=bad)
    with open(src, "a") as f:  # bad lines in the middle of the input, not only at the end
        for r in records[15000:]:
            f.write(json.dumps(r) + "\n")
    reference = jsonl_to_parquet([src], tmp_path / "reference", **PARAMS)

    out = tmp_path / "killed"
    cmd = [sys.executable, "-m", "nanodata.cli", "to-parquet", "--input", str(src), "--out", str(out),
           "--rows-per-file", "500", "--row-group-size", "128", "--val-fraction", "0.05", "--seed", "3"]
    env = dict(os.environ, TQDM_DISABLE="1")
    rng = random.Random(2024)
    kills, progress_at_kill = 0, []
    for _ in range(6):
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        before = shards_done(out)
        deadline = time.monotonic() + 60
        while proc.poll() is None and shards_done(out) <= before and time.monotonic() < deadline:
            time.sleep(0.002)  # wait until this run has made progress of its own, then strike at random
        time.sleep(rng.uniform(0, 0.04))
        if proc.poll() is not None:
            break
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        kills += 1
        progress_at_kill.append(shards_done(out))
    assert kills >= 3, f"only {kills} kill(s) landed"
    assert progress_at_kill == sorted(progress_at_kill)
    assert sum(n < len(reference["shards"]) for n in progress_at_kill) >= 2  # most strike in the middle

    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads((out / "manifest.json").read_text()) == reference
    assert file_bytes(out) == file_bytes(tmp_path / "reference")
    assert reference["bad_lines"]["invalid_json"]["count"] == 1 and reference["total_rows"] == 30000
    assert not list(out.glob("*.tmp"))
