"""Properties of the resume path: whatever is passed as resume_state_dict (a real state with keys dropped, values
of another type or value, lists cut, keys added; nanochat-shaped dicts; arbitrary JSON), the loader resumes
(exactly, when the state is the real one) or refuses it with a one-line ValueError or NanodataError, never
another exception. Small corpus, small B/T, so that each example is a few milliseconds."""

import copy

import pytest
import torch
from batches import take
from hypothesis import given, settings
from hypothesis import strategies as st
from loader_helpers import small_bestfit, small_concat, write_small_corpus

from nanodata.errors import NanodataError

KINDS = {"bestfit": lambda tok, d, **kw: small_bestfit(tok, d, B=1, T=32, crop="requeue", **kw),
         "concat": lambda tok, d, **kw: small_concat(tok, d, B=1, T=32, **kw),
         "streaming": lambda tok, d, **kw: small_bestfit(tok, d, B=1, T=32, streaming=True, poll_interval=0.01, **kw)}
STATES_AT = (1, 6, 13)  # batches whose states are mutated
JSON = st.recursive(st.none() | st.booleans() | st.integers(-3, 300) | st.floats(allow_nan=False) | st.text(max_size=6),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
                    max_leaves=10)


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tokenizer):
    """Per loader kind: a loader factory and the uninterrupted run's batches (each with its state)."""
    data_dir = write_small_corpus(tmp_path_factory.mktemp("properties"))
    (data_dir / "_COMPLETE").write_text("")  # streaming: the corpus is whole, nothing is waited for

    def factory(kind):
        return lambda **kwargs: KINDS[kind](tokenizer, data_dir, prefetch=0, **kwargs)

    return {kind: (factory(kind), take(factory(kind)(), max(STATES_AT) + 2)) for kind in KINDS}


def _resume(make, state):
    """Two batches resumed from `state`, or None when it was refused in one line."""
    try:
        return take(make(resume_state_dict=state), 2)
    except (ValueError, NanodataError) as exc:
        assert str(exc) and "\n" not in str(exc), repr(str(exc))
        return None


def _paths(value, prefix=()):
    """Paths to every part of a state; of a long list (the buffer) only the first items and the last."""
    yield prefix
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, list):
        items = [(i, value[i]) for i in sorted({*range(min(3, len(value))), len(value) - 1}) if value]
    else:
        return
    for key, child in items:
        yield from _paths(child, prefix + (key,))


def _nudge(value, data):
    """A nearby value of the same type, which is what a hand edit most often is."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + data.draw(st.sampled_from([-1000, -2, -1, 1, 2, 7]))
    if isinstance(value, str):
        return data.draw(st.sampled_from(["", value + "x", value[:-1], value.upper()]))
    if isinstance(value, list):
        return value[:data.draw(st.integers(0, max(len(value) - 1, 0)))]  # cut short
    return data.draw(JSON)


def _mutate(state: dict, data) -> None:
    """One edit somewhere in the state: nudge a value (what a hand edit most often is), replace it by any JSON,
    drop a key or item, or add a key. Depths are drawn first, so that nested parts are edited as often as the
    top-level keys, which outnumber them."""
    paths = list(_paths(state))[1:]
    depth = data.draw(st.sampled_from(sorted({len(path) for path in paths})), label="depth")
    path = data.draw(st.sampled_from([path for path in paths if len(path) == depth]), label="path")
    parent = state
    for key in path[:-1]:
        parent = parent[key]
    action = data.draw(st.sampled_from(["nudge"] * 4 + ["replace"] * 2 + ["drop", "add"]), label="action")
    if action == "drop":
        del parent[path[-1]]
    elif action == "replace":
        parent[path[-1]] = data.draw(JSON)
    elif action == "nudge":
        parent[path[-1]] = _nudge(parent[path[-1]], data)
    else:
        state[data.draw(st.text(max_size=12))] = data.draw(JSON)


def _same_batches(resumed, full, k):
    return resumed is not None and all(torch.equal(inputs, full[j][0]) and torch.equal(targets, full[j][1])
                                       for j, (inputs, targets, _) in enumerate(resumed, start=k))


@pytest.mark.parametrize("kind", KINDS)
def test_the_states_themselves_resume_exactly(runs, kind):
    make, full = runs[kind]
    for k in STATES_AT:
        assert _same_batches(_resume(make, full[k - 1][2]), full, k)
    raw = [state for _, (_, _, state) in zip(range(3), make(), strict=False)][-1]  # not round-tripped through JSON
    assert any(isinstance(doc_id, tuple) for doc_id in raw["buffer"])
    assert _same_batches(_resume(make, raw), full, 3)


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_mutated_states_resume_or_are_refused_in_one_line(runs, data):
    kind = data.draw(st.sampled_from(sorted(KINDS)), label="kind")
    make, full = runs[kind]
    k = data.draw(st.sampled_from(STATES_AT), label="k")
    state = copy.deepcopy(full[k - 1][2])
    for _ in range(data.draw(st.integers(1, 3), label="edits")):
        _mutate(state, data)
    resumed = _resume(make, state)
    if state == full[k - 1][2]:  # edits that cancel out
        assert _same_batches(resumed, full, k)


NANOCHAT_FIELD = st.integers(-2, 40) | JSON


@settings(max_examples=80, deadline=None)
@given(kind=st.sampled_from(sorted(KINDS)), pq_idx=NANOCHAT_FIELD, rg_idx=NANOCHAT_FIELD, epoch=NANOCHAT_FIELD)
def test_nanochat_states_resume_approximately_when_well_formed(runs, kind, pq_idx, rg_idx, epoch):
    make, _ = runs[kind]
    resumed = _resume(make, {"pq_idx": pq_idx, "rg_idx": rg_idx, "epoch": epoch})
    well_formed = all(type(v) is int for v in (pq_idx, rg_idx, epoch)) and min(pq_idx, rg_idx, epoch - 1) >= 0
    assert (resumed is not None) == well_formed


@settings(max_examples=100, deadline=None)
@given(kind=st.sampled_from(sorted(KINDS)), state=JSON.filter(lambda v: v is not None) | st.dictionaries(
    st.sampled_from(["version", "loader", "pq_idx", "rg_idx", "epoch", "cursor", "files", "buffer", "B", "T"]),
    JSON, min_size=1))
def test_arbitrary_json_is_refused_in_one_line(runs, kind, state):
    make, _ = runs[kind]
    resumed = _resume(make, state)
    is_nanochat = isinstance(state, dict) and set(state) == {"pq_idx", "rg_idx", "epoch"}
    assert resumed is None or is_nanochat
