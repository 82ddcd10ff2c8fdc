"""Parse one C++ file with tree-sitter into ordered, token-counted units.

A file becomes a table of *segments* (texts in source order: comments, declarations,
`namespace N {` openers, `}` closers, `#if` lines) and *units* built from them:
- preamble: file-scope includes, macros, using, typedefs, forward declarations, globals;
- decl: the same kinds of declarations inside a namespace (kept in their namespace);
- type: class/struct/union/enum with a body, templates included;
- function: definitions, templates and out-of-class methods included.
Leading comments (and a same-line trailing comment) belong to the unit they sit next to.
Nothing is left out: `#if`/`#elif`/`#else` lines and `#endif` become a *scope* around the units
between them (like a namespace: a doc that holds any of those units re-opens `#if X` / `#if X` +
`#else` and closes `#endif`), and what no unit claims (a stray `;`, comments before a `}`) is a decl
unit of its own. So the units' segments plus their scopes' lines are every non-blank line of the file.

A node larger than `split_bytes` (a function, class, `if`, `switch`, `case`, `#if` inside a class...)
is laid out as a `Part`: its opening lines (signature through `{`), its children as members (each
possibly a Part again) and its closing lines (`}`, `};`, `} while (x);`, `#endif`); the lines between two
blocks (`} else {`, `} catch (E& e) {`) are members too. pack.Packer cuts such a node between members and
gives each piece the opening and closing lines, so every piece balances its braces. (A node of at most
split_bytes bytes has at most that many tokens: it never needs cutting.)

Parse errors. tree-sitter recovers from what it cannot parse (macros it cannot see through) in ways that
break the structure: a namespace closed at a function's `}`, a `}` left loose. When the tree's units and
scopes do not balance (`_consistent`), the file is laid out from its brace structure instead
(`_Builder.brace_units`, counted in `parse_error_regions`): lines and blocks, cut between lines at a
block's own depth, never inside a comment, literal, directive, open `(` or an `#else` branch; an `#if` ...
`#endif` block that nests with the braces is a block too (a piece of it re-opens its `#if` line). The balance
lexer reads only an `#if`'s first branch; each later branch of such a block is read again on its own, so its
braces give it structure too, and at unit level it is a scope re-opened by `#if X` + `#else` as in the tree's layout.

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
from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import accumulate

import numpy as np
import tree_sitter_cpp
from tree_sitter import Language, Parser, Query, QueryCursor

from nanodata.pipeline.chunking.braces import OPEN_IF, balanced, line_arrays

LANGUAGE = Language(tree_sitter_cpp.language())
WRAPPERS = {"namespace_definition", "linkage_specification"}      # re-wrapped around their units
CONDITIONALS = {"preproc_if", "preproc_ifdef", "preproc_else", "preproc_elif", "preproc_elifdef"}
TYPE_SPECIFIERS = {"class_specifier", "struct_specifier", "union_specifier", "enum_specifier"}
# Cutting a large node along the tree (_layout): the blocks whose children are its members, the clauses
# read through (`} else {`), the nodes whose members follow a head line, the declarations holding a block.
BLOCKS = {"compound_statement", "field_declaration_list", "declaration_list", "enumerator_list"}
CLAUSES = {"else_clause", "catch_clause", "preproc_else", "preproc_elif", "preproc_elifdef"}
HEADED = {"case_statement", "preproc_if", "preproc_ifdef", "preproc_else", "preproc_elif", "preproc_elifdef"}
CONTAINERS = TYPE_SPECIFIERS | {"function_definition", "template_declaration", "declaration", "field_declaration",
                                "type_definition"}
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
                             "(qualified_identifier scope: (namespace_identifier) @type) "
                             "(base_class_clause [(type_identifier) (qualified_identifier) (template_type)] @base)")
IDENTIFIER = re.compile(r"[A-Za-z_]\w*")
# a class definition's opening lines (brace fallback): after the namespaces and line comments its block opens
# with, a template header, key, name (macros before it), bases, `{`. (Each comment runs to its line end, one
# way to match only: `//////` read as three comments would make a failed match exponential.) Looked for in the
# first HEAD_BYTES of a unit.
CLASS_HEAD = re.compile(rb"\s*(?:(?:namespace\s+[\w:]*\s*\{|//[^\n]*\n)\s*)*"
                        rb"(?:template\b[^{;]*?>\s*)?(?:class|struct|union)\s+([^{;()=]*)\{", re.S)
HEAD_BYTES = 4096
# brace fallback: a scope, not a Part (a namespace, extern "C", an #if block whose opener is its #if line alone)
WRAPPER_OPENER = re.compile(rb'\s*(namespace\b|extern\s*"C")[^;{]*\{\s*$|[ \t]*\#[ \t]*if\w*\b[^\n]*\n\s*$')

_parser: Parser | None = None


def parser() -> Parser:
    global _parser  # one per process: Parser objects are not picklable, so workers build their own
    if _parser is None:
        _parser = Parser(LANGUAGE)
    return _parser


@dataclass
class Member:
    segments: list[int]         # its leading comments, the member itself (opener ... closer if a Part)
    part: Part | None = None    # how to cut it, when it is large


@dataclass
class Part:
    """A construct that may be cut between its members, each piece wrapped in opener ... closer."""
    opener: int                 # segment: first lines through `{` (`case X:`, `#if X`)
    closer: int                 # segment: `}` to its end; -1 when it has none (a case label)
    members: list[Member]


@dataclass
class Unit:
    kind: str                   # preamble | decl | type | function
    name: str                   # simple name ("" for preamble/decl)
    owner: str                  # class of an out-of-class method or nested type ("A" for A::f, class A::It)
    # ((open text, tokens, close text, tokens, key), ...): namespaces, extern "C", #if branches around it
    scope: tuple
    segments: list[int]         # segment indices: leading comments, body, trailing comment
    body: int                   # the segment holding the code itself
    start: int                  # byte offsets of the body in the file
    end: int
    tokens: int = 0
    part: Part | None = None    # large units: how to cut them (body is then the closer)
    calls: tuple = ()           # simple names called, first occurrence order
    types: tuple = ()           # type names referenced, first occurrence order
    bases: tuple = ()           # of a type: the names of the classes it (or a class in it) derives from
    specialization: bool = False  # a type written `class X<...>`: a partial or explicit specialization of X
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
    order: list[int] = field(default_factory=list)  # segment indices in source order
    parse_error_regions: int = 0   # 1 when the file's units come from its brace structure (_consistent)
    may_fit: bool = True  # False once basic mode found the file over budget (modes.whole_file): not asked twice

    def text_of(self, unit: Unit) -> str:
        return "".join(self.texts[s] for s in unit.segments)

    def whole_text(self) -> str:
        """The file's lines in source order, as its segments hold them (the blank lines between units left out)."""
        return "".join(self.texts[i] for i in self.order)


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


def _class_head(text: bytes) -> tuple[str, str, str] | None:
    """("type", name, owner) of a text that opens with a class head (`template <...> struct A::B<T> final
    : C {`), as the brace fallback reads it where the tree is wrong; else None."""
    head = CLASS_HEAD.match(text)
    if head is None:
        return None
    written = _strip_template_args(re.split(r"(?<!:):(?!:)", head.group(1).decode("utf-8", "replace"))[0])
    written = re.sub(r"\bfinal\s*$", "", written.strip())
    return "type", _last_name(written), _last_name(written.rpartition("::")[0])


def _structural(node) -> bool:
    """A node that is a whole declaration (or holds some), as opposed to a loose token."""
    if node.type == "ERROR":
        return any(_structural(c) for c in node.children)
    return (node.type == "comment" or node.type in CONDITIONALS or node.type in WRAPPERS
            or node.type in PREAMBLE_NODES or _is_definition(node))


def _is_definition(node) -> bool:
    return classify(node, named=False)[0] in ("type", "function")


def _statement_heads(lines: list[str], blocks: dict[int, int], joined: dict[int, int]) -> list[int]:
    """Brace fallback: heads[i] is the first line from i on that opens a block (`blocks`) or ends a statement,
    a comment over several lines (`joined`: its first line -> the line after it) passed over whole; a line
    that ends none (a signature, an open expression) continues into the next. So a block starting at line i
    has its `{` at heads[i], after its signature's lines. Vectorized: a line's head is the value of the
    first line from it on that stops the scan: itself, or for a joined comment the head after it."""
    n = len(lines)
    special = np.array([not (c := line.strip()) or c[-1] in ";{}" or c[-1] == ":" and c[-2:] != "::" or c[0] in "#*"
                        or c[:2] in ("//", "/*") for line in lines] + [True])
    redirects = sorted(joined.keys() - blocks.keys(), reverse=True)
    special[list(blocks)] = True
    special[redirects] = True
    positions = np.arange(n + 1)
    following = np.minimum.accumulate(np.where(special, positions, n)[::-1])[::-1]  # next stop from each line
    for k in redirects:  # (from the last: a redirect's target lies after it, already final)
        positions[k] = positions[following[joined[k]]]
    return positions[following].tolist()


def _layout(node, out: list) -> None:
    """Flatten a node into ("edge" | "member", child) items: the inner children of its blocks (and
    of else/catch/#else clauses, `case X:` and `#if X` bodies) are members, the rest is edges."""
    headed = node.type in HEADED
    for child in node.children:
        if child.type in BLOCKS and len(child.children) >= 2 and child.children[-1].end_byte > child.children[-1].start_byte:
            out.append(("edge", child.children[0]))
            out.extend(("member", c) for c in child.children[1:-1])
            out.append(("edge", child.children[-1]))
        elif child.type in CLAUSES or (child.type == "if_statement" and node.type == "else_clause"):
            _layout(child, out)
        elif child.type in CONTAINERS and not headed and not any(kind == "member" for kind, _ in out):
            _layout(child, out)  # template<...> class X {, struct S {...} s;: down to the block
        elif headed and child.is_named and child.start_point[0] > node.start_point[0]:
            out.append(("member", child))
        else:
            out.append(("edge", child))


def _holds_block(node) -> bool:
    """Does a node the tree could not lay out hold a block (a body, a lambda's, an `#if` section of one) or a parse
    error? Then, larger than the budget, it would be cut by lines through its blocks: the file is laid out from its
    braces instead (parse_units). Only a statement with no block inside (a huge initializer) is cut by lines."""
    if node.has_error:
        return True
    stack = [node]
    while stack:
        for child in stack.pop().children:
            if child.type in BLOCKS and child.type != "enumerator_list":
                return True
            if child.child_count:
                stack.append(child)
    return False


def _roles(children) -> Iterator[tuple[str, object]]:
    """How the walk reads a list of sibling nodes: (role, node) for each node it keeps, the role one of
    "comment", "conditional" (an `#if` chain: _branches), "wrapper" (a namespace or extern "C" block),
    "region" (an ERROR wrapped around good code: _region_pieces), "head" (an ERROR before a definition:
    recovery split e.g. a template header from its function; it stays with the definition) or "unit"."""
    children = list(children)
    for i, node in enumerate(children):
        kind = node.type
        if node.end_byte == node.start_byte or kind == "\n":
            continue  # MISSING nodes tree-sitter invented to recover; line ends of directives
        if kind == "comment":
            yield "comment", node
        elif kind in CONDITIONALS:
            yield "conditional", node
        elif kind in WRAPPERS and _body_list(node) is not None:
            yield "wrapper", node
        elif kind == "ERROR" and any(_structural(c) for c in node.children):
            yield "region", node
        elif kind == "ERROR" and i + 1 < len(children) and _is_definition(children[i + 1]):
            yield "head", node
        else:
            yield "unit", node


def _body_list(node):
    body = node.child_by_field_name("body")
    return body if body is not None and body.type == "declaration_list" else None


def _between_braces(body) -> list:
    """The nodes a namespace's or extern "C" block's declaration list holds between its braces."""
    return [c for c in body.children if c.type not in ("{", "}")]


def _branches(node) -> Iterator[tuple[object, object, list]]:
    """An `#if` chain's branches in order: (branch node, the node ending its head line, the nodes inside it).
    What tree-sitter placed after an alternative in its parent belongs to the last branch."""
    trailing: list = []
    while node is not None:
        head = node.child_by_field_name("condition") or node.child_by_field_name("name") or node.children[0]
        alternative = node.child_by_field_name("alternative")
        body = [c for c in node.children if c.id not in (node.children[0].id, head.id) and c.type not in ("#endif", "\n")]
        cut = next((i for i, c in enumerate(body) if alternative is not None and c.id == alternative.id), len(body))
        yield node, head, body[:cut] + (trailing if alternative is None else [])
        trailing = body[cut + 1:] + trailing
        node = alternative


def _region_pieces(node) -> Iterator[tuple[str, object, object]]:
    """An ERROR region's children as the walk keeps them: ("node", child, child) for a structural child, and
    ("loose", first, last) for a run of loose tokens between them, or ("head", first, last) when a definition
    follows the run (e.g. `template<...>` cut off from its function)."""
    loose: list = []
    for child in list(node.children) + [None]:
        if child is not None and not _structural(child):
            loose.append(child)
            continue
        if loose and loose[0].start_byte < loose[-1].end_byte:
            yield ("head" if child is not None and _is_definition(child) else "loose"), loose[0], loose[-1]
        loose = []
        if child is not None:
            yield "node", child, child


def _recovered(children) -> Iterator[tuple[int, int]]:
    """The byte ranges of the units the walk would make of what tree-sitter recovered from parse errors (a node
    with an error inside, a run of loose tokens in an ERROR region). Only nodes that hold an error are visited:
    a few, where the walk visits every node."""
    for role, node in _roles(children):
        if not node.has_error:
            continue
        if role == "conditional":
            for _, _, inside in _branches(node):
                yield from _recovered(inside)
        elif role == "wrapper":
            yield from _recovered(_between_braces(_body_list(node)))
        elif role == "region":
            for piece, first, last in _region_pieces(node):
                if piece == "node":
                    yield from _recovered([first])
                elif piece == "loose":
                    yield first.start_byte, last.end_byte
        elif role == "unit":
            yield node.start_byte, node.end_byte


def _balances_alone(data: bytes, start: int, end: int) -> bool:
    """False for a unit recovered from a parse error that does not balance: _consistent would fail on it, so the
    file is laid out from its braces (parse_units) without walking the tree. Judged only when the unit is alone
    on its lines (blanks before it, at most a comment after it): its text is then those lines plus neutral
    comments, as _consistent sees it; anything else is left to _consistent."""
    first = data.rfind(b"\n", 0, start) + 1
    last = data.find(b"\n", end)
    last = len(data) if last < 0 else last
    after = data[end:last].strip()
    if data[first:start].strip() or after and not after.startswith(b"//"):
        return True
    lines = data[first:last]
    if lines.count(b"{") == lines.count(b"}") and lines.count(b"(") == lines.count(b")"):
        return True  # (the lexer is asked only when the bare brackets do not cancel: most such units balance)
    return balanced(lines.decode("utf-8", "replace"))


class _Builder:
    """Walks the tree once, filling the segment table and the unit list."""

    def __init__(self, data: bytes, named: bool, split_bytes: int):
        self.data = data
        self.named = named
        self.split_bytes = split_bytes
        self.spans: list[tuple[int, int]] = []   # segment byte ranges (of the nodes; widened to lines later)
        self.closers: dict[tuple, int] = {}      # a scope key (its opener segments) -> its closer (-1: never closed)
        self.pairs: dict[int, int] = {}          # opener -> closer segment of namespaces and Parts (for _line_texts)
        self.conditional_keys: set[tuple] = set()
        self.inside: list[tuple[int, int]] = []  # byte ranges of the units laid out as Parts
        self.unsplit: list[int] = []             # segments of large nodes with a block inside that have no Part
        self.units: list[Unit] = []
        self.includes: list[str] = []
        self.pending: list[int] = []             # comment segments waiting for the unit they document
        self.last: tuple[Unit | None, int] = (None, -1)  # what ended last, on which row
        # rows from byte offsets (a bisection: tree-sitter's points cost a Python object each)
        self.newlines: list[int] = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == 10).tolist()

    def _row(self, offset: int) -> int:
        return bisect_left(self.newlines, offset)

    def _last_row(self, node) -> int:
        """The row of a node's last byte (a preprocessor line ends after its "\n": the row of that "\n")."""
        return bisect_left(self.newlines, max(node.end_byte - 1, node.start_byte))

    def segment(self, start: int, end: int) -> int:
        if start >= end:
            return -1  # e.g. a MISSING `#endif`
        self.spans.append((start, end))
        return len(self.spans) - 1

    def walk(self, children, scope: tuple) -> None:
        for role, node in _roles(children):
            if role == "comment":
                index = self.segment(node.start_byte, node.end_byte)
                unit, row = self.last
                if row == self._row(node.start_byte) and not self.pending and unit is not None:
                    unit.segments.append(index)  # `int x;  // why` stays with x
                else:
                    self.pending.append(index)
            elif role == "conditional":
                self._conditional(node, scope)
            elif role == "wrapper":
                self._wrapper(node, scope)
            elif role == "region":
                self._error_region(node, scope)
            elif role == "head":
                self.pending.append(self.segment(node.start_byte, node.end_byte))
            elif node.type == ";" and self.last[0] is not None and self.last[0].body == len(self.spans) - 1:
                self._extend_last(node)
            else:
                self._unit(node, scope)

    def flush(self, scope: tuple) -> None:
        """Comments no unit claimed (before a `}`, an `#endif`, the file's end): a unit of their own."""
        if self.pending:
            first, last = self.spans[self.pending[0]][0], self.spans[self.pending[-1]][1]
            self._add(Unit("decl", "", "", scope, self.pending, self.pending[-1], first, last), -1)

    def _error_region(self, node, scope: tuple) -> None:
        """tree-sitter wrapped good code in an ERROR (macros it cannot see through): walk the good
        parts as usual and keep each run of loose tokens between them as one segment."""
        for piece, first, last in _region_pieces(node):
            if piece == "node":
                self.walk([first], scope)
                continue
            index = self.segment(first.start_byte, last.end_byte)
            if piece == "head":
                self.pending.append(index)
            else:  # never preamble: such debris must not repeat in every chunk
                self._add(Unit("decl", "", "", scope, self.pending + [index], index, first.start_byte, last.end_byte),
                          self._last_row(last))

    def _add(self, unit: Unit, row: int) -> None:
        self.pending = []
        self.units.append(unit)
        self.last = (unit, row)

    def _extend_last(self, node) -> None:
        unit = self.last[0]
        self.spans[unit.body] = (self.spans[unit.body][0], node.end_byte)
        unit.end = node.end_byte
        self.last = (unit, self._last_row(node))

    def _unit(self, node, scope: tuple) -> None:
        kind, name, owner = classify(node, self.named)
        if kind == "preamble" and any(key not in self.conditional_keys for key in scope):
            kind = "decl"  # declarations inside a namespace stay in their namespace
        path = _include_path(node)
        if path is not None:
            self.includes.append(path)
        leading = self.pending
        member = self._member(node)
        if member.part is not None:
            self.inside.append((node.start_byte, node.end_byte))
        body = member.part.closer if member.part is not None else member.segments[-1]
        self._add(Unit(kind, name, owner, scope, leading + member.segments, body, node.start_byte, node.end_byte,
                       part=member.part), self._last_row(node))

    def _member(self, node) -> Member:
        """A node as one segment, or, when larger than split_bytes, as a Part (see the module docstring)."""
        part = self._part(node) if node.end_byte - node.start_byte > self.split_bytes and node.type != "ERROR" else None
        if part is None:
            member = Member([self.segment(node.start_byte, node.end_byte)])
            if self.split_bytes and node.end_byte - node.start_byte > self.split_bytes and _holds_block(node):
                self.unsplit.append(member.segments[0])
            return member
        segments = [part.opener] + [s for m in part.members for s in m.segments] + ([part.closer] if part.closer >= 0 else [])
        return Member(segments, part)

    def _part(self, node) -> Part | None:
        items: list = []
        _layout(node, items)
        if not any(kind == "member" for kind, _ in items) or items[0][0] != "edge":
            return None
        runs: list = []  # ("edge", first, last) runs and ("member", node) items, in source order
        for kind, child in items:
            if child.end_byte == child.start_byte or child.type == "\n":
                continue
            if kind == "edge" and runs and runs[-1][0] == "edge":
                runs[-1] = ("edge", runs[-1][1], child)
            else:
                runs.append((kind, child, child))
        if runs[-1][0] == "member" and node.type not in HEADED:
            return None  # an unclosed block: not cut by the tree
        opener = self.segment(node.start_byte, runs[0][2].end_byte)
        members, pending, last_row = [], [], -1
        for kind, first, last in runs[1:-1] if runs[-1][0] == "edge" else runs[1:]:
            if kind == "edge":  # `} else {`: balanced on its own line(s)
                members.append(Member(pending + [self.segment(first.start_byte, last.end_byte)]))
                pending = []
            elif first.type in (";", ":", ",") and members and members[-1].part is None:
                index = members[-1].segments[-1]  # `public` + `:`, a stray `;`, an enumerator's `,`
                self.spans[index] = (self.spans[index][0], first.end_byte)
            elif first.type == "comment" and members and not pending and self._row(first.start_byte) == last_row:
                members[-1].segments.append(self.segment(first.start_byte, first.end_byte))  # trailing comment
            elif first.type == "comment":
                pending.append(self.segment(first.start_byte, first.end_byte))
            else:
                member = self._member(first)
                member.segments[:0] = pending
                members.append(member)
                pending = []
            last_row = self._last_row(last)
        if pending:
            members.append(Member(pending))
        closer = self.segment(runs[-1][1].start_byte, node.end_byte) if runs[-1][0] == "edge" else -1
        self.pairs[opener] = closer
        return Part(opener, closer, members)

    def _wrapper(self, node, scope: tuple) -> None:
        body = _body_list(node)
        self.flush(scope)  # comments before it stay before its opener
        opener = self.segment(node.start_byte, body.start_byte + 1)
        self.last = (None, -1)
        self.walk_scope(_between_braces(body), scope + ((opener,),))
        close = body.children[-1] if body.children else None
        closed = close is not None and close.type == "}" and close.end_byte > close.start_byte
        self.closers[(opener,)] = self.pairs[opener] = self.segment(close.start_byte, close.end_byte) if closed else -1
        self.last = (None, self._last_row(body))

    def brace_units(self, text: str, definitions: list) -> None:
        """Parse-error fallback: units from the file's lines and brace structure (braces.line_depths).
        A line that opens a block larger than split_bytes is a Part's opener (with the signature lines
        before it) and the line that closes it its closer, so such blocks are still cut between whole
        lines with their opening and closing lines; every other line (a comment or literal over several
        lines: those lines; a small block) is a member, runs of them up to split_bytes/8 bytes together.
        `#if` ... `#endif` blocks that nest with the braces are blocks as well (_conditional_blocks).
        A large `namespace`/`extern "C"`/`#if` block is a scope, its members units; a unit is named after the
        largest definition tree-sitter found inside it (`definitions`: sorted (start, end, node)), if any.
        Segments keep the blank lines after them: the units' texts are the source's, blank lines included."""
        lines = text.splitlines(keepends=True)
        sizes = map(len, lines) if text.isascii() else (len(line.encode("utf-8")) for line in lines)  # in bytes
        starts = [0, *accumulate(sizes)]
        blocks, joined, branch_lines = _brace_structure(lines, starts, self.split_bytes, 0, len(lines))
        branch_segments: set[int] = set()   # the `#elif`/`#else` lines of those blocks: each its own member

        small = self.split_bytes // 8  # consecutive small members are one: fewer, still fine-grained cuts
        heads = _statement_heads(lines, blocks, joined)

        def members(i: int, stop: int) -> list[Member]:
            out = []
            while i < stop:
                head = min(heads[i], stop)
                block = head < stop and blocks.get(head, stop) < stop
                if block:
                    j = blocks[head]
                else:  # a statement: its lines up to the one that ends it (a small run of them), never an `#else`
                    last = head - 1 if head > i and head in branch_lines else head
                    end = last if last < stop and starts[last + 1] - starts[i] <= small else i
                    head, j = i, min(max(joined.get(i, i), end), stop - 1)
                if block and starts[j + 1] - starts[i] > self.split_bytes:
                    opener, inner = self.segment(starts[i], starts[head + 1]), members(head + 1, j)
                    closer = self.segment(starts[j], starts[j + 1])
                    self.pairs[opener] = closer
                    segments = [opener, *(s for m in inner for s in m.segments), closer]
                    out.append(Member(segments, Part(opener, closer, inner)))
                elif i in branch_lines:
                    out.append(Member([self.segment(starts[i], starts[j + 1])]))
                    branch_segments.add(out[-1].segments[0])
                elif (out and out[-1].part is None and out[-1].segments[0] not in branch_segments
                      and starts[j + 1] - self.spans[out[-1].segments[0]][0] <= small):
                    self.spans[out[-1].segments[0]] = (self.spans[out[-1].segments[0]][0], starts[j + 1])
                elif lines[i].strip():
                    out.append(Member([self.segment(starts[i], starts[j + 1])]))
                i = j + 1
            return out

        def add_units(found: list[Member], scope: tuple) -> None:
            for member in found:
                start, end = self.spans[member.segments[0]][0], self.spans[member.segments[-1]][1]
                part = member.part
                if part is not None and WRAPPER_OPENER.match(self.data[start:self.spans[part.opener][1]]):
                    # a scope; an #if block's later branches are scopes of their own, opened by the heads up
                    # to them (`#if X` + `#else`), as in the tree's layout (_conditional)
                    key, branch = (part.opener,), []
                    for inner in part.members + [None]:
                        if inner is not None and inner.segments[0] not in branch_segments:
                            branch.append(inner)
                            continue
                        self.closers[key] = part.closer
                        add_units(branch, scope + (key,))
                        if not branch:  # an empty branch still shows its lines
                            self.units.append(Unit("decl", "", "", scope + (key,), [], -1, 0, 0))
                        if inner is not None:  # an `#elif`/`#else` line: the next branch's heads
                            key, branch = key + (inner.segments[0],), []
                    continue
                first = bisect_left(definitions, (start,))
                inside = [n for s, e, n in definitions[first:bisect_left(definitions, (end,))] if e <= end]
                node = max(inside, key=lambda n: n.end_byte - n.start_byte, default=None)
                kind, name, owner = classify(node, self.named) if node is not None else ("decl", "", "")
                if self.named:  # a class whose largest definition is a member function
                    kind, name, owner = _class_head(self.data[start:min(end, start + HEAD_BYTES)]) or (kind, name, owner)
                self.units.append(Unit(kind if kind in ("function", "type") else "decl", name, owner, scope,
                                       member.segments, member.segments[-1], start, end, part=part))

        add_units(members(0, len(lines)), ())
        self.inside = [(0, len(self.data))]  # the lines were cut anywhere: keep every blank line

    def walk_scope(self, children: list, scope: tuple) -> None:
        """Walk the body of a namespace or #if branch; one without units still gets one (empty) unit,
        so that a doc holds its opening and closing lines."""
        count = len(self.units)
        self.walk(children, scope)
        self.flush(scope)
        if len(self.units) == count:
            self._add(Unit("decl", "", "", scope, [], -1, 0, 0), -1)

    def _conditional(self, node, scope: tuple) -> None:
        """`#if X` ... `#elif Y` ... `#else` ... `#endif`: each branch is a scope whose opener is the heads
        up to it (`#if X` + `#else` for the else branch) and whose closer is the `#endif`."""
        self.flush(scope)  # comments before it stay before its head
        heads: tuple = ()
        keys = []
        for branch, head, inside in _branches(node):
            heads = heads + (self.segment(branch.start_byte, head.end_byte),)
            keys.append(heads)
            self.conditional_keys.add(heads)
            self.last = (None, -1)
            self.walk_scope(inside, scope + (heads,))
        endif = node.children[-1]
        if endif.type == "#endif":
            closer = self.pairs[heads[0]] = self.segment(endif.start_byte, endif.end_byte)
            for key in keys:
                self.closers[key] = closer
            if closer >= 0:
                self.last = (None, self._last_row(endif))
        else:
            for key in keys:
                self.closers.setdefault(key, -1)


def _brace_blocks(depths: np.ndarray, cuttable: np.ndarray) -> dict[int, int]:
    """Brace fallback: a line after which the depth rises (from d) opens a block, closed by the first later
    line after which it is d or less; lines that end inside a comment, literal or `(` neither open nor close.
    (Per depth d, a search among the lines at or below d: no loop over the lines.)"""
    lines = np.flatnonzero(cuttable)
    after = depths[lines]
    before = np.concatenate(([0], after[:-1]))
    opening = np.flatnonzero(after > before)
    blocks: dict[int, int] = {}
    for level in np.unique(before[opening]).tolist():
        closing = np.flatnonzero(after <= level)
        these = opening[before[opening] == level]
        at = np.searchsorted(closing, these, side="right")
        closed = at < len(closing)
        blocks.update(zip(lines[these[closed]].tolist(), lines[closing[at[closed]]].tolist(), strict=True))
    return blocks


def _conditional_blocks(depths: np.ndarray, cuttable: np.ndarray, directives: list) -> tuple[dict, dict]:
    """Brace fallback: `#if` line -> its `#endif` line, for the conditionals that nest with the braces (the
    first branch closes what it opens: cut at that depth only, a piece never starts inside a branch without
    its `#if`, the Part's opener); those that do not (`#if` ... `void f() {` `#else` ... `#endif`) are lines.
    And `#if` line -> its `#elif`/`#else` lines, for those."""
    found, branches, open_ifs = {}, {}, []
    for line, name in directives:
        if name in OPEN_IF:
            open_ifs.append((line, []))
        elif name in ("elif", "elifdef", "elifndef", "else") and open_ifs:
            open_ifs[-1][1].append(line)
        elif name == "endif" and open_ifs:
            first, later = open_ifs.pop()
            if first and not cuttable[first - 1] or not cuttable[first] or not cuttable[line]:
                continue
            before = int(depths[first - 1]) if first else 0
            if depths[line] == before and depths[first:line + 1][cuttable[first:line + 1]].min() >= before:
                found[first], branches[first] = line, later
    return found, branches


def _brace_structure(lines: list[str], starts: list[int], split_bytes: int, lo: int, hi: int) -> tuple[dict, dict, set]:
    """Brace fallback, lines[lo:hi]: blocks (opening line -> closing line: `{`...`}`, `#if`...`#endif`), runs
    of lines that end inside a comment, literal or continued directive (first line -> the line after them),
    and the `#elif`/`#else` lines of the #if blocks. The lexer reads only an #if's first branch (braces), so
    to it a later branch is one skipped run; each later branch of a block larger than split_bytes is read
    again on its own, so its own blocks are found (and a piece of it starts from whole statements, not from
    any line). (A smaller block is one member whole: what is inside it is never looked at; `starts`: each
    line's byte offset.)"""
    depths, cuttable, directives = line_arrays(lines[lo:hi])
    blocks = _brace_blocks(depths, cuttable)
    found, branches = _conditional_blocks(depths, cuttable, directives)
    blocks.update(found)
    joined = dict(zip(np.flatnonzero(~cuttable & np.concatenate(([True], cuttable[:-1]))).tolist(),
                      (np.flatnonzero(~cuttable & np.concatenate((cuttable[1:], [True]))) + 1).tolist(), strict=True))
    blocks = {lo + k: lo + v for k, v in blocks.items()}
    joined = {lo + k: lo + v for k, v in joined.items()}
    branch_lines = set()
    for first, later in branches.items():
        if starts[lo + found[first] + 1] - starts[lo + first] <= split_bytes:
            continue
        for line, stop in zip(later, [*later[1:], found[first]], strict=False):  # (each later branch: to the next)
            branch_lines.add(lo + line)
            joined.pop(lo + line, None)  # (the branch skipped as a whole, from its `#else` line)
            if stop - line > 1:
                inner = _brace_structure(lines, starts, split_bytes, lo + line + 1, lo + stop)
                blocks.update(inner[0])
                joined.update(inner[1])
                branch_lines |= inner[2]
    return blocks, joined, branch_lines


def _line_texts(data: bytes, spans: list[tuple[int, int]], closers: dict[int, int],
                inside: list[tuple[int, int]]) -> tuple[list[str], list[int]]:
    """Each segment's text: the whole lines its node touches, exactly as in the source; and the
    segments in source order. Blank lines between segments are dropped, except inside the byte
    ranges `inside` (the units laid out as Parts): there a segment keeps the blank lines after it, so
    a Part's segments together are its source text exactly, as the unit's one segment would be.
    ("X\n\n" + "Y" still tokenizes as the sum of its parts: pack._check_additive probes it.)

    Segments that share a line form one group whose text goes to one of them (the others get ''),
    chosen so re-wrapped docs keep their braces balanced: a namespace's `{` or `}` when the group
    holds one (`} }  // ns` closes both namespaces), unless the group holds a whole namespace
    (`namespace a { void f(); }`): then, like a group without braces, its widest node. `closers` maps
    the opener of each namespace and Part to its closer.
    """
    braces = set(closers) | set(closers.values())
    texts = [""] * len(spans)
    group: list[int] = []
    group_start = group_end = 0
    inside_starts = [start for start, _ in inside]

    def flush(next_start: int) -> None:
        if not group:
            return
        owner = group[0]
        if len(group) > 1:  # (most groups are one segment)
            members = set(group)
            whole = any(closers[i] in members for i in members if i in closers)
            prefer = (lambda i: i not in braces) if whole else (lambda i: i in braces)
            owner = max(group, key=lambda i: (prefer(i), spans[i][1] - spans[i][0]))  # first of the widest
        k = bisect_right(inside_starts, group_start) - 1
        end = next_start if k >= 0 and group_end < inside[k][1] else group_end
        text = data[group_start:end].decode("utf-8")
        texts[owner] = text if text.endswith("\n") else text + "\n"

    order = sorted(range(len(spans)), key=spans.__getitem__)
    # the lines each span touches, looked up among the file's newlines at once (a search from each span would
    # rescan a long line once per node on it: quadratic on a minified file)
    newlines = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == 10)
    around = np.concatenate(([-1], newlines, [len(data) - 1]))  # a newline before the file and one at its end
    bounds = np.array([spans[i] for i in order], dtype=np.int64).reshape(-1, 2)
    line_starts = (around[np.searchsorted(newlines, bounds[:, 0])] + 1).tolist()  # after the last newline before
    line_ends = (around[np.searchsorted(newlines, bounds[:, 1] - 1) + 1] + 1).tolist()  # after the first at/after
    for i, line_start, line_end in zip(order, line_starts, line_ends, strict=True):
        if group and line_start < group_end:
            group.append(i)
            group_end = max(group_end, line_end)
        else:
            flush(line_start)
            group, group_start, group_end = [i], line_start, line_end
    flush(len(data))
    return texts, order


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
    found: dict[str, list[dict]] = {"call": [{} for _ in units], "type": [{} for _ in units],
                                    "base": [{} for _ in units]}
    for label, buckets in found.items():
        # captures come back in an order that varies from call to call: sort for determinism
        nodes = sorted(captures.get(label, ()), key=lambda n: (n.start_byte, n.end_byte))
        for node in nodes:
            start, end = node.start_byte, node.end_byte
            i = bisect_right(starts, start) - 1
            if i >= 0 and end <= units[i].end:
                raw = data[start:end]  # bytes: decode only the distinct names
                qualifier = (_call_qualifier(raw.decode("utf-8", "replace")) if label == "call" else
                             _type_qualifier(node) if label == "type" else "")
                buckets[i].setdefault(raw, set()).add(qualifier)
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


def _include_path(node) -> str | None:
    path = node.child_by_field_name("path") if node.type == "preproc_include" else None
    return path.text.decode("utf-8", "replace").strip("<>\"") if path is not None else None


def _includes(root) -> list[str]:
    """The paths the `#include` lines at declaration level name (where the walk meets them), in source order."""
    return [_include_path(node) for node in sorted(_declaration_level(root, _include_path), key=lambda n: n.start_byte)]


def _definitions(root) -> list[tuple]:
    """(start, end, node) of the functions and types tree-sitter found at declaration level, by start."""
    return sorted(((node.start_byte, node.end_byte, node) for node in _declaration_level(root, _is_definition)),
                  key=lambda item: item[:2])


def _declaration_level(root, wanted) -> list:
    """The nodes `wanted` accepts among the root's children and those of the namespaces, extern "C" blocks, #if
    branches and ERROR regions in it (not below a wanted node), found depth-first."""
    found, stack = [], [root]
    while stack:
        for child in stack.pop().children:
            if wanted(child):
                found.append(child)
            elif child.type in WRAPPERS or child.type in CONDITIONALS or child.type in ("ERROR", "declaration_list"):
                stack.append(child)
    return found


def _consistent(builder: _Builder, texts: list[str]) -> bool:
    """Does the tree's structure agree with the braces (braces.balanced)? tree-sitter recovers from
    what it cannot parse (macros) by closing a namespace at a function's `}` or leaving a `}` loose:
    then a unit, or a scope's opening and closing lines, do not balance."""
    def text(segments) -> str:
        return "".join(texts[s] for s in segments)

    def cuttable(node) -> bool:
        """It balances, and if it is a Part, so do its opening + closing lines and each member (which
        implies the whole: each byte is lexed once, however deep the Parts nest)."""
        part = node.part
        if part is None:
            return balanced(text(node.segments))
        leading = node.segments[:node.segments.index(part.opener)]
        return (balanced(text(leading + [part.opener] + ([part.closer] if part.closer >= 0 else [])))
                and all(cuttable(m) for m in part.members))

    for key, closer in builder.closers.items():
        if key not in builder.conditional_keys and not balanced(texts[key[0]] + (texts[closer] if closer >= 0 else "")):
            return False
    return all(cuttable(unit) for unit in builder.units)


def parse_units(text: str, count_batch, with_references: bool = True, split_bytes: int = 0) -> FileUnits:
    """Parse `text`; `count_batch(list[str]) -> list[int]` counts tokens of every segment once.
    Without references, units carry no names, calls nor types (all basic mode needs). Nodes of more
    than `split_bytes` bytes are laid out as Parts (the chunker passes its budget's worth)."""
    data = text.encode("utf-8")
    tree = parser().parse(data)
    root = tree.root_node
    # a unit recovered from a parse error that does not balance alone: the tree need not be walked
    fallback = root.has_error and not all(_balances_alone(data, *span) for span in _recovered(root.children))
    if fallback:
        includes = _includes(root)
    else:
        builder = _Builder(data, with_references, split_bytes)
        builder.walk(root.children, ())
        builder.flush(())
        texts, order = _line_texts(data, builder.spans, builder.pairs, builder.inside)
        fallback = root.has_error and not _consistent(builder, texts)
        includes = builder.includes
        if not fallback:
            tokens = count_batch(texts)
            # a block the tree left whole, too large for any doc: cut along the braces instead of by lines
            fallback = any(tokens[s] > split_bytes for s in builder.unsplit)
    if fallback:
        builder = _Builder(data, with_references, split_bytes)
        builder.brace_units(text, _definitions(root) if with_references else [])
        texts, order = _line_texts(data, builder.spans, builder.pairs, builder.inside)
        tokens = count_batch(texts)

    def entry(key: tuple) -> tuple:
        closer = builder.closers[key]  # -1 when the source never closes it: neither do its docs
        close = (texts[closer], tokens[closer]) if closer >= 0 else ("", 0)
        return "".join(texts[i] for i in key), sum(tokens[i] for i in key), *close, key

    scopes: dict[tuple, tuple] = {}
    for unit in builder.units:
        unit.tokens = sum(map(tokens.__getitem__, unit.segments))
        if unit.scope not in scopes:
            scopes[unit.scope] = tuple(entry(key) for key in unit.scope)
        unit.scope = scopes[unit.scope]
    if with_references and builder.units:
        _references(tree, builder.units, data)
    # drop units whose lines another unit holds (but keep the empty ones that carry a scope's lines)
    units = [u for u in builder.units if any(texts[s] for s in u.segments) or not u.segments]
    return FileUnits(texts, tokens, units, includes, root.has_error, order, int(fallback))
