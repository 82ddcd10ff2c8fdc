"""nanodata.report: report.json, hand-written SVG plots and index.html of a built corpus."""

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from corpus import make_docs
from nanodata import report
from nanodata.errors import NanodataError
from nanodata.loader.packing import simulate_crop_fraction

SVG = "{http://www.w3.org/2000/svg}"
MODES = ["basic", "dep-aware", "compilable"]


def write_built_corpus(build_dir: Path, lengths_per_shard: list[list[int]]) -> Path:
    """Shards shaped like the chunker's output (text, n_tokens, mode) plus a manifest; the last shard is val."""
    build_dir.mkdir(parents=True, exist_ok=True)
    entries = []
    for i, lengths in enumerate(lengths_per_shard):
        name = "val_shard.parquet" if i == len(lengths_per_shard) - 1 else f"shard_{i:05d}.parquet"
        table = pa.table({"text": [f"int f{i}_{j}();" for j in range(len(lengths))],
                          "n_tokens": pa.array(lengths, pa.int64()),
                          "mode": [MODES[j % len(MODES)] for j in range(len(lengths))]})
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


def svg_bars(path: Path) -> list[float]:
    """Bar heights of a chart, from the parsed SVG (so the file must be well-formed XML)."""
    root = ET.parse(path).getroot()
    assert root.tag == f"{SVG}svg"
    return [float(r.get("height")) for r in root.iter(f"{SVG}rect") if r.find(f"{SVG}title") is not None]


def test_report_counts_plots_and_crop(built):
    build_dir, lengths = built
    index = report.write_report(build_dir)
    assert index == build_dir / "report" / "index.html"
    data = json.loads((index.parent / "report.json").read_text())
    everything = [n for shard in lengths for n in shard]
    assert data["docs"] == len(everything) == data["manifest"]["total_rows"]
    assert data["tokens"] == sum(everything)
    assert data["token_counts_from"] == "n_tokens column"
    assert data["complete"] is True
    assert data["doc_tokens"]["max"] == max(everything) and data["doc_tokens"]["min"] == min(everything)
    assert sum(data["doc_tokens_histogram"].values()) == len(everything)
    assert data["modes"] == {m: sum(1 for s in lengths for j in range(len(s)) if MODES[j % 3] == m) for m in MODES}
    assert [s["split"] for s in data["shards"]] == ["train", "train", "val"]
    assert [s["rows"] for s in data["shards"]] == [len(s) for s in lengths]
    # the crop figures are the loader's packing replayed on the train docs only, in shard order
    train = lengths[0] + lengths[1]
    assert data["crop_fraction"] == {str(T): round(simulate_crop_fraction(train, T), 6) for T in report.CROP_T}
    assert data["crop_fraction"]["1024"] > data["crop_fraction"]["4096"] > 0  # docs up to 3000 tokens
    assert data["crop_fraction"]["16384"] < data["crop_fraction"]["1024"]

    assert len(svg_bars(index.parent / "doc_tokens.svg")) == len(data["doc_tokens_histogram"])
    assert len(svg_bars(index.parent / "docs_per_mode.svg")) == 3
    shard_bars = svg_bars(index.parent / "shard_sizes.svg")
    sizes = [s["bytes"] for s in data["shards"]]
    assert shard_bars.index(max(shard_bars)) == sizes.index(max(sizes))  # tallest bar = largest shard
    crop_bars = svg_bars(index.parent / "crop_fraction.svg")
    assert crop_bars == sorted(crop_bars, reverse=True) and crop_bars[0] > 0
    html = index.read_text()
    for name in report.PLOTS:
        assert f'src="{name}"' in html
    assert "report.json" in html and "val_shard.parquet" in html


def test_text_only_corpus_is_tokenized(corpus_dir, tokenizer):
    """Shards with only a text column (no chunker metadata): tokens counted with the tokenizer."""
    index = report.write_report(corpus_dir, corpus_dir.parent / "out")
    data = json.loads((index.parent / "report.json").read_text())
    texts = [t for p in sorted(corpus_dir.glob("*.parquet")) for t in pq.read_table(p)["text"].to_pylist()]
    assert data["docs"] == len(texts) == 1200
    assert data["tokens"] == sum(tokenizer.count_tokens(t) for t in texts)
    assert data["token_counts_from"] == "tokenized with cl100k_base"
    assert data["modes"] == {"(no mode column)": 1200}
    assert data["manifest"] is None and data["shards"][-1]["split"] == "val"  # no manifest: last file is val
    assert not (corpus_dir / "report").exists()  # --out honoured


def test_report_is_deterministic(built, tmp_path):
    build_dir, _ = built
    a = report.write_report(build_dir, tmp_path / "a").parent
    b = report.write_report(build_dir, tmp_path / "b").parent
    names = sorted(p.name for p in a.iterdir())
    assert names == sorted([*report.PLOTS, "report.json", "index.html"])  # no temp files left behind
    assert all((a / n).read_bytes() == (b / n).read_bytes() for n in names)


def test_bad_input_names_the_file(tmp_path):
    with pytest.raises(NanodataError, match="does not exist"):
        report.write_report(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(NanodataError, match="no parquet shards|no train"):
        report.write_report(tmp_path / "empty")
    bad = tmp_path / "bad"
    bad.mkdir()
    for name in ("a.parquet", "val.parquet"):
        pq.write_table(pa.table({"text": ["x"], "n_tokens": ["7"]}), bad / name)
    with pytest.raises(NanodataError, match=r"a\.parquet: column n_tokens"):
        report.write_report(bad)


def test_cli(built, tmp_path):
    build_dir, lengths = built
    out = tmp_path / "cli_out"
    proc = subprocess.run([sys.executable, "-m", "nanodata.cli", "report", str(build_dir), "--out", str(out)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert f"{sum(map(len, lengths))} docs" in proc.stdout and str(out / "index.html") in proc.stdout
    assert (out / "crop_fraction.svg").is_file()
    proc = subprocess.run([sys.executable, "-m", "nanodata.cli", "report", str(tmp_path / "nope")],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "nope does not exist" in proc.stderr


def test_find_builds_and_ensure_report(built, tmp_path):
    build_dir, _ = built
    root = build_dir.parent
    (root / ".staging" / "k" / "parquet").mkdir(parents=True)
    (root / ".staging" / "k" / "parquet" / "manifest.json").write_text("{}")  # work dirs are not builds
    write_built_corpus(root / "builds" / "abc", [[5, 6, 7], [8]])
    assert report.find_builds(root) == ["build", "builds/abc"]

    out = Path(report.ensure_report(build_dir))
    first = (out / "report.json").read_bytes()
    assert json.loads(first)["source_fingerprint"] == report.source_fingerprint(build_dir)
    assert report.ensure_report(build_dir) == str(out) and (out / "report.json").read_bytes() == first
    write_built_corpus(build_dir, [[1, 2], [3]])  # a rebuild changes the manifest: the report follows
    report.ensure_report(build_dir)
    assert json.loads((out / "report.json").read_text())["docs"] == 3
