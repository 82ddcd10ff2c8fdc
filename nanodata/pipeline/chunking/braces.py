"""The brace lexer: where a C++ text's `{}` and `()` count, for the chunker's layout (bracefallback.py: the brace
fallback, the tree check; pack.split_text: where a cut by lines balances) and the run's figures (fidelity.py).

Balance. A doc is *balanced* when its `{}` and its `()` each never close more than they opened and
end at depth 0, counting only code: comments, string and char literals (raw strings
`R"delim(...)delim"` included) and preprocessor lines are skipped, and of an `#if`/`#elif`/`#else`
chain only the first branch counts (as a compiler with the `#if` true would see it; an `#else` with no
`#if` in the doc starts a branch that does not count). The chunker balances every doc except those made
by cutting a single statement larger than the budget at line ends (`cut_docs`, pack.Packer.cut).
"""

from __future__ import annotations

import re

import numpy as np

# What never counts, first match wins, left to right: comments and literals (a u8/u/U/L prefix is just
# letters before them), and directive lines. Every alternative starts with a literal character, so the regex
# engine skips ahead to those characters instead of trying each alternative at every position. Their loops are
# unrolled (a run of plain characters, then an escape or a `*` and a run again): the engine repeats a character
# class at C speed, where a choice inside a repetition costs a step per character.
_SKIP = r"""//[^\n]*                                                # line comment
      | /\*(?:[^*]*\*+(?:[^/*][^*]*\*+)*/|.*)                   # block comment (to the end if unclosed)
      | R"(?P<delim>[^()\\\s"]{0,16})\((?:.*?\)(?P=delim)"|.*)   # raw string
      | "[^"\\\n]*(?:\\.[^"\\\n]*)*"                             # string
      | '(?!')[^'\\\n]*(?:\\.[^'\\\n]*)*'                        # char literal (not empty)
"""
_DIRECTIVE = r"\#(?P<line>[ \t]*(?P<directive>\w*)[^\n\\]*(?:\\.[^\n\\]*)*)"   # from its `#`, continuations included
_FLAGS = re.VERBOSE | re.DOTALL
# A directive is a line whose first character other than a space or tab is `#` (_BY_LINE: matched with the
# newline before it; the lexers put one before the text). _STRIP matches it from its `#` instead, which the
# engine finds faster than every newline, and the lexers check that only blanks precede that `#` on its line;
# a text where something else does (a `#` in code: not C++) is lexed again with _BY_LINE, the rule as written.
_STRIP = re.compile(rf"{_SKIP} | {_DIRECTIVE}", _FLAGS)  # balanced splits the text at these, line_depths walks them
_BY_LINE = re.compile(rf"{_SKIP} | \n[ \t]*{_DIRECTIVE}", _FLAGS)
_DIRECTIVE_GROUP = _STRIP.groupindex["directive"]
_SKIP_START = re.compile(r"[/\"'#]")   # a character every match of _STRIP (or _BY_LINE) holds: without one, none
_NOT_BRACKETS = re.compile(r"[^{}()]+")
_ONLY_BRACKETS = {c: None for c in range(128) if chr(c) not in "{}()"}   # str.translate: drops other ASCII
OPEN_IF = ("if", "ifdef", "ifndef")
_BRANCH = ("else", "elif", "elifdef", "elifndef")
_BRACKET_KIND = np.zeros(128, dtype=np.int8)   # by code point (all others: the last, 0): { 1, } 2, ( 3, ) 4
_BRACKET_KIND[[ord(c) for c in "{}()"]] = [1, 2, 3, 4]
_BRACKET_BYTES = _BRACKET_KIND.tobytes() + bytes(128)   # the same, as a bytes.translate table


def line_depths(lines: list[str]) -> list[int | None]:
    """`{}` depth after each of `lines` (joined, they make one text), counted as `balanced` counts; None
    for a line that ends inside a comment, literal, directive or open `(` (no place to cut)."""
    depths, cuttable, _ = line_arrays(lines)
    depths = depths.astype(object)
    depths[~cuttable] = None
    return depths.tolist()


def line_arrays(lines: list[str]) -> tuple[np.ndarray, np.ndarray, list[tuple[int, str]]]:
    """line_depths as arrays: the `{}` depth after each line and whether a line ends where a cut may go (not
    inside a comment, literal, directive or open `(`: its depth is then None in line_depths); and (line, name)
    of every directive of `lines` (`if`, `else`, `endif`...), in order.

    Only what is skipped is matched in Python (comments, literals, directives: far fewer than brackets);
    the brackets that count are summed with numpy: the depth after a line is the running sum up to its
    newline, and an open `(` count that a stray `)` never takes below 0 is the running sum minus its
    lowest point so far."""
    if not lines:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=bool), []
    text = "".join(lines)
    ends = np.cumsum(np.fromiter(map(len, lines), dtype=np.int64, count=len(lines)))
    skipped, counted_to, directives = _skipped(text)
    spans = np.array(skipped, dtype=np.int64).reshape(-1, 2)
    starts, stops = np.sort(spans[:, 0]), np.sort(spans[:, 1])
    if text.isascii():  # one byte a character, its kind by a C-speed table lookup (no numpy index per character)
        kinds = np.frombuffer(text.encode("ascii").translate(_BRACKET_BYTES), dtype=np.int8)
    else:
        codes = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
        kinds = _BRACKET_KIND[np.minimum(codes, len(_BRACKET_KIND) - 1)]
    at = np.flatnonzero(kinds)
    # a bracket counts when fewer skipped spans start at or before it than end at or before it (spans nest)
    at = at[(np.searchsorted(starts, at, side="right") == np.searchsorted(stops, at, side="right")) & (at < counted_to)]
    kinds = kinds[at]
    braces = np.cumsum((kinds == 1).astype(np.int64) - (kinds == 2))
    parens = np.cumsum((kinds == 3).astype(np.int64) - (kinds == 4))
    parens -= np.minimum(np.minimum.accumulate(parens), 0)  # a stray `)` does not stop cuts
    before = np.searchsorted(at, ends - 1, side="right")   # brackets up to each line's end
    braces, parens = np.concatenate(([0], braces))[before], np.concatenate(([0], parens))[before]
    # a line whose end lies strictly inside a skipped span (a comment over several lines, a closed branch)
    inside = np.searchsorted(starts, ends, side="left") > np.searchsorted(stops, ends, side="right")
    lines_of = np.searchsorted(ends, [start for start, _ in directives], side="right").tolist()
    return braces, ~(inside | (parens != 0)), list(zip(lines_of, (name for _, name in directives), strict=True))


def _skipped(text: str, pattern: re.Pattern = _STRIP) -> tuple[list, int, list]:
    """What line_depths does not count in `text`: (start, end) of every comment, literal and directive line
    and of every closed branch that does not count (see the module docstring), and where counting stops
    (a branch that does not count and is never closed: its brackets do not count, its lines keep a depth);
    and (where its line starts, name) of every directive. A comment or literal inside a closed branch that does
    not count is a span inside that branch's span: spans nest, so it changes nothing (line_arrays)."""
    text = "\n" + text  # offsets in the text given: one less
    found = [(m.start(), m.end(), m.group(_DIRECTIVE_GROUP)) for m in pattern.finditer(text)]
    skipped = [(start - 1, end - 1) for start, end, name in found if name is None]  # comments and literals
    directives: list[tuple[int, str]] = []
    branches: list[bool] = []   # stack of conditionals open in the text: True while the branch read counts
    skipped_from = -1
    for at, end, directive in found:
        if directive is None:
            continue
        start = at if pattern is _BY_LINE else text.rfind("\n", 0, at)  # its line's
        if text[start + 1:at].strip(" \t"):
            return _skipped(text[1:], _BY_LINE)
        directives.append((start, directive))
        counting = all(branches)
        _branch(branches, directive)
        if counting:  # (inside a branch that does not count, only that branch is one span)
            skipped.append((start, end - 1))  # not its newline: the line before
        if counting and not all(branches):
            skipped_from = start
        elif not counting and all(branches):
            skipped.append((skipped_from, end - 1))
    if all(branches):
        return skipped, len(text) - 1, directives
    return [span for span in skipped if span[0] < skipped_from], skipped_from, directives  # (counting stops there)


def _branch(branches: list[bool], directive: str) -> None:
    """Follow one directive on the stack of open conditionals (True while the branch read counts)."""
    if directive in OPEN_IF:
        branches.append(all(branches))
    elif directive in _BRANCH:
        if branches:
            branches[-1] = False
        else:  # the doc starts inside the first branch: what follows does not count
            branches.append(False)
    elif directive == "endif" and branches:
        branches.pop()


def _counted_code(text: str, pattern: re.Pattern = _STRIP) -> str:
    """The code of `text` whose brackets count: no comments, literals, directives or later branches.
    One C-speed split does the lexing (no per-match replacement, which Python 3.11 expands in Python);
    only the directives are then read one by one, to follow their branches."""
    if _SKIP_START.search(text) is None:  # (most units the tree check lexes: nothing to skip, nothing to split)
        return text
    fields = pattern.split("\n" + text)   # code, then per match its groups (None if unmatched), code, ...
    step = pattern.groups + 1
    codes, names = fields[::step], fields[_DIRECTIVE_GROUP::step]   # names: None for a comment or literal
    if names.count(None) == len(names):  # no directive (a C-speed scan): no branch to follow
        return "".join(codes)
    found = [i for i, name in enumerate(names) if name is not None]
    if pattern is _STRIP and not all(codes[i].rstrip(" \t").endswith("\n") for i in found):  # (see _STRIP)
        return _counted_code(text, _BY_LINE)
    marks = [i for i in found if names[i]]   # a bare `#` changes no branch
    if not marks:
        return "".join(codes)
    kept, branches = codes[:marks[0] + 1], []
    for k, i in enumerate(marks):
        _branch(branches, names[i])
        if all(branches):  # the code up to the next directive counts
            kept.extend(codes[i + 1:marks[k + 1] + 1 if k + 1 < len(marks) else len(codes)])
    return "".join(kept)


def _cancels(brackets: str, pair: str) -> bool:
    """Does a string of one kind of bracket cancel out, innermost pairs first (C-speed passes, one per depth)?"""
    while pair in brackets:
        brackets = brackets.replace(pair, "")
    return not brackets


def balanced(text: str) -> bool:
    brackets = _counted_code(text).translate(_ONLY_BRACKETS)  # (C-speed for ASCII)
    if not brackets.isascii():  # what the table does not know is no bracket either
        brackets = _NOT_BRACKETS.sub("", brackets)
    return (_cancels(brackets.replace("(", "").replace(")", ""), "{}")
            and _cancels(brackets.replace("{", "").replace("}", ""), "()"))
