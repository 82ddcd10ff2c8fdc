"""What a tree-sitter C++ node is, shared by the tree walk, the brace fallback and the reference lookup:
the grammar, the node kinds each layout step cares about, and a declaration's kind and name."""

from __future__ import annotations

import re

import tree_sitter_cpp
from tree_sitter import Language, Parser

LANGUAGE = Language(tree_sitter_cpp.language())
WRAPPERS = {"namespace_definition", "linkage_specification"}      # re-wrapped around their units
CONDITIONALS = {"preproc_if", "preproc_ifdef", "preproc_else", "preproc_elif", "preproc_elifdef"}
TYPE_SPECIFIERS = {"class_specifier", "struct_specifier", "union_specifier", "enum_specifier"}
# Small file-scope declarations of these kinds form the preamble every chunk of the file repeats.
PREAMBLE_NODES = {"preproc_include", "preproc_def", "preproc_function_def", "preproc_call", "using_declaration",
                  "alias_declaration", "type_definition", "declaration", "template_declaration",
                  "namespace_alias_definition", "linkage_specification", "struct_specifier", "class_specifier",
                  "union_specifier", "enum_specifier", "static_assert_declaration", "concept_definition"}
MAX_PREAMBLE_ITEM_BYTES = 512
IDENTIFIER = re.compile(r"[A-Za-z_]\w*")
TEMPLATE_ARGS = re.compile(r"<[^<>]*>")   # innermost template arguments (_strip_template_args)

_parser: Parser | None = None


def parser() -> Parser:
    global _parser  # one per process: Parser objects are not picklable, so workers build their own
    if _parser is None:
        _parser = Parser(LANGUAGE)
    return _parser


# `class EXPORT_MACRO Name : public Base {` (leveldb's `class LEVELDB_EXPORT Env`): an upper-case word between the
# class key and the name can only be a macro (an export or visibility attribute). tree-sitter cannot see through it
# and reads a function named Name; parsing a copy with that word blanked to spaces (the same byte offsets) gives
# the class, its bases and its members.
EXPORT_MACRO = re.compile(rb"\b(?:class|struct|union)\s+([A-Z][A-Z0-9_]*)\s+(?=[A-Za-z_]\w*\s*(?:final\s*)?[:{])")
CLASS_KEYS = (b"class", b"struct", b"union")


def export_macros(data: bytes) -> list[tuple[int, int]]:
    """The spans of the export macros in `data` (EXPORT_MACRO's group), in order. The keys are found with bytes.find
    and EXPORT_MACRO is matched only there: a search would try the pattern at every byte, at a third of the
    speed. (Its matches cannot overlap: each ends before the name after the macro, and a key lies in none.)"""
    spans = []
    for key in CLASS_KEYS:
        at = data.find(key)
        while at >= 0:
            match = EXPORT_MACRO.match(data, at)  # (its \b looks at the byte before `at`, as a search would)
            if match:
                spans.append(match.span(1))
            at = data.find(key, at + len(key))
    return sorted(spans)


def parse_tree(data: bytes):
    """tree-sitter's tree of a file, export macros in class heads read as blanks (EXPORT_MACRO)."""
    marks = export_macros(data) if b"class " in data or b"struct " in data or b"union " in data else []
    if marks:
        blanked = bytearray(data)
        for start, end in marks:
            blanked[start:end] = b" " * (end - start)
        data = bytes(blanked)
    return parser().parse(data)


def _inner(node):
    """The declaration a template_declaration wraps (templates may nest)."""
    while node.type == "template_declaration":
        inner = [c for c in node.named_children if c.type not in ("template_parameter_list", "comment")]
        if not inner:
            return node
        node = inner[-1]
    return node


def _last_name(text: str) -> str:
    names = IDENTIFIER.findall(text[:200].split("<", 1)[0])
    return names[-1] if names else ""


def _strip_template_args(text: str) -> str:
    if "<" not in text:  # (most names: no pattern run)
        return text
    while True:  # innermost first: A<B<C>>::f -> A<B>::f -> A::f
        stripped = TEMPLATE_ARGS.sub("", text)
        if stripped == text:
            return text
        text = stripped


def _function_name(node) -> tuple[str, str]:
    declarator = node.child_by_field_name("declarator")
    while declarator is not None and declarator.type != "function_declarator":
        # reference_declarator keeps its inner declarator as an unnamed child
        declarator = declarator.child_by_field_name("declarator") or next(
            (c for c in declarator.named_children if c.type.endswith("declarator")), None)
    if declarator is None or declarator.child_by_field_name("declarator") is None:
        return "", ""
    text = declarator.child_by_field_name("declarator").text.decode("utf-8", "replace")
    owner, _, name = text.rpartition("::") if "operator" in text else _strip_template_args(text).rpartition("::")
    name = name.strip()
    if not name.startswith("operator"):
        name = ("~" if name.startswith("~") else "") + _last_name(name)
    return name, _last_name(_strip_template_args(owner))


def _type_name(node) -> tuple[str, str]:
    """(name, owner) of a class/struct/enum: `class path::iterator {` is (iterator, path)."""
    name = node.child_by_field_name("name")
    if name is None:
        return "", ""
    text = name.text.decode("utf-8", "replace")
    return _last_name(text), _last_name(_strip_template_args(text).rpartition("::")[0])


def classify(node, named: bool = True) -> tuple[str, str, str]:
    """(kind, name, owner) of a declaration-level node: kind is type, function, preamble or decl.
    Names are looked up only when `named` (basic mode never needs them)."""
    inner = _inner(node)
    if inner.type == "linkage_specification":
        body = inner.child_by_field_name("body")
        inner = _inner(body) if body is not None else inner
    if inner.type == "function_definition":
        return ("function", *_function_name(inner)) if named else ("function", "", "")
    for candidate in (inner, inner.child_by_field_name("type")):
        if candidate is not None and candidate.type in TYPE_SPECIFIERS and candidate.child_by_field_name("body"):
            if not named:
                return "type", "", ""
            name, owner = _type_name(candidate)
            if not name and inner.type == "type_definition":  # typedef struct { ... } Name;
                declarator = inner.child_by_field_name("declarator")
                name = _last_name(declarator.text.decode("utf-8", "replace")) if declarator else ""
            return "type", name, owner
    if node.type in PREAMBLE_NODES and node.end_byte - node.start_byte <= MAX_PREAMBLE_ITEM_BYTES:
        return "preamble", "", ""
    return "decl", "", ""


def _structural(node) -> bool:
    """A node that is a whole declaration (or holds some), as opposed to a loose token."""
    if node.type == "ERROR":
        return any(_structural(c) for c in node.children)
    return (node.type == "comment" or node.type in CONDITIONALS or node.type in WRAPPERS
            or node.type in PREAMBLE_NODES or _is_definition(node))


def _is_definition(node) -> bool:
    return classify(node, named=False)[0] in ("type", "function")


def _include_path(node) -> str | None:
    path = node.child_by_field_name("path") if node.type == "preproc_include" else None
    return path.text.decode("utf-8", "replace").strip("<>\"") if path is not None else None


def _includes(root) -> list[str]:
    """The paths the `#include` lines at declaration level name (where the walk meets them), in source order."""
    return [_include_path(node) for node in sorted(_declaration_level(root, _include_path), key=lambda n: n.start_byte)]


def _definitions(root) -> list[tuple]:
    """(start, end, node) of the functions and types tree-sitter found at declaration level, by start."""
    return sorted(((node.start_byte, node.end_byte, node) for node in _declaration_level(root, _is_definition)),
                  key=lambda item: item[:2])


def _declaration_level(root, wanted) -> list:
    """The nodes `wanted` accepts among the root's children and those of the namespaces, extern "C" blocks, #if
    branches and ERROR regions in it (not below a wanted node), found depth-first."""
    found, stack = [], [root]
    while stack:
        for child in stack.pop().children:
            if wanted(child):
                found.append(child)
            elif child.type in WRAPPERS or child.type in CONDITIONALS or child.type in ("ERROR", "declaration_list"):
                stack.append(child)
    return found
