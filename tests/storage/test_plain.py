"""Plain data (nanodata.storage.plain): what a build stores is read back as exactly the value written, in its declared
type, or not at all (Undecodable); nothing stored runs code; a field added to a dataclass travels and changes the
shape, so older payloads no longer decode."""

import json
import pickle
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from nanodata.storage.plain import HEADER, Codec, Undecodable


@dataclass
class Inner:
    name: str
    count: int = 0
    parent: "Inner | None" = None


@dataclass
class Record:
    flag: bool
    ratio: float
    names: list[str]
    numbers: tuple[int, ...]
    pair: tuple[str, int] | None
    by_name: dict[str, int]
    by_pair: dict[tuple[str, str], tuple]
    blob: bytes
    inner: list[Inner]
    anything: tuple = ()
    loose: dict = field(default_factory=dict)
    where: str = "here"


def _record() -> Record:
    scope = (("namespace a {\n", 3, "}\n", 1, (0, 1)),)
    return Record(True, 0.25, ["a", "\udcff lone surrogate", "é"], (1, 2, 3), ("x", 4), {"k": 1},
                  {("function", "f"): ("a", "b")}, b"\x00\xff" * 10,
                  [Inner("one", 1), Inner("two", 2, Inner("three"))], (scope, scope, [1, {"l": 2}], None, b"raw"),
                  {(1, 2): [3.5, "x"], "s": {"nested": (b"",)}}, where="there")


@dataclass
class Scoped:
    scope: tuple


@dataclass(frozen=True)
class Frozen:
    reason: str
    item: str = ""


@dataclass
class Checked:
    size: int

    def __post_init__(self):
        if self.size < 0:
            raise Undecodable("a size below 0")


def test_a_value_reads_back_equal_and_equal_tuples_as_one_object():
    codec = Codec(Record, omit={Record: {"where": "filled"}})
    value = _record()
    back = codec.decode(codec.encode(value))
    assert back == Record(**{**value.__dict__, "where": "filled"})
    scoped = Codec(list[Scoped])
    shared = value.anything[0]
    units = scoped.decode(scoped.encode([Scoped(shared), Scoped(shared), Scoped(())]))
    assert units[0].scope == shared and units[0].scope is units[1].scope  # one object, as pickle's memo kept it
    flags = scoped.decode(scoped.encode([Scoped((1,)), Scoped((True,)), Scoped((1.0,))]))
    assert [type(u.scope[0]) for u in flags] == [int, bool, float]  # equal values, not the same: kept apart
    frozen = Codec(Frozen)
    assert frozen.decode(frozen.encode(Frozen("generated", "x"))) == Frozen("generated", "x")
    checked = Codec(Checked)  # a dataclass that checks itself is made through __init__
    assert checked.decode(checked.encode(Checked(3))) == Checked(3)
    bad = Checked(1)
    bad.size = -1
    data = checked.encode(bad)
    with pytest.raises(Undecodable, match="below 0"):
        checked.decode(data)


class Touch:
    """Unpickling it creates a file."""

    def __init__(self, path: Path):
        self.path = path

    def __reduce__(self):
        return Path.touch, (self.path,)


def test_a_pickle_is_undecodable_and_runs_nothing(tmp_path):
    live = tmp_path / "live"
    pickle.loads(pickle.dumps(Touch(live)))
    assert live.exists()  # the payload does run code when unpickled
    marker = tmp_path / "marker"
    codec = Codec(Record)
    for payload in (pickle.dumps(Touch(marker)), codec.encode(_record())[:HEADER] + pickle.dumps(Touch(marker))):
        with pytest.raises(Undecodable):
            codec.decode(payload)
    assert not marker.exists()


def _with_body(codec: Codec, value_json, blobs: list[bytes] = (), shared: list = ()) -> bytes:
    body = json.dumps([value_json, [len(b) for b in blobs], list(shared)]).encode()
    return b"".join([b"npd1", codec.fingerprint, len(body).to_bytes(8, "little"), body, *blobs])


def test_a_value_of_another_shape_is_undecodable():
    codec = Codec(list[Inner])
    good = [["a", 1, None]]
    assert codec.decode(_with_body(codec, good)) == [Inner("a", 1)]
    for bad in ([["a", True, None]], [["a", 1]], [["a", 1, None, 2]], [[1, 1, None]], [["a", 1.5, None]],
                {"a": 1}, [["a", 1, ["b", 2, "nope"]]], "x", [["a", 1, {"l": []}]]):
        with pytest.raises(Undecodable):
            codec.decode(_with_body(codec, bad))
    blob = Codec(tuple[bytes, str])
    assert blob.decode(_with_body(blob, [0, "s"], [b"xy"])) == (b"xy", "s")
    for bad_value, blobs in (([1, "s"], [b"xy"]), ([0, "s"], []), ([-1, "s"], [b"xy"])):
        with pytest.raises(Undecodable):
            blob.decode(_with_body(blob, bad_value, blobs))
    data = blob.encode((b"xy", "s"))
    for broken in (data[:-1], data + b"z", data[:HEADER - 1], b"npd0" + data[4:]):
        with pytest.raises(Undecodable):
            blob.decode(broken)
    plain = Codec(tuple)
    assert plain.decode(_with_body(plain, 0, shared=[["a", 1]])) == ("a", 1)
    for bad, shared in (({"d": [[["unhashable", {"l": []}], 1]]}, []), ({"q": 1}, []), ({"l": 1, "d": 2}, []),
                        (1, [["a"]]), (-1, [["a"]]), (0, [{"l": []}]), (0, [1])):
        with pytest.raises(Undecodable):
            plain.decode(_with_body(plain, bad, shared=shared))


def test_a_field_added_travels_and_older_payloads_no_longer_decode():
    @dataclass
    class Before:
        a: int

    @dataclass
    class After:
        a: int
        lines: tuple[int, int] | None = None

    After.__qualname__ = Before.__qualname__
    before, after = Codec(Before), Codec(After)
    assert before.fingerprint != after.fingerprint
    assert after.decode(after.encode(After(1, (2, 3)))) == After(1, (2, 3))
    with pytest.raises(Undecodable, match="another shape"):
        after.decode(before.encode(Before(1)))


def test_writing_a_value_not_of_its_type_fails_loudly():
    codec = Codec(list[Inner])
    for bad in ([Inner("a", True)], [Inner(1)], (Inner("a"),), [Inner("a", 1, "parent")]):
        with pytest.raises(TypeError):
            codec.encode(bad)
    with pytest.raises(TypeError, match="no plain-data codec"):
        Codec(set[int])


def test_fields_checked_in_bulk_fail_on_the_field_one_converter_each_would_name():
    codec = Codec(Record)
    for name, bad in (("names", ["a", 1]), ("numbers", [1, 2]), ("numbers", (1, "2")), ("pair", ("x", "4"))):
        value = _record()
        setattr(value, name, bad)
        with pytest.raises(TypeError, match=f"^Record.{name}: "):
            codec.encode(value)


def test_a_memo_kept_across_values_writes_what_each_value_alone_would():
    codec = Codec(Scoped)
    scope = _record().anything[0]
    values = [Scoped(scope), Scoped(scope), Scoped((b"raw", scope))]
    memo: dict = {}
    assert [codec.encode(v, memo) for v in values] == [codec.encode(v) for v in values]
    assert [held for held, _ in memo.values()] == [scope]  # not a tuple holding bytes: its blob numbers are its own


def test_a_codec_travels_to_worker_processes():
    codec = pickle.loads(pickle.dumps(Codec(Record, omit={Record: {"where": ""}})))
    assert codec.decode(codec.encode(_record())).names == _record().names


def test_values_checked_in_bulk_are_checked_as_each_one_alone():
    """Lists, dicts and plain tuples of scalars are checked in one pass each: a wrong item anywhere in them still
    makes the payload undecodable, and what they hold is written as the JSON of each value alone would be."""
    counts = Codec(dict[str, int])
    assert counts.decode(_with_body(counts, {"a": 1, "b": 2})) == {"a": 1, "b": 2}
    for bad in ({"a": 1, "b": True}, {"a": 1, "b": "2"}, {"a": 1, "b": 1.0}, {"a": [1]}):
        with pytest.raises(Undecodable):
            counts.decode(_with_body(counts, bad))
    plain = Codec(dict)
    assert plain.decode(_with_body(plain, {"d": [["a", 1], [2, None]]})) == {"a": 1, 2: None}
    for bad in ({"d": [["a", 1], ["b"]]}, {"d": [["a", 1], ["b", 2, 3]]}, {"d": [["a", 1], "b2"]},
                {"d": [["a", 1], {"l": []}]}, {"d": [[{"l": ["k"]}, 1]]}):
        with pytest.raises(Undecodable):
            plain.decode(_with_body(plain, bad))
    nested = Codec(tuple)
    value = ("a", 1, (2, ("b", None)), [3, (4,)], {"k": (5, "v")}, True, 0.5)
    body = ('[0,[],[["a",1,[2,["b",null]],{"l":[3,[4]]},{"d":[["k",[5,"v"]]]},true,0.5]]]')
    assert nested.encode(value)[HEADER:] == body.encode()
    assert nested.decode(nested.encode(value)) == value
    for bad in (("a", {1, 2}), ("a", (1, object())), ("a", {"k": {1}}), {"k": [1, {2}]}):
        with pytest.raises(TypeError):
            Codec(object).encode(bad)


def test_a_float_json_cannot_hold_fails_loudly_and_lone_surrogates_travel():
    for codec, value in ((Codec(float), float("nan")), (Codec(list[float]), [1.0, float("inf")]),
                         (Codec(dict), {"ratio": -float("inf")}), (Codec(tuple), (0.5, (float("nan"),)))):
        with pytest.raises(ValueError, match="not JSON"):
            codec.encode(value)
    texts = Codec(tuple[str, dict[str, float]])
    value = ("\udcff\udc80 bytes that were not UTF-8", {"\udcfe": 1e16})
    assert texts.decode(texts.encode(value)) == value
