"""The five chunking modes: which units go together, in which order.

A *ref* is (file number, unit number). Modes build *bundles* (refs added to a doc together,
dependencies first, the root last) and hand them to `Packer`, which owns the budget.
- basic:      a file that fits is one doc; else preamble + runs of whole units in source order.
- dep-aware:  types and declarations, then functions callees-first (call levels, cycles after).
- cross-file: each function bundled with the definitions it calls in other files (BFS to a depth,
              only names that resolve to one definition its file can see: globalindex's rule).
- project:    cross-file over project dirs, projects in #include order.
- compilable: per root function: preamble, needed types in dependency order, functions callees-first;
              fallbacks drop cross-file functions, then reduce to preamble + named types + root.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from nanodata.pipeline.chunking.graphs import callees_in_file, reachable, topo_order
from nanodata.pipeline.chunking.pack import Counter, Doc, DocBuilder, closing_cost, scope_transition, split_text
from nanodata.pipeline.chunking.units import FileUnits, Part

MODES = ("basic", "dep-aware", "cross-file", "project", "compilable")
GLOBAL_MODES = ("cross-file", "project", "compilable")   # need every file parsed before emitting
PREAMBLE_SHARE = 4   # a preamble over budget/4 is not repeated in every doc; its units are packed instead
WHOLE_STEP = 4       # characters per token left of the budget counted at a time (whole_file)


def squeezed(text: str) -> str:
    """A file as its one doc: its lines without the whitespace-only ones, the last one ended."""
    lines = list(filter(str.strip, text.split("\n")))
    return "\n".join(lines) + "\n" if lines else ""


def whole_file(text: str, counter: Counter, budget: int) -> Doc | None:
    """Basic mode: a file that fits the budget is one doc (kind "file", no source yet), else None. Decided
    before any parse: the pipeline tokenizes a fitting file once and emits it. The lines are counted about what
    is left of the budget at a time, stopping once over it, so a large file costs little more than the budget's
    worth of tokenizing: counts add up at line ends (pack.counter_for)."""
    doc = squeezed(text)
    tokens = start = 0
    while start < len(doc) and tokens <= budget:  # (whole lines, about what is left of the budget at a time)
        stop = doc.find("\n", start + WHOLE_STEP * (budget + 1 - tokens)) + 1 or len(doc)
        tokens += counter.count(doc[start:stop])
        start = stop
    return Doc(doc, tokens, "file", "") if tokens <= budget else None


class Index:
    """What a Chunker looks up: the files it emits (whole, by gid) and, in global modes, the
    definitions of every file of the run (a GlobalIndex on disk: names, ids and the text of
    resolvable definitions, never the whole corpus in memory)."""

    def __init__(self, files: dict[int, FileUnits], lookup=None):
        self.files = files
        self.lookup = lookup

    def resolve(self, kind: str, name: str, ref):
        """The one definition (file, unit) that `name`, used in unit `ref`, means as seen from ref's
        file (its project, then the projects it includes), or None (absent or ambiguous)."""
        unit = self.unit(ref)
        context = (unit.owner, unit.name) if unit.kind == "type" else (unit.owner,)
        return self.lookup.resolve(kind, name, ref[0], unit.qualifiers.get((kind, name), ()), context)

    def unit(self, ref):
        fu = self.files.get(ref[0])
        return fu.units[ref[1]] if fu is not None else self.lookup.unit(ref)

    def text(self, ref) -> str:
        fu = self.files.get(ref[0])
        return fu.text_of(fu.units[ref[1]]) if fu is not None else self.lookup.text(ref)


LEAD = -1  # the last step of a ref naming the comments before a Part's opener


def part_entry(fu: FileUnits, part: Part) -> tuple:
    """A Part as a scope entry (see pack.DocBuilder): its opening and closing lines."""
    close = (fu.texts[part.closer], fu.tokens[part.closer]) if part.closer >= 0 else ("", 0)
    return fu.texts[part.opener], fu.tokens[part.opener], *close, ("part", part.opener)


@dataclass
class Packer:
    budget: int
    counter: Counter
    index: Index
    # what had to be cut by lines: statements (or lines) larger than the budget
    stats: dict = field(default_factory=lambda: {"oversized_statement_cuts": 0})
    _nodes: dict = field(default_factory=dict)   # ref -> node(ref): a Packer serves one root file
    _inner: dict = field(default_factory=dict)   # ref -> the scope inside its Part, one tuple for all its members

    def shape(self, ref) -> tuple[tuple, int]:
        """(scope, tokens) of a unit (file, unit) or of a member inside it (file, unit, *path)."""
        if len(ref) == 2:
            unit = self.index.unit(ref)
            return unit.scope, unit.tokens
        fu, scope, segments, _ = self.node(ref)
        return scope, sum(map(fu.tokens.__getitem__, segments))

    def text(self, ref) -> str:
        if len(ref) == 2:
            return self.index.text(ref)
        fu, _, segments, _ = self.node(ref)
        return "".join(fu.texts[s] for s in segments)

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
        return DocBuilder(self.budget, list(preamble))

    def fits(self, builder: DocBuilder, refs: list) -> bool:
        """Would the doc stay within budget with all of `refs` added (in order)?"""
        tokens, scope = builder.tokens, builder.scope
        for ref in refs:
            new_scope, unit_tokens = self.shape(ref)
            tokens += scope_transition(scope, new_scope)[1] + unit_tokens
            scope = new_scope
            if tokens > self.budget:
                return False
        return tokens + closing_cost(scope) <= self.budget

    def add(self, builder: DocBuilder, refs: list) -> None:
        for ref in refs:
            scope, tokens = self.shape(ref)
            builder.add(scope, self.text(ref), tokens)

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
        if part is not None and DocBuilder(self.budget).fits(scope + (part_entry(fu, part),), 0):
            lead = [[ref + (LEAD,)]] if segments[0] != part.opener else []
            return self.pack(lead + [[ref + (m,)] for m in range(len(part.members))], [], source, "split")
        return self.cut(ref, scope, source)

    def cut(self, ref, scope: tuple, source: str) -> list[Doc]:
        """A statement larger than the budget (a huge initializer, a line of a parse-error region):
        cut by lines (at balanced lines where it can) inside its scope's lines, and counted."""
        self.stats["oversized_statement_cuts"] += 1
        wrapping = sum(entry[1] for entry in scope) + closing_cost(scope)
        if 2 * wrapping > self.budget:  # the scope would leave too little room: cut bare
            scope, wrapping = (), 0
        docs = []
        for piece, tokens in split_text(self.text(ref), self.budget - wrapping, self.counter):
            if piece.strip():
                builder = DocBuilder(self.budget)
                builder.add(scope, piece, tokens)
                docs.append(builder.finish("split", source, cut=True))
        return docs

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


class Chunker:
    """Emits the docs of one file in the chosen mode; global modes look other files up in the Index.
    Its caches are per root file: make one per file emitted."""

    def __init__(self, mode: str, budget: int, counter: Counter, index: Index, cross_depth: int = 3):
        self.mode, self.cross_depth = mode, cross_depth
        self.index = index
        self.packer = Packer(budget, counter, index)
        self._calls: dict[int, dict] = {}   # per file: unit -> callees in the file
        self._types: dict[int, dict] = {}   # per file: type name -> its definitions in the file
        self._edges: dict[tuple, list] = {}  # (root file, ref) -> call / type dependencies

    def local_calls(self, f: int) -> dict:
        if f not in self._calls:
            self._calls[f] = callees_in_file(self.index.files[f].units)
        return self._calls[f]

    def local_types(self, f: int) -> dict:
        if f not in self._types:
            table: dict[str, list] = {}
            for u, unit in enumerate(self.index.files[f].units):
                if unit.kind == "type" and unit.name:
                    table.setdefault(unit.name, []).append((f, u))
            self._types[f] = table
        return self._types[f]

    def docs(self, f: int, source: str) -> list[Doc]:
        fu = self.index.files[f]
        fits = self.mode == "basic" and fu.may_fit
        whole = whole_file(fu.whole_text(), self.packer.counter, self.packer.budget) if fits else None
        if whole is not None:
            whole.source = source
            return [whole]
        preamble = self.packer.preamble(f)  # context for later docs: every unit is packed in place too
        others = [(f, u) for u, unit in enumerate(fu.units) if unit.kind != "function"]
        if self.mode == "basic":
            return self.packer.pack([[(f, u)] for u in range(len(fu.units))], preamble, source)
        functions = self.functions_callees_first(f)
        if self.mode == "dep-aware":
            return self.packer.pack([[ref] for ref in others + functions], preamble, source)
        if self.mode == "compilable":
            return self.compilable(f, functions, others, preamble, source)
        bundles = [[ref] for ref in others]
        bundles += [list(reversed(self.external_calls(ref))) + [ref] for ref in functions]
        return self.packer.pack(bundles, preamble, source)

    def functions_callees_first(self, f: int) -> list:
        calls = self.local_calls(f)
        return [(f, u) for u in topo_order(sorted(calls), calls)]

    def call_edges(self, ref, root_file: int) -> list:
        """Definitions `ref` calls outside the root's file, resolved uniquely in the index."""
        key = ("calls", root_file, ref)
        if key not in self._edges:
            found = (self.index.resolve("function", name, ref) for name in self.index.unit(ref).calls)
            self._edges[key] = [target for target in found if target is not None and target[0] != root_file]
        return self._edges[key]

    def external_calls(self, root) -> list:
        """Breadth-first cross-file dependencies of `root` (nearest first), --cross-depth levels."""
        return reachable([root], _LazyEdges(lambda ref: self.call_edges(ref, root[0])), self.cross_depth)

    # -- compilable ---------------------------------------------------------------------------

    def needed_types(self, functions: list, closure: bool, root_file: int) -> list:
        """Type definitions the functions name (and, with closure, the types those types name), resolved
        as seen from each unit's file: the root file's own types first, then the index."""
        local = self.local_types(root_file)

        def resolve(ref) -> list:
            key = ("types", root_file, ref)
            if key not in self._edges:
                unit = self.index.unit(ref)
                out = []
                for name in unit.types + ((unit.owner,) if unit.owner else ()):
                    if ref[0] == root_file and name in local:
                        out.extend(local[name])
                    else:
                        target = self.index.resolve("type", name, ref)
                        if target is not None:
                            out.append(target)
                self._edges[key] = [t for t in out if t != ref]
            return self._edges[key]

        direct = list(dict.fromkeys(t for fn in functions for t in resolve(fn)))
        everything = direct + reachable(direct, _LazyEdges(resolve)) if closure else direct
        base = sorted(set(everything))  # (file, unit): source order within a file
        deps = {t: resolve(t) for t in base}
        return topo_order(base, deps)  # bases and primary templates first, the named types alone too

    def compilable(self, f: int, functions: list, others: list, preamble: list, source: str) -> list[Doc]:
        packer = self.packer
        local_calls = self.local_calls(f)
        covered, docs = set(), []
        # preamble units the preamble repeats whole: without comments of their own, outside any #if
        repeated = [(f, u) for u, unit in enumerate(self.index.files[f].units)
                    if preamble and unit.kind == "preamble" and unit.segments == [unit.body] and not unit.scope]
        for root in reversed(functions):  # callers first: their docs cover many callees
            if root in covered:
                continue
            local = [(f, u) for u in reachable([root[1]], local_calls)]
            external = self.external_calls(root)
            # full closure; without cross-file functions; preamble + directly named types + root
            for deps, closure in [(local + external, True), (local, True), ([], False)]:
                group = deps + [root]
                ordered = topo_order(sorted(group), {r: self._callees(r, f) for r in group})
                refs = self.needed_types(ordered, closure, f) + ordered
                builder = packer.builder(preamble)
                if packer.fits(builder, refs):
                    packer.add(builder, refs)
                    docs.append(builder.finish("compilable", source))
                    covered.update([r for r in refs if r[0] == f] + repeated)
                    break
            else:
                docs.extend(packer.alone(root, preamble, source, "compilable"))
                covered.add(root)
        leftovers = [[ref] for ref in others if ref not in covered]
        return docs + packer.pack(leftovers, preamble, source)

    def _callees(self, ref, root_file: int) -> list:
        same_file = self.local_calls(root_file).get(ref[1], []) if ref[0] == root_file else []
        return [(ref[0], u) for u in same_file] + self.call_edges(ref, root_file)


class _LazyEdges(dict):
    """A mapping whose values are computed on first access (BFS touches few nodes)."""

    def __init__(self, compute):
        super().__init__()
        self.compute = compute

    def get(self, key, default=None):
        if key not in self:
            self[key] = self.compute(key)
        return self[key]
