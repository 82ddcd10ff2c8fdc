"""The five chunking modes: which units go together, in which order.

A *ref* is (file number, unit number). Modes build *bundles* (refs added to a doc together,
dependencies first, the root last) and hand them to `pack.Packer`, which owns the budget.
- basic:      a file that fits is one doc; else preamble + runs of whole units in source order.
- dep-aware:  types and declarations, then functions callees-first (call levels, cycles after).
- cross-file: each function bundled with the definitions it calls in other files (BFS to a depth,
              only names that resolve to one definition its file can see: globalindex's rule).
- project:    cross-file over project dirs, projects in #include order.
- compilable: per root function: preamble, needed types in dependency order, functions callees-first;
              fallbacks drop cross-file functions, then reduce to preamble + named types + root.
"""

from __future__ import annotations

from nanodata.pipeline.chunking.fidelity import EXAMPLES, EXAMPLES_KEPT
from nanodata.pipeline.chunking.graphs import callees_in_file, reachable, topo_order
from nanodata.pipeline.chunking.pack import Counter, Doc, Packer
from nanodata.pipeline.chunking.units import FileUnits


def as_doc(text: str) -> str:
    """A file's text as its one doc: as read, its last line ended (so that nothing placed after it joins it)."""
    return text if not text or text.endswith("\n") else text + "\n"


def whole_file(text: str, counter: Counter, budget: int) -> Doc | None:
    """Basic mode: a file that fits the budget is one doc, the file as read (kind "file", no source yet), else None
    (a file of nothing but whitespace too: it makes no doc). Decided before any parse: the pipeline tokenizes a
    fitting file once and emits it. Every file is tokenized whole, once, even one far over budget: that one is
    parsed next, and its segments, which tile it, are priced off this same encoding (pack.Counter.token_ends keeps
    the last one), so no pretest could spare it the tokenizing."""
    if not text.strip():
        return None
    doc = as_doc(text)
    tokens = len(counter.token_ends(doc))
    return Doc(doc, tokens, "file", "", lines=(1, doc.count("\n"))) if tokens <= budget else None


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
        return self.resolve_all(kind, (name,), ref)[0]

    def resolve_all(self, kind: str, names, ref) -> list:
        """`resolve` of each of `names` (a sequence), used in unit `ref` (the unit looked up once)."""
        if not names:  # (a local Index has no lookup: only what its own files define is named there)
            return []
        unit = self.unit(ref)
        context = (unit.owner, unit.name) if unit.kind == "type" else (unit.owner,)
        resolve, qualifiers, gid = self.lookup.resolve, unit.qualifiers, ref[0]
        return [resolve(kind, name, gid, qualifiers.get((kind, name), ()), context) for name in names]

    def bound(self, ref, kind: str) -> list | None:
        """The clang resolver: the definitions (file, unit) of `kind` ("function", "type"; "base": the types it
        derives from) that unit `ref`'s code binds to, first use first, then (functions) those the names rule
        finds for the calls clang could not bind in a template (they depend on its arguments); None when its file
        is resolved by names."""
        unit = self.unit(ref)
        if unit.usrs is None:
            return None
        found = (self.lookup.resolve_usr(usr, ref[0]) for usr in (unit.base_usrs if kind == "base" else unit.usrs))
        targets = dict.fromkeys(t for t in found if t is not None and t != ref)
        if kind == "function" and unit.unbound_calls:
            unbound = set(unit.unbound_calls)
            named = self.resolve_all(kind, [name for name in unit.calls if name in unbound], ref)
            targets.update(dict.fromkeys(t for t in named if t is not None and t != ref))
        return [t for t in targets if kind == "base" or self.unit(t).kind == kind]

    def unit(self, ref):
        fu = self.files.get(ref[0])
        return fu.units[ref[1]] if fu is not None else self.lookup.unit(ref)

    def text(self, ref) -> str:
        fu = self.files.get(ref[0])
        return fu.text_of(fu.units[ref[1]]) if fu is not None else self.lookup.text(ref)


class Chunker:
    """Emits the docs of one file in the chosen mode; global modes look other files up in the Index.
    Its caches are per root file: make one per file emitted."""

    def __init__(self, mode: str, budget: int, counter: Counter, index: Index, cross_depth: int = 3):
        self.mode, self.cross_depth = mode, cross_depth
        self.index = index
        self.packer = Packer(budget, counter, index, separate=mode != "basic")
        self._calls: dict[int, dict] = {}   # per file: unit -> callees in the file
        self._types: dict[int, dict] = {}   # per file: type name -> its definitions in the file
        # per unit (file, unit), as seen from the root's file (the one file a Chunker serves): what it calls outside
        # that file (call_edges), what it calls (_callees), (the types it names, those that must come first)
        # (_types_of), every type it reaches (_closure), the types it names and those reach (_named_closed)
        self._call_edges: dict = {}
        self._callees_of: dict = {}
        self._type_edges_of: dict = {}
        self._closures: dict = {}
        self._named: dict = {}
        self._orders: dict = {}   # a set of types -> in dependency order (roots that name the same types share it)
        self._checked: set = set()   # types known to lie on a cycle of bases / primary templates, or not (_cyclic)
        self._cyclic: set = set()
        self.type_cycles: dict = {}   # type placed before a base or primary template (a cycle of those) -> why

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
        self.packer.root = f
        fits = self.mode == "basic" and fu.may_fit
        whole = whole_file(fu.whole_text(), self.packer.counter, self.packer.budget) if fits else None
        if whole is not None:
            whole.source = source
            return [whole]
        preamble = self.packer.preamble(f)  # context for later docs: every unit is packed in place too
        if self.mode == "basic":
            return self.packer.pack([[(f, u)] for u in range(len(fu.units))], preamble, source)
        others = [(f, u) for u, unit in enumerate(fu.units) if unit.kind != "function"]
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

    def _derived(self, what: str, compute, ref, root_file: int):
        """compute(ref, root_file): `ref`'s edges. Those of a unit of another file than the root's depend on its
        definition and the index alone: computed once per process, kept by the index's lookup (`derived`), as
        every file that pulls the unit in asks again."""
        if ref[0] == root_file or self.index.lookup is None:
            return compute(ref, root_file)
        return self.index.lookup.derived((what, ref), lambda: compute(ref, root_file))

    def _calls_of(self, ref, root_file: int) -> list:
        """Every definition `ref` calls, resolved uniquely in the index (the root's file's too)."""
        found = self.index.bound(ref, "function")
        if found is None:
            found = self.index.resolve_all("function", self.index.unit(ref).calls, ref)
        return [target for target in found if target is not None]

    def call_edges(self, ref, root_file: int) -> list:
        """Definitions `ref` calls outside the root's file, resolved uniquely in the index."""
        found = self._call_edges.get(ref)
        if found is None:
            calls = self._derived("calls", self._calls_of, ref, root_file)
            found = self._call_edges[ref] = [target for target in calls if target[0] != root_file]
        return found

    def external_calls(self, root) -> list:
        """Breadth-first cross-file dependencies of `root` (nearest first), --cross-depth levels."""
        return reachable([root], _EdgesOf(lambda ref: self.call_edges(ref, root[0])), self.cross_depth)

    # -- compilable ---------------------------------------------------------------------------

    def needed_types(self, functions: list, closure: bool, root_file: int) -> frozenset:
        """Type definitions the functions name (and, with closure, the types those types name), resolved
        as seen from each unit's file: the root file's own types first, then the index. Each definition is
        a node of its own, a specialization too (type_order places them)."""
        if closure:
            return frozenset().union(*(self._named_closed(fn, root_file) for fn in functions))
        return frozenset(t for fn in functions for t in self._types_of(fn, root_file)[0])

    def type_order(self, named: frozenset, root_file: int) -> list:
        """needed_types in order: each comes after what it names where it can, and always after its bases and its
        primary template (a cycle of those is counted in stats, not hidden)."""
        order = self._orders.get(named)
        if order is None:
            base = sorted(named)  # (file, unit): source order
            edges = {t: self._types_of(t, root_file) for t in base}
            forced: list = []
            order = topo_order(base, {t: e[0] for t, e in edges.items()}, {t: e[1] for t, e in edges.items()}, forced)
            for ref in forced:
                needs = sorted({self.index.unit(d).name for d in self._types_of(ref, root_file)[1]})
                self.type_cycles.setdefault(ref, f"{self.index.unit(ref).name} before {', '.join(needs)}")
            self._orders[named] = order
        return order  # the named types alone too

    def _forces_none(self, named: frozenset, root_file: int) -> bool:
        """Does type_order place these types without forcing any (so recording no type cycle)? Yes when none of
        them lies on a cycle of bases / primary templates: only such a cycle among them makes it force one."""
        for ref in named.difference(self._checked):
            first = [t for t in self._types_of(ref, root_file)[1] if t != ref]  # (a node waits on itself for none)
            if first and ref in reachable(first, _EdgesOf(lambda t: self._types_of(t, root_file)[1])):
                self._cyclic.add(ref)
            self._checked.add(ref)
        return self._cyclic.isdisjoint(named)

    def _types_of(self, ref, root_file: int) -> tuple[list, list]:
        """(every type `ref` names, those that must come first: bases, primary template)."""
        found = self._type_edges_of.get(ref)
        if found is None:
            found = self._type_edges_of[ref] = self._derived("types", self._type_edges, ref, root_file)
        return found

    def _closure(self, ref, root_file: int) -> frozenset:
        """Every type `ref` reaches (the same for every root function naming it: computed once)."""
        found = self._closures.get(ref)
        if found is None:
            reached = reachable([ref], _EdgesOf(lambda t: self._types_of(t, root_file)[0]))
            found = self._closures[ref] = frozenset(reached)
        return found

    def _named_closed(self, ref, root_file: int) -> frozenset:
        """The types `ref` names and every type those reach (the same for every root whose doc holds `ref`)."""
        found = self._named.get(ref)
        if found is None:
            direct = self._types_of(ref, root_file)[0]
            found = self._named[ref] = frozenset(direct).union(*(self._closure(t, root_file) for t in set(direct)))
        return found

    def _type_edges(self, ref, root_file: int) -> tuple[list, list]:
        """needed_types' edges of a unit: (the types it names, resolved as seen from its file, the root's file's own
        first; those that must come first: its bases and, for a specialization, its primary template)."""
        unit = self.index.unit(ref)
        if unit.usrs is not None:
            return self._bound_types(ref)
        local = self.local_types(root_file) if ref[0] == root_file else {}
        out, required = [], []
        names = unit.types + ((unit.owner,) if unit.owner else ())
        resolved = iter(self.index.resolve_all("type", [name for name in names if name not in local], ref))
        for name in names:
            if name in local:
                targets = local[name]
            else:
                target = next(resolved)
                targets = [target] if target is not None else []
            # `class D : B<int>` and `struct B<int>` need the template B, not its other specializations
            needs = name in unit.bases or unit.specialization and name == unit.name
            for target in targets:
                if target != ref:
                    out.append(target)
                    if needs and not self.index.unit(target).specialization:
                        required.append(target)
        return out, required

    def _bound_types(self, ref) -> tuple[list, list]:
        """needed_types' edges of a unit its file's clang result binds: (the types it binds to, those that must
        come first: its bases and, for a specialization, its primary template)."""
        unit = self.index.unit(ref)
        out = self.index.bound(ref, "type")
        required = self.index.bound(ref, "base")
        if unit.specialization:
            required += [t for t in out if self.index.unit(t).name == unit.name and not self.index.unit(t).specialization]
        return out, required

    def compilable(self, f: int, functions: list, others: list, preamble: list, source: str) -> list[Doc]:
        packer = self.packer
        local_calls = self.local_calls(f)
        covered, docs = set(), []
        # preamble units the preamble repeats whole: without comments of their own, outside any #if
        repeated = [(f, u) for u, unit in enumerate(self.index.files[f].units)
                    if preamble and unit.kind == "preamble" and unit.segments == [unit.body] and not unit.scope]
        fresh = packer.builder(preamble)  # every doc starts as this one: fits asks it (never changes it)
        for root in reversed(functions):  # callers first: their docs cover many callees
            if root in covered:
                continue
            local = [(f, u) for u in reachable([root[1]], local_calls)]
            external = self.external_calls(root)
            # full closure; without cross-file functions (unless it has none: the same doc again, that did not
            # fit); preamble + directly named types + root
            levels = [(local + external, True)] + ([(local, True)] if external else []) + [([], False)]
            for deps, closure in levels:
                group = deps + [root]
                named = self.needed_types(group, closure, f)
                # a level whose units alone pass the budget fits in no order (most full closures): left unordered,
                # unless ordering its types could record a type cycle
                if packer.over_budget(fresh, [*named, *group]) and self._forces_none(named, f):
                    continue
                ordered = topo_order(sorted(group), {r: self._callees(r, f) for r in group})
                refs = self.type_order(named, f) + ordered
                if packer.fits(fresh, refs):
                    builder = packer.builder(preamble)
                    packer.add(builder, refs)
                    docs.append(builder.finish("compilable", source))
                    covered.update([r for r in refs if r[0] == f] + repeated)
                    break
            else:
                docs.extend(packer.alone(root, preamble, source, "compilable"))
                covered.add(root)
        leftovers = [[ref] for ref in others if ref not in covered]
        packer.stats["type_cycles"] = len(self.type_cycles)
        packer.stats[EXAMPLES] = [f"{source}: {why}" for why in self.type_cycles.values()][:EXAMPLES_KEPT]
        return docs + packer.pack(leftovers, preamble, source)

    def _callees(self, ref, root_file: int) -> list:
        """What `ref` calls: in the root's file, then resolved in other files (asked for every root it reaches)."""
        found = self._callees_of.get(ref)
        if found is None:
            same_file = self.local_calls(root_file).get(ref[1], []) if ref[0] == root_file else []
            found = self._callees_of[ref] = [(ref[0], u) for u in same_file] + self.call_edges(ref, root_file)
        return found


class _EdgesOf:
    """A node's edges as graphs.reachable reads them (a mapping's get), from a Chunker method that keeps them."""

    def __init__(self, edges):
        self.edges = edges

    def get(self, node, default=None):
        return self.edges(node)
