"""The chunker's entry to a file: parse it, walk the tree (or fall back to its braces), price the segments."""

from __future__ import annotations

from nanodata.pipeline.chunking.bracefallback import _consistent, brace_units
from nanodata.pipeline.chunking.lines import _line_texts
from nanodata.pipeline.chunking.references import _references
from nanodata.pipeline.chunking.syntax import _definitions, _includes, parse_tree
from nanodata.pipeline.chunking.treewalk import _balances_alone, _Builder, _recovered
from nanodata.pipeline.chunking.units import FileUnits


def parse_units(text: str, count_batch, with_references: bool = True, split_bytes: int = 0) -> FileUnits:
    """Parse `text`; `count_batch(list[str]) -> list[int]` counts tokens of every segment once.
    Without references, units carry no names, calls nor types, and the file no includes (all basic mode needs). Nodes of more
    than `split_bytes` bytes are laid out as Parts (the chunker passes its budget's worth)."""
    data = text.encode("utf-8")
    tree = parse_tree(data)
    root = tree.root_node
    # a unit recovered from a parse error that does not balance alone: the tree need not be walked
    fallback = root.has_error and not all(_balances_alone(data, *span) for span in _recovered(root.children))
    if fallback:
        includes = _includes(root) if with_references else []
    else:
        builder = _Builder(data, with_references, split_bytes)
        builder.walk(root.children, ())
        builder.flush(())
        texts, order = _line_texts(data, builder.spans, builder.pairs)
        fallback = root.has_error and not _consistent(builder, texts)
        includes = builder.includes
        if not fallback:
            tokens = count_batch(texts)
            # a block the tree left whole, too large for any doc: cut along the braces instead of by lines
            fallback = any(tokens[s] > split_bytes for s in builder.unsplit)
    if fallback:
        builder = _Builder(data, with_references, split_bytes)
        brace_units(builder, text, _definitions(root) if with_references else [])
        texts, order = _line_texts(data, builder.spans, builder.pairs)
        tokens = count_batch(texts)

    fu = FileUnits(texts, tokens, [], includes, root.has_error, order, int(fallback))

    def entry(key: tuple) -> tuple:
        """A scope entry (pack.DocBuilder): its opening and closing lines, each head line (text, tokens, lines)
        for going on to the next branch of an #if chain, and where its closing lines are."""
        closer = builder.closers[key]  # -1 when the source never closes it: neither do its docs
        close = (texts[closer], tokens[closer]) if closer >= 0 else ("", 0)
        heads = tuple((texts[i], tokens[i], fu.lines_of([i])) for i in key)
        return ("".join(texts[i] for i in key), sum(tokens[i] for i in key), *close, key, heads,
                fu.lines_of([closer]) if closer >= 0 else None)

    scopes: dict[tuple, tuple] = {}
    for unit in builder.units:
        unit.tokens = sum(map(tokens.__getitem__, unit.segments))
        if unit.scope not in scopes:
            scopes[unit.scope] = tuple(entry(key) for key in unit.scope)
        unit.scope = scopes[unit.scope]
    if with_references and builder.units:
        _references(tree, builder.units, data)
    # drop units whose lines another unit holds (but keep the empty ones that carry a scope's lines)
    fu.units = [u for u in builder.units if any(texts[s] for s in u.segments) or not u.segments]
    return fu
