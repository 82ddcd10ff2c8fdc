"""Segment texts: widens each segment to the whole source lines it touches and the lines after it, so that the
segments tile the file and every doc is a concatenation of exact spans of it (lines shared by several nodes go
to one of them)."""

from __future__ import annotations

from itertools import chain

import numpy as np


def _line_texts(data: bytes, spans: list[tuple[int, int]], closers: dict[int, int]) -> tuple[list[str], list[int]]:
    """Each segment's text: the whole lines its node touches, exactly as in the source, and the lines after them up
    to the next segment's (blank lines, or what no node holds); and the segments in source order. So the segments'
    texts, in order, are the file itself: the first one also holds the lines before it, the last one the file's
    end (and the one newline added where the file has no final one, so that nothing placed after it joins it).

    Lines between two segments go with the one before them, never the one after: a tokenizer's split pattern joins
    a run of line ends (and a mark before them, `}\n\n`) into one pre-token, so a cut inside such a run would
    change the count, while a cut after it leaves every count a sum (pack._check_additive).

    Segments that share a line form one group whose text goes to one of them (the others get ''),
    chosen so re-wrapped docs keep their braces balanced: a namespace's `{` or `}` when the group
    holds one (`} }  // ns` closes both namespaces), unless the group holds a whole namespace
    (`namespace a { void f(); }`): then, like a group without braces, its widest node. `closers` maps
    the opener of each namespace and Part to its closer.
    """
    braces = set(closers) | set(closers.values())
    texts = [""] * len(spans)
    if not spans:
        return texts, []
    table = np.fromiter(chain.from_iterable(spans), dtype=np.int64, count=2 * len(spans)).reshape(-1, 2)
    order_array = np.lexsort((table[:, 1], table[:, 0]))   # by (start, end), ties in segment order: a stable sort
    order = order_array.tolist()
    # the lines each span touches, looked up among the file's newlines at once (a search from each span would
    # rescan a long line once per node on it: quadratic on a minified file)
    newlines = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == 10)
    around = np.concatenate(([-1], newlines, [len(data) - 1]))  # a newline before the file and one at its end
    bounds = table[order_array]
    line_starts = around[np.searchsorted(newlines, bounds[:, 0])] + 1  # after the last newline before
    line_ends = around[np.searchsorted(newlines, bounds[:, 1] - 1) + 1] + 1  # after the first at/after
    # a segment starts a group when it starts at or after the end of every line an earlier one touches (the groups'
    # running end, found at once: no loop over the segments)
    first = np.ones(len(order), dtype=bool)
    first[1:] = line_starts[1:] >= np.maximum.accumulate(line_ends)[:-1]
    heads = np.flatnonzero(first)
    stops = [*heads[1:].tolist(), len(order)]
    cuts = [0, *line_starts[heads[1:]].tolist(), len(data)]  # a group's text: its first line up to the next group's
    owners = [order[k] for k in heads.tolist()]
    for g in np.flatnonzero(stops - heads > 1).tolist():  # (most groups are one segment)
        group = order[heads[g]:stops[g]]
        members = set(group)
        whole = any(closers[i] in members for i in members if i in closers)
        prefer = (lambda i: i not in braces) if whole else (lambda i: i in braces)
        owners[g] = max(group, key=lambda i: (prefer(i), spans[i][1] - spans[i][0]))  # first of the widest
    source = data.decode("ascii") if data.isascii() else None  # (ASCII: its byte offsets are its characters')
    for owner, start, end in zip(owners, cuts, cuts[1:], strict=False):
        texts[owner] = source[start:end] if source is not None else data[start:end].decode("utf-8")
    if not texts[owners[-1]].endswith("\n"):
        texts[owners[-1]] += "\n"
    return texts, order
