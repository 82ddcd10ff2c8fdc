"""The brace fallback: where tree-sitter's recovery from a parse error breaks the structure (`_consistent`),
a file is laid out from its lines and brace structure instead, so its docs still balance."""

from __future__ import annotations

import re
from bisect import bisect_left
from itertools import accumulate

import numpy as np

from nanodata.pipeline.chunking.braces import OPEN_IF, balanced, line_arrays
from nanodata.pipeline.chunking.syntax import _last_name, _strip_template_args, classify
from nanodata.pipeline.chunking.treewalk import _Builder
from nanodata.pipeline.chunking.units import Member, Part, Unit

# a class definition's opening lines (brace fallback): after the namespaces and line comments its block opens
# with, a template header, key, name (macros before it), bases, `{`. (Each comment runs to its line end, one
# way to match only: `//////` read as three comments would make a failed match exponential.) Looked for in the
# first HEAD_BYTES of a unit.
CLASS_HEAD = re.compile(rb"\s*(?:(?:namespace\s+[\w:]*\s*\{|//[^\n]*\n)\s*)*"
                        rb"(?:template\b[^{;]*?>\s*)?(?:class|struct|union)\s+([^{;()=]*)\{", re.S)
HEAD_BYTES = 4096
# brace fallback: a scope, not a Part (a namespace, extern "C", an #if block whose opener is its #if line alone)
WRAPPER_OPENER = re.compile(rb'\s*(namespace\b|extern\s*"C")[^;{]*\{\s*$|[ \t]*\#[ \t]*if\w*\b[^\n]*\n\s*$')


def _class_head(text: bytes) -> tuple[str, str, str] | None:
    """("type", name, owner) of a text that opens with a class head (`template <...> struct A::B<T> final
    : C {`), as the brace fallback reads it where the tree is wrong; else None."""
    head = CLASS_HEAD.match(text)
    if head is None:
        return None
    written = _strip_template_args(re.split(r"(?<!:):(?!:)", head.group(1).decode("utf-8", "replace"))[0])
    written = re.sub(r"\bfinal\s*$", "", written.strip())
    return "type", _last_name(written), _last_name(written.rpartition("::")[0])


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


def brace_units(builder: _Builder, text: str, definitions: list) -> None:
    """Parse-error fallback: units from the file's lines and brace structure (braces.line_depths).
    A line that opens a block larger than split_bytes is a Part's opener (with the signature lines
    before it) and the line that closes it its closer, so such blocks are still cut between whole
    lines with their opening and closing lines; every other line (a comment or literal over several
    lines: those lines; a small block) is a member, runs of them up to split_bytes/8 bytes together
    (holding one of `definitions` at most, so that a unit's name is its only definition's).
    `#if` ... `#endif` blocks that nest with the braces are blocks as well (_conditional_blocks).
    A large `namespace`/`extern "C"`/`#if` block is a scope, its members units; a unit is named after the
    largest definition tree-sitter found inside it (`definitions`: sorted (start, end, node)), if any.
    Segments keep the blank lines after them: the units' texts are the source's, blank lines included."""
    lines = text.splitlines(keepends=True)
    sizes = map(len, lines) if text.isascii() else (len(line.encode("utf-8")) for line in lines)  # in bytes
    starts = [0, *accumulate(sizes)]
    blocks, joined, branch_lines = _brace_structure(lines, starts, builder.split_bytes, 0, len(lines))
    branch_segments: set[int] = set()   # the `#elif`/`#else` lines of those blocks: each its own member

    small = builder.split_bytes // 8  # consecutive small members are one: fewer, still fine-grained cuts
    heads = _statement_heads(lines, blocks, joined)
    definition_starts = [start for start, _, _ in definitions]

    def defines(start: int, end: int) -> bool:
        """Does a definition tree-sitter found start in bytes [start, end)? (Never without `definitions`.)"""
        k = bisect_left(definition_starts, start)
        return k < len(definition_starts) and definition_starts[k] < end

    def joins(run: Member, start: int, end: int) -> bool:
        """May the lines in bytes [start, end) join the run of small members `run`? Not into a Part or an `#else`
        branch, not past `small` bytes, and not a second definition: a unit is named after its one definition,
        and compilable orders it by it."""
        run_start = builder.spans[run.segments[0]][0]
        return (run.part is None and run.segments[0] not in branch_segments and end - run_start <= small
                and not (defines(run_start, start) and defines(start, end)))

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
            if block and starts[j + 1] - starts[i] > builder.split_bytes:
                opener, inner = builder.segment(starts[i], starts[head + 1]), members(head + 1, j)
                closer = builder.segment(starts[j], starts[j + 1])
                builder.pairs[opener] = closer
                segments = [opener, *(s for m in inner for s in m.segments), closer]
                out.append(Member(segments, Part(opener, closer, inner)))
            elif i in branch_lines:
                out.append(Member([builder.segment(starts[i], starts[j + 1])]))
                branch_segments.add(out[-1].segments[0])
            elif out and joins(out[-1], starts[i], starts[j + 1]):
                builder.spans[out[-1].segments[0]] = (builder.spans[out[-1].segments[0]][0], starts[j + 1])
            elif lines[i].strip():
                out.append(Member([builder.segment(starts[i], starts[j + 1])]))
            i = j + 1
        return out

    def add_units(found: list[Member], scope: tuple) -> None:
        for member in found:
            start, end = builder.spans[member.segments[0]][0], builder.spans[member.segments[-1]][1]
            part = member.part
            if part is not None and WRAPPER_OPENER.match(builder.data[start:builder.spans[part.opener][1]]):
                # a scope; an #if block's later branches are scopes of their own, opened by the heads up
                # to them (`#if X` + `#else`), as in the tree's layout (_conditional)
                key, branch = (part.opener,), []
                for inner in part.members + [None]:
                    if inner is not None and inner.segments[0] not in branch_segments:
                        branch.append(inner)
                        continue
                    builder.closers[key] = part.closer
                    add_units(branch, scope + (key,))
                    if not branch:  # an empty branch still shows its lines
                        builder.units.append(Unit("decl", "", "", scope + (key,), [], -1, 0, 0))
                    if inner is not None:  # an `#elif`/`#else` line: the next branch's heads
                        key, branch = key + (inner.segments[0],), []
                continue
            first = bisect_left(definitions, (start,))
            inside = [n for s, e, n in definitions[first:bisect_left(definitions, (end,))] if e <= end]
            node = max(inside, key=lambda n: n.end_byte - n.start_byte, default=None)
            kind, name, owner = classify(node, builder.named) if node is not None else ("decl", "", "")
            if builder.named:  # a class whose largest definition is a member function
                kind, name, owner = _class_head(builder.data[start:min(end, start + HEAD_BYTES)]) or (kind, name, owner)
            builder.units.append(Unit(kind if kind in ("function", "type") else "decl", name, owner, scope,
                                   member.segments, member.segments[-1], start, end, part=part))

    add_units(members(0, len(lines)), ())


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
