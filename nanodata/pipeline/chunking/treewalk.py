"""The tree walk: lays a parsed file out as segments and units along tree-sitter's nodes, the normal path
(the brace fallback, bracefallback.py, takes over where the tree's structure cannot be trusted)."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator

import numpy as np

from nanodata.pipeline.chunking.braces import balanced
from nanodata.pipeline.chunking.syntax import (
    CONDITIONALS,
    TYPE_SPECIFIERS,
    WRAPPERS,
    _include_path,
    _is_definition,
    _structural,
    classify,
)
from nanodata.pipeline.chunking.units import Member, Part, Unit

# Cutting a large node along the tree (_layout): the blocks whose children are its members, the clauses
# read through (`} else {`), the nodes whose members follow a head line, the declarations holding a block.
BLOCKS = {"compound_statement", "field_declaration_list", "declaration_list", "enumerator_list"}
CLAUSES = {"else_clause", "catch_clause", "preproc_else", "preproc_elif", "preproc_elifdef"}
HEADED = {"case_statement", "preproc_if", "preproc_ifdef", "preproc_else", "preproc_elif", "preproc_elifdef"}
CONTAINERS = TYPE_SPECIFIERS | {"function_definition", "template_declaration", "declaration", "field_declaration",
                                "type_definition"}


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
        path = _include_path(node) if self.named else None
        if path is not None:
            self.includes.append(path)
        leading = self.pending
        member = self._member(node)
        body = member.part.closer if member.part is not None else member.segments[-1]
        self._add(Unit(kind, name, owner, scope, leading + member.segments, body, node.start_byte, node.end_byte,
                       part=member.part), self._last_row(node))

    def _member(self, node) -> Member:
        """A node as one segment, or, when larger than split_bytes, as a Part (see units.py's module docstring)."""
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
