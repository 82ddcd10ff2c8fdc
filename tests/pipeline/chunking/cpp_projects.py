"""Small generated C++ projects with known structure, plus helpers to read chunker output."""

from __future__ import annotations

import json
from pathlib import Path

import tree_sitter_cpp
from tree_sitter import Language, Parser

STD_HEADERS = Path("/usr/include/c++/12/bits")
# A bounded, varied slice of the real standard library: templates, classes, macros, #if soup.
STD_SUBSET = ["stl_pair.h", "stl_vector.h", "vector.tcc", "stl_list.h", "list.tcc", "stl_algobase.h",
              "unique_ptr.h", "char_traits.h", "stl_heap.h", "stl_stack.h"]

# two classes each naming the other as base (their names resolve so): ordering them must force one first
CYCLE_OF_BASES = """struct Left : Right {
  int left;
};
struct Right : Left {
  int right;
};
"""

LAYERS = {
    # base.h: the root of an inheritance chain; the derived classes live in other files
    "base.h": """#pragma once
#include <string>
namespace shapes {
/// The root of the hierarchy.
struct Base {
  virtual ~Base() = default;
  virtual int area() const { return 0; }
};
}  // namespace shapes
""",
    "middle.h": """#pragma once
#include "base.h"
namespace shapes {
// A middle layer: derives from Base.
struct Middle : Base {
  int width = 2;
  int area() const override { return width * 2; }
};
}
""",
    "derived.h": """#pragma once
#include "middle.h"
namespace shapes {
/** The most derived type. */
struct Derived : Middle {
  int height = 3;
  int area() const override { return width * height; }
};
}
""",
    "calls.cpp": """#include "derived.h"
#include <cstdio>
#define SQUARE(x) ((x) * (x))

int leaf_value(int x);
int middle_value(int x);

/// Entry point of the call chain: calls middle_value.
int top_value(int x) {
  shapes::Derived d;
  return middle_value(x) + d.area();
}

// middle_value calls leaf_value.
int middle_value(int x) {
  return leaf_value(x) * 2;
}

/* leaf_value calls nothing. */
int leaf_value(int x) {
  return SQUARE(x);
}

// ping and pong call each other: a cycle.
int pong(int n);
int ping(int n) { return n <= 0 ? 0 : pong(n - 1); }
int pong(int n) { return n <= 0 ? 1 : ping(n - 1); }

namespace util {
namespace detail {
template <typename T>
T clamp_value(T v, T lo, T hi) {
  return v < lo ? lo : (v > hi ? hi : v);
}
}  // namespace detail
int clamp_int(int v) { return detail::clamp_value(v, 0, 10) + helper_from_other_file(v); }
}  // namespace util
""",
    "other.cpp": """#include "derived.h"
// Defined here, called from calls.cpp: only cross-file modes bring it along.
int helper_from_other_file(int v) {
  return deeper_helper(v) + 1;
}
int deeper_helper(int v) { return v * 3; }
// defined in two files: ambiguous, never pulled across files
int twice(int v) { return v; }
""",
    "third.cpp": """int twice(int v) { return v + v; }
int uses_twice(int v) { return twice(v) + helper_from_other_file(v); }
""",
}


def write_layers(root: Path) -> Path:
    """One project 'shapes' with the files above; returns the project-dirs root."""
    project = root / "shapes"
    project.mkdir(parents=True)
    for name, text in LAYERS.items():
        (project / name).write_text(text)
    return root


def write_projects(root: Path, cycle: bool = False) -> Path:
    """Projects app -> lib -> core by #include (app < core < lib by name, so order must come from includes)."""
    files = {
        "core/include/core/math.h": "#pragma once\nint core_add(int a, int b) { return a + b; }\n",
        "lib/include/lib/api.h": ('#pragma once\n#include "core/math.h"\n'
                                  "int lib_sum(int a) { return core_add(a, 1); }\n"),
        "app/src/main.cpp": '#include "lib/api.h"\nint main() { return lib_sum(41); }\n',
    }
    if cycle:
        files["core/include/core/back.h"] = '#include "app/app.h"\nint core_back() { return 0; }\n'
        files["app/src/app/app.h"] = "int app_api() { return 1; }\n"
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def read_docs(path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


_parser = Parser(Language(tree_sitter_cpp.language()))


def function_texts(source: str) -> list[str]:
    """Texts of every function_definition node anywhere in the file (methods in classes included)."""
    data = source.encode("utf-8")
    found, stack = [], [_parser.parse(data).root_node]
    while stack:
        node = stack.pop()
        if node.type == "function_definition":
            found.append(data[node.start_byte:node.end_byte].decode("utf-8"))
        stack.extend(node.children)
    return found


def write_jsonl(path: Path, texts: list[str], key: str = "path") -> Path:
    with open(path, "w", encoding="utf-8") as f:
        for i, text in enumerate(texts):
            f.write(json.dumps({"text": text, key: f"f{i}.cpp"}) + "\n")
    return path
