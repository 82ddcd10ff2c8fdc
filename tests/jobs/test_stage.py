"""nanodata.jobs.stage.each_item, the loop every mapped build step runs, on a local stage and on gs:// (the real
emulator): an item is done when its summary exists and is never run again; otherwise its work runs in a temp dir
removed after, and its summary is written after its data, so a failure or a kill leaves the item to be redone."""

import pytest

from nanodata.jobs.stage import each_item, item_uri
from nanodata.storage import exists, read_json, write_bytes, write_json

FOLDER = "docs"


@pytest.fixture(params=["local", "gs"])
def stage(request, tmp_path):
    if request.param == "local":
        return str(tmp_path / "stage")
    return f"gs://{request.getfixturevalue('gcs_bucket')}/stage"


class Work:
    """A mapped step's work: writes the item's data into the stage, then returns its summary; records each call
    and its temp dir, and raises on the numbers in `fail`."""

    def __init__(self, stage: str, fail=()):
        self.stage, self.fail = stage, set(fail)
        self.calls, self.tmps = [], []

    def __call__(self, number, tmp):
        self.calls.append(number)
        self.tmps.append(tmp)
        assert tmp.is_dir() and not any(tmp.iterdir())  # a fresh, empty dir of its own
        assert read_json(item_uri(self.stage, FOLDER, number)) is None  # not done: no summary yet
        (tmp / "spool").write_bytes(b"intermediate")
        if number in self.fail:
            raise RuntimeError(f"item {number} failed")
        write_bytes(item_uri(self.stage, FOLDER, number, ".bin"), f"data of {number}".encode())
        # the data is there before the summary that says so
        assert exists(item_uri(self.stage, FOLDER, number, ".bin"))
        return {"item": number, "docs": number * 10}


def test_a_first_run_runs_every_item_in_order_and_records_its_summary(stage):
    work = Work(stage)
    got = list(each_item(stage, FOLDER, [0, 1, 2], work))
    assert [(n, ran) for n, _, ran in got] == [(0, True), (1, True), (2, True)]
    assert work.calls == [0, 1, 2]
    for number, summary, _ in got:
        assert {k: summary[k] for k in ("item", "docs")} == {"item": number, "docs": number * 10}
        assert isinstance(summary["seconds"], float) and summary["seconds"] >= 0
        assert read_json(item_uri(stage, FOLDER, number)) == summary  # what was yielded is what was recorded
    assert not any(tmp.exists() for tmp in work.tmps)
    assert len(set(work.tmps)) == 3 and all(tmp.name.startswith(f"nanodata-{FOLDER}-") for tmp in work.tmps)


def test_an_item_with_a_summary_is_not_run_and_its_summary_is_yielded_as_recorded(stage):
    recorded = {"item": 1, "docs": 99, "seconds": 12.5}
    write_json(item_uri(stage, FOLDER, 1), recorded)
    write_json(item_uri(stage, FOLDER, 3), {})  # an empty summary still says the item finished
    work = Work(stage)
    got = list(each_item(stage, FOLDER, [0, 1, 2, 3], work))
    assert work.calls == [0, 2]
    assert [(n, s, ran) for n, s, ran in got if not ran] == [(1, recorded, False), (3, {}, False)]
    assert read_json(item_uri(stage, FOLDER, 1)) == recorded  # untouched, no new seconds
    assert not exists(item_uri(stage, FOLDER, 1, ".bin"))  # its work never ran


def test_numbers_are_any_iterable_and_name_their_files(stage):
    work = Work(stage)
    got = list(each_item(stage, FOLDER, (n for n in (7, 3, 12)), work))
    assert [n for n, _, _ in got] == work.calls == [7, 3, 12]
    assert item_uri(stage, FOLDER, 12) == f"{stage}/{FOLDER}/00012.json"
    assert all(read_json(f"{stage}/{FOLDER}/{n:05d}.json")["item"] == n for n in (7, 3, 12))


def test_a_failing_item_leaves_no_summary_and_no_temp_dir_and_stops_the_loop(stage):
    work = Work(stage, fail={2})
    items = each_item(stage, FOLDER, range(5), work)
    done = [next(items), next(items)]
    assert work.calls == [0, 1]  # the loop runs an item only when the caller asks for it
    with pytest.raises(RuntimeError, match="item 2 failed"):
        next(items)
    assert list(items) == []  # the error ends the loop: items after it are not run
    assert work.calls == [0, 1, 2]
    assert [n for n, _, _ in done] == [0, 1]
    assert read_json(item_uri(stage, FOLDER, 2)) is None and not exists(item_uri(stage, FOLDER, 2, ".bin"))
    assert not work.tmps[2].exists()  # its temp dir is gone, with what it wrote there
    assert [read_json(item_uri(stage, FOLDER, n)) is not None for n in range(5)] == [True, True, False, False, False]


def test_a_rerun_redoes_only_the_unfinished_items(stage):
    first = Work(stage, fail={2})
    with pytest.raises(RuntimeError):
        list(each_item(stage, FOLDER, range(5), first))
    before = {n: read_json(item_uri(stage, FOLDER, n)) for n in (0, 1)}

    again = Work(stage)
    got = list(each_item(stage, FOLDER, range(5), again))
    assert again.calls == [2, 3, 4]
    assert [(n, ran) for n, _, ran in got] == [(0, False), (1, False), (2, True), (3, True), (4, True)]
    assert {n: s for n, s, _ in got if n < 2} == before  # finished items keep their summaries, seconds and all

    third = Work(stage)
    assert [ran for _, _, ran in each_item(stage, FOLDER, range(5), third)] == [False] * 5
    assert third.calls == []  # a whole step re-run redoes nothing finished

