"""How faithful docs are to their source: the run's figures (lines kept, balanced docs, cuts), used by the
chunker's run stats, the tests and the benchmark. A doc balances as braces.balanced says; a file emitted whole
counts as balanced without being lexed (it is the source as written: its balance is the file's, not the chunker's).

Lines. A file's *lines* are all its lines as written: blank ones, indentation and trailing spaces counted
(a line is what lies between two line ends, "\n"; a "\r" before it is part of it). `lines_kept` counts how
many of them its docs hold, with multiplicity: a line that occurs n times in the file needs n occurrences
across the file's docs (repeated context, e.g. a signature carried by every piece of a split function, may add
more, never fewer). `lines_in_order` counts the longest prefix-greedy subsequence of the file's lines found in
its docs read in output order, which is what "in source order" means for basic mode
(tests/pipeline/chunking/test_fidelity.py).
"""

from __future__ import annotations

from collections import Counter

from nanodata.pipeline.chunking.braces import balanced


def source_lines(text: str) -> list[str]:
    """The lines of a text as written, without their line ends ("\n")."""
    lines = text.split("\n")
    return lines[:-1] if lines[-1] == "" else lines


def lines_kept(source: str, docs: list[str]) -> int:
    """How many of the source's lines the docs hold as written (multiplicity counted, see above)."""
    return _kept(source_lines(source), docs)


def _kept(lines: list[str], docs: list[str]) -> int:
    wanted = Counter(lines)
    held = Counter(doc_lines(docs))  # (one C-speed pass)
    return sum(map(min, wanted.values(), map(held.__getitem__, wanted)))  # C-speed iteration


def doc_lines(docs: list[str]) -> list[str]:
    """The lines of docs read in order. Every doc ends its last line, except a piece of a line longer than the
    budget (pack._cut_line): joined as they are, its pieces make the line again, so a cut line counts whole."""
    return source_lines("".join(docs))


def lines_in_order(source: str, docs: list[str]) -> int:
    """How many of the source's lines the docs, read in order, hold as a greedy subsequence."""
    wanted = source_lines(source)
    found = 0
    for line in doc_lines(docs):
        if found < len(wanted) and line == wanted[found]:
            found += 1
    return found


# ---------------------------------------------------------------- a run's figures, per project

# statements (or lines) larger than the budget cut by lines (pack.Packer.cut), the docs those cuts made
# (the only docs that may not balance), files laid out from their braces (bracefallback.py),
# types a cycle of bases / primary templates put before one of them in compilable docs (Chunker.needed_types)
CUTS = ("oversized_statement_cuts", "cut_docs", "parse_error_regions", "type_cycles")
FIELDS = ("lines", "lines_kept", "docs", "balanced_docs") + CUTS
EXAMPLES = "type_cycle_examples"   # "SOURCE: X before B": the first few such types, per project and overall
EXAMPLES_KEPT = 10


def _every_line_held(lines: list[str], docs: list[str], bodies: list) -> bool:
    """Do the docs hold every line of the file as written, by their bodies (each doc's (first, last) lines of the
    file, or None)? Yes when the bodies tile the file's lines and each doc, ending its last line, holds its body's
    lines whole (a substring from a line start): then each line of the file has a line of its own in the docs, and
    _kept would count them all. False when that is not shown (docs reordered, a line cut), not when lines are lost."""
    held = sorted((body, doc) for body, doc in zip(bodies, docs, strict=True) if body is not None)
    if not held or held[0][0][0] != 1 or held[-1][0][1] != len(lines) or not all(d.endswith("\n") for d in docs):
        return False
    expected = 1
    for (first, last), doc in held:
        if first != expected or last < first:
            return False
        body = "\n".join(lines[first - 1:last]) + "\n"
        if not (doc.startswith(body) or "\n" + body in doc):
            return False
        expected = last + 1
    return True


def file_stats(source: str, docs: list[str], cuts: dict, bodies: list | None = None) -> dict:
    """One file's figures: its lines and how many its docs keep as written, its docs and how many
    balance, and what had to be cut by lines (`cuts`: the counts named in CUTS, and EXAMPLES if any).
    bodies: each doc's (first, last) lines of the file (pack.Doc.lines), when known: where they show every line
    held, lines are not counted one by one."""
    examples = {EXAMPLES: cuts[EXAMPLES]} if cuts.get(EXAMPLES) else {}
    if docs == [source]:  # emitted whole, the file as written: every line kept, and whether it balances is the
        lines = source.count("\n") + (not source.endswith("\n"))  # file's own (nothing lexed: the fast path)
        return {"lines": lines, "lines_kept": lines, "docs": 1, "balanced_docs": 1, **{k: cuts[k] for k in CUTS},
                **examples}
    lines = source_lines(source) if source.strip() else []  # (a file of whitespace makes no doc: nothing to keep)
    kept = len(lines) if lines and bodies is not None and _every_line_held(lines, docs, bodies) else _kept(lines, docs)
    return {"lines": len(lines), "lines_kept": kept, "docs": len(docs),
            "balanced_docs": sum(map(balanced, docs)), **{k: cuts[k] for k in CUTS}, **examples}


def _fresh() -> dict:
    return {**dict.fromkeys(FIELDS, 0), EXAMPLES: []}


def _add(into: dict, stats: dict) -> None:
    for name in FIELDS:
        into[name] += stats.get(name, 0)  # (a chunk task's summary from before type_cycles has none)
    into[EXAMPLES].extend(stats.get(EXAMPLES, ())[:EXAMPLES_KEPT - len(into[EXAMPLES])])


def add_stats(by_project: dict, project: str, stats: dict) -> None:
    _add(by_project.setdefault(project, _fresh()), stats)


def summarize(by_project: dict) -> dict:
    """Per project and overall: the counts plus lines_kept_pct and balanced_docs_pct."""
    total = _fresh()
    for project in sorted(by_project):
        _add(total, by_project[project])

    def with_shares(stats: dict) -> dict:
        return {**stats, "lines_kept_pct": round(100 * stats["lines_kept"] / max(stats["lines"], 1), 3),
                "balanced_docs_pct": round(100 * stats["balanced_docs"] / max(stats["docs"], 1), 3)}

    return {"total": with_shares(total), "by_project": {p: with_shares(by_project[p]) for p in sorted(by_project)}}
