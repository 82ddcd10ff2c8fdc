"""storage.files.commit_together: a file and the marker that says it is complete appear together."""

import pytest

from nanodata.storage.files import commit_together, temp_name


def test_both_renamed_in_order(tmp_path):
    out, done = tmp_path / "docs.jsonl", tmp_path / "docs.jsonl.done"
    temp_name(out).write_text("a\n")
    temp_name(done).write_text("{}\n")
    commit_together((temp_name(out), out), (temp_name(done), done))
    assert out.read_text() == "a\n" and done.read_text() == "{}\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["docs.jsonl", "docs.jsonl.done"]


def test_nothing_renamed_when_a_temp_is_missing(tmp_path):
    """Every temp is opened (fsynced) before the first rename: a missing marker leaves the output unrenamed."""
    out, done = tmp_path / "docs.jsonl", tmp_path / "docs.jsonl.done"
    temp_name(out).write_text("a\n")
    with pytest.raises(FileNotFoundError):
        commit_together((temp_name(out), out), (temp_name(done), done))
    assert not out.exists() and temp_name(out).exists()
