"""The build graph (nanodata.pipeline.chunkbuild.graph) as the CLI's executor runs it: every stage a build with
given settings has, in the graph's order, each one's work the graph's own; its staged files are sealed with the
run's key, so one changed under it stops the run in one line. (tests/dags/test_build_graph.py: the DAG's tasks.)"""

import logging

import pytest

from nanodata.errors import NanodataError
from nanodata.pipeline.chunkbuild import executor, graph
from nanodata.pipeline.chunkbuild.executor import InProcess, chunk_to_jsonl
from nanodata.pipeline.chunkbuild.stage import redone_by
from nanodata.settings import MODES
from nanodata.storage import write_bytes

NEAR = 0.7
HEADER = "#pragma once\nint twice(int x);\nstruct Shape {\n  virtual ~Shape();\n  virtual double area() const;\n};\n"
SOURCE = ("#include \"shape.h\"\nint twice(int x) { return x + x; }\n\nint four(int x) {\n  return twice(twice(x));\n}\n"
          "double Shape::area() const { return 0.0; }\n")


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "trees"
    for project in ("alpha", "beta"):
        (root / project).mkdir(parents=True)
        (root / project / "shape.h").write_text(HEADER)
        (root / project / "shape.cc").write_text(SOURCE.replace("four", f"four_{project}"))
    (root / "beta" / "copy.cc").write_text(SOURCE + "// a near copy\n")
    return root


def ran_stages(caplog) -> list[str]:
    return [r.args[0] for r in caplog.records if r.name == executor.__name__ and r.msg.startswith("stage %s")]


def test_every_stage_has_its_method_in_the_cli_executor():
    assert {stage.name for stage in graph.STAGES} <= {name for name in dir(InProcess) if not name.startswith("_")}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("near", [None, NEAR])
def test_the_cli_runs_the_stages_of_the_graph_in_its_order(tree, tmp_path, caplog, mode, near):
    caplog.set_level(logging.DEBUG, logger=executor.__name__)
    dedup = {"dedup": "exact"} if near is None else {"dedup": "near", "near_threshold": near}
    summary = chunk_to_jsonl(tmp_path / "out.jsonl", project_dirs=[tree], mode=mode, max_tokens=256, workers=1,
                             **dedup)
    assert ran_stages(caplog) == [stage.name for stage in graph.stages(mode, near)]
    assert summary["docs"] > 0
    assert (summary["near_duplicates"] is not None) == (near is not None)


def test_a_stage_left_out_of_the_graph_breaks_the_run(tree, tmp_path, monkeypatch):
    """The graph decides what runs: without settle, the merge finds no list of removed files (and says so)."""
    monkeypatch.setattr(graph, "STAGES", tuple(s for s in graph.STAGES if s.name != "settle"))
    with pytest.raises(NanodataError, match="near/removed.bin"):
        chunk_to_jsonl(tmp_path / "out.jsonl", project_dirs=[tree], mode="basic", max_tokens=256, workers=1)


def test_a_staged_file_changed_under_the_run_stops_it_in_one_line(tree, tmp_path, monkeypatch):
    """The run's unit stores are sealed with its own key: one edited between parse and index is refused."""
    index = InProcess.index

    def tamper_then_index(self):
        store = self.stage / "units" / "00000.sqlite"
        store.write_bytes(store.read_bytes() + b"\0")
        index(self)

    monkeypatch.setattr(InProcess, "index", tamper_then_index)
    with pytest.raises(NanodataError, match="units/00000.sqlite") as failure:
        chunk_to_jsonl(tmp_path / "out.jsonl", project_dirs=[tree], mode="compilable", max_tokens=256, workers=1)
    assert "\n" not in str(failure.value)
    assert not (tmp_path / "out.jsonl").exists()


def test_the_cli_keeps_no_staged_file_after_its_run(tree, tmp_path):
    chunk_to_jsonl(tmp_path / "out" / "docs.jsonl", project_dirs=[tree], mode="compilable", max_tokens=256,
                   workers=1)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["docs.jsonl", "docs.jsonl.done"]


@pytest.mark.parametrize("stage", [s for s in graph.STAGES if s.name != "merge"], ids=lambda s: s.name)
def test_a_broken_file_a_stage_writes_is_redone_by_the_stage_s_own_skip_rule(stage, tmp_path):
    """What the graph declares is what the DAG's recovery does: every file a stage writes, found not as sealed, names
    that stage's done record as the one to delete (stage.redone_by, which broken_seals quotes)."""
    root = str(tmp_path / "stage")
    if stage.name == "parse":  # signatures: the global modes' file pass is known by its units' summary
        write_bytes(f"{root}/units/00003.json", b"{}")
    for written in stage.writes:
        assert redone_by(root, f"{root}/{written.format(n='00003')}") == f"{root}/{stage.done.format(n='00003')}"
