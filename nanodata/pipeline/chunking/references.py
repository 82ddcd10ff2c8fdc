"""References: the names a unit calls, the types it uses and the classes it derives from, which the
compilable mode follows to put a unit's dependencies before it."""

from __future__ import annotations

import re
from bisect import bisect_right
from functools import lru_cache

from tree_sitter import Query, QueryCursor

from nanodata.pipeline.chunking.syntax import LANGUAGE, _last_name, _strip_template_args
from nanodata.pipeline.chunking.units import Unit

# Types: every type_identifier, plus the scopes of qualified names (`a::B::C` -> a, B), which
# tree-sitter-cpp parses as namespace_identifier even when they name a class (a nested type's
# enclosing class, `typename X::Y`, `X::kValue`): the enclosing type is a dependency too. A real
# namespace name just resolves to no type. (A template scope, `Outer<T>::Inner`, is a template_type
# whose name is already a type_identifier.)
REFERENCES = Query(LANGUAGE, "(call_expression function: (_) @call) (type_identifier) @type "
                             "(qualified_identifier scope: (namespace_identifier) @type) "
                             "(base_class_clause [(type_identifier) (qualified_identifier) (template_type)] @base)")


def _is_field(parent, node, field_name: str) -> bool:
    child = parent.child_by_field_name(field_name)
    return child is not None and child.start_byte == node.start_byte and child.end_byte == node.end_byte


def _type_qualifier(node) -> str:
    """The last scope component qualifying a type name node (`b` in a::b::T, `vector` in
    vector<int>::iterator), '' when unqualified. A scope is itself qualified by what qualifies
    the name it scopes (`std` for the `vector` of std::vector<int>::iterator)."""
    parent = node.parent
    kind = parent.type if parent is not None else None  # (read once: each read makes a string)
    if kind == "template_type" and _is_field(parent, node, "name"):
        node, parent = parent, parent.parent
        kind = parent.type if parent is not None else None
    if kind == "qualified_identifier" and _is_field(parent, node, "scope"):
        node, parent = parent, parent.parent
        kind = parent.type if parent is not None else None
    if kind != "qualified_identifier" or not _is_field(parent, node, "name"):
        return ""
    scope = parent.child_by_field_name("scope")
    return _last_name(_strip_template_args(scope.text.decode("utf-8", "replace"))) if scope is not None else ""


def _call_qualifier(text: str) -> str:
    """`a::b::f` -> b, `X<int>::g` -> X; member calls (obj.f, p->f) and ::f are unqualified."""
    if "." in text or "->" in text or ":" not in text:  # (no `::` even once template arguments are gone)
        return ""
    return _last_name(_strip_template_args(text).rpartition("::")[0])


@lru_cache(maxsize=4096)
def _specialization_head(name: str) -> re.Pattern:
    """`class|struct|union [attributes] [scope::]name <`: compiled once per name (re's own cache holds
    512 patterns, fewer than a large file's type names)."""
    return re.compile(rb"\b(?:class|struct|union)\s+(?:\w+\s+)*(?:[\w:]*::)?" + re.escape(name.encode())
                      + rb"\s*<")


def _is_specialization(unit: Unit, data: bytes) -> bool:
    """A type unit written `class X<...>` (a partial or explicit specialization of the template X)."""
    if unit.kind != "type" or not unit.name:
        return False
    brace = data.find(b"{", unit.start, unit.end)
    head = data[unit.start:brace if brace >= 0 else unit.end]
    if b"<" not in head:  # the common case, decided without a pattern
        return False
    return _specialization_head(unit.name).search(head) is not None


def _references(tree, units: list[Unit], data: bytes) -> None:
    """Attach called names and referenced type names to the unit whose body contains them, and the
    qualifiers of the names only ever used qualified."""
    starts = [u.start for u in units]
    ends = [u.end for u in units]
    captures = QueryCursor(REFERENCES).captures(tree.root_node)
    found: dict[str, list[dict]] = {"call": [{} for _ in units], "type": [{} for _ in units],
                                    "base": [{} for _ in units]}
    for label, buckets in found.items():
        nodes = captures.get(label, [])
        # captures come back in an order that varies from call to call: by span for determinism (the capture's
        # number only orders nodes of one span, whose text, bucket and qualifiers are the same whatever their order)
        for start, end, k in sorted([(n.start_byte, n.end_byte, k) for k, n in enumerate(nodes)]):
            i = bisect_right(starts, start) - 1
            if i >= 0 and end <= ends[i]:
                raw = data[start:end]  # bytes: decode only the distinct names
                used = buckets[i].get(raw)
                if used is None:
                    used = buckets[i][raw] = set()
                elif "" in used:  # used unqualified: its qualifiers are dropped (below), so not worth reading
                    continue
                used.add(_call_qualifier(raw.decode("utf-8", "replace")) if label == "call" else
                         _type_qualifier(nodes[k]) if label == "type" else "")
    for unit, calls, types, bases in zip(units, found["call"], found["type"], found["base"], strict=False):
        qualifiers: dict[tuple, set] = {}
        for raw, used in calls.items():
            qualifiers.setdefault(("function", _last_name(raw.decode("utf-8", "replace"))), set()).update(used)
        for raw, used in types.items():
            qualifiers.setdefault(("type", raw.decode("utf-8", "replace")), set()).update(used)
        unit.calls = tuple(name for kind, name in qualifiers if kind == "function" and name and name != unit.name)
        unit.specialization = _is_specialization(unit, data)
        own = unit.name if not unit.specialization else None  # a specialization needs its primary
        unit.types = tuple(name for kind, name in qualifiers if kind == "type" and name != own)
        if unit.kind == "type":  # `a::B<T>::C` derives from C (its scopes are in types already)
            names = (_last_name(_strip_template_args(raw.decode("utf-8", "replace"))) for raw in bases)
            unit.bases = tuple(dict.fromkeys(name for name in names if name))
        unit.qualifiers = {key: tuple(sorted(used)) for key, used in qualifiers.items() if "" not in used}
