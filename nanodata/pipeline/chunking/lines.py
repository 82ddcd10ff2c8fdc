"""Segment texts: widens each segment to the whole source lines it touches and the lines after it, so that the
segments tile the file and every doc is a concatenation of exact spans of it (lines shared by several nodes go
to one of them)."""

from __future__ import annotations

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
    group: list[int] = []
    group_start = 0

    def flush(next_start: int) -> None:
        if not group:
            return
        owner = group[0]
        if len(group) > 1:  # (most groups are one segment)
            members = set(group)
            whole = any(closers[i] in members for i in members if i in closers)
            prefer = (lambda i: i not in braces) if whole else (lambda i: i in braces)
            owner = max(group, key=lambda i: (prefer(i), spans[i][1] - spans[i][0]))  # first of the widest
        text = data[group_start:next_start].decode("utf-8")
        texts[owner] = text if text.endswith("\n") else text + "\n"

    order = sorted(range(len(spans)), key=spans.__getitem__)
    # the lines each span touches, looked up among the file's newlines at once (a search from each span would
    # rescan a long line once per node on it: quadratic on a minified file)
    newlines = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == 10)
    around = np.concatenate(([-1], newlines, [len(data) - 1]))  # a newline before the file and one at its end
    bounds = np.array([spans[i] for i in order], dtype=np.int64).reshape(-1, 2)
    line_starts = (around[np.searchsorted(newlines, bounds[:, 0])] + 1).tolist()  # after the last newline before
    line_ends = (around[np.searchsorted(newlines, bounds[:, 1] - 1) + 1] + 1).tolist()  # after the first at/after
    group_end = 0
    for i, line_start, line_end in zip(order, line_starts, line_ends, strict=True):
        if group and line_start < group_end:
            group.append(i)
            group_end = max(group_end, line_end)
        else:
            if group:
                flush(line_start)
                group_start = line_start
            group, group_end = [i], line_end
    flush(len(data))
    return texts, order
