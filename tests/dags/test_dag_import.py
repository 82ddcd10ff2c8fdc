"""Every DAG file imports cleanly, parses fast, stays light at import time and follows the conventions."""

import json
import subprocess
import sys
from datetime import timedelta

from airflow_test_home import REPO

DAG_IDS = {"nanodata_cpp_corpus", "nanodata_fineweb_download", "nanodata_tokenizer", "nanodata_pretokenize"}
TRANSFER_TASKS = {("nanodata_fineweb_download", "download")}  # corpus shard tasks upload their own files, unpooled


def test_every_dag_imports_without_errors(dagbag):
    assert dagbag.import_errors == {}
    assert set(dagbag.dag_ids) == DAG_IDS
    assert {stat.file.lstrip("/") for stat in dagbag.dagbag_stats} == {f"{d}.py" for d in DAG_IDS}


def test_each_file_parses_in_under_two_seconds(dagbag):
    for stat in dagbag.dagbag_stats:
        assert stat.duration < timedelta(seconds=2), (stat.file, stat.duration)


def test_dag_files_import_nothing_heavy():
    """The dag-processor parses every file every 30 s: nanodata and its dependencies load only in tasks."""
    code = ("import runpy, sys, json; sys.path.insert(0, sys.argv[1]);\n"
            "[runpy.run_path(f'{sys.argv[1]}/{n}.py') for n in sys.argv[2:]];\n"
            "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('nanodata', 'torch', 'pyarrow', 'tiktoken', 'tree_sitter', 'google', 'numpy'))))")
    out = subprocess.run([sys.executable, "-c", code, str(REPO / "dags"), *sorted(DAG_IDS)],
                         capture_output=True, text=True, check=True)
    loaded = set(json.loads(out.stdout.splitlines()[-1]))
    # the retry policy's exception class, the Params' ranges and the chunk settings (shared with the CLI): tiny modules
    assert loaded <= {"nanodata", "nanodata.errors", "nanodata.ranges", "nanodata.settings"}, loaded


def test_params_explain_themselves(dagbag):
    for dag in dagbag.dags.values():
        assert dag.params, dag.dag_id
        for name, param in dag.params.items():
            param = dag.params.get_param(name)
            assert param.schema.get("title") and param.description, (dag.dag_id, name)
            assert param.schema.get("type"), (dag.dag_id, name)
            # Airflow reports a `pattern` mismatch as the raw regex: rules are said in the description instead
            assert "pattern" not in param.schema, (dag.dag_id, name)


def test_each_dag_has_a_one_line_description(dagbag):
    """The DAG list shows it."""
    for dag in dagbag.dags.values():
        assert dag.description and "\n" not in dag.description and len(dag.description) < 160, dag.dag_id


def test_tasks_retry_with_backoff_and_transfers_use_the_gcs_pool(dagbag):
    for dag in dagbag.dags.values():
        for t in dag.tasks:
            assert t.retries >= 1 and t.retry_exponential_backoff > 1, (dag.dag_id, t.task_id)
            expected = "gcs" if (dag.dag_id, t.task_id) in TRANSFER_TASKS else "default_pool"
            assert t.pool == expected, (dag.dag_id, t.task_id, t.pool)


def test_schedules(dagbag):
    corpus = dagbag.dags["nanodata_cpp_corpus"]
    assert corpus.schedule == "0 3 * * *" and corpus.catchup is False
    assert corpus.max_active_runs == 1
    tokenizer = dagbag.dags["nanodata_tokenizer"]
    assert [a.name for a in tokenizer.timetable.asset_condition.objects] == ["nanodata_cpp_corpus"]
    assert [o.name for o in corpus.get_task("publish").outlets] == ["nanodata_cpp_corpus"]
    assert type(corpus.get_task("chunk")).__name__.endswith("MappedOperator")


def test_mode_param_offers_exactly_the_chunker_modes(dagbag):
    from nanodata.settings import MODES

    assert dagbag.dags["nanodata_cpp_corpus"].params.get_param("mode").schema["enum"] == list(MODES)


def test_params_carry_the_cli_ranges(dagbag):
    """The forms bound a number as the matching `nanodata` flag does (nanodata/ranges.py), so a value the form
    accepts is never refused by the task, and a value that would exhaust a worker is refused at the form."""
    from nanodata import ranges

    expected = {("nanodata_fineweb_download", "num_shards"): ranges.NUM_SHARDS,
                ("nanodata_fineweb_download", "workers"): ranges.THREAD_WORKERS,
                ("nanodata_pretokenize", "shard_tokens"): ranges.SHARD_TOKENS,
                ("nanodata_pretokenize", "workers"): ranges.PROCESS_WORKERS,
                ("nanodata_tokenizer", "vocab_size"): ranges.VOCAB_SIZE,
                ("nanodata_tokenizer", "max_chars"): ranges.MAX_CHARS,
                ("nanodata_cpp_corpus", "max_tokens"): ranges.MAX_TOKENS,
                ("nanodata_cpp_corpus", "max_file_bytes"): ranges.MAX_FILE_BYTES,
                ("nanodata_cpp_corpus", "rows_per_file"): ranges.ROWS_PER_FILE,
                ("nanodata_cpp_corpus", "shard_mb"): ranges.SHARD_MB}
    for (dag_id, name), allowed in expected.items():
        schema = dagbag.dags[dag_id].params.get_param(name).schema
        assert {k: schema.get(k) for k in allowed.param()} == allowed.param(), (dag_id, name)
    partition = dagbag.dags["nanodata_cpp_corpus"].params.get_param("partition_mb").schema
    assert 0 < partition["minimum"] and partition["maximum"] == ranges.PARTITION_MB.hi
