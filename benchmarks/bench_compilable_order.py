"""Classes placed before a base or before their primary template in compilable docs, this checkout
beside a reference revision (default main), on real trees.

Each tree is chunked in compilable mode at --max-tokens (default 2048; 1 worker) by each checkout in a child
process; every doc but the pieces of one split unit is then parsed with tree-sitter and its declaration-level
class definitions are read in order. A class is *misplaced* when the doc defines, after it and nowhere before it,
- a base it derives from (the class of the base's name, not a specialization: `class D : public B<int>` needs
  the template B), or
- for a partial or explicit specialization (`struct formatter<int, Char> {`), its primary template.
Only a definition the use can mean counts: one in the namespace the use's qualifier names (as seen from the class's
namespace), else (unqualified) in the class's namespace (a base: or one around it); one of them before the class
places it. Goal: 0. Beside the
counts: the docs of this checkout that the reference does not emit, and the files whose docs differ.

Trees: the directories named, or every directory under --trees-dir ($NANODATA_BENCH_TREES; skipped without one),
each chunked as one project dir holding it: e.g. fmtlib/fmt, google/leveldb, google/re2, leethomason/tinyxml2, gabime/spdlog, nlohmann/json,
abseil/abseil-cpp, google/googletest, extracted with `git archive`.

    .venv/bin/python benchmarks/bench_compilable_order.py --trees-dir TREES [--reference main] [--examples 5]
        [--max-tokens 2048]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

from nanodata.pipeline.chunking.syntax import parser

REPO = Path(__file__).resolve().parents[1]
MAX_TOKENS = 2048
CLASSES = {"class_specifier", "struct_specifier", "union_specifier"}
BASE_TYPES = {"type_identifier", "qualified_identifier", "template_type"}
NOT_DECLARATION_LEVEL = {"field_declaration_list", "compound_statement"}   # members and function bodies

CHILD = """
import sys
sys.path.insert(0, sys.argv[1])
import nanodata
assert nanodata.__file__.startswith(sys.argv[1]), nanodata.__file__
from nanodata.pipeline.chunkbuild import chunk_to_jsonl
chunk_to_jsonl(sys.argv[3], project_dirs=[sys.argv[2]], mode="compilable", max_tokens=int(sys.argv[4]), workers=1)
"""


def _split(text: str) -> tuple[str, str]:
    """(last scope, name) of a (qualified) name with its template arguments dropped: a::B<T>::C -> (B, C)."""
    depth, kept = 0, []
    for c in text:
        depth += c == "<"
        if depth == 0:
            kept.append(c)
        depth -= c == ">" and depth > 0
    *scopes, name = "".join(kept).replace(" ", "").split("::")
    return (scopes[-1] if scopes else ""), name


def classes(text: str) -> list[tuple]:
    """(start, namespaces, name, is a specialization, written scope, [(scope, name) of each base], head line) of
    the doc's declaration-level class definitions, in order. A specialization's name is its template's."""
    data = text.encode("utf-8")
    found, stack = [], [(parser().parse(data).root_node, ())]
    while stack:
        node, chain = stack.pop()
        if node.type == "namespace_definition" and node.child_by_field_name("name") is not None:
            chain = chain + tuple(node.child_by_field_name("name").text.decode("utf-8", "replace").split("::"))
        if node.type in CLASSES and node.child_by_field_name("body") is not None:
            name = node.child_by_field_name("name")
            if name is not None:
                scope, written = _split(name.text.decode("utf-8", "replace"))
                bases = [_split(c.text.decode("utf-8", "replace")) for clause in node.children
                         if clause.type == "base_class_clause" for c in clause.named_children if c.type in BASE_TYPES]
                while name.type == "qualified_identifier" and name.child_by_field_name("name") is not None:
                    name = name.child_by_field_name("name")
                head = data[node.start_byte:].split(b"\n", 1)[0].decode("utf-8", "replace")
                found.append((node.start_byte, chain, written, name.type == "template_type", scope, bases, head))
            stack.extend((c, chain) for c in node.children if c.type != "field_declaration_list")
        elif node.type not in NOT_DECLARATION_LEVEL:
            stack.extend((c, chain) for c in node.children)
    return sorted(found)


def misplaced(text: str) -> list[tuple[str, str, int]]:
    """(class head, what it needs, characters the needed definition comes after it) of each misplaced class.
    A definition can be meant when it sits in the namespace the use's qualifier names (one in the user's namespace
    or around it), or (unqualified) in the user's namespace (a base: or one around it; a primary template: that
    one)."""
    found = classes(text)
    primaries: dict[str, list[tuple[int, tuple]]] = {}
    for start, chain, name, special, *_ in found:
        if not special:
            primaries.setdefault(name, []).append((start, chain))
    out = []
    for start, chain, name, special, scope, bases, head in found:
        needs = [(*b, False) for b in bases if b[1] != name or special] + ([(scope, name, True)] if special else [])
        for qualifier, need, primary in needs:
            meant = [at for at, where in primaries.get(need, ()) if (
                where[-1:] == (qualifier,) and where[:-1] == chain[:len(where) - 1] if qualifier else
                where == (chain if primary else chain[:len(where)]))]
            if meant and meant[0] > start:
                out.append((head.strip(), need, meant[0] - start))
    return out


def chunk(checkout: Path, tree: Path, out: Path, max_tokens: int) -> list[dict]:
    with tempfile.TemporaryDirectory(prefix="nanodata-order-tree-") as holder:
        shutil.copytree(tree, Path(holder) / tree.name, symlinks=True)  # a project dir holding the tree alone
        subprocess.run([sys.executable, "-c", CHILD, str(checkout), holder, str(out), str(max_tokens)], check=True,
                       stdout=subprocess.DEVNULL)
    with open(out, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def count(docs: list[dict]) -> tuple[int, list[tuple]]:
    """(docs checked, [(source, head, needs, distance)] of every misplaced class)."""
    checked = [d for d in docs if d["kind"] != "split"]
    return len(checked), [(d["source"], *m) for d in checked for m in misplaced(d["text"])]


def _by_source(docs: list[dict]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for doc in docs:
        out.setdefault(doc["source"], []).append(doc["text"])
    return out


def main() -> None:
    parser_ = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser_.add_argument("trees", nargs="*", type=Path, help="tree directories (default: every one in --trees-dir)")
    parser_.add_argument("--trees-dir", type=Path, default=os.environ.get("NANODATA_BENCH_TREES"),
                         help="default: $NANODATA_BENCH_TREES")
    parser_.add_argument("--reference", default="main", help="git revision to compare with (default main)")
    parser_.add_argument("--examples", type=int, default=5, help="misplaced classes listed per tree and checkout")
    parser_.add_argument("--max-tokens", type=int, default=MAX_TOKENS)
    args = parser_.parse_args([] if __name__ != "__main__" else None)  # (run_all.py: defaults)
    trees = args.trees or (sorted(p for p in Path(args.trees_dir).iterdir() if p.is_dir()) if args.trees_dir else [])
    if not trees:  # the trees are not part of the repository
        print("compilable_order: skipped: name tree directories, --trees-dir or $NANODATA_BENCH_TREES (each tree a "
              "`git archive` of e.g. fmtlib/fmt)")
        return
    with tempfile.TemporaryDirectory(prefix="nanodata-order-") as tmp:
        tmp = Path(tmp)
        ref = tmp / "ref"
        ref.mkdir()
        archive = subprocess.run(["git", "-C", str(REPO), "archive", args.reference, "nanodata"], capture_output=True,
                                 check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(ref)], input=archive, check=True)
        print(f"compilable --max-tokens {args.max_tokens}, 1 worker; ref = git archive {args.reference}, this = {REPO}")
        print(f"{'tree':<12} {'docs ref':>8} {'misplaced ref':>13} {'docs this':>9} {'misplaced this':>14} "
              f"{'docs changed':>12} {'files changed':>13}")
        totals = Counter()
        for tree in trees:
            rows = {}
            for label, checkout in (("ref", ref), ("this", REPO)):
                docs = chunk(checkout, tree, tmp / f"{label}.jsonl", args.max_tokens)
                rows[label] = (docs, *count(docs))
            texts = {label: Counter(d["text"] for d in docs) for label, (docs, _, _) in rows.items()}
            changed = sum((texts["this"] - texts["ref"]).values())
            by_source = {label: _by_source(docs) for label, (docs, _, _) in rows.items()}
            sources = sorted(s for s in by_source["ref"].keys() | by_source["this"].keys()
                             if by_source["ref"].get(s) != by_source["this"].get(s))
            (_, n_ref, bad_ref), (_, n_this, bad_this) = rows["ref"], rows["this"]
            totals.update({"ref": len(bad_ref), "this": len(bad_this)})
            print(f"{tree.name:<12} {n_ref:>8} {len(bad_ref):>13} {n_this:>9} {len(bad_this):>14} {changed:>12} "
                  f"{len(sources):>5} of {len(by_source['ref'])} files")
            if sources:
                print(f"    files whose docs changed: {', '.join(sources[:args.examples])}"
                      + (" ..." if len(sources) > args.examples else ""))
            for label, (_, _, bad) in rows.items():
                for source, head, needs, distance in bad[:args.examples]:
                    print(f"    {label}: {source}: `{head[:90]}` before `{needs}` ({distance:,} chars)")
        print(f"{'total':<12} {'':>8} {totals['ref']:>13} {'':>9} {totals['this']:>14}   (goal: 0)")


if __name__ == "__main__":
    main()
