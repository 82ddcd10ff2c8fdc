"""nanodata.report: report.json, hand-written SVG plots and index.html of a built corpus."""

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from built_corpus import MODES
from nanodata import report
from nanodata.errors import NanodataError
from nanodata.loader.packing import simulate_crop_fraction

SVG = "{http://www.w3.org/2000/svg}"


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


def test_report_of_a_real_to_parquet_build(tmp_path):
    """The contract with nanodata.parquet: its shards keep the chunker's n_tokens and mode columns."""
    from nanodata.parquet import jsonl_to_parquet

    docs = [{"text": f"int f{i}() {{ return {i}; }}" * (1 + i % 7), "n_tokens": 9 * (1 + i % 7),
             "mode": MODES[i % 2], "source": f"p/f{i}.cpp", "kind": "function"} for i in range(300)]
    jsonl = tmp_path / "docs.jsonl"
    jsonl.write_text("".join(json.dumps(d) + "\n" for d in docs))
    manifest = jsonl_to_parquet([jsonl], tmp_path / "build", rows_per_file=100, val_fraction=0.1)
    data = json.loads((report.write_report(tmp_path / "build").parent / "report.json").read_text())
    assert data["token_counts_from"] == "n_tokens column"
    assert data["docs"] == manifest["total_rows"] == 300
    assert data["tokens"] == sum(d["n_tokens"] for d in docs)
    assert data["modes"] == {MODES[0]: 150, MODES[1]: 150}
    assert len(data["shards"]) == len(manifest["shards"]) + 1 and data["shards"][-1]["split"] == "val"


def run_report(*argv) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nanodata.cli", "report", *map(str, argv)],
                          capture_output=True, text=True)


def test_report_of_plain_text_jsonl_counts_tokens_with_its_tokenizer(tmp_path, tokenizer):
    """to-parquet over {"text"} lines (no chunker metadata) writes an all-null n_tokens column; over a mix,
    a partly null one. The report counts every doc with its tokenizer then, and says so."""
    from nanodata.parquet import jsonl_to_parquet

    texts = [f"int f{i}() {{ return {i * i}; }} // plain doc {i}\n" * (1 + i % 5) for i in range(250)]
    plain = tmp_path / "plain.jsonl"
    plain.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    mixed = tmp_path / "mixed.jsonl"  # half the docs carry a (wrong) n_tokens: the tokenizer decides for all
    mixed.write_text("".join(json.dumps({"text": t, **({"n_tokens": 1} if i % 2 else {})}) + "\n"
                             for i, t in enumerate(texts)))
    for src in (plain, mixed):
        build = tmp_path / src.stem
        jsonl_to_parquet([src], build, rows_per_file=100, row_group_size=32, val_fraction=0.1)
        proc = run_report(build)
        assert proc.returncode == 0, proc.stderr
        data = json.loads((build / "report" / "report.json").read_text())
        assert data["docs"] == 250 and data["token_counts_from"] == "tokenized with cl100k_base"
        assert data["tokens"] == sum(tokenizer.count_tokens(t) for t in texts) > 250 * 10
        assert f"250 docs, {data['tokens']} tokens" in proc.stdout
        assert sum(s["tokens"] for s in data["shards"]) == data["tokens"]
        assert data["doc_tokens"]["max"] == max(tokenizer.count_tokens(t) for t in texts)


def test_bad_arguments_are_one_line_errors_before_any_work(built, tmp_path):
    build_dir, _ = built
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    for argv, expected in [((a_file,), f"build dir {a_file}: is a file, not a directory"),
                           ((build_dir, "--out", a_file), f"--out {a_file}: {a_file} is a file, not a directory"),
                           ((build_dir, "--out", a_file / "r"), f"--out {a_file / 'r'}: {a_file} is a file"),
                           ((build_dir, "--tokenizer", tmp_path / "no_such_tokenizer"), "no_such_tokenizer")]:
        proc = run_report(*argv)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and expected in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr
    assert not (build_dir / "report").exists() and a_file.read_text() == "x"
