"""The report's near-duplicate section: a build's near-dedup summary (nanodata.pipeline.dedup.near) on the page,
in report.json and in `nanodata report`'s output, from the DAG's extras or a chunk run's summary."""

import json
import subprocess
import sys
import xml.etree.ElementTree as ET

from nanodata.corpus.layout import CHUNK_SUMMARY
from nanodata.report import corpus_report as report
from nanodata.report import figures, page

SVG = "{http://www.w3.org/2000/svg}"
EVIL = "evil/<script>alert(1)</script>.h"  # file names are the user's data


def near_summary(projects: int = 2) -> dict:
    """A summary shaped like near._summary's (plus docs_removed): `projects` projects with removals."""
    by_project = {"json": {"removed": 40, "bytes_removed": 860924, "files": 456, "bytes": 5268695, "kept": 416},
                  "googletest": {"removed": 38, "bytes_removed": 87970, "files": 1465, "bytes": 9000000, "kept": 1427}}
    by_project.update({f"p{i:03d}": {"removed": 1, "bytes_removed": 10, "files": 5, "bytes": 50, "kept": 4}
                       for i in range(projects - 2)})
    return {
        "threshold": 0.7, "bands": 36, "rows": 7, "files_removed": 78, "bytes_removed": 948894, "clusters": 30,
        "files_signed": 1921, "docs_removed": 212, "candidate_pairs_verified": 169,
        "examples": [{"removed": EVIL, "kept": "json/docs/examples/binary.cpp", "jaccard": 0.8125}]
                    + [{"removed": f"json/docs/examples/get_{i}.cpp", "kept": "json/docs/examples/binary.cpp",
                        "jaccard": 1.0} for i in range(30)],
        "by_project": by_project,
        "largest_clusters": [{"kept": "googletest/include/gmock-matchers.h", "files": 29, "bytes": 57274,
                              "removed_projects": ["googletest", "json"]},
                             {"kept": EVIL, "files": 3, "bytes": 1200, "removed_projects": ["evil"]}],
        "jaccard_histogram": [{"from": round(0.7 + 0.03 * i, 3), "to": round(0.73 + 0.03 * i, 3), "files": 20 - i}
                              for i in range(9)] + [{"from": 0.97, "to": 1.0, "files": 12}],
    }


def html_and_json(index):
    return index.read_text(), json.loads((index.parent / figures.REPORT_JSON).read_text())


def inline_svg(html: str) -> ET.Element:
    """The section's chart, parsed (so it must be well-formed XML)."""
    section = html.split(f"<h2>{page.NEAR_TITLE}</h2>")[1]
    return ET.fromstring(section[section.index("<svg"):section.index("</svg>") + len("</svg>")])


def test_near_duplicates_section_shows_the_summary(built, tmp_path):
    build_dir, _ = built
    near = near_summary()
    html, data = html_and_json(report.write_report(build_dir, tmp_path / "r", near_duplicates=near))
    assert data["near_duplicates"] == near  # report.json keeps the whole summary, every example included
    assert html.count(f"<h2>{page.NEAR_TITLE}</h2>") == 1
    assert ("Jaccard &gt;= 0.7: 78 of 1,921 files removed (948,894 bytes, 212 docs) in 30 clusters" in html)
    assert "<tr><td>json</td><td>456</td><td>40</td><td>416</td><td>860,924</td></tr>" in html
    assert "<tr><td>googletest</td><td>1,465</td><td>38</td><td>1,427</td><td>87,970</td></tr>" in html
    assert ("<tr><td>googletest/include/gmock-matchers.h</td><td>29</td><td>57,274</td><td>googletest, json</td>"
            "</tr>") in html
    # the Jaccard histogram: one bar per bin, heights in the bins' order (20, 19, ..., 12 files)
    svg = inline_svg(html)
    bars = [float(r.get("height")) for r in svg.iter(f"{SVG}rect") if r.find(f"{SVG}title") is not None]
    assert len(bars) == 10 and bars[:9] == sorted(bars[:9], reverse=True) and bars[0] > bars[-1] > 0
    labels = [t.text for t in svg.iter(f"{SVG}text")]
    assert "0.70-0.73" in labels and "0.97-1.00" in labels
    # the first NEAR_EXAMPLES_SHOWN example pairs, of the 31 the summary holds
    assert f"{page.NEAR_EXAMPLES_SHOWN} of 78 removed files" in html
    assert html.count("<td>json/docs/examples/binary.cpp</td>") == page.NEAR_EXAMPLES_SHOWN
    assert f"get_{page.NEAR_EXAMPLES_SHOWN - 2}.cpp" in html and f"get_{page.NEAR_EXAMPLES_SHOWN - 1}" not in html
    assert "<td>0.812</td>" in html and "<td>1.000</td>" in html


def test_file_names_are_escaped(built, tmp_path):
    build_dir, _ = built
    near = near_summary()
    near["by_project"]["<script>x</script>"] = near["by_project"].pop("json")
    html, _ = html_and_json(report.write_report(build_dir, tmp_path / "r", near_duplicates=near))
    assert "<script>" not in html
    assert html.count("<td>evil/&lt;script&gt;alert(1)&lt;/script&gt;.h</td>") == 2  # an example, a cluster
    assert "<td>&lt;script&gt;x&lt;/script&gt;</td>" in html


def test_only_the_first_projects_are_listed(built, tmp_path):
    build_dir, _ = built
    near = near_summary(projects=page.NEAR_PROJECTS_SHOWN + 7)
    html, data = html_and_json(report.write_report(build_dir, tmp_path / "r", near_duplicates=near))
    assert len(data["near_duplicates"]["by_project"]) == page.NEAR_PROJECTS_SHOWN + 7
    assert "; 7 more projects not listed" in html
    last = page.NEAR_PROJECTS_SHOWN - 3  # json and googletest come first
    assert f"<td>p{last:03d}</td>" in html and f"<td>p{last + 1:03d}</td>" not in html


def test_no_section_without_near_dedup(built, tmp_path):
    build_dir, _ = built
    html, data = html_and_json(report.write_report(build_dir, tmp_path / "r"))
    assert data["near_duplicates"] is None
    assert page.NEAR_TITLE not in html and "Jaccard" not in html
    html, data = html_and_json(report.write_report(build_dir, tmp_path / "n", near_duplicates=None))
    assert data["near_duplicates"] is None and page.NEAR_TITLE not in html


def test_report_build_passes_the_dags_summary(built):
    """The DAG's report step: report_extras' near_duplicates reach the page as a keyword of report_build."""
    build_dir, _ = built
    index = report.report_build(str(build_dir), near_duplicates=near_summary())
    html, data = html_and_json(build_dir / "report" / page.INDEX_HTML)
    assert index == str(build_dir / "report" / page.INDEX_HTML)
    assert data["near_duplicates"]["files_removed"] == 78 and "78 of 1,921 files removed" in html


def run_report(*argv) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nanodata.cli", "report", *map(str, argv)],
                          capture_output=True, text=True)


def test_a_parquet_dir_builds_chunk_summary_is_read(built, tmp_path):
    """`nanodata chunk --parquet-dir` leaves CHUNK_SUMMARY in the corpus: the report (and its output) show its
    near-duplicates; its null (--dedup exact) shows none."""
    build_dir, _ = built
    (build_dir / CHUNK_SUMMARY).write_text(json.dumps({"mode": "basic", "near_duplicates": near_summary()}))
    proc = run_report(build_dir, "--out", tmp_path / "r")
    assert proc.returncode == 0, proc.stderr
    html, data = html_and_json(tmp_path / "r" / page.INDEX_HTML)
    assert data["near_duplicates"] == near_summary() and "<td>860,924</td>" in html
    lines = proc.stdout.split(f"{page.NEAR_TITLE}: Jaccard >= 0.7: 78 of 1,921 files removed (948,894 bytes, "
                              "212 docs) in 30 clusters\n")[1].splitlines()
    assert lines[0].split() == ["project", "files", "removed", "kept", "bytes", "removed"]
    assert lines[1].split() == ["json", "456", "40", "416", "860,924"]
    assert lines[2].split() == ["googletest", "1,465", "38", "1,427", "87,970"]

    (build_dir / CHUNK_SUMMARY).write_text(json.dumps({"mode": "basic", "near_duplicates": None}))
    proc = run_report(build_dir, "--out", tmp_path / "e")
    assert proc.returncode == 0, proc.stderr
    html, data = html_and_json(tmp_path / "e" / page.INDEX_HTML)
    assert data["near_duplicates"] is None and page.NEAR_TITLE not in html + proc.stdout


def test_cli_reads_near_duplicates_from_the_chunk_summary_flag(built, tmp_path):
    """`--chunk-summary OUTPUT.done` of a local-mode run with near-dedup: no ambiguity counts, its near-duplicates
    shown; a summary with neither is still an error."""
    build_dir, _ = built
    done = tmp_path / "docs.jsonl.done"
    near = near_summary(projects=page.NEAR_PROJECTS_SHOWN + 1)
    done.write_text(json.dumps({"mode": "basic", "near_duplicates": near}))
    proc = run_report(build_dir, "--out", tmp_path / "r", "--chunk-summary", done)
    assert proc.returncode == 0, proc.stderr
    html, data = html_and_json(tmp_path / "r" / page.INDEX_HTML)
    assert data["near_duplicates"] == near and data["ambiguity"] is None
    assert "Ambiguous names" not in proc.stdout and "78 of 1,921 files removed" in proc.stdout
    assert "  ... and 1 more projects" in proc.stdout and "<h2>Ambiguous" not in html
    done.write_text(json.dumps({"mode": "basic", "near_duplicates": None}))
    proc = run_report(build_dir, "--out", tmp_path / "r", "--chunk-summary", done)
    assert proc.returncode == 2 and "no ambiguity counts (chunked in mode 'basic'" in proc.stderr
    assert "no near-duplicates" in proc.stderr
