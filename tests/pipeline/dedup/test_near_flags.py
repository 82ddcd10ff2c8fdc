"""`nanodata chunk`'s near-dedup flags: checked before any work, one line, exit code 2."""

import pytest

from nanodata.cli import main
from nanodata.errors import NanodataError
from nanodata.pipeline.chunkbuild.config import ChunkConfig


@pytest.mark.parametrize("argv, message", [
    (["--dedup", "fuzzy"], "argument --dedup: invalid choice: 'fuzzy'"),
    (["--near-threshold", "0.3"], "--near-threshold: 0.3 is out of range: must be a finite number >= 0.5 and <= 1"),
    (["--near-threshold", "nan"], "--near-threshold"),
])
def test_bad_flags_exit_2_with_one_line_before_any_work(tmp_path, capsys, argv, message):
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.cpp").write_text("int main() { return 0; }\n")
    code = main(["chunk", "--project-dirs", str(src), "--output", str(tmp_path / "out.jsonl"), *argv])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and message in err[0]
    assert not list(tmp_path.glob("out.jsonl*")) and not list(tmp_path.glob(".out.jsonl*"))


def test_the_library_config_checks_the_same_ranges():
    with pytest.raises(NanodataError, match=r"--dedup 'fuzzy': expected one of near, exact"):
        ChunkConfig(dedup="fuzzy")
    with pytest.raises(NanodataError, match=r"--near-threshold must be a finite number >= 0.5 and <= 1, not 0.2"):
        ChunkConfig(near_threshold=0.2)
    assert ChunkConfig().worker_settings()["near"] == 0.7
    assert ChunkConfig(dedup="exact").worker_settings()["near"] is None
