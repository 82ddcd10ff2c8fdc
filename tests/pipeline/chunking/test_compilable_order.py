"""Compilable mode: a class comes after the definition of its base, and a partial or explicit specialization
after the definition of the primary template it specializes, in every doc that holds both: also when the
function's types are all a fallback doc keeps (named types only), and when the primary is defined after the
specialization in the source or the base lives in a file sorted after the derived class's."""

import pytest
from cpp_projects import read_docs

from nanodata.pipeline.chunkbuild import chunk_to_jsonl

BIG = "\n".join(f"  total += {i} * (total ^ {i * 7});" for i in range(120))

FILES = {
    # re2: the base in a header named after the file that derives from it
    "z_regexp_generator.h": """namespace re2 {
class RegexpGenerator {
 public:
  explicit RegexpGenerator(int maxatoms) : maxatoms_(maxatoms) {}
  virtual ~RegexpGenerator() {}
  void Generate() { HandleRegexp(maxatoms_); }
  virtual void HandleRegexp(int regexp) = 0;
 private:
  int maxatoms_;
};
}  // namespace re2
""",
    "possible_match_test.cc": """#include "z_regexp_generator.h"
namespace re2 {
class PossibleMatchTester : public RegexpGenerator {
 public:
  explicit PossibleMatchTester(int maxatoms) : RegexpGenerator(maxatoms), regexps_(0) {}
  void HandleRegexp(int regexp) override { regexps_ += regexp; }
  int regexps() const { return regexps_; }
 private:
  int regexps_;
};
static int Exhaust(int total) {
""" + BIG + """
  return total;
}
int RunTester() {
  PossibleMatchTester tester(3);
  RegexpGenerator* generator = &tester;
  generator->Generate();
  return Exhaust(tester.regexps());
}
}  // namespace re2
""",
    # fmt: a partial specialization deriving from a template base of another file, defined before its primary
    "z_buffer.h": """namespace fmt {
template <typename T> class buffer {
 public:
  T* ptr_ = nullptr;
  unsigned size_ = 0;
  virtual void grow(unsigned capacity) = 0;
  void push_back(const T& value) { ptr_[size_++] = value; }
};
}  // namespace fmt
""",
    "format.h": """#include "z_buffer.h"
namespace fmt {
struct fixed_buffer_traits {
  unsigned limit(unsigned size) { return size; }
};
template <typename OutputIt, typename T, typename Traits = fixed_buffer_traits> class iterator_buffer;
template <typename T>
class iterator_buffer<T*, T, fixed_buffer_traits> : public fixed_buffer_traits, public buffer<T> {
 public:
  explicit iterator_buffer(T* out) { this->ptr_ = out; }
  void grow(unsigned) override {}
  T* out() { return this->ptr_; }
};
template <typename OutputIt, typename T, typename Traits>
class iterator_buffer : public Traits, public buffer<T> {
 public:
  OutputIt out_;
  void grow(unsigned) override {}
};
template <typename T> struct formatter;
template <> struct formatter<int> {
  int format(int value) { return value + 1; }
};
template <typename T> struct formatter {
  int format(const T&) { return 0; }
};
static int Pad(int total) {
""" + BIG + """
  return total;
}
int write_ints(int* out) {
  iterator_buffer<int*, int, fixed_buffer_traits> buf(out);
  buf.push_back(1);
  formatter<int> f;
  return Pad(f.format(*buf.out()));
}
}  // namespace fmt
""",
}

# (defined first, defined after it): a base, then its derived class; a primary template, then its specialization
PAIRS = [
    ("class RegexpGenerator {", "class PossibleMatchTester : public RegexpGenerator {"),
    ("template <typename T> class buffer {", "class iterator_buffer<T*, T, fixed_buffer_traits>"),
    ("class iterator_buffer : public Traits, public buffer<T> {", "class iterator_buffer<T*, T, fixed_buffer_traits>"),
    ("template <typename T> struct formatter {", "template <> struct formatter<int> {"),
]


@pytest.mark.parametrize("max_tokens", [256, 400, 4096])
def test_bases_and_primary_templates_come_first(tmp_path, max_tokens):
    project = tmp_path / "trees" / "lib"
    project.mkdir(parents=True)
    for name, text in FILES.items():
        (project / name).write_text(text)
    chunk_to_jsonl(tmp_path / "out.jsonl", project_dirs=[tmp_path / "trees"], mode="compilable",
                   max_tokens=max_tokens, dedup="exact")  # the order of every file's docs, near-copies too
    docs = [d["text"] for d in read_docs(tmp_path / "out.jsonl") if d["kind"] != "split"]
    together = {pair: 0 for pair in PAIRS}
    for text in docs:
        for first, then in PAIRS:
            if first in text and then in text:
                together[(first, then)] += 1
                assert text.index(first) < text.index(then), (first, then, text)
    if max_tokens == 4096:  # every pair meets in some doc: the order was checked, not just absent
        assert all(together.values()), together


def test_fallback_to_named_types_orders_them(tmp_path):
    """At 400 tokens RunTester's doc is the last fallback (its callee is too big): preamble, the types it
    names (derived first in its text), the function. The base still comes first."""
    project = tmp_path / "trees" / "lib"
    project.mkdir(parents=True)
    for name, text in FILES.items():
        (project / name).write_text(text)
    chunk_to_jsonl(tmp_path / "out.jsonl", project_dirs=[tmp_path / "trees"], mode="compilable", max_tokens=400,
                   dedup="exact")
    [doc] = [d["text"] for d in read_docs(tmp_path / "out.jsonl") if "int RunTester() {" in d["text"]]
    assert "static int Exhaust(int total) {" not in doc
    assert doc.index("class RegexpGenerator {") < doc.index("class PossibleMatchTester") < doc.index("int RunTester")
