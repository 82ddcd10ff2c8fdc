"""DataLoaderLite.load_state_dict over arbitrary and mutated states: an exact resume, or one line naming the key.

Whatever a checkpoint holds (keys dropped, values of other types or other values, extra keys, any JSON),
load_state_dict either puts the loader exactly where an uninterrupted run would be, or raises a
NanodataError/ValueError whose message is one line; never a KeyError, TypeError or IndexError.
"""

import json

import pytest
import torch
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from test_lite import write_shards

from nanodata.errors import NanodataError
from nanodata.lite import STATE_TYPES, DataLoaderLite

B, T, RANK, WORLD = 2, 8, 1, 2  # steps of 32 tokens; rank 1 starts at 16
EPOCH_STEPS = 70  # shards of 1000, 700 and 430 tokens: 31 + 21 + 13 steps, then the run wraps
PROPERTY = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6)


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return write_shards(tmp_path_factory.mktemp("shards"), {0: 500, 1: 1000, 2: 700, 3: 430})


def new_loader(root) -> DataLoaderLite:
    return DataLoaderLite(B, T, RANK, WORLD, "train", root)


def state_after(root, steps: int) -> dict:
    loader = new_loader(root)
    for _ in range(steps):
        loader.next_batch()
    return json.loads(json.dumps(loader.state_dict()))  # as a checkpoint holds it


def other_value(draw, value):
    """Another value of the same type (whole steps away as often as not), or any JSON for a non-state value."""
    if type(value) is int:
        return value + draw(st.integers(-3, 3) | st.integers(-40, 40).map(lambda k: 32 * k) | st.integers())
    if isinstance(value, str):
        return draw(st.sampled_from(["", "val", "train", value[:-1], value + "0"]) | st.text(max_size=20))
    return draw(json_values)


@st.composite
def mutated_states(draw, root):
    """A real state after some steps, with 1-3 mutations; the key of the single mutation, if one."""
    state = state_after(root, draw(st.integers(0, 2 * EPOCH_STEPS)))
    mutations = draw(st.lists(st.sampled_from(["drop", "type", "value", "extra"]), min_size=1, max_size=3))
    keys = []
    for kind in mutations:
        key = draw(st.sampled_from(sorted(STATE_TYPES)))
        if kind == "drop":
            state.pop(key, None)
        elif kind == "type":
            state[key] = draw(json_values)
        elif kind == "value" and key in state:
            state[key] = other_value(draw, state[key])
        elif kind == "extra":
            key = draw(st.text(max_size=12))
            state[key] = draw(json_values)
        keys.append(key)
    return state, keys[0] if len(keys) == 1 else None


def check_outcome(root, state, key=None) -> str:
    """Exact resume or a one-line NanodataError/ValueError (naming `key` when one key was changed)."""
    loader = new_loader(root)
    try:
        loader.load_state_dict(state)
    except (NanodataError, ValueError) as exc:
        message = str(exc)
        assert message and "\n" not in message, message
        if key in STATE_TYPES:
            assert key in message, (key, message)
        return "refused"
    assert loader.state_dict() == {k: state[k] for k in STATE_TYPES}
    reference = new_loader(root)  # an uninterrupted run must pass through the accepted state
    for _ in range(EPOCH_STEPS + 1):
        if reference.state_dict() == loader.state_dict():
            break
        reference.next_batch()
    else:
        pytest.fail(f"accepted a state no uninterrupted run reaches: {state}")
    for _ in range(EPOCH_STEPS + 5):  # past a shard switch and the wrap
        (x, y), (rx, ry) = loader.next_batch(), reference.next_batch()
        assert torch.equal(x, rx) and torch.equal(y, ry)
    return "resumed"


@PROPERTY
@given(data=st.data())
def test_mutated_states_resume_exactly_or_name_the_key(root, data):
    state, key = data.draw(mutated_states(root))
    event(check_outcome(root, state, key))


@PROPERTY
@given(state=json_values | st.dictionaries(st.sampled_from(sorted(STATE_TYPES)) | st.text(max_size=8), json_values))
def test_any_json_is_refused_in_one_line(root, state):
    assert check_outcome(root, state) == "refused"


@PROPERTY
@given(steps=st.integers(0, 2 * EPOCH_STEPS))
def test_unchanged_states_resume_exactly(root, steps):
    assert check_outcome(root, state_after(root, steps)) == "resumed"
