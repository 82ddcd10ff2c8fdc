"""Dependency graphs and their deterministic orders.

Every order here is a function of the input alone: nodes are visited in a given base order
(source order, or name order for projects), never in hash-map order, and a cycle is broken
by placing its earliest node first (that may go first: see topo_order's `required`).
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence


def topo_order(nodes: Sequence, deps: Mapping, required: Mapping | None = None, forced: list | None = None) -> list:
    """Dependencies first; ties and cycles resolved by the position in `nodes`.

    Kahn's algorithm by rounds (a node is ready when all its dependencies are placed), so the
    result is grouped by level: leaves, then what only needs leaves, and so on, each level in
    position order. When no node is ready (a cycle), the earliest unplaced node goes next, alone;
    with `required` (a subset of `deps`' edges that must hold: a class's bases, a specialization's
    primary template), the earliest unplaced node whose required dependencies are all placed. Only
    when there is none (a cycle of required edges) does a node of that cycle go first anyway: it
    is appended to `forced`. Counting unplaced dependencies (rather than rescanning every node each
    round) keeps it O(edges + n log n): a project's call graph of thousands of functions is ordered
    at once.
    """
    position = {n: i for i, n in enumerate(nodes)}
    waiting, dependents = _counted(nodes, position, deps)
    if not dependents:  # no edge among the nodes (most calls: a root alone, types that name no other): one round
        return list(nodes)
    must_wait, must_dependents = _counted(nodes, position, required) if required else (dict.fromkeys(nodes, 0), {})
    unblocked = [position[n] for n in nodes if must_wait[n] == 0]  # a heap: who may break a cycle
    placed, order, earliest = set(), [], 0
    ready = [n for n in nodes if waiting[n] == 0]
    while len(order) < len(nodes):
        if not ready:
            while unblocked and nodes[unblocked[0]] in placed:
                heapq.heappop(unblocked)
            if unblocked:
                ready = [nodes[heapq.heappop(unblocked)]]
            else:  # every unplaced node waits on a required one: walk those edges to a node on a cycle
                while nodes[earliest] in placed:
                    earliest += 1
                node, seen = nodes[earliest], set()
                while node not in seen:
                    seen.add(node)
                    node = min((d for d in required.get(node, ()) if d in position and d not in placed and d != node),
                               key=position.__getitem__)
                ready = [node]
                if forced is not None:
                    forced.append(node)
        order.extend(ready)
        placed.update(ready)
        released = []
        for n in ready:
            for m in dependents.get(n, ()):
                waiting[m] -= 1
                if waiting[m] == 0 and m not in placed:
                    released.append(m)
            for m in must_dependents.get(n, ()):
                must_wait[m] -= 1
                if must_wait[m] == 0 and m not in placed:
                    heapq.heappush(unblocked, position[m])
        ready = sorted(released, key=position.__getitem__)
    return order


def _counted(nodes: Sequence, position: dict, edges: Mapping) -> tuple[dict, dict]:
    """topo_order's counts: per node, how many of the nodes it waits on; per node, the nodes that wait on it."""
    waiting, dependents = dict.fromkeys(nodes, 0), {}
    for n in nodes:
        targets = edges.get(n)
        if not targets:  # (most nodes of `required` have none)
            continue
        inside = position.keys() & targets  # (one C-speed pass; the order of dependents' lists changes no result)
        inside.discard(n)
        waiting[n] = len(inside)
        for d in inside:
            dependents.setdefault(d, []).append(n)
    return waiting, dependents


def callees_in_file(units) -> dict[int, list[int]]:
    """unit index -> indices of the file's functions it calls (every definition of the name)."""
    by_name: dict[str, list[int]] = {}
    for i, unit in enumerate(units):
        if unit.kind == "function" and unit.name:
            by_name.setdefault(unit.name, []).append(i)
    return {i: [j for name in unit.calls for j in by_name.get(name, ()) if j != i]
            for i, unit in enumerate(units) if unit.kind == "function"}


def reachable(start: Sequence, edges: Mapping, depth: int | None = None) -> list:
    """Breadth-first closure of `start` along `edges` (in edge order), `depth` levels at most."""
    seen, order, frontier, level = set(start), [], list(start), 0
    while frontier and (depth is None or level < depth):
        nxt = []
        for node in frontier:
            for target in edges.get(node, ()):
                if target not in seen:
                    seen.add(target)
                    order.append(target)
                    nxt.append(target)
        frontier, level = nxt, level + 1
    return order
