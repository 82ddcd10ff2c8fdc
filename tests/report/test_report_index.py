"""nanodata.report.index: finding builds and keeping their reports current (local dirs here; the
reports plugin's tests cover gs:// builds against the emulator)."""

import json
from pathlib import Path

from built_corpus import write_built_corpus

from nanodata.report import figures, index


def test_find_builds_and_ensure_report(built, tmp_path):
    build_dir, _ = built
    root = build_dir.parent
    (root / ".staging" / "k" / "parquet").mkdir(parents=True)
    (root / ".staging" / "k" / "parquet" / "manifest.json").write_text("{}")  # work dirs are not builds
    write_built_corpus(root / "builds" / "abc", [[5, 6, 7], [8]])
    assert index.find_builds(root) == ["build", "builds/abc"]

    out = Path(index.ensure_report(build_dir))
    first = (out / "report.json").read_bytes()
    assert json.loads(first)["source_fingerprint"] == figures.source_fingerprint(build_dir)
    assert index.ensure_report(build_dir) == str(out) and (out / "report.json").read_bytes() == first
    write_built_corpus(build_dir, [[1, 2], [3]])  # a rebuild changes the manifest: the report follows
    index.ensure_report(build_dir)
    assert json.loads((out / "report.json").read_text())["docs"] == 3
