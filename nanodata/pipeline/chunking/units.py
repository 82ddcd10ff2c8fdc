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
(`bracefallback.brace_units`, counted in `parse_error_regions`): lines and blocks, cut between lines at a
block's own depth, never inside a comment, literal, directive, open `(` or an `#else` branch; an `#if` ...
`#endif` block that nests with the braces is a block too (a piece of it re-opens its `#if` line). The balance
lexer reads only an `#if`'s first branch; each later branch of such a block is read again on its own, so its
braces give it structure too, and at unit level it is a scope re-opened by `#if X` + `#else` as in the tree's layout.

Every segment's text is an exact span of the source made of whole lines: a node is widened to
the lines it touches and the lines after it up to the next segment's (blank lines go with what is
before them, comments with the unit after them), and nodes that share a line (`int a; int b;`,
`@@@ junk`, `} }`) share one segment, held by the widest of them (the others are empty). The
segments in source order are the file itself, so a doc is always a concatenation of exact spans of
its file; the one byte that may not be is the newline a file's last line lacks, added so that
nothing placed after it joins that line. GPT-4-style split patterns always cut "X\\n" + "Y" right
after the newline, so the token count of concatenated segments is the sum of their counts: each
segment is tokenized exactly once and docs are priced without re-tokenizing them
(`pack.counter_for` refuses a tokenizer for which this does not hold).

The dataclasses live here, apart from the parsing (parse.parse_units builds them): unit stores and cache entries
hold them as plain data, their shapes read off these classes' fields (chunkbuild.stored).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property


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
    calls: tuple[str, ...] = ()   # simple names called, first occurrence order
    types: tuple[str, ...] = ()   # type names referenced, first occurrence order
    bases: tuple[str, ...] = ()   # of a type: the names of the classes it (or a class in it) derives from
    specialization: bool = False  # a type written `class X<...>`: a partial or explicit specialization of X
    # ("function" | "type", name) -> last scope components (`b` for a::b::f) of a name every use of
    # which is qualified; a name used unqualified even once is absent (global lookups match by what
    # the use names: `C::iterator` is not `path::iterator`)
    qualifiers: dict[tuple[str, str], tuple[str, ...]] = field(default_factory=dict)
    # the clang resolver (clangpass): the USRs its code binds to inside the input tree, first use first, and those
    # of the classes it derives from; None when its file is resolved by names
    usrs: tuple[str, ...] | None = None
    base_usrs: tuple[str, ...] = ()
    # names of the uses clang left unbound, as they depend on a template's arguments: resolved by names
    unbound_calls: tuple[str, ...] = ()


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
        return "".join(map(self.texts.__getitem__, unit.segments))

    def whole_text(self) -> str:
        """The file as read (its segments in source order tile it), its last line ended."""
        return "".join(map(self.texts.__getitem__, self.order))

    @cached_property
    def line_bounds(self) -> tuple[list[int], list[int]]:
        """(the 1-based line each segment starts on, the one it ends on): an empty segment starts where the next one
        starts and ends on the line before. (lines_of reads them for every unit placed in a doc.)"""
        first, last = [0] * len(self.texts), [0] * len(self.texts)
        line = 1
        for i in self.order:
            first[i] = line
            line += self.texts[i].count("\n")
            last[i] = line - 1
        return first, last

    def lines_of(self, segments) -> tuple[int, int] | None:
        """(first, last) line of the segments' texts, or None when they hold none."""
        texts = self.texts
        held = [s for s in segments if texts[s]]
        if not held:
            return None
        first, last = self.line_bounds
        return min(map(first.__getitem__, held)), max(map(last.__getitem__, held))
