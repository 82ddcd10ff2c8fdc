"""The corpus DAG's steps with `resolver=clang`: the same corpus for any partition size, equal to one CLI run."""

import json
import sys
from pathlib import Path

import pytest
from dag_data import run_steps

from nanodata.errors import NanodataError
from nanodata.jobs import cpp_corpus
from nanodata.pipeline.chunkbuild import chunk_to_jsonl
from nanodata.pipeline.to_parquet import jsonl_to_parquet
from nanodata.report import build_stats
from nanodata.report.corpus_report import report_build
from nanodata.report.page import CLANG_TITLE

sys.path.append(str(Path(__file__).parents[1] / "pipeline" / "chunking"))
from test_clang_resolver import ALPHA, BETA, _tree  # noqa: E402  (the C++ written for the clang tests)
from test_partitions import _build_files, _rows  # noqa: E402

PARAMS = {"mode": "cross-file", "resolver": "clang", "max_tokens": 256, "tokenizer": "cl100k_base",
          "rows_per_file": 40, "val_fraction": 0.1}


def test_the_dag_builds_what_the_cli_does_with_clang_for_any_partition_size(tmp_path):
    src = _tree(tmp_path / "src")
    docs = tmp_path / "cli" / "docs.jsonl"
    chunk_to_jsonl(docs, project_dirs=[src], mode=PARAMS["mode"], resolver="clang", max_tokens=PARAMS["max_tokens"])
    manifest = jsonl_to_parquet([str(docs)], tmp_path / "cli" / "parquet", rows_per_file=PARAMS["rows_per_file"],
                                val_fraction=PARAMS["val_fraction"], seed=cpp_corpus.SEED)
    cli = _rows(tmp_path / "cli" / "parquet", manifest)
    counted = _counts(json.loads(docs.with_name(docs.name + ".done").read_text())["clang"])
    assert counted["files_clang"] > 0 and counted["pulls_gained"] > 0
    builds = []
    for partition_mb in (0.0005, 256):
        dest = str(tmp_path / f"dest-{partition_mb}")
        planned, _, _ = run_steps(src, dest, PARAMS, partition_mb)
        build = Path(dest) / "builds" / planned["key"]
        assert _rows(build, json.loads((build / "manifest.json").read_text())) == cli, partition_mb
        builds.append(_build_files(dest, planned["key"]))
        # the build's report counts the clang resolver as the CLI's summary does: files, references, pulls
        extras = build_stats.report_extras(planned["stage"])
        assert _counts(extras["clang"]) == counted, partition_mb
        page = Path(report_build(str(build), max_tokens=PARAMS["max_tokens"], **extras)).read_text()
        assert CLANG_TITLE in page and "use_alpha.cc" in page
    assert builds[0] == builds[1]
    def text(source: str) -> str:
        return "".join(row[0] for rows in cli for row in rows if row[3] == source)

    assert ALPHA in text("proj/use_alpha.cc") and BETA in text("proj/use_beta.cc")  # pulled by clang


def _counts(clang: dict) -> dict:
    """The clang figures summed over projects, examples left out (which are kept depends on the order)."""
    totals: dict = {}
    for figures in clang.values():
        for name, value in figures.items():
            if not isinstance(value, list):
                totals[name] = totals.get(name, 0) + value
    return totals


def test_plan_refuses_clang_over_a_source_that_is_not_a_local_tree(tmp_path):
    """clang parses each file in its tree with its includes: a JSONL source (or a bucket) would make every file
    fall back to names, so plan stops at once, before any work."""
    source = tmp_path / "crawl.jsonl"
    source.write_text(json.dumps({"text": "int f() { return 1; }\n", "path": "f.cc"}) + "\n")
    with pytest.raises(NanodataError, match="source .*crawl.jsonl is not a directory"):
        cpp_corpus.plan(str(source), str(tmp_path / "dest"), PARAMS)
    assert not (tmp_path / "dest").exists()
