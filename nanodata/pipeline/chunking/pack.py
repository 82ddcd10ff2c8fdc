"""Token-exact packing of units into docs of at most `budget` tokens.

Units are priced by their segments' token counts (see units.py: segments concatenate
additively), so a doc's count is a sum, never an estimate. A unit that cannot fit even
alone is cut at line boundaries (preferring lines that end a statement) into pieces whose
counts are taken with the real tokenizer. `Packer` is what the modes (modes.py) hand their bundles of units
to: it fills docs greedily within the budget and splits a unit too large for any doc along its Parts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from operator import itemgetter

import numpy as np

from nanodata.errors import NanodataError
from nanodata.pipeline.chunking.braces import balanced, line_depths
from nanodata.pipeline.chunking.units import FileUnits, Part
from nanodata.tokenizer import load

STATEMENT_ENDS = (";", "{", "}", ":")
# Segment shapes that meet in docs: each ends "X\n", the next starts with a non-space.
_PROBE_SEGMENTS = ["}\n", "int x = 1;\n", "// note é\n", "#include <a/b.h>\n", "/** doc */\n", "namespace a {\n",
                   "return x\n", "'c'\n", "42\n", "x->y(z);\n", "template<typename T>\nstruct S {\n  T t;\n};\n",
                   "\"str\"\n", "_x\n", "#endif\n", "::f();\n", "—\n", "    int y;\n", "\tcall();\n", "  };\n", "x = 1;   \n", "y();\r\n",
                   "  // indented comment\n", "}\n\n", "x;\n  \n\t\n", "{\n\n\n"]


class Counter:
    """Exact token counts with the run's tokenizer.

    `count_batch` encodes the concatenation of many segments in one call and reads each
    segment's count off the token byte offsets (one call instead of thousands of tiny ones).
    That is exact only when no token straddles a segment boundary, which is checked per batch;
    a batch that fails the check is counted segment by segment.
    """

    def __init__(self, tokenizer):
        encoding = tokenizer.encoding
        self.encode = encoding.encode_ordinary
        self._encode_array = encoding.encode_to_numpy
        lengths = np.zeros(encoding.n_vocab, dtype=np.int64)
        for token in range(encoding.n_vocab):
            try:
                lengths[token] = len(encoding.decode_single_token_bytes(token))
            except KeyError:  # holes in the id space and special tokens never come from encode_ordinary
                pass
        self.token_bytes = lengths
        self._last: tuple[str, np.ndarray] = ("", np.zeros(0, dtype=np.int64))   # token_ends' last text and answer

    def count(self, text: str) -> int:
        return len(self.encode(text))

    def token_ends(self, text: str) -> np.ndarray:
        """Byte offset where each token of `text` ends (read-only). The ids come as an array straight from the
        encoder (no Python int per token); with no special token allowed or refused, they are encode_ordinary's.
        The last text's answer is kept: basic mode encodes a file whole to see whether it fits (modes.whole_file),
        then prices the segments of one that does not (count_batch joins them back into that same text)."""
        if text == self._last[0]:  # (a length check, at most a memcmp: nothing beside an encoding)
            return self._last[1]
        try:
            ids = self._encode_array(text, allowed_special=set(), disallowed_special=())
        except UnicodeEncodeError:  # lone surrogates: encode_ordinary repairs them
            ids = np.asarray(self.encode(text), dtype=np.int64)
        ends = np.cumsum(self.token_bytes[ids])
        ends.flags.writeable = False
        self._last = (text, ends)
        return ends

    def count_batch(self, texts: list[str]) -> list[int]:
        if not texts:
            return []
        joined = "".join(texts)
        sizes = (map(len, texts) if joined.isascii() else (len(t.encode("utf-8")) for t in texts))  # in bytes
        bounds = np.cumsum(np.fromiter(sizes, dtype=np.int64, count=len(texts)))
        ends = self.token_ends(joined)
        tokens_before = np.searchsorted(ends, bounds, side="right")
        if np.all(tokens_before > 0) and np.array_equal(ends[tokens_before - 1], bounds):
            return np.diff(tokens_before, prepend=0).tolist()
        return [self.count(t) for t in texts]


@lru_cache(maxsize=4)
def counter_for(spec: str) -> Counter:
    """The Counter of a tokenizer spec, built and checked once per process (its table takes ~0.1 s)."""
    counter = Counter(load(spec))
    _check_additive(counter, spec)
    return counter


def _check_additive(counter: Counter, name: str) -> None:
    """Refuse tokenizers whose split pattern would merge tokens across segment boundaries."""
    for a in _PROBE_SEGMENTS:
        for b in _PROBE_SEGMENTS:
            if counter.count(a + b) != counter.count(a) + counter.count(b):
                raise NanodataError(f"--tokenizer {name}: its split pattern merges tokens across lines "
                                    f"({a!r} + {b!r}), so exact per-unit counts cannot be summed")


@lru_cache(maxsize=1 << 12)
def _separator_tokens(counter: Counter, tail: str) -> int:
    """Tokens SEPARATOR adds after a text ending in `tail` (its last line and the blank lines after it): a tokenizer's
    pre-tokens join line ends (and a mark before them), so only the tail's count changes. Counted once per tail (a
    few shapes, `}` lines mostly) per process."""
    return counter.count(tail + SEPARATOR) - counter.count(tail)


@dataclass
class Doc:
    text: str
    tokens: int
    kind: str
    source: str
    cut: bool = False   # a piece of something cut by lines (see Packer.cut): may be unbalanced
    lines: tuple | None = None  # (first, last) 1-based lines of its own file that it holds as written (its body)


# Units of one file that are not next to each other in it (the reordering modes) are parted by one blank line.
SEPARATOR = "\n"


def _advances(old: tuple, new: tuple) -> bool:
    """Is scope entry `new` a later branch of the #if chain `old` is in (its heads extend old's)? Then going from
    one to the other writes only the heads in between (`#else`), as the file does, not `#endif` + `#if X #else`."""
    a, b = old[4], new[4]
    return len(b) > len(a) and b[:len(a)] == a


def scope_transition(old: tuple, new: tuple) -> tuple[int, int]:
    """(shared depth, tokens to close `old` down to it and open the rest of `new`)."""
    if old is new:
        return len(new), 0
    common = 0
    while common < min(len(old), len(new)) and old[common] == new[common]:
        common += 1
    if common < min(len(old), len(new)) and _advances(old[common], new[common]):
        skipped = len(old[common][4])
        return common, (closing_cost(old[common + 1:]) + sum(head[1] for head in new[common][5][skipped:])
                        + sum(entry[1] for entry in new[common + 1:]))
    return common, closing_cost(old[common:]) + sum(entry[1] for entry in new[common:])


def closing_cost(scope: tuple) -> int:
    return sum(map(_CLOSE_TOKENS, scope)) if scope else 0


_CLOSE_TOKENS = itemgetter(3)   # a scope entry's closing tokens
_TOKENS = itemgetter(1)   # a shape's tokens (Packer.shape)


@dataclass
class DocBuilder:
    """Accumulates units inside their wrappers (namespaces, #if branches, a split class) with an exact token count.

    A scope is a tuple of entries, outermost first: (open text, open tokens, close text, close tokens, key,
    heads, closing lines), where heads are the opening lines as (text, tokens, lines) and lines are (first, last)
    in the entry's file (see parse.parse_units). Each piece placed is marked with where it lies in its file, so
    that the doc can say which lines of its own file (`root`) it holds as they stand there (`finish`).
    """

    budget: int
    preamble: list = field(default_factory=list)   # [(text, tokens)]
    root: int = -1                                  # the file the doc is made for
    pieces: list = field(default_factory=list)
    tokens: int = 0
    scope: tuple = ()
    n_units: int = 0
    marks: list = field(default_factory=list)  # (is a unit, first line, last line) of the root file's pieces
    file: int = -1      # the file of the scope now open (its closing lines are that file's)
    last: tuple | None = None   # the last unit (or member) placed

    def __post_init__(self):
        for text, tokens in self.preamble:
            self.pieces.append(text)
            self.tokens += tokens

    def fits(self, scope: tuple, tokens: int) -> bool:
        """Would the doc, closers included, stay within budget with this unit added?"""
        _, transition = scope_transition(self.scope, scope)
        return self.tokens + transition + tokens + closing_cost(scope) <= self.budget

    def _close(self, entries) -> None:
        for entry in reversed(entries):
            self.pieces.append(entry[2])
            self._mark(False, entry[6])

    def _open(self, heads, file: int) -> None:
        for text, _, lines in heads:
            self.pieces.append(text)
            self._mark(False, lines, file)

    def _mark(self, unit: bool, lines, file: int | None = None) -> None:
        if lines is not None and (self.file if file is None else file) == self.root:
            self.marks.append((unit, *lines))

    def add(self, scope: tuple, text: str, tokens: int, where=None, separator: int | None = None) -> None:
        """Place a unit (or member) in `scope`: `where` is (file, lines or None) of its text, `separator` the tokens
        of SEPARATOR written before it (None: no separator)."""
        file, lines = where if where is not None else (-1, None)
        if separator is not None:
            self.pieces.append(SEPARATOR)
            self.tokens += separator
        old = self.scope
        if scope is not old:  # (most units share the scope of the one before: nothing to close or open)
            common, transition = scope_transition(old, scope)
            if common < min(len(old), len(scope)) and _advances(old[common], scope[common]):
                self._close(old[common + 1:])
                self._open(scope[common][5][len(old[common][4]):], file)
                common += 1
            else:
                self._close(old[common:])
            for entry in scope[common:]:
                self._open(entry[5], file)
            self.tokens += transition
            self.scope = scope
        self.pieces.append(text)
        self.file = file
        self._mark(True, lines)
        self.tokens += tokens
        self.n_units += bool(text) or lines is not None  # (a member without text adds no line: alone, no doc)

    def finish(self, kind: str, source: str, cut: bool = False) -> Doc:
        self._close(self.scope)
        return Doc("".join(self.pieces), self.tokens + closing_cost(self.scope), kind, source, cut, self.body())

    def body(self) -> tuple[int, int] | None:
        """The lines of the root file the doc holds as they stand there: from its first unit to its last, with the
        opening lines just before the first and the closing lines just after the last where the file has them
        there (a namespace opened in this doc, closed in it); None when it holds none of the root's units."""
        units = [i for i, mark in enumerate(self.marks) if mark[0]]
        if not units:
            return None
        first, last = self.marks[units[0]][1], self.marks[units[-1]][2]
        for _, start, end in reversed(self.marks[:units[0]]):
            if end != first - 1:
                break
            first = start
        for _, start, end in self.marks[units[-1] + 1:]:
            if start != last + 1:
                break
            last = end
        held = [self.marks[i] for i in units]
        return min(first, *(m[1] for m in held)), max(last, *(m[2] for m in held))


def _cut_line(line: str, limit: int, counter: Counter) -> list[str]:
    """A single line over the budget (minified code, a huge literal): cut by characters.

    One encoding of the whole line proposes each cut (the end of the piece's `limit`-th token); the piece is then
    counted alone and, where tokens merged differently at its edges, shortened by a search inside the piece only,
    so a line of n bytes costs O(n log n), not a count of ever longer prefixes per piece (quadratic)."""
    data = line.encode("utf-8")
    ends = counter.token_ends(line)
    pieces, start = [], 0
    while start < len(data):
        first = int(np.searchsorted(ends, start, side="right"))  # the first token ending after start
        cut = _char_boundary(data, int(ends[min(first + limit, len(ends)) - 1]), start)
        if counter.count(data[start:cut].decode("utf-8")) > limit:
            lo, hi = start + 1, cut - 1
            while lo < hi:  # the longest prefix of this piece within the limit
                mid = _char_boundary(data, (lo + hi + 1) // 2, start)
                if mid > lo and counter.count(data[start:mid].decode("utf-8")) <= limit:
                    lo = mid
                else:
                    hi = mid - 1 if mid > lo else lo
            cut = _char_boundary(data, lo, start)
        pieces.append(data[start:cut].decode("utf-8"))
        start = cut
    return pieces


def _char_boundary(data: bytes, cut: int, start: int) -> int:
    """`cut` moved back to the start of a UTF-8 character (a byte-level token may end inside one), past `start`."""
    while cut < len(data) and cut > start + 1 and data[cut] & 0xC0 == 0x80:
        cut -= 1
    return cut


def _cut_at(lines: list[str], depths: list[int], start: int, end: int) -> int:
    """Where a piece of lines[start:end] should end: the last balanced line, else a statement end in
    its second half, else `end`."""
    depth = depths[start - 1] if start else 0
    for cut in range(end, start, -1):
        if depths[cut - 1] is not None and depths[cut - 1] == depth:
            return cut
    for cut in range(end, start + (end - start) // 2, -1):
        if lines[cut - 1].rstrip().endswith(STATEMENT_ENDS) or not lines[cut - 1].strip():
            return cut
    return end


def _before_text(lines: list[str], start: int, end: int) -> int:
    """`end` moved back until the next piece starts on a line with text, where it can: a run of blank lines is one
    pre-token of the tokenizer (and goes with the lines before it), so a cut inside it would change the counts."""
    while start + 1 < end < len(lines) and not lines[end].strip():
        end -= 1
    return end


def split_text(text: str, limit: int, counter: Counter) -> list[tuple[str, int]]:
    """Cut `text` at line boundaries into pieces of at most `limit` tokens (exact counts).

    A piece ends, where it can, at the last line that brings the brace/paren depth back to where the
    piece started (braces.line_depths), so pieces of a balanced text balance; else on a statement
    end in its second half. Token offsets of one encoding of the whole text price every candidate cut;
    each piece is then verified with the real tokenizer and shortened by a line if tokens merged.
    """
    lines = []
    for line in text.splitlines(keepends=True):
        # a token is >= 1 byte, a character <= 4: only a line of over limit/4 characters is measured, then counted
        too_long = 4 * len(line) > limit and len(line.encode("utf-8")) > limit and counter.count(line) > limit
        lines.extend(_cut_line(line, limit, counter) if too_long else [line])
    sizes = map(len, lines) if text.isascii() else (len(line.encode("utf-8")) for line in lines)  # in bytes
    line_ends = np.cumsum(np.fromiter(sizes, dtype=np.int64, count=len(lines)))
    tokens_at = np.searchsorted(counter.token_ends(text), line_ends, side="right")  # tokens ending by each cut
    depths = line_depths(lines)
    pieces, start = [], 0
    while start < len(lines):
        base = tokens_at[start - 1] if start else 0
        end = max(int(np.searchsorted(tokens_at, base + limit, side="right")), start + 1)
        if end < len(lines):
            end = _before_text(lines, start, _cut_at(lines, depths, start, end))
        piece = "".join(lines[start:end])
        tokens = counter.count(piece)
        while end > start + 1 and tokens > limit:
            end = _before_text(lines, start, end - 1)
            piece = "".join(lines[start:end])
            tokens = counter.count(piece)
        pieces.append((piece, tokens))
        start = end
    return pieces


# ---------------------------------------------------------------- packing units into docs

def _bordering(scope: tuple, lines: tuple) -> tuple[str, str]:
    """The scope's opening lines that end just before `lines` and its closing lines that start just after them
    (innermost first outwards): what a text cut without its scope holds as its own, so no line goes missing."""
    before, first = [], lines[0]
    for entry in reversed(scope):
        text, _, head = entry[5][-1] if entry[5] else ("", 0, None)
        if head is None or head[1] != first - 1:
            break
        before.insert(0, text)
        first = head[0]
    after, last = [], lines[1]
    for entry in reversed(scope):
        if entry[6] is None or entry[6][0] != last + 1:
            break
        after.append(entry[2])
        last = entry[6][1]
    return "".join(before), "".join(after)


_UNPRICED = object()   # Packer._separators' mark of a unit not priced yet (None: no separator after it)
PREAMBLE_SHARE = 4   # a preamble over budget/4 is not repeated in every doc; its units are packed instead
LEAD = -1  # the last step of a ref naming the comments before a Part's opener


def part_entry(fu: FileUnits, part: Part) -> tuple:
    """A Part as a scope entry (see pack.DocBuilder): its opening and closing lines."""
    opener = (fu.texts[part.opener], fu.tokens[part.opener])
    close = (fu.texts[part.closer], fu.tokens[part.closer]) if part.closer >= 0 else ("", 0)
    return (*opener, *close, ("part", part.opener), ((*opener, fu.lines_of([part.opener])),),
            fu.lines_of([part.closer]) if part.closer >= 0 else None)


@dataclass
class Packer:
    budget: int
    counter: Counter
    index: object   # modes.Index: the units and texts of the files packed
    root: int = -1  # the file whose docs are made (a Packer serves one)
    separate: bool = False  # units of a file not next to each other in it are parted by SEPARATOR (reordering)
    # what had to be cut by lines: statements (or lines) larger than the budget
    # and (compilable) how many types a cycle of bases / primary templates placed first (Chunker.needed_types)
    stats: dict = field(default_factory=lambda: {"oversized_statement_cuts": 0, "type_cycles": 0})
    _nodes: dict = field(default_factory=dict)   # ref -> node(ref): a Packer serves one root file
    _inner: dict = field(default_factory=dict)   # ref -> the scope inside its Part, one tuple for all its members
    _separators: dict = field(default_factory=dict)   # ref -> tokens SEPARATOR adds after its text
    _negative: set = field(default_factory=set)   # refs whose separator takes tokens away (over_budget reads them)
    _where: dict = field(default_factory=dict)   # ref -> where(ref)
    _shapes: dict = field(default_factory=dict)   # ref -> shape(ref)
    _texts: dict = field(default_factory=dict)   # ref -> text(ref)

    def shape(self, ref) -> tuple[tuple, int]:
        """(scope, tokens) of a unit (file, unit) or of a member inside it (file, unit, *path)."""
        found = self._shapes.get(ref)  # (asked for each time a doc is tried with it: most calls are hits)
        if found is None:
            if len(ref) == 2:
                unit = self.index.unit(ref)
                found = unit.scope, unit.tokens
            else:
                fu, scope, segments, _ = self.node(ref)
                found = scope, sum(map(fu.tokens.__getitem__, segments))
            self._shapes[ref] = found
        return found

    def text(self, ref) -> str:
        found = self._texts.get(ref)  # (compilable docs repeat the units they depend on)
        if found is None:
            if len(ref) == 2:
                found = self.index.text(ref)
            else:
                fu, _, segments, _ = self.node(ref)
                found = "".join(fu.texts[s] for s in segments)
            self._texts[ref] = found
        return found

    def node(self, ref) -> tuple:
        """(file units, scope, segments, part) of what `ref` names: a unit, a member of its Part
        at a path of member numbers (inside the openers of the Parts on the way), or (last step LEAD)
        the comments before a Part's opener."""
        if ref not in self._nodes:
            fu = self.index.files[ref[0]]
            if len(ref) == 2:
                unit = fu.units[ref[1]]
                self._nodes[ref] = fu, unit.scope, unit.segments, unit.part
            else:
                _, scope, segments, part = self.node(ref[:-1])
                if ref[-1] == LEAD:
                    self._nodes[ref] = fu, scope, segments[:segments.index(part.opener)], None
                else:  # (siblings share one scope tuple: scope_transition between them is one `is`)
                    inner = self._inner.get(ref[:-1])
                    if inner is None:
                        inner = self._inner[ref[:-1]] = scope + (part_entry(fu, part),)
                    member = part.members[ref[-1]]
                    self._nodes[ref] = fu, inner, member.segments, member.part
        return self._nodes[ref]

    def preamble(self, f: int) -> list:
        """[(text, tokens)] of the file's preamble, or [] when it is too big to repeat."""
        fu = self.index.files[f]
        pieces = [(fu.texts[u.body], fu.tokens[u.body]) for u in fu.units if u.kind == "preamble"]
        return pieces if sum(t for _, t in pieces) <= self.budget // PREAMBLE_SHARE else []

    def builder(self, preamble: list) -> DocBuilder:
        return DocBuilder(self.budget, list(preamble), self.root)

    def where(self, ref) -> tuple:
        """(file, (first, last) lines of ref's text in it, or None when unknown): a unit without text (one carrying
        a scope's lines) sits just after its scope's opening lines."""
        found = self._where.get(ref)
        if found is not None:
            return found
        fu = self.index.files.get(ref[0])
        if fu is None:
            return ref[0], None
        _, scope, segments, _ = self.node(ref)
        lines = fu.lines_of(segments)
        if lines is None and not segments and scope and scope[-1][5] and scope[-1][5][-1][2] is not None:
            after = scope[-1][5][-1][2][1]
            lines = (after + 1, after)
        self._where[ref] = ref[0], lines
        return self._where[ref]

    def separator(self, last, ref) -> int | None:
        """Tokens of SEPARATOR between unit `last` and unit `ref` placed after it, or None when none goes there: not
        separating, not two units, or two units next to each other in their file (or one without text)."""
        if not self.separate or last is None or len(last) != 2 or len(ref) != 2:
            return None
        if last[0] == ref[0] and ref[1] == last[1] + 1 or not (self._shapes.get(ref) or self.shape(ref))[1]:
            return None  # next to it, or no text
        return self._after(last)

    def _after(self, last) -> int | None:
        """Tokens SEPARATOR adds after unit `last` (None when its text has no line)."""
        found = self._separators.get(last, _UNPRICED)
        if found is _UNPRICED:
            text = self.text(last)
            tail = text[text.rstrip().rfind("\n") + 1:]  # its last line and the blank lines after it
            found = self._separators[last] = _separator_tokens(self.counter, tail) if tail else None
            if found is not None and found < 0:
                self._negative.add(last)
        return found

    def over_budget(self, builder: DocBuilder, refs: list) -> bool:
        """Would the doc exceed budget with `refs` added in any order (so `fits` says no to every one)? Their own
        tokens are added whatever the order, scope lines only add some; a separator might take some away (a
        tokenizer could merge a line end), so each unit that could stand before another counts its own if negative.
        `refs` are distinct (as in any doc)."""
        separators = self._separators
        try:
            tokens = builder.tokens + sum(map(_TOKENS, map(self._shapes.__getitem__, refs)))  # (C speed)
        except KeyError:  # (some not shaped yet: shape keeps them)
            tokens = builder.tokens + sum([self.shape(ref)[1] for ref in refs])
        if tokens <= self.budget or not self.separate:
            return tokens > self.budget
        units = set(refs).union([builder.last] if builder.last is not None else ())
        for ref in units.difference(separators):  # (C-speed: most were priced for an earlier root)
            if len(ref) == 2:
                self._after(ref)
        negative = self._negative.intersection(units)  # (none, with the usual tokenizers)
        return tokens + sum(separators[ref] for ref in negative) > self.budget

    def fits(self, builder: DocBuilder, refs: list) -> bool:
        """Would the doc stay within budget with all of `refs` added (in order)?"""
        tokens, scope, last = builder.tokens, builder.scope, builder.last
        budget, shapes = self.budget, self._shapes
        for ref in refs:
            new_scope, unit_tokens = shapes.get(ref) or self.shape(ref)
            if new_scope is not scope:  # (most units share the scope of the one before: nothing to close or open)
                tokens += scope_transition(scope, new_scope)[1]
                scope = new_scope
            tokens += unit_tokens + (self.separator(last, ref) or 0)
            last = ref
            if tokens > budget:
                return False
        return tokens + closing_cost(scope) <= budget

    def add(self, builder: DocBuilder, refs: list) -> None:
        for ref in refs:
            scope, tokens = self.shape(ref)
            builder.add(scope, self.text(ref), tokens, self.where(ref), self.separator(builder.last, ref))
            builder.last = ref

    def alone(self, ref, preamble: list, source: str, kind: str) -> list[Doc]:
        """One unit (or member) that does not share a doc: with the preamble if it fits, bare, or split
        along the tree (its comments, then runs of whole members, each run inside the Part's opening
        and closing lines); only what has no Part is cut by lines (`cut`)."""
        for pre in (preamble, []):
            builder = self.builder(pre)
            if self.fits(builder, [ref]):
                self.add(builder, [ref])
                return [builder.finish(kind, source)]
        fu, scope, segments, part = self.node(ref)
        if part is not None and self.builder([]).fits(scope + (part_entry(fu, part),), 0):
            lead = [[ref + (LEAD,)]] if segments[0] != part.opener else []
            return self.pack(lead + [[ref + (m,)] for m in range(len(part.members))], [], source, "split")
        return self.cut(ref, scope, source)

    def cut(self, ref, scope: tuple, source: str) -> list[Doc]:
        """A statement larger than the budget (a huge initializer, a line of a parse-error region):
        cut by lines (at balanced lines where it can) inside its scope's lines, and counted. One that fits the budget
        without its scope's lines (a long doc comment in a namespace) is a doc of its own instead, uncut, where no
        line of the scope borders it (that line would be its doc's alone)."""
        file, lines = self.where(ref)
        text, whole = self.text(ref), self.shape(ref)[1]
        before, after = _bordering(scope, lines) if lines is not None else ("", "")  # the scope's lines bordering it
        if not before and not after and whole <= self.budget:
            return [self._alone_in((), text, whole, (file, lines), source, cut=False)]
        self.stats["oversized_statement_cuts"] += 1
        wrapping = sum(entry[1] for entry in scope) + closing_cost(scope)
        if 2 * wrapping > self.budget:  # the scope would leave too little room: cut bare, with the scope's lines
            text, lines = before + text + after, lines and (lines[0] - before.count("\n"), lines[1])
            scope, wrapping = (), 0
        line = lines[0] if lines is not None else None
        docs = []
        pieces = split_text(text, self.budget - wrapping, self.counter)
        for number, (piece, tokens) in enumerate(pieces):
            ends = piece.count("\n")  # (a piece of a line longer than the budget ends none: the next is on it too)
            where = (file, (line, line + max(ends - 1, 0)) if line is not None else None)
            if piece.strip():
                # a piece that starts or ends inside a comment or literal would swallow its scope's closing lines
                # (or spill into code): it goes bare, unless its scope's lines border it (they are its own)
                bordered = number == 0 and before or number == len(pieces) - 1 and after
                doc = self._alone_in(scope, piece, tokens, where, source)
                if scope and not bordered and not balanced(doc.text):
                    doc = self._alone_in((), piece, tokens, where, source)
                docs.append(doc)
            line = line + ends if line is not None else None
        return docs

    def _alone_in(self, scope: tuple, text: str, tokens: int, where, source: str, cut: bool = True) -> Doc:
        """A `split` doc of one text (a piece of a statement, or a statement whole) inside `scope`."""
        builder = self.builder([])
        builder.add(scope, text, tokens, where)
        return builder.finish("split", source, cut)

    def pack(self, bundles: list[list], preamble: list, source: str, kind: str = "chunk") -> list[Doc]:
        """Greedy: add each bundle whole to the current doc or start a new one; deps repeat per doc.
        Docs after the first start with the preamble (the first holds the file's own preamble units)."""
        docs, builder, in_doc = [], self.builder([]), set()
        for bundle in bundles:
            refs = [r for r in bundle if r not in in_doc]
            if not self.fits(builder, refs):
                if builder.n_units:
                    docs.append(builder.finish(kind, source))
                builder, in_doc, refs = self.builder(preamble if docs else []), set(), list(bundle)
                while len(refs) > 1 and not self.fits(builder, refs):
                    refs = refs[1:]  # farthest dependencies go first
                if not self.fits(builder, refs):
                    docs.extend(self.alone(refs[-1], preamble, source, kind))
                    continue
            self.add(builder, refs)
            in_doc.update(refs)
        if builder.n_units:
            docs.append(builder.finish(kind, source))
        return docs
