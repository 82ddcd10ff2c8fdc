"""Chunker-like JSONL inputs for the to-parquet tests, and readers for what it wrote."""

import json
from pathlib import Path

import pyarrow.parquet as pq
from corpus import make_docs


def make_records(n: int, seed: int = 0) -> list[dict]:
    docs = [d or f"nonempty {seed}-{i}" for i, d in enumerate(make_docs(n, seed=seed, max_words=120))]
    return [{"text": d, "n_tokens": len(d.split()), "mode": "basic", "source": f"src/f{seed}_{i}.cpp",
             "lines": [i + 1, i + 1 + len(d) % 40] if i % 5 else None, "kind": "function"}
            for i, d in enumerate(docs)]


def write_jsonl(path: Path, records, extra_lines=()) -> Path:
    with open(path, "w") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")
        for line in extra_lines:
            f.write(line + "\n")
    return path


def read_rows(out_dir: Path, manifest: dict) -> dict[str, list[dict]]:
    """{file name: rows} for every shard and the val shard the manifest names."""
    names = [s["name"] for s in manifest["shards"]] + ([manifest["val"]["name"]] if manifest["val"] else [])
    return {name: pq.read_table(Path(out_dir) / name).to_pylist() for name in names}


def file_bytes(out_dir: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(Path(out_dir).iterdir())
            if p.suffix == ".parquet" or p.name in ("manifest.json", "_COMPLETE")}
