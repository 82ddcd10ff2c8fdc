"""nanodata.report.corpus_report: report.json, hand-written SVG plots and index.html of a built corpus."""

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from built_corpus import KINDS, MODES, source_of, write_built_corpus

from nanodata.errors import NanodataError
from nanodata.loader.packing import simulate_crop_fraction
from nanodata.report import corpus_report as report
from nanodata.report import figures, page

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
    assert data["crop_fraction"] == {str(T): round(simulate_crop_fraction(train, T), 6) for T in figures.CROP_T}
    assert data["crop_fraction"]["1024"] > data["crop_fraction"]["4096"] > 0  # docs up to 3000 tokens
    assert data["crop_fraction"]["16384"] < data["crop_fraction"]["1024"]

    assert len(svg_bars(index.parent / "doc_tokens.svg")) == len(data["doc_tokens_histogram"])
    assert len(svg_bars(index.parent / "docs_by_kind.svg")) == 2 * 3  # % of docs and % of tokens per kind
    shard_bars = svg_bars(index.parent / "shard_sizes.svg")
    sizes = [s["bytes"] for s in data["shards"]]
    assert shard_bars.index(max(shard_bars)) == sizes.index(max(sizes))  # tallest bar = largest shard
    crop_bars = svg_bars(index.parent / "crop_fraction.svg")
    assert crop_bars == sorted(crop_bars, reverse=True) and crop_bars[0] > 0
    html = index.read_text()
    for name in page.PLOTS:
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
    assert data["modes"] == {"(not recorded)": 1200}
    assert data["kinds"] == {"(not recorded)": {"docs": 1200, "tokens": data["tokens"]}}
    assert data["manifest"] is None and data["shards"][-1]["split"] == "val"  # no manifest: last file is val
    assert not (corpus_dir / "report").exists()  # --out honoured


def test_report_is_deterministic(built, tmp_path):
    build_dir, _ = built
    a = report.write_report(build_dir, tmp_path / "a").parent
    b = report.write_report(build_dir, tmp_path / "b").parent
    names = sorted(p.name for p in a.iterdir())
    assert names == sorted([*page.PLOTS, "report.json", "index.html"])  # no temp files left behind
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


def test_cli_adds_the_chunk_summarys_ambiguous_names_per_project(built, tmp_path):
    """`nanodata report --chunk-summary OUTPUT.done`: the chunker's per-project counts, as a table on the page and
    in the output; a summary of a local mode has none, and says so."""
    build_dir, _ = built
    done = tmp_path / "docs.jsonl.done"
    done.write_text(json.dumps({"mode": "cross-file", "ambiguous_names": 7, "ambiguous_by_project": {"llvm": 5, "fmt": 2}}))
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "nanodata.cli", "report", str(build_dir), "--out", str(out),
                           "--chunk-summary", str(done)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    table = proc.stdout.split("Ambiguous names by project: 7 names")[1].splitlines()[1:4]
    assert [line.split() for line in table] == [["project", "ambiguous", "names"], ["llvm", "5"], ["fmt", "2"]]
    assert json.loads((out / "report.json").read_text())["ambiguity"]["ambiguous_by_project"] == {"llvm": 5, "fmt": 2}
    assert "<td>llvm</td><td>5</td>" in (out / "index.html").read_text()
    done.write_text(json.dumps({"mode": "basic"}))
    proc = subprocess.run([sys.executable, "-m", "nanodata.cli", "report", str(build_dir), "--out", str(out),
                           "--chunk-summary", str(done)], capture_output=True, text=True)
    assert proc.returncode == 2 and "no ambiguity counts (chunked in mode 'basic'" in proc.stderr


def test_report_of_a_real_to_parquet_build(tmp_path):
    """The contract with nanodata.pipeline.to_parquet: its shards keep the chunker's n_tokens and mode columns."""
    from nanodata.pipeline.to_parquet import jsonl_to_parquet

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
    from nanodata.pipeline.to_parquet import jsonl_to_parquet

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


def expected_groups(lengths, key):
    """{key(j): {"docs", "tokens"}} summed over every shard, doc j of a shard keyed by key(j)."""
    out = {}
    for shard in lengths:
        for j, n in enumerate(shard):
            entry = out.setdefault(key(j), {"docs": 0, "tokens": 0})
            entry["docs"] += 1
            entry["tokens"] += n
    return out


def test_docs_and_tokens_by_kind_and_by_project(built):
    """One bar per mode says nothing for a one-mode build: the report shows where docs and tokens are, by kind
    (whole file, chunk, split) and by source project."""
    build_dir, lengths = built
    index = report.write_report(build_dir)
    data = json.loads((index.parent / "report.json").read_text())
    by_kind = expected_groups(lengths, lambda j: KINDS[j % len(KINDS)])
    assert data["kinds"] == {"whole file": by_kind["file"], "chunk": by_kind["chunk"], "split": by_kind["split"]}
    assert list(data["kinds"]) == ["whole file", "chunk", "split"]
    by_project = expected_groups(lengths, lambda j: source_of(j).replace(":", "/").split("/")[0])
    assert set(by_project) == {"boost", "llvm", "fmt.jsonl"}  # 'repo/path' and 'input.jsonl:LINE' sources
    assert data["projects"] == dict(sorted(by_project.items(), key=lambda kv: -kv[1]["tokens"]))
    assert data["project_count"] == 3

    kind_bars = svg_bars(index.parent / "docs_by_kind.svg")  # % of docs per kind, then % of tokens per kind
    docs_share = [v["docs"] / data["docs"] for v in data["kinds"].values()]
    assert kind_bars[:3] == pytest.approx([kind_bars[1] * s / docs_share[1] for s in docs_share], rel=1e-2)
    assert kind_bars[1] == max(kind_bars[:3])  # chunks are half the docs
    html = index.read_text()
    assert "<th>kind</th>" in html and "<td>whole file</td>" in html and "<td>fmt.jsonl</td>" in html


def test_many_projects_show_the_top_ones_and_the_rest_summed(tmp_path):
    import pyarrow as pa

    build = tmp_path / "b"
    build.mkdir()
    sources = [f"p{i:02d}/x.cpp" for i in range(30) for _ in range(i + 1)]  # project pNN has NN+1 docs
    pq.write_table(pa.table({"text": ["x"] * len(sources), "n_tokens": pa.array([5] * len(sources), pa.int64()),
                             "source": sources}), build / "shard_00000.parquet")
    pq.write_table(pa.table({"text": ["x"], "n_tokens": pa.array([5], pa.int64())}), build / "val.parquet")
    data = json.loads((report.write_report(build).parent / "report.json").read_text())
    assert data["project_count"] == 31  # 30 named projects + the val shard's docs without a source column
    names = list(data["projects"])
    assert names[:figures.TOP_PROJECTS] == [f"p{i:02d}" for i in range(29, 29 - figures.TOP_PROJECTS, -1)]
    assert names[-1] == "(11 other projects)" and len(names) == figures.TOP_PROJECTS + 1
    assert sum(v["docs"] for v in data["projects"].values()) == data["docs"] == len(sources) + 1


def test_length_histogram_ends_at_max_tokens(tmp_path):
    """Docs chunked to max_tokens=2048 hold up to exactly 2048 tokens: the last bin is 1024-2048, not 2048-4095."""
    lengths = [[2048, 2048, 1500, 1024, 1023, 40, 15, 16], [2048, 7]]
    build = write_built_corpus(tmp_path / "b", lengths)
    data = json.loads((report.write_report(build, max_tokens=2048).parent / "report.json").read_text())
    histogram = data["doc_tokens_histogram"]
    assert list(histogram)[-1] == "1024-2048" and histogram["1024-2048"] == 5  # 2048 x3, 1500, 1024
    assert not any(label.startswith("2048") for label in histogram)
    assert histogram["512-1023"] == 1 and histogram["0-15"] == 2 and histogram["16-31"] == 1
    assert sum(histogram.values()) == 10 and data["max_tokens"] == 2048
    assert "2048" in data["crop_fraction"]
    labels = [t.text for t in ET.parse(tmp_path / "b" / "report" / "doc_tokens.svg").getroot().iter(f"{SVG}text")]
    assert "1024-2048" in labels

    # without max_tokens the bins end at the longest doc; docs beyond a given max_tokens get a bin of their own
    histogram = json.loads((report.write_report(build, tmp_path / "a").parent / "report.json").read_text())[
        "doc_tokens_histogram"]
    assert list(histogram)[-1] == "1024-2048"
    histogram = json.loads((report.write_report(build, tmp_path / "c", max_tokens=1500).parent / "report.json")
                           .read_text())["doc_tokens_histogram"]
    assert list(histogram)[-2:] == ["1024-1500", ">1500"] and histogram[">1500"] == 3


def test_crop_table_adds_max_tokens_and_the_page_explains_the_crop(built):
    build_dir, lengths = built
    index = report.write_report(build_dir, max_tokens=3000)
    data = json.loads((index.parent / "report.json").read_text())
    train = lengths[0] + lengths[1]
    assert list(data["crop_fraction"]) == ["1024", "2048", "3000", "4096", "16384"]
    assert data["crop_fraction"]["3000"] == round(simulate_crop_fraction(train, 3000), 6) > 0  # docs <= 3000
    assert simulate_crop_fraction(train, 3000, crop="requeue") == 0  # what the page promises for requeue
    html = index.read_text()
    assert "at T = max_tokens = 3000, " + f"{100 * data['crop_fraction']['3000']:.2f}% of the tokens" in html
    assert "crops the shortest doc to fill the row exactly" in html
    assert 'crop="requeue"' in html and "no token is lost" in html
    assert "<th>max tokens per doc</th><td>3,000</td>" in html


def test_report_of_a_gs_build_names_its_uri(gcs_emulator, tmp_path):
    """The DAG's report step fetches a gs:// build to a temp dir: the report names the build's URI, not that dir."""
    from nanodata import corpus, storage
    from nanodata.report import corpus_report

    gcs_emulator.create_bucket("report-uri")
    local = write_built_corpus(tmp_path / "local", [[10, 20, 30], [40]])
    uri = "gs://report-uri/cpp/builds/k1"
    assert corpus.sync(str(local), uri)["failed"] == 0
    index_uri = corpus_report.report_build(uri, max_tokens=64)
    assert index_uri == f"{uri}/report/index.html"
    data = json.loads(storage.read_bytes(f"{uri}/report/report.json"))
    assert data["build"] == uri and data["max_tokens"] == 64
    html = storage.read_bytes(index_uri).decode()
    assert f"<th>build</th><td>{uri}</td>" in html and "nanodata-report-" not in html  # the temp dir's prefix


def test_max_tokens_option(built, tmp_path):
    build_dir, _ = built
    proc = run_report(build_dir, "--out", tmp_path / "r", "--max-tokens", "3000")
    assert proc.returncode == 0, proc.stderr
    assert "T=3000:" in proc.stdout
    assert json.loads((tmp_path / "r" / "report.json").read_text())["max_tokens"] == 3000
    proc = run_report(build_dir, "--max-tokens", "0")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "argument --max-tokens: 0 is out of range: must be" in proc.stderr
    assert not (build_dir / "report").exists()
