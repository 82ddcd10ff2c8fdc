"""The DAG maps the build graph (nanodata.pipeline.chunkbuild.graph): every stage has the tasks the graph names,
each stage's tasks come after the stage before it, and a stage done per partition or band group is a mapped task.
(tests/pipeline/chunking/test_graph.py: the CLI's executor runs the same stages; tests/dags/test_partitions.py:
both make the same corpus.)"""

import pytest

from nanodata.pipeline.chunkbuild import graph
from nanodata.settings import MODES


@pytest.fixture(scope="module")
def tasks(dagbag):
    return dagbag.dags["nanodata_cpp_corpus"].task_dict


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("near", [None, 0.7])
def test_each_stage_runs_in_the_dag_after_the_stage_before_it(tasks, mode, near):
    stages = graph.stages(mode, near)
    for stage in stages:
        assert set(stage.tasks) <= set(tasks), stage
    for before, after in zip(stages, stages[1:], strict=False):
        for name in set(after.tasks) - set(before.tasks):
            upstream = tasks[name].get_flat_relative_ids(upstream=True)
            assert upstream & set(before.tasks), f"{name} ({after.name}) does not wait for {before.name}"


def test_a_stage_done_in_pieces_is_a_mapped_task(tasks):
    for stage in graph.STAGES:
        if len(stage.tasks) == 1:
            assert tasks[stage.tasks[0]].is_mapped == (stage.over != "build"), stage


def test_a_graph_whose_order_the_dag_breaks_is_caught(tasks, monkeypatch):
    """The check above can fail: emit placed before the index it needs is not what the DAG runs."""
    order = {s.name: s for s in graph.STAGES}
    monkeypatch.setattr(graph, "STAGES", (order["parse"], order["emit"], order["index"], order["merge"]))
    with pytest.raises(AssertionError, match="does not wait for emit"):
        test_each_stage_runs_in_the_dag_after_the_stage_before_it(tasks, "compilable", None)
