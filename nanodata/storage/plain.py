"""Plain data: values of a declared type, stored as JSON with their bytes out of band, read back only in that type.

What a build stores and reads back (cache entries, the units in unit stores) is data, never code: no pickle, no
eval. A `Codec` is derived from a type, and reading checks every value against it, strictly (an int is not a bool,
a list holds what its type says, a dataclass has exactly its fields); anything else raises `Undecodable`, which
callers treat as a miss. Types:
- str, int, float, bool, bytes, None; `X | None`; list[X], tuple[X, ...], tuple[X, Y, ...], dict[K, V];
- a dataclass: its fields as `dataclasses.fields` lists them, each with its annotated type, so a field added to
  the class travels without any change here (and changes the fingerprint, so older payloads no longer decode);
  `omit` names fields left out (filled with a given value on reading: what depends on where a value is used);
- a bare `tuple`, `list` or `dict` (or `object`): plain values nested of the kinds above (a bare tuple's value is
  written once per payload and read back as one object wherever it was one, as pickle's memo kept them).

Layout: MAGIC, the type's fingerprint (8 bytes), the JSON's length (8 bytes, little-endian), the JSON
`[value, [blob lengths], [shared tuples]]` (UTF-8, lone surrogates kept), then the blobs (every bytes value, in
order).

msgspec writes the JSON (json does when a string holds lone surrogates: not UTF-8, which msgspec keeps to) and reads
it straight into the shape the type implies (a dataclass as an array-like msgspec Struct of its stored fields'
shapes), checking every value's type in C as it goes; what is left to Python is making the dataclasses, reading
plain values and blobs, and sharing the shared tuples (a converter's `post`). A float is finite (JSON has no NaN).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import types
import typing
from itertools import chain
from operator import attrgetter, itemgetter

import msgspec

MAGIC = b"npd1"
HEADER = len(MAGIC) + 8 + 8
_SCALARS = (str, int, float, bool, type(None))
_SCALAR_SET = frozenset(_SCALARS)
_WRITTEN_AS_IS = frozenset((str, int, bool, type(None)))  # (a float is checked first: JSON has no NaN, no infinity)
_LIST, _TWO = frozenset((list,)), frozenset((2,))
_COUNT = typing.Annotated[int, msgspec.Meta(ge=0)]
# json.dumps(..., ensure_ascii=False, separators=(",", ":"), allow_nan=False), its encoder made once, not per value:
# what writes a value holding lone surrogates, which msgspec (the writer otherwise) does not take
_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def _only(values, kinds: frozenset) -> bool:
    """Is the type of every one of `values` in `kinds`? (One C-speed pass: no call per item, no set built, stops at
    the first other type.)"""
    return kinds.issuperset(map(type, values))


def _pairs(values) -> bool:
    """Is every one of `values` a list of two? (As _only: no call per item.)"""
    return _LIST.issuperset(map(type, values)) and _TWO.issuperset(map(len, values))


def _tuple_of(getter, keys: list):
    """x -> the tuple of getter(key)(x) for each key (operator's getters return a bare value for one key)."""
    if len(keys) == 1:
        one = getter(keys[0])
        return lambda x: (one(x),)
    return getter(*keys) if keys else lambda x: ()


class Undecodable(ValueError):
    """Stored bytes that are not a value of the expected type (made by another version, edited, or not ours)."""


class _Out(list):
    """What encoding collects besides the value: the blobs (the list itself) and the shared tuples; `memo`: the
    shared tuples' JSON-able forms by identity, kept across the values a caller encodes (Codec.encode)."""

    def __init__(self, memo: dict | None):
        super().__init__()
        self.shared: list = []
        self.index: dict = {}
        self.memo = {} if memo is None else memo

    def plain(self, v: tuple):
        """A shared tuple's JSON-able form, converted once per memo (unless it holds bytes: blob numbers are the
        payload's own). The memo holds the tuple too, so its id names no other object while the memo lives."""
        held = self.memo.get(id(v))
        if held is not None:
            return held[1]
        blobs = len(self)
        encoded = _enc_plain(v, self)
        if len(self) == blobs:
            self.memo[id(v)] = (v, encoded)
        return encoded


class _Context:
    __slots__ = ("blobs", "shared", "decoded")

    def __init__(self, blobs: list, shared: list):
        self.blobs = blobs
        self.shared = shared
        self.decoded: list = [_UNSET] * len(shared)


_UNSET = object()


def _fail(what: str, value) -> typing.NoReturn:
    raise Undecodable(f"expected {what}, found {type(value).__name__}")


def _same(v, ctx):
    return v


def _finite(v: float) -> float:
    if v - v != 0.0:  # (NaN and the infinities alone)
        raise ValueError(f"{v} is not JSON (plain data holds finite floats)")
    return v


class _Conv:
    """A type's encoder enc(value, blobs) -> JSON-able; `spec`: the type msgspec reads its JSON as (checked there),
    `post`: post(what msgspec read, context) -> value, or None when what msgspec read is the value; `exact`: the
    type, when enc only checks that a value is of exactly that type and passes it as it is (checked in bulk by
    the converters of lists and dataclasses holding it); `items`: (container type, item type), when enc only checks
    that a value is such a container of such exact items and passes it as it is (checked in bulk by dataclasses);
    `optional`: enc takes None as it is (dataclasses pass a None without the call)."""
    __slots__ = ("enc", "spec", "post", "name", "exact", "items", "optional")

    def __init__(self, name: str, spec, exact: type | None = None):
        self.name = name
        self.spec = spec
        self.exact = exact
        self.items = None
        self.optional = False
        self.post = None


def _scalar(kind: type) -> _Conv:
    """A scalar of exactly `kind` (an int is not a bool); a float is finite (msgspec reads one written as an int's
    digits, 1e16, as a float)."""
    conv = _Conv(kind.__name__, kind, None if kind is float else kind)

    def enc(v, blobs):
        if type(v) is not kind:
            raise TypeError(f"expected {kind.__name__}, got {type(v).__name__}: {v!r:.80}")
        return _finite(v) if kind is float else v

    conv.enc = enc
    return conv


def _bytes() -> _Conv:
    conv = _Conv("bytes", _COUNT)

    def enc(v, blobs):
        if type(v) is not bytes:
            raise TypeError(f"expected bytes, got {type(v).__name__}")
        blobs.append(v)
        return len(blobs) - 1

    def post(v, ctx):
        if v >= len(ctx.blobs):
            _fail("a blob's number", v)
        return ctx.blobs[v]

    conv.enc, conv.post = enc, post
    return conv


def _none() -> _Conv:
    conv = _Conv("None", None)

    def enc(v, blobs):
        if v is not None:
            raise TypeError(f"expected None, got {type(v).__name__}")
        return None

    conv.enc = enc
    return conv


def _optional(inner: _Conv) -> _Conv:
    conv = _Conv(f"{inner.name} | None", inner.spec | None)
    conv.optional = True
    conv.enc = lambda v, blobs: None if v is None else inner.enc(v, blobs)
    if inner.post is not None:
        conv.post = lambda v, ctx: None if v is None else inner.post(v, ctx)
    return conv


def _sequence(inner: _Conv, kind: type) -> _Conv:
    conv = _Conv(f"{kind.__name__}[{inner.name}]", list[inner.spec] if kind is list else tuple[inner.spec, ...])
    if inner.exact is not None:  # the common case (str, int, bool), checked without a call per item
        kinds = frozenset((inner.exact,))
        conv.items = (kind, inner.exact)

        def enc(v, blobs):
            if type(v) is not kind or not _only(v, kinds):
                raise TypeError(f"expected {conv.name}, got {v!r:.80}")
            return v
    else:
        def enc(v, blobs):
            if type(v) is not kind:
                raise TypeError(f"expected {conv.name}, got {type(v).__name__}")
            return [inner.enc(x, blobs) for x in v]

    item = inner.post
    if item is not None:
        conv.post = lambda v, ctx: kind([item(x, ctx) for x in v])
    conv.enc = enc
    return conv


def _fixed_tuple(inners: list[_Conv]) -> _Conv:
    conv = _Conv(f"tuple[{', '.join(c.name for c in inners)}]", tuple[tuple(c.spec for c in inners)])
    n = len(inners)
    kinds = tuple(c.exact for c in inners)

    def enc(v, blobs):
        if type(v) is not tuple or len(v) != n:
            raise TypeError(f"expected {conv.name}, got {v!r:.80}")
        if tuple(map(type, v)) == kinds:  # scalars of exactly their types (a pair of names): as they are
            return v
        return [c.enc(x, blobs) for c, x in zip(inners, v, strict=True)]

    if any(c.post is not None for c in inners):
        posts = [c.post or _same for c in inners]
        conv.post = lambda v, ctx: tuple([p(x, ctx) for p, x in zip(posts, v, strict=True)])
    conv.enc = enc
    return conv


def _mapping(key: _Conv, value: _Conv) -> _Conv:
    string_keys = key.name == "str"  # a JSON object, else [[key, value], ...]
    spec = dict[str, value.spec] if string_keys else list[tuple[key.spec, value.spec]]
    conv = _Conv(f"dict[{key.name}, {value.name}]", spec)
    if string_keys:
        def enc(v, blobs):
            if type(v) is not dict:
                raise TypeError(f"expected {conv.name}, got {type(v).__name__}")
            return {key.enc(k, blobs): value.enc(x, blobs) for k, x in v.items()}
    else:
        def enc(v, blobs):
            if type(v) is not dict:
                raise TypeError(f"expected {conv.name}, got {type(v).__name__}")
            return [[key.enc(k, blobs), value.enc(x, blobs)] for k, x in v.items()]

    if string_keys:
        if value.post is not None:
            conv.post = lambda v, ctx: {k: value.post(x, ctx) for k, x in v.items()}
    elif key.post is None and value.post is None:
        conv.post = _dict_of_pairs
    else:
        key_post, value_post = key.post or _same, value.post or _same
        conv.post = lambda v, ctx: _dict_of_pairs([(key_post(k, ctx), value_post(x, ctx)) for k, x in v], ctx)
    conv.enc = enc
    return conv


def _dict_of_pairs(pairs: list, ctx) -> dict:
    try:
        return dict(pairs)
    except TypeError:  # an unhashable key
        raise Undecodable("a dict with an unhashable key") from None


# plain values: scalars as themselves, a tuple as a JSON array, the rest as a one-key object naming its kind

# (a scalar item is taken in place, as the call for it would give it back: no call per item)

def _enc_plain(v, blobs, _scalars=_WRITTEN_AS_IS.issuperset):
    t = type(v)
    if t in _WRITTEN_AS_IS:
        return v
    if t is float:
        return _finite(v)
    if t is tuple:
        return list(v) if _scalars(map(type, v)) else _enc_items(v, blobs)
    if t is list:
        return {"l": list(v) if _scalars(map(type, v)) else _enc_items(v, blobs)}
    if t is dict:
        if _scalars(map(type, v)) and _scalars(map(type, v.values())):
            return {"d": list(map(list, v.items()))}
        return {"d": [[_enc_plain(k, blobs), _enc_plain(x, blobs)] for k, x in v.items()]}
    if t is bytes:
        blobs.append(v)
        return {"b": len(blobs) - 1}
    raise TypeError(f"not a plain value: {t.__name__}")


def _enc_items(v, blobs) -> list:
    return [x if type(x) in _WRITTEN_AS_IS else _enc_plain(x, blobs) for x in v]


def _dec_plain(v, ctx, _scalars=_SCALAR_SET.issuperset):
    t = type(v)
    if t is list:
        if _scalars(map(type, v)):  # names, numbers
            return tuple(v)
        return tuple([x if type(x) in _SCALAR_SET else _dec_plain(x, ctx) for x in v])
    if t is dict:
        if len(v) != 1:
            _fail("a plain value", v)
        (kind, inner), = v.items()
        if kind == "l" and type(inner) is list:
            return [x if type(x) in _SCALAR_SET else _dec_plain(x, ctx) for x in inner]
        if kind == "d" and type(inner) is list and _pairs(inner):
            if _scalars(map(type, chain.from_iterable(inner))):  # (figures by name: no call per item)
                return dict(inner)
            try:
                return {_dec_plain(k, ctx): _dec_plain(x, ctx) for k, x in inner}
            except TypeError:  # an unhashable key
                raise Undecodable("a plain dict with an unhashable key") from None
        if kind == "b" and type(inner) is int and 0 <= inner < len(ctx.blobs):
            return ctx.blobs[inner]
        _fail("a plain value", v)
    return v  # JSON's scalars are plain


def _plain(kind: type | None) -> _Conv:
    """A bare tuple/list/dict (or object): a plain value. A bare tuple's value is written once per payload and
    referred to by its number wherever the same object recurs (a scope shared by a file's units): read once, one
    object again."""
    conv = _Conv(kind.__name__ if kind else "object", typing.Any)

    def enc(v, out):
        if kind is not None and type(v) is not kind:
            raise TypeError(f"expected {kind.__name__}, got {type(v).__name__}")
        if kind is tuple:  # by identity, as pickle's memo: (1,) and (True,) are equal, not the same
            number = out.index.get(id(v))
            if number is None:
                number = out.index[id(v)] = len(out.shared)
                out.shared.append(out.plain(v))
            return number
        return _enc_plain(v, out)

    def post(v, ctx):
        if kind is tuple and type(v) is int:
            if not 0 <= v < len(ctx.shared):
                _fail("a shared tuple's number", v)
            value = ctx.decoded[v]
            if value is _UNSET:
                value = ctx.decoded[v] = _dec_plain(ctx.shared[v], ctx)
        else:
            value = _dec_plain(v, ctx)
        if kind is not None and type(value) is not kind:
            _fail(kind.__name__, value)
        return value

    conv.enc, conv.post = enc, post
    return conv


def _dataclass(cls: type, fills: dict, names: list[str]) -> tuple[_Conv, list]:
    """A dataclass as the list of its stored fields' values (`names`); the (name, converter, passed to __init__) of
    each stored field are appended to the returned list by the caller (after registering: types may recurse),
    and their shapes set on the converter's spec (an array-like msgspec Struct of those fields) then.

    Encoding, fields of an exact scalar type (str, int, bool: a converter that only checks the type) and lists or
    tuples of them are read and checked all at once, their values taken as they are; only the other fields'
    converters are called (not for None in an optional field), in field order, so a value fails on the same field,
    with the same message, as one converter per field would make it."""
    spec = msgspec.defstruct(cls.__qualname__, [(name, object) for name in names], array_like=True,
                             forbid_unknown_fields=True, gc=False)
    conv = _Conv(cls.__qualname__, spec)
    built: list = []
    plan: list = []  # [_Plan] once `built` is complete

    def planned() -> _Plan:
        if not plan:
            plan.append(_Plan(built))
        return plan[0]

    def enc_each(v, blobs):  # (one converter per field: the rule the fast path keeps)
        out = []
        for name, field_conv, _ in built:
            try:
                out.append(field_conv.enc(getattr(v, name), blobs))
            except TypeError as exc:
                raise TypeError(f"{cls.__qualname__}.{name}: {exc}") from None
        return out

    def enc(v, blobs):
        if type(v) is not cls:
            raise TypeError(f"expected {cls.__qualname__}, got {type(v).__name__}")
        p = planned()
        values = p.read(v)
        types = tuple(map(type, values))
        if p.scalars(types) != p.scalar_types or p.sequences(types) != p.sequence_types:
            return enc_each(v, blobs)  # (fails on its first wrong field)
        for group, kinds in p.items:
            if not kinds.issuperset(map(type, chain.from_iterable(group(values)))):
                return enc_each(v, blobs)
        out = list(values)
        for i, name, field_enc, optional in p.others:
            if optional and values[i] is None:
                continue
            try:
                out[i] = field_enc(values[i], blobs)
            except TypeError as exc:
                raise TypeError(f"{cls.__qualname__}.{name}: {exc}") from None
        return out

    # a plain dataclass (no __post_init__ to run, no slots) is filled in as pickle does, without calling __init__:
    # every field is set, as msgspec checked it
    direct = not hasattr(cls, "__post_init__") and "__slots__" not in cls.__dict__
    new, fields = object.__new__, msgspec.structs.astuple

    def post(v, ctx):
        p = planned()
        if direct:
            value = new(cls)
            values = value.__dict__
            if fills:
                values.update(fills)
            values.update(zip(p.names, fields(v), strict=True))
        else:
            values = dict(zip(p.names, fields(v), strict=True))
        for name, field_post, optional in p.posts:
            x = values[name]
            if x is not None or not optional:  # (a None in an optional field is its value)
                values[name] = field_post(x, ctx)
        if direct:
            return value
        args = {**fills, **{name: values[name] for name, _, init in built if init}}
        try:
            value = cls(**args)
        except TypeError as exc:
            raise Undecodable(f"{cls.__qualname__}: {exc}") from None
        for name, _, init in built:
            if not init:
                object.__setattr__(value, name, values[name])
        return value

    conv.enc, conv.post = enc, post
    return conv, built


class _Plan:
    """How a dataclass's stored fields are written and read (see _dataclass)."""

    def __init__(self, built: list):
        self.names = [name for name, _, _ in built]
        self.read = _tuple_of(attrgetter, self.names)
        exact = [i for i, (_, c, _) in enumerate(built) if c.exact is not None]
        sequences = [i for i, (_, c, _) in enumerate(built) if c.items is not None]
        self.scalars = _tuple_of(itemgetter, exact)
        self.scalar_types = tuple(built[i][1].exact for i in exact)
        self.sequences = _tuple_of(itemgetter, sequences)
        self.sequence_types = tuple(built[i][1].items[0] for i in sequences)
        by_item: dict[type, list[int]] = {}
        for i in sequences:
            by_item.setdefault(built[i][1].items[1], []).append(i)
        self.items = [(_tuple_of(itemgetter, group), frozenset((kind,))) for kind, group in by_item.items()]
        self.others = [(i, name, c.enc, c.optional) for i, (name, c, _) in enumerate(built)
                       if i not in exact and i not in sequences]
        self.posts = [(name, c.post, c.optional) for name, c, _ in built if c.post is not None]


class Codec:
    """encode(value) -> bytes and decode(bytes) -> value of one type (see the module doc); `fingerprint` names
    the type's shape (field names and types, all the way down)."""

    def __init__(self, hint, omit: dict | None = None):
        self.hint = hint
        self.omit = {cls: dict(fields) for cls, fields in (omit or {}).items()}
        self._convs: dict = {}
        self._shapes: list[str] = []
        self.root = self._conv(hint)
        self._shapes.insert(0, _describe(hint))
        self.fingerprint = hashlib.blake2b("\n".join(self._shapes).encode(), digest_size=8).digest()
        self._top = tuple[self.root.spec, list[_COUNT], list]  # [value, [blob lengths], [shared tuples]]
        self._read = msgspec.json.Decoder(self._top).decode

    def __reduce__(self):  # (to worker processes: made again there from the type)
        return Codec, (self.hint, self.omit)

    def _conv(self, hint) -> _Conv:
        key = hint
        if key in self._convs:
            return self._convs[key]
        conv = self._make(hint)
        self._convs[key] = conv
        return conv

    def _make(self, hint) -> _Conv:
        if hint in (str, int, bool):
            return _scalar(hint)
        if hint is float:
            return _scalar(float)
        if hint is bytes:
            return _bytes()
        if hint is type(None) or hint is None:
            return _none()
        if hint in (tuple, list, dict):
            return _plain(hint)
        if hint is object or hint is typing.Any:
            return _plain(None)
        if dataclasses.is_dataclass(hint) and isinstance(hint, type):
            fills = self.omit.get(hint, {})
            unknown = set(fills) - {f.name for f in dataclasses.fields(hint)}
            if unknown:
                raise TypeError(f"{hint.__qualname__} has no fields {sorted(unknown)}")
            hints = typing.get_type_hints(hint)
            stored = [f for f in dataclasses.fields(hint) if f.name not in fills]
            conv, built = _dataclass(hint, fills, [f.name for f in stored])
            self._convs[hint] = conv  # registered before its fields: a field may be of this type again
            self._shapes.append(f"{_describe(hint)}: " + ", ".join(f"{f.name}: {_describe(hints[f.name])}"
                                                                  for f in stored) + f" / omitted {sorted(fills)}")
            for f in stored:
                built.append((f.name, self._conv(hints[f.name]), f.init))
                conv.spec.__annotations__[f.name] = built[-1][1].spec  # (read when the first decoder is made)
            return conv
        origin, args = typing.get_origin(hint), typing.get_args(hint)
        if origin in (typing.Union, types.UnionType):
            rest = [a for a in args if a is not type(None)]
            if len(rest) == 1 and len(args) == 2:
                return _optional(self._conv(rest[0]))
        elif origin is list and len(args) == 1:
            return _sequence(self._conv(args[0]), list)
        elif origin is tuple and len(args) == 2 and args[1] is Ellipsis:
            return _sequence(self._conv(args[0]), tuple)
        elif origin is tuple and args:
            return _fixed_tuple([self._conv(a) for a in args])
        elif origin is dict and len(args) == 2:
            return _mapping(self._conv(args[0]), self._conv(args[1]))
        raise TypeError(f"no plain-data codec for {hint!r}")

    def encode(self, value, memo: dict | None = None) -> bytes:
        """`value` as plain data. memo: a dict a caller encoding many values that share tuples (a file's units, their
        scopes) passes to every call, so each tuple is converted once; its values must not change meanwhile."""
        out = _Out(memo)
        top = [self.root.enc(value, out), [len(b) for b in out], out.shared]
        try:
            body = msgspec.json.encode(top)
        except UnicodeEncodeError:  # lone surrogates (a file's undecodable bytes, kept as surrogateescape)
            body = _JSON.encode(top).encode("utf-8", "surrogatepass")
        return b"".join([MAGIC, self.fingerprint, len(body).to_bytes(8, "little"), body, *out])

    def decode(self, data: bytes | memoryview):
        """The value `data` holds; Undecodable when it is not one of this type, whatever the bytes."""
        data = memoryview(data)
        if len(data) < HEADER or data[:len(MAGIC)] != MAGIC:
            raise Undecodable("not plain data (no header)")
        if data[len(MAGIC):len(MAGIC) + 8] != self.fingerprint:
            raise Undecodable("plain data of another shape (made by another version)")
        size = int.from_bytes(data[len(MAGIC) + 8:HEADER], "little")
        if size > len(data) - HEADER:
            raise Undecodable("plain data cut short")
        body = data[HEADER:HEADER + size]
        try:
            top = self._read(body)
        except msgspec.ValidationError as exc:
            raise Undecodable(f"not a value of this shape: {exc}") from None
        except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
            top = self._read_surrogates(body)
        if sum(top[1]) != len(data) - HEADER - size:
            raise Undecodable("blobs of other lengths than the data holds")
        blobs, at = [], HEADER + size
        for n in top[1]:
            blobs.append(bytes(data[at:at + n]))
            at += n
        try:
            return top[0] if self.root.post is None else self.root.post(top[0], _Context(blobs, top[2]))
        except RecursionError:
            raise Undecodable("nested too deeply") from None

    def _read_surrogates(self, body: memoryview):
        """What msgspec cannot read: JSON holding lone surrogates (a file's undecodable bytes, kept as
        surrogateescape), written surrogatepass, which is not UTF-8; and what is not JSON at all."""
        try:
            return msgspec.convert(json.loads(str(body, "utf-8", "surrogatepass")), self._top)
        except msgspec.ValidationError as exc:
            raise Undecodable(f"not a value of this shape: {exc}") from None
        except (ValueError, RecursionError) as exc:
            raise Undecodable(f"not JSON: {exc}") from None


def _describe(hint) -> str:
    if isinstance(hint, type):
        return f"{hint.__module__}.{hint.__qualname__}" if dataclasses.is_dataclass(hint) else hint.__name__
    return repr(hint)
