"""nanodata.pipeline.chunkbuild.stage.each_item, the loop every mapped build step runs, on a local stage and on gs:// (the real
emulator): an item is done when its summary is there under its seal and is never run again; otherwise its work runs
in a temp dir removed after, and its summary is sealed after its data is written, so a failure or a kill leaves the
item to be redone, and a summary not sealed with the build's secret is not trusted."""

import pytest

from nanodata.pipeline.chunkbuild.stage import each_item, item_uri
from nanodata.storage import exists, write_bytes, write_json
from nanodata.storage.auth import load_secret, read_sealed_json, seal_json

FOLDER = "docs"
SECRET = load_secret()  # the suite's (NANODATA_CACHE_SECRET, tests/conftest.py)


@pytest.fixture(params=["local", "gs"])
def stage(request, tmp_path):
    if request.param == "local":
        return str(tmp_path / "stage")
    return f"gs://{request.getfixturevalue('gcs_bucket')}/stage"


def summary_of(stage: str, number: int):
    return read_sealed_json(item_uri(stage, FOLDER, number), SECRET)


class Work:
    """A mapped step's work: writes the item's data into the stage, then returns its summary; records each call,
    its temp dir and whether the item's summary file was there then, and raises on the numbers in `fail`."""

    def __init__(self, stage: str, fail=()):
        self.stage, self.fail = stage, set(fail)
        self.calls, self.tmps, self.summary_there = [], [], []

    def __call__(self, number, tmp):
        self.calls.append(number)
        self.tmps.append(tmp)
        self.summary_there.append(exists(item_uri(self.stage, FOLDER, number)))
        assert tmp.is_dir() and not any(tmp.iterdir())  # a fresh, empty dir of its own
        (tmp / "spool").write_bytes(b"intermediate")
        if number in self.fail:
            raise RuntimeError(f"item {number} failed")
        write_bytes(item_uri(self.stage, FOLDER, number, ".bin"), f"data of {number}".encode())
        return {"item": number, "docs": number * 10}


def run(stage: str, numbers, work: Work) -> list:
    return list(each_item(stage, FOLDER, numbers, work, SECRET))


def test_a_first_run_runs_every_item_in_order_and_seals_its_summary_after_its_data(stage):
    work = Work(stage)
    got = run(stage, [0, 1, 2], work)
    assert [(n, ran) for n, _, ran in got] == [(0, True), (1, True), (2, True)]
    assert work.calls == [0, 1, 2] and work.summary_there == [False] * 3  # the summary comes after the work
    for number, summary, _ in got:
        assert {k: summary[k] for k in ("item", "docs")} == {"item": number, "docs": number * 10}
        assert isinstance(summary["seconds"], float) and summary["seconds"] >= 0
        assert summary_of(stage, number) == summary  # what was yielded is what was recorded, under its seal
        assert exists(item_uri(stage, FOLDER, number, ".bin"))
    assert not any(tmp.exists() for tmp in work.tmps)
    assert len(set(work.tmps)) == 3 and all(tmp.name.startswith(f"nanodata-{FOLDER}-") for tmp in work.tmps)


def test_an_item_with_a_sealed_summary_is_not_run_and_its_summary_is_yielded_as_recorded(stage):
    recorded = {"item": 1, "docs": 99, "seconds": 12.5}
    seal_json(item_uri(stage, FOLDER, 1), recorded, SECRET)
    seal_json(item_uri(stage, FOLDER, 3), {}, SECRET)  # an empty summary still says the item finished
    work = Work(stage)
    got = run(stage, [0, 1, 2, 3], work)
    assert work.calls == [0, 2]
    assert [(n, s, ran) for n, s, ran in got if not ran] == [(1, recorded, False), (3, {}, False)]
    assert summary_of(stage, 1) == recorded  # untouched, no new seconds
    assert not exists(item_uri(stage, FOLDER, 1, ".bin"))  # its work never ran


def test_a_summary_not_sealed_with_the_secret_is_redone(stage):
    write_json(item_uri(stage, FOLDER, 0), {"item": 0, "docs": 0, "seconds": 1.0})  # no seal at all
    seal_json(item_uri(stage, FOLDER, 1), {"item": 1}, load_secret("another build's secret, not this one: " * 2))
    seal_json(item_uri(stage, FOLDER, 2), {"item": 2}, SECRET)
    write_bytes(item_uri(stage, FOLDER, 2), b'{"item": 2, "docs": 1000000}\n')  # edited under its seal
    work = Work(stage)
    got = run(stage, [0, 1, 2], work)
    assert work.calls == [0, 1, 2] and work.summary_there == [True] * 3
    assert [(s["docs"], ran) for _, s, ran in got] == [(0, True), (10, True), (20, True)]
    assert [summary_of(stage, n)["docs"] for n in range(3)] == [0, 10, 20]  # sealed now, so the next run skips
    assert run(stage, [0, 1, 2], Work(stage)) == [(n, summary_of(stage, n), False) for n in range(3)]


def test_numbers_are_any_iterable_and_name_their_files(stage):
    work = Work(stage)
    got = run(stage, (n for n in (7, 3, 12)), work)
    assert [n for n, _, _ in got] == work.calls == [7, 3, 12]
    assert item_uri(stage, FOLDER, 12) == f"{stage}/{FOLDER}/00012.json"
    assert all(read_sealed_json(f"{stage}/{FOLDER}/{n:05d}.json", SECRET)["item"] == n for n in (7, 3, 12))


def test_a_failing_item_leaves_no_summary_and_no_temp_dir_and_stops_the_loop(stage):
    work = Work(stage, fail={2})
    items = each_item(stage, FOLDER, range(5), work, SECRET)
    done = [next(items), next(items)]
    assert work.calls == [0, 1]  # the loop runs an item only when the caller asks for it
    with pytest.raises(RuntimeError, match="item 2 failed"):
        next(items)
    assert list(items) == []  # the error ends the loop: items after it are not run
    assert work.calls == [0, 1, 2]
    assert [n for n, _, _ in done] == [0, 1]
    assert not exists(item_uri(stage, FOLDER, 2)) and not exists(item_uri(stage, FOLDER, 2, ".bin"))
    assert not work.tmps[2].exists()  # its temp dir is gone, with what it wrote there
    assert [summary_of(stage, n) is not None for n in range(5)] == [True, True, False, False, False]


def test_a_rerun_redoes_only_the_unfinished_items(stage):
    with pytest.raises(RuntimeError):
        run(stage, range(5), Work(stage, fail={2}))
    before = {n: summary_of(stage, n) for n in (0, 1)}

    again = Work(stage)
    got = run(stage, range(5), again)
    assert again.calls == [2, 3, 4]
    assert [(n, ran) for n, _, ran in got] == [(0, False), (1, False), (2, True), (3, True), (4, True)]
    assert {n: s for n, s, _ in got if n < 2} == before  # finished items keep their summaries, seconds and all

    third = Work(stage)
    assert [ran for _, _, ran in run(stage, range(5), third)] == [False] * 5
    assert third.calls == []  # a whole step re-run redoes nothing finished
