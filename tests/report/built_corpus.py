"""A built corpus as the DAG leaves it: chunker-shaped shards (text, n_tokens, mode, source, kind) + manifest +
_COMPLETE."""

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

MODES = ["basic", "dep-aware", "compilable"]
KINDS = ["file", "chunk", "split", "chunk"]  # the chunker's kinds, chunks the most common
PROJECTS = ["boost", "llvm", "fmt.jsonl"]  # the third as a JSONL input names its records: "fmt.jsonl:LINE"


def source_of(j: int) -> str:
    project = PROJECTS[j % len(PROJECTS)]
    return f"{project}:{j}" if project.endswith(".jsonl") else f"{project}/src/f{j}.cpp"


def write_built_corpus(build_dir: Path, lengths_per_shard: list[list[int]]) -> Path:
    """Shards shaped like the chunker's output (text, n_tokens, mode, source, kind) plus a manifest; the last
    shard is val. Doc j of a shard has mode MODES[j % 3], kind KINDS[j % 4] and source source_of(j)."""
    build_dir.mkdir(parents=True, exist_ok=True)
    entries = []
    for i, lengths in enumerate(lengths_per_shard):
        name = "val_shard.parquet" if i == len(lengths_per_shard) - 1 else f"shard_{i:05d}.parquet"
        table = pa.table({"text": [f"int f{i}_{j}();" for j in range(len(lengths))],
                          "n_tokens": pa.array(lengths, pa.int64()),
                          "mode": [MODES[j % len(MODES)] for j in range(len(lengths))],
                          "source": [source_of(j) for j in range(len(lengths))],
                          "kind": [KINDS[j % len(KINDS)] for j in range(len(lengths))]})
        pq.write_table(table, build_dir / name, row_group_size=64)
        entries.append({"name": name, "rows": len(lengths), "bytes": (build_dir / name).stat().st_size,
                        "sha256": "0" * 64, "crc32c": "AAAAAA==", "tokens": sum(lengths)})
    manifest = {"version": 1, "shards": entries[:-1], "val": entries[-1], "bad_lines": {"count": 0},
                "total_rows": sum(e["rows"] for e in entries), "created_by": "nanodata test"}
    (build_dir / "manifest.json").write_text(json.dumps(manifest))
    (build_dir / "_COMPLETE").write_text("")
    return build_dir


@pytest.fixture
def built(tmp_path):
    lengths = [[(37 * j) % 3000 + 1 for j in range(s * 50, s * 50 + 150)] for s in range(3)]
    return write_built_corpus(tmp_path / "build", lengths), lengths
