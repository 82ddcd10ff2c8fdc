"""Parse one C++ file with tree-sitter into ordered, token-counted units.

A file becomes a table of *segments* (texts in source order: comments, declarations,
`namespace N {` openers, `}` closers, `#if` lines) and *units* built from them:
- preamble: file-scope includes, macros, using, typedefs, forward declarations, globals;
- decl: the same kinds of declarations inside a namespace (kept in their namespace);
- type: class/struct/union/enum with a body, templates included;
- function: definitions, templates and out-of-class methods included.
Leading comments (and a same-line trailing comment) belong to the unit they sit next to.

Every segment's text is an exact span of the source made of whole lines: a node is widened to
the lines it touches, and nodes that share a line (`int a; int b;`, `@@@ junk`, `} }`) share one
segment, held by the widest of them (the others are empty). A doc is thus always a concatenation
of exact spans of its file; the one byte that may not be is the newline a file's last line lacks,
added so that nothing placed after it joins that line. GPT-4-style split patterns always cut
"X\\n" + "Y" right after the newline, so the token count of concatenated segments is the sum of
their counts: each segment is tokenized exactly once and docs are priced without re-tokenizing
them (`pack.counter_for` refuses a tokenizer for which this does not hold).
"""

from __future__ import annotations

import re
from bisect import bisect_right
from dataclasses import dataclass, field

import tree_sitter_cpp
from tree_sitter import Language, Parser, Query, QueryCursor

LANGUAGE = Language(tree_sitter_cpp.language())
WRAPPERS = {"namespace_definition", "linkage_specification"}      # re-wrapped around their units
CONDITIONALS = {"preproc_if", "preproc_ifdef", "preproc_else", "preproc_elif", "preproc_elifdef"}
TYPE_SPECIFIERS = {"class_specifier", "struct_specifier", "union_specifier", "enum_specifier"}
# Small file-scope declarations of these kinds form the preamble every chunk of the file repeats.
PREAMBLE_NODES = {"preproc_include", "preproc_def", "preproc_function_def", "preproc_call", "using_declaration",
                  "alias_declaration", "type_definition", "declaration", "template_declaration",
                  "namespace_alias_definition", "linkage_specification", "struct_specifier", "class_specifier",
                  "union_specifier", "enum_specifier", "static_assert_declaration", "concept_definition"}
MAX_PREAMBLE_ITEM_BYTES = 512
# Types: every type_identifier, plus the scopes of qualified names (`a::B::C` -> a, B), which
# tree-sitter-cpp parses as namespace_identifier even when they name a class (a nested type's
# enclosing class, `typename X::Y`, `X::kValue`): the enclosing type is a dependency too. A real
# namespace name just resolves to no type. (A template scope, `Outer<T>::Inner`, is a template_type
# whose name is already a type_identifier.)
REFERENCES = Query(LANGUAGE, "(call_expression function: (_) @call) (type_identifier) @type "
                             "(qualified_identifier scope: (namespace_identifier) @type)")
IDENTIFIER = re.compile(r"[A-Za-z_]\w*")

_parser: Parser | None = None


def parser() -> Parser:
    global _parser  # one per process: Parser objects are not picklable, so workers build their own
    if _parser is None:
        _parser = Parser(LANGUAGE)
    return _parser


@dataclass
class Unit:
    kind: str                   # preamble | decl | type | function
    name: str                   # simple name ("" for preamble/decl)
    owner: str                  # class of an out-of-class method or nested type ("A" for A::f, class A::It)
    scope: tuple                # ((open text, tokens, close text, tokens), ...): namespaces / extern "C" around it
    segments: list[int]         # segment indices: leading comments, body, trailing comment
    body: int                   # the segment holding the code itself
    start: int                  # byte offsets of the body in the file
    end: int
    tokens: int = 0
    members: list = field(default_factory=list)  # a class body's members (segment lists), for splitting
    opener: int = -1            # with members: the `class X : Base {` segment; body is the `};` segment
    calls: tuple = ()           # simple names called, first occurrence order
    types: tuple = ()           # type names referenced, first occurrence order
    # ("function" | "type", name) -> last scope components (`b` for a::b::f) of a name every use of
    # which is qualified; a name used unqualified even once is absent (global lookups match by what
    # the use names: `C::iterator` is not `path::iterator`)
    qualifiers: dict = field(default_factory=dict)


@dataclass
class FileUnits:
    texts: list[str]            # segment table
    tokens: list[int]           # tokens of each segment (exact, real tokenizer)
    units: list[Unit]
    includes: list[str] = field(default_factory=list)
    syntax_errors: bool = False

    def text_of(self, unit: Unit) -> str:
        return "".join(self.texts[s] for s in unit.segments)

    @property
    def whole_tokens(self) -> int:
        return sum(self.tokens)

    def whole_text(self) -> str:
        """The file with blank lines between declarations squeezed out (what 'a file that fits' emits)."""
        return "".join(self.texts)


def _inner(node):
    """The declaration a template_declaration wraps (templates may nest)."""
    while node.type == "template_declaration":
        inner = [c for c in node.named_children if c.type not in ("template_parameter_list", "comment")]
        if not inner:
            return node
        node = inner[-1]
    return node


def _last_name(text: str) -> str:
    names = IDENTIFIER.findall(text[:200].split("<", 1)[0])
    return names[-1] if names else ""


def _strip_template_args(text: str) -> str:
    while True:  # innermost first: A<B<C>>::f -> A<B>::f -> A::f
        stripped = re.sub(r"<[^<>]*>", "", text)
        if stripped == text:
            return text
        text = stripped


def _function_name(node) -> tuple[str, str]:
    declarator = node.child_by_field_name("declarator")
    while declarator is not None and declarator.type != "function_declarator":
        # reference_declarator keeps its inner declarator as an unnamed child
        declarator = declarator.child_by_field_name("declarator") or next(
            (c for c in declarator.named_children if c.type.endswith("declarator")), None)
    if declarator is None or declarator.child_by_field_name("declarator") is None:
        return "", ""
    text = declarator.child_by_field_name("declarator").text.decode("utf-8", "replace")
    owner, _, name = text.rpartition("::") if "operator" in text else _strip_template_args(text).rpartition("::")
    name = name.strip()
    if not name.startswith("operator"):
        name = ("~" if name.startswith("~") else "") + _last_name(name)
    return name, _last_name(_strip_template_args(owner))


def _type_name(node) -> tuple[str, str]:
    """(name, owner) of a class/struct/enum: `class path::iterator {` is (iterator, path)."""
    name = node.child_by_field_name("name")
    if name is None:
        return "", ""
    text = name.text.decode("utf-8", "replace")
    return _last_name(text), _last_name(_strip_template_args(text).rpartition("::")[0])


def classify(node, named: bool = True) -> tuple[str, str, str]:
    """(kind, name, owner) of a declaration-level node: kind is type, function, preamble or decl.
    Names are looked up only when `named` (basic mode never needs them)."""
    inner = _inner(node)
    if inner.type == "linkage_specification":
        body = inner.child_by_field_name("body")
        inner = _inner(body) if body is not None else inner
    if inner.type == "function_definition":
        return ("function", *_function_name(inner)) if named else ("function", "", "")
    for candidate in (inner, inner.child_by_field_name("type")):
        if candidate is not None and candidate.type in TYPE_SPECIFIERS and candidate.child_by_field_name("body"):
            if not named:
                return "type", "", ""
            name, owner = _type_name(candidate)
            if not name and inner.type == "type_definition":  # typedef struct { ... } Name;
                declarator = inner.child_by_field_name("declarator")
                name = _last_name(declarator.text.decode("utf-8", "replace")) if declarator else ""
            return "type", name, owner
    if node.type in PREAMBLE_NODES and node.end_byte - node.start_byte <= MAX_PREAMBLE_ITEM_BYTES:
        return "preamble", "", ""
    return "decl", "", ""


def _structural(node) -> bool:
    """A node that is a whole declaration (or holds some), as opposed to a loose token."""
    if node.type == "ERROR":
        return any(_structural(c) for c in node.children)
    return (node.type == "comment" or node.type in CONDITIONALS or node.type in WRAPPERS
            or node.type in PREAMBLE_NODES or _is_definition(node))


def _is_definition(node) -> bool:
    return classify(node, named=False)[0] in ("type", "function")


def _class_body(node):
    inner = _inner(node)
    for candidate in (inner, inner.child_by_field_name("type")):
        if candidate is not None and candidate.type in TYPE_SPECIFIERS:
            body = candidate.child_by_field_name("body")
            return body if body is not None and body.type == "field_declaration_list" else None
    return None


def _last_row(node) -> int:
    row, column = node.end_point
    return row - 1 if column == 0 and row > node.start_point[0] else row  # preprocessor lines end after "\n"


class _Builder:
    """Walks the tree once, filling the segment table and the unit list."""

    def __init__(self, data: bytes, named: bool):
        self.data = data
        self.named = named
        self.spans: list[tuple[int, int]] = []   # segment byte ranges (of the nodes; widened to lines later)
        self.closers: dict[int, int] = {}        # a wrapper's opener segment -> its `}` segment (-1: never closed)
        self.units: list[Unit] = []
        self.includes: list[str] = []
        self.pending: list[int] = []             # comment segments waiting for the unit they document
        self.last: tuple[Unit | None, int] = (None, -1)  # what ended last, on which row

    def segment(self, start: int, end: int) -> int:
        if start >= end:
            return -1  # e.g. a MISSING `#endif`
        self.spans.append((start, end))
        return len(self.spans) - 1

    def walk(self, children, scope: tuple) -> None:
        children = list(children)
        for i, node in enumerate(children):
            kind = node.type
            if node.end_byte == node.start_byte or kind == "\n":
                continue  # MISSING nodes tree-sitter invented to recover; line ends of directives
            if kind == "comment":
                index = self.segment(node.start_byte, node.end_byte)
                unit, row = self.last
                if row == node.start_point[0] and not self.pending:
                    if unit is not None:  # `int x;  // why` stays with x
                        unit.segments.append(index)
                else:
                    self.pending.append(index)
                continue
            if kind == ";" and self.last[0] is not None and self.last[0].body == len(self.spans) - 1:
                self._extend_last(node)
            elif kind in CONDITIONALS:
                self._conditional(node, scope)
            elif kind in WRAPPERS and self._body_list(node) is not None:
                self._wrapper(node, scope)
            elif kind == "ERROR" and any(_structural(c) for c in node.children):
                self._error_region(node, scope)
            elif kind == "ERROR" and i + 1 < len(children) and _is_definition(children[i + 1]):
                # recovery split e.g. a template header from its function: keep them together
                self.pending.append(self.segment(node.start_byte, node.end_byte))
            elif kind == ";":
                self.segment(node.start_byte, node.end_byte)
            else:
                self._unit(node, scope)

    def _error_region(self, node, scope: tuple) -> None:
        """tree-sitter wrapped good code in an ERROR (macros it cannot see through): walk the good
        parts as usual and keep each run of loose tokens between them as one segment."""
        loose: list = []
        for child in list(node.children) + [None]:
            if child is not None and not _structural(child):
                loose.append(child)
                continue
            if loose:
                index = self.segment(loose[0].start_byte, loose[-1].end_byte)
                if index >= 0 and child is not None and _is_definition(child):
                    self.pending.append(index)  # e.g. `template<...>` cut off from its function
                elif index >= 0:  # never preamble: such debris must not repeat in every chunk
                    self._add(Unit("decl", "", "", scope, self.pending + [index],
                                   index, loose[0].start_byte, loose[-1].end_byte), _last_row(loose[-1]))
                loose = []
            if child is not None:
                self.walk([child], scope)

    def _add(self, unit: Unit, row: int) -> None:
        self.pending = []
        self.units.append(unit)
        self.last = (unit, row)

    def _extend_last(self, node) -> None:
        unit = self.last[0]
        self.spans[unit.body] = (self.spans[unit.body][0], node.end_byte)
        unit.end = node.end_byte
        self.last = (unit, _last_row(node))

    def _unit(self, node, scope: tuple) -> None:
        kind, name, owner = classify(node, self.named)
        if kind == "preamble" and scope:
            kind = "decl"  # declarations inside a namespace stay in their namespace
        if node.type == "preproc_include":
            path = node.child_by_field_name("path")
            if path is not None:
                self.includes.append(path.text.decode("utf-8", "replace").strip("<>\""))
        members_body = _class_body(node) if kind == "type" else None
        if members_body is None:
            body = self.segment(node.start_byte, node.end_byte)
            unit = Unit(kind, name, owner, scope, self.pending + [body], body, node.start_byte, node.end_byte)
        else:
            unit = self._class_unit(node, members_body, name, owner, scope)
        self._add(unit, _last_row(node))

    def _class_unit(self, node, body, name: str, owner: str, scope: tuple) -> Unit:
        """A class with its members as separate segments, so an oversized class splits between members."""
        leading = self.pending
        opener = self.segment(node.start_byte, body.start_byte + 1)
        members, pending, last_row, last_code = [], [], -1, -1
        for child in body.children:
            if child.type in ("{", "}") or child.start_byte == child.end_byte:
                continue
            if child.type in (";", ":") and last_code == len(self.spans) - 1:  # `public` + `:`, a stray `;`
                self.spans[last_code] = (self.spans[last_code][0], child.end_byte)
                continue
            index = self.segment(child.start_byte, child.end_byte)
            if index < 0:
                continue
            if child.type == "comment" and members and not pending and child.start_point[0] == last_row:
                members[-1].append(index)  # same-line trailing comment
            elif child.type == "comment":
                pending.append(index)
            else:
                members.append(pending + [index])
                pending, last_code = [], index
            last_row = _last_row(child)
        if pending:
            members.append(pending)
        closer = self.segment(body.end_byte - 1, node.end_byte)
        segments = leading + [opener] + [s for member in members for s in member] + [closer]
        return Unit("type", name, owner, scope, segments, closer, node.start_byte, node.end_byte,
                    members=members, opener=opener)

    @staticmethod
    def _body_list(node):
        body = node.child_by_field_name("body")
        return body if body is not None and body.type == "declaration_list" else None

    def _wrapper(self, node, scope: tuple) -> None:
        body = self._body_list(node)
        opener = self.segment(node.start_byte, body.start_byte + 1)
        self.last = (None, -1)
        self.walk([c for c in body.children if c.type not in ("{", "}")], scope + (opener,))
        close = body.children[-1] if body.children else None
        closed = close is not None and close.type == "}" and close.end_byte > close.start_byte
        self.closers[opener] = self.segment(close.start_byte, close.end_byte) if closed else -1
        self.last = (None, _last_row(body))

    def _conditional(self, node, scope: tuple) -> None:
        # `#if X` / `#else` lines are kept in place in whole-file docs and dropped from chunks.
        head = node.child_by_field_name("condition") or node.child_by_field_name("name") or node.children[0]
        self.segment(node.start_byte, head.end_byte)
        self.last = (None, -1)
        alternative = node.child_by_field_name("alternative")
        skip = {node.children[0].id, head.id} | ({alternative.id} if alternative is not None else set())
        self.walk([c for c in node.children if c.id not in skip and c.type not in ("#endif", "\n")], scope)
        if alternative is not None:
            self._conditional(alternative, scope)
        endif = node.children[-1]
        if endif.type == "#endif" and self.segment(endif.start_byte, endif.end_byte) >= 0:
            self.last = (None, _last_row(endif))


def _line_texts(data: bytes, spans: list[tuple[int, int]], closers: dict[int, int]) -> list[str]:
    """Each segment's text: the whole lines its node touches, exactly as in the source.

    Segments that share a line form one group whose text goes to one of them (the others get ''),
    chosen so re-wrapped docs keep their braces balanced: a namespace's `{` or `}` when the group
    holds one (`} }  // ns` closes both namespaces), unless the group holds a whole namespace
    (`namespace a { void f(); }`): then, like a group without braces, its widest node.
    """
    braces = set(closers) | set(closers.values())
    texts = [""] * len(spans)
    group: list[int] = []
    group_start = group_end = 0

    def flush() -> None:
        if group:
            members = set(group)
            whole = any(closers[i] in members for i in members if i in closers)
            prefer = (lambda i: i not in braces) if whole else (lambda i: i in braces)
            owner = max(group, key=lambda i: (prefer(i), spans[i][1] - spans[i][0]))  # first of the widest
            text = data[group_start:group_end].decode("utf-8")
            texts[owner] = text if text.endswith("\n") else text + "\n"

    for i in sorted(range(len(spans)), key=spans.__getitem__):
        start, end = spans[i]
        line_start = data.rfind(b"\n", 0, start) + 1
        line_end = data.find(b"\n", end - 1) + 1 or len(data)
        if group and line_start < group_end:
            group.append(i)
            group_end = max(group_end, line_end)
        else:
            flush()
            group, group_start, group_end = [i], line_start, line_end
    flush()
    return texts


def _is_field(parent, node, field_name: str) -> bool:
    child = parent.child_by_field_name(field_name)
    return child is not None and child.start_byte == node.start_byte and child.end_byte == node.end_byte


def _type_qualifier(node) -> str:
    """The last scope component qualifying a type name node (`b` in a::b::T, `vector` in
    vector<int>::iterator), '' when unqualified. A scope is itself qualified by what qualifies
    the name it scopes (`std` for the `vector` of std::vector<int>::iterator)."""
    parent = node.parent
    if parent is not None and parent.type == "template_type" and _is_field(parent, node, "name"):
        node, parent = parent, parent.parent
    if parent is not None and parent.type == "qualified_identifier" and _is_field(parent, node, "scope"):
        node, parent = parent, parent.parent
    if parent is None or parent.type != "qualified_identifier" or not _is_field(parent, node, "name"):
        return ""
    scope = parent.child_by_field_name("scope")
    return _last_name(_strip_template_args(scope.text.decode("utf-8", "replace"))) if scope is not None else ""


def _call_qualifier(text: str) -> str:
    """`a::b::f` -> b, `X<int>::g` -> X; member calls (obj.f, p->f) and ::f are unqualified."""
    if "." in text or "->" in text:
        return ""
    return _last_name(_strip_template_args(text).rpartition("::")[0])


def _is_specialization(unit: Unit, data: bytes) -> bool:
    """A type unit written `class X<...>` (a partial or explicit specialization of the template X)."""
    if unit.kind != "type" or not unit.name:
        return False
    head = data[unit.start:unit.end].split(b"{", 1)[0]
    return re.search(rb"\b(?:class|struct|union)\s+(?:\w+\s+)*(?:[\w:]*::)?" + re.escape(unit.name.encode())
                     + rb"\s*<", head) is not None


def _references(tree, units: list[Unit], data: bytes) -> None:
    """Attach called names and referenced type names to the unit whose body contains them, and the
    qualifiers of the names only ever used qualified."""
    starts = [u.start for u in units]
    captures = QueryCursor(REFERENCES).captures(tree.root_node)
    found: dict[str, list[dict]] = {"call": [{} for _ in units], "type": [{} for _ in units]}
    for label, buckets in found.items():
        # captures come back in an order that varies from call to call: sort for determinism
        nodes = sorted(captures.get(label, ()), key=lambda n: (n.start_byte, n.end_byte))
        for node in nodes:
            start, end = node.start_byte, node.end_byte
            i = bisect_right(starts, start) - 1
            if i >= 0 and end <= units[i].end:
                raw = data[start:end]  # bytes: decode only the distinct names
                qualifier = _call_qualifier(raw.decode("utf-8", "replace")) if label == "call" else _type_qualifier(node)
                buckets[i].setdefault(raw, set()).add(qualifier)
    for unit, calls, types in zip(units, found["call"], found["type"], strict=False):
        qualifiers: dict[tuple, set] = {}
        for raw, used in calls.items():
            qualifiers.setdefault(("function", _last_name(raw.decode("utf-8", "replace"))), set()).update(used)
        for raw, used in types.items():
            qualifiers.setdefault(("type", raw.decode("utf-8", "replace")), set()).update(used)
        unit.calls = tuple(name for kind, name in qualifiers if kind == "function" and name and name != unit.name)
        own = unit.name if not _is_specialization(unit, data) else None  # a specialization needs its primary
        unit.types = tuple(name for kind, name in qualifiers if kind == "type" and name != own)
        unit.qualifiers = {key: tuple(sorted(used)) for key, used in qualifiers.items() if "" not in used}


def parse_units(text: str, count_batch, with_references: bool = True) -> FileUnits:
    """Parse `text`; `count_batch(list[str]) -> list[int]` counts tokens of every segment once.
    Without references, units carry no names, calls nor types (all basic mode needs)."""
    data = text.encode("utf-8")
    tree = parser().parse(data)
    builder = _Builder(data, named=with_references)
    builder.walk(tree.root_node.children, ())
    if builder.pending and builder.units:  # comments after the last unit: keep them with it
        builder.units[-1].segments.extend(builder.pending)
    elif builder.pending:  # a file of comments only is still text worth keeping
        first, last = builder.spans[builder.pending[0]][0], builder.spans[builder.pending[-1]][1]
        builder.units.append(Unit("decl", "", "", (), builder.pending, builder.pending[-1], first, last))
    texts = _line_texts(data, builder.spans, builder.closers)
    tokens = count_batch(texts)

    def wrapper(opener: int) -> tuple:
        closer = builder.closers[opener]  # -1 when the source never closes it: neither do its docs
        close = (texts[closer], tokens[closer]) if closer >= 0 else ("", 0)
        return texts[opener], tokens[opener], *close

    scopes: dict[tuple, tuple] = {}
    for unit in builder.units:
        unit.tokens = sum(tokens[s] for s in unit.segments)
        if unit.scope not in scopes:
            scopes[unit.scope] = tuple(wrapper(i) for i in unit.scope)
        unit.scope = scopes[unit.scope]
    if with_references and builder.units:
        _references(tree, builder.units, data)
    units = [u for u in builder.units if any(texts[s] for s in u.segments)]  # whose lines another unit holds
    return FileUnits(texts, tokens, units, builder.includes, tree.root_node.has_error)
