"""Compilable mode: each partial or explicit specialization is a type of its own, after its primary template and
after its own bases, and a class is never placed before its base to break a cycle (issue 31). Modelled on fmt,
whose macros (FMT_BEGIN_NAMESPACE, FMT_CONSTEXPR before a constructor) send base.h and ostream.h to the brace
fallback, where a class used to be named after the largest member function tree-sitter found in it:
- ostream.h: `formatter<streamed_view<T>>` derives from `basic_ostream_formatter`, which derives from another
  specialization of `formatter` (`formatter<basic_string_view<Char>>`, in base.h);
- base-test.cc: a test type, `mock_buffer`, derives from a library template, `fmt::detail::buffer<T>`.
"""

import re

import pytest
from cpp_projects import CYCLE_OF_BASES, read_docs

from nanodata.pipeline.chunkbuild import chunk_to_jsonl
from nanodata.pipeline.chunking.graphs import topo_order
from nanodata.pipeline.chunking.parse import parse_units

BASE_H = r"""#pragma once
#include <stddef.h>
#define FMT_BEGIN_NAMESPACE namespace fmt { inline namespace v11 {
#define FMT_END_NAMESPACE }}
#define FMT_BEGIN_EXPORT
#define FMT_END_EXPORT
#define FMT_CONSTEXPR constexpr
#define FMT_CONSTEXPR20
#ifdef NDEBUG
#  define FMT_ASSERT(condition, message) ((void)(condition), (void)(message))
#else
#  define FMT_ASSERT(condition, message)            \
    ((condition) /* a failed assertion reports */   \
         ? (void)0                                  \
         : ::fmt::assert_fail(__FILE__, __LINE__, (message)))
#endif

FMT_BEGIN_NAMESPACE
// Reports a failed FMT_ASSERT and aborts.
void assert_fail(const char* file, int line, const char* message);

namespace detail {
/// A contiguous memory buffer with an optional growing ability.
template <typename T> class buffer {
 private:
  T* ptr_;
  size_t size_;
  size_t capacity_;

 protected:
  // A buffer over `p`, full: pushing more needs a buffer with room.
  FMT_CONSTEXPR buffer(T* p, size_t sz) noexcept
      : ptr_(p), size_(sz), capacity_(sz) {
    if (sz == 0) ptr_ = nullptr;
  }

  constexpr buffer(T* p = nullptr, size_t sz = 0,
                   size_t cap = 0) noexcept
      : ptr_(p), size_(sz), capacity_(cap) {}

  FMT_CONSTEXPR20 ~buffer() = default;
  buffer(buffer&&) = default;

  /// Sets the buffer data and capacity.
  FMT_CONSTEXPR void set(T* buf_data, size_t buf_capacity) noexcept {
    ptr_ = buf_data;
    capacity_ = buf_capacity;
  }

 public:
  auto begin() noexcept -> T* { return ptr_; }
  auto end() noexcept -> T* { return ptr_ + size_; }
  constexpr auto size() const noexcept -> size_t { return size_; }
  FMT_CONSTEXPR void push_back(const T& value) { ptr_[size_++] = value; }

  /// Returns the capacity of this buffer.
  constexpr auto capacity() const noexcept -> size_t { return capacity_; }

  /// Returns a pointer to the buffer data (not null-terminated).
  FMT_CONSTEXPR auto data() noexcept -> T* { return ptr_; }
  FMT_CONSTEXPR auto data() const noexcept -> const T* { return ptr_; }

  /// Clears this buffer.
  FMT_CONSTEXPR void clear() { size_ = 0; }

  // Tries resizing the buffer to contain `count` elements. If T is a POD type
  // the new elements may not be initialized.
  FMT_CONSTEXPR void try_resize(size_t count) {
    try_reserve(count);
    size_ = count <= capacity_ ? count : capacity_;
  }

  // Tries increasing the buffer capacity to `new_capacity`. It can increase the
  // capacity by a smaller amount than requested but guarantees there is space
  // for at least one additional element either by increasing the capacity or by
  // flushing the buffer if it is full.
  FMT_CONSTEXPR void try_reserve(size_t new_capacity) {
    if (new_capacity > capacity_) FMT_ASSERT(false, "cannot grow a fixed buffer");
  }

  /// Appends data to the end of the buffer.
  template <typename U>
  FMT_CONSTEXPR void append(const U* begin, const U* end) {
    while (begin != end) {
      auto count = static_cast<size_t>(end - begin);
      try_reserve(size_ + count);
      auto free_cap = capacity_ - size_;
      if (free_cap < count) count = free_cap;
      // A loop is faster than memcpy on small sizes.
      T* out = ptr_ + size_;
      for (size_t i = 0; i < count; ++i) out[i] = begin[i];
      size_ += count;
      begin += count;
    }
  }

  template <typename Idx> FMT_CONSTEXPR auto operator[](Idx index) -> T& {
    return ptr_[index];
  }
  template <typename Idx>
  FMT_CONSTEXPR auto operator[](Idx index) const -> const T& {
    return ptr_[index];
  }
};
}  // namespace detail

FMT_BEGIN_EXPORT

// An implementation of std::basic_string_view for pre-C++17.
template <typename Char> class basic_string_view {
 private:
  const Char* data_;
  size_t size_;

 public:
  constexpr basic_string_view(const Char* s, size_t count) noexcept : data_(s), size_(count) {}
  constexpr auto data() const noexcept -> const Char* { return data_; }
  constexpr auto size() const noexcept -> size_t { return size_; }
};

// A formatter for objects of type T.
template <typename T, typename Char = char, typename Enable = void>
struct formatter {
  // A deleted default constructor indicates a disabled formatter.
  formatter() = delete;
};

template <typename Char> struct formatter<basic_string_view<Char>, Char> {
  template <typename Context>
  auto format(basic_string_view<Char> s, Context& ctx) const -> decltype(ctx.out()) {
    auto out = ctx.out();
    for (size_t i = 0; i < s.size(); ++i) *out++ = s.data()[i];
    return out;
  }
};

FMT_END_EXPORT
FMT_END_NAMESPACE
"""

OSTREAM_H = """#pragma once
#include <sstream>
#include "fmt/base.h"

FMT_BEGIN_NAMESPACE
namespace detail {
template <typename T> struct streamed_view {
  const T& value;
};
}  // namespace detail

FMT_BEGIN_EXPORT

// Formats an object of type T that has an overloaded ostream operator<<.
template <typename Char>
struct basic_ostream_formatter : formatter<basic_string_view<Char>, Char> {
  void set_debug_format() = delete;

  template <typename T, typename Context>
  auto format(const T& value, Context& ctx) const -> decltype(ctx.out()) {
    std::basic_ostringstream<Char> output;
    output << value;
    auto text = output.str();
    return formatter<basic_string_view<Char>, Char>::format(
        {text.data(), text.size()}, ctx);
  }
};

using ostream_formatter = basic_ostream_formatter<char>;

template <typename T, typename Char>
struct formatter<detail::streamed_view<T>, Char>
    : basic_ostream_formatter<Char> {
  template <typename Context>
  auto format(detail::streamed_view<T> view, Context& ctx) const
      -> decltype(ctx.out()) {
    return basic_ostream_formatter<Char>::format(view.value, ctx);
  }
};

// Returns a view that formats `value` via an ostream `operator<<`.
template <typename T>
constexpr auto streamed(const T& value) -> detail::streamed_view<T> {
  return {value};
}

FMT_END_EXPORT
FMT_END_NAMESPACE
#endif  // FMT_OSTREAM_H_
"""

BASE_TEST_CC = """#include "fmt/base.h"
#include "gmock/gmock.h"

using testing::_;
using testing::Invoke;

template <typename T> struct mock_buffer final : fmt::detail::buffer<T> {
  MOCK_METHOD(size_t, do_grow, (size_t));

  mock_buffer(T* data = nullptr, size_t buf_capacity = 0) {
    this->set(data, buf_capacity);
    ON_CALL(*this, do_grow(_)).WillByDefault(Invoke([](size_t capacity) {
      return capacity;
    }));
  }
};

TEST(buffer_test, ctor) {
  {
    mock_buffer<int> buffer;
    EXPECT_EQ(nullptr, buffer.begin());
    EXPECT_EQ(static_cast<size_t>(0), buffer.size());
  }
  {
    int data;
    mock_buffer<int> buffer(&data);
    EXPECT_EQ(&data, buffer.begin());
  }
}

TEST(buffer_test, append) {
  int data[4];
  mock_buffer<int> buffer(data, 4);
  int more[] = {1, 2};
  buffer.append(more, more + 2);
  EXPECT_EQ(static_cast<size_t>(2), buffer.size());
}
"""

FILES = {"include/fmt/base.h": BASE_H, "include/fmt/ostream.h": OSTREAM_H, "test/base-test.cc": BASE_TEST_CC}
# the same code with fmt's namespace macros written out, no macro before a member and FMT_ASSERT on one line:
# tree-sitter parses it
PLAIN = {rel: re.sub(r"(?ms)^FMT_(?:BEGIN|END)_EXPORT\n|(?<!#define )\bFMT_CONSTEXPR(?:20)? |#ifdef NDEBUG\n.*?#endif\n",
                     "", text.replace("\nFMT_BEGIN_NAMESPACE\n", "\nnamespace fmt {\n")
                     .replace("\nFMT_END_NAMESPACE\n", "\n}  // namespace fmt\n"))
         for rel, text in FILES.items()}

# (defined first, defined after it): a base, then its derived class; a primary template, then its specialization
PAIRS = [
    ("struct basic_ostream_formatter :", "struct formatter<detail::streamed_view<T>, Char>"),
    ("template <typename T> class buffer {", "struct mock_buffer final"),
    ("struct formatter {", "struct formatter<basic_string_view<Char>, Char> {"),
]


def _chunk(tmp_path, files: dict, max_tokens: int) -> tuple[list[dict], dict]:
    for rel, text in files.items():
        path = tmp_path / "trees" / "fmt" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    summary = chunk_to_jsonl(tmp_path / "out.jsonl", project_dirs=[tmp_path / "trees"], mode="compilable",
                             max_tokens=max_tokens, dedup="exact")  # every file's docs, near-copies too
    return read_docs(tmp_path / "out.jsonl"), summary


@pytest.mark.parametrize("files", ["macros", "plain"])
@pytest.mark.parametrize("max_tokens", [256, 512, 2048, 4096])
def test_specializations_and_test_types_after_their_bases(tmp_path, max_tokens, files):
    docs, summary = _chunk(tmp_path, FILES if files == "macros" else PLAIN, max_tokens)
    together, wrong = dict.fromkeys(PAIRS, 0), []
    for text in (d["text"] for d in docs if d["kind"] != "split"):
        for first, then in PAIRS:
            if first in text and then in text:
                together[(first, then)] += 1
                if text.index(first) > text.index(then):
                    wrong.append((first, then))
    assert not wrong
    # the order was checked, not just absent: each pair meets where a doc can hold both
    assert together[PAIRS[0]], together
    if max_tokens >= 2048:
        assert all(together.values()), together
    assert summary["fidelity"]["total"]["type_cycles"] == 0


def test_plain_files_are_parsed():
    for rel, text in PLAIN.items():
        assert not re.search(r"(?m)^FMT_|[^ ]FMT_CONSTEXPR", text)
        assert not parse_units(text, lambda texts: [len(t) for t in texts], split_bytes=2048).parse_error_regions, rel


def test_brace_fallback_names_classes_as_types():
    """base.h and ostream.h are laid out from their braces; their classes are types (not the member function
    tree-sitter found largest), a specialization marked as one, with its bases."""
    count = lambda texts: [len(t) for t in texts]  # noqa: E731
    for text, wanted in ((BASE_H, {"buffer", "basic_string_view", "formatter"}),
                         (OSTREAM_H, {"basic_ostream_formatter", "formatter"})):
        for split_bytes in (0, 2048):  # (a larger budget groups small classes with what is around them)
            fu = parse_units(text, count, split_bytes=split_bytes)
            assert fu.parse_error_regions == 1
            assert {u.name for u in fu.units if u.kind == "type"} == wanted
            assert not {u.name for u in fu.units if u.kind == "function"} & {"append", "format"}
    fu = parse_units(OSTREAM_H, count, split_bytes=2048)
    [special] = [u for u in fu.units if u.kind == "type" and u.name == "formatter"]
    assert special.specialization and special.bases == ("basic_ostream_formatter",)


def test_tree_records_bases_and_specializations():
    fu = parse_units("""template <typename T, typename C = char> struct formatter {};
template <typename C> struct base_formatter : formatter<const C*, C> {};
template <typename T> struct formatter<view<T>, char> final : public base_formatter<char>, fmt::detail::tag {};
class plain : a::B<int>::C { struct inner : D {}; };
""", lambda texts: [len(t) for t in texts])
    types = {(u.name, u.specialization): u.bases for u in fu.units if u.kind == "type"}
    assert types == {("formatter", False): (), ("base_formatter", False): ("formatter",),
                     ("formatter", True): ("base_formatter", "tag"), ("plain", False): ("C", "D")}


def test_required_edges_break_cycles_elsewhere():
    """A specialization whose base names it back (by its template's name): the cycle is broken by placing the
    base first, though the specialization comes first in the base order; a cycle of required edges alone is
    broken at one of its nodes, which is reported."""
    nodes = ["special", "base", "primary"]
    deps = {"special": ["base", "primary"], "base": ["special"]}
    required = {"special": ["base", "primary"]}
    assert topo_order(nodes, deps) == ["primary", "special", "base"]
    forced: list = []
    assert topo_order(nodes, deps, required, forced) == ["primary", "base", "special"]
    assert forced == []
    # a waits on the cycle b <-> c: b, on it, goes first (a is earlier, but not on the cycle)
    nodes, forced = ["a", "b", "c"], []
    required = {"a": ["b"], "b": ["c"], "c": ["b"]}
    assert topo_order(nodes, required) == ["a", "b", "c"]
    assert topo_order(nodes, required, required, forced) == ["b", "a", "c"]
    assert forced == ["b"]


def test_cycle_of_bases_is_reported(tmp_path):
    """Two classes each naming the other as base (their names resolve so): one must go first; the summary says so."""
    files = {"cycle.cc": CYCLE_OF_BASES + """int use() {
  Left l;
  Right r;
  return l.left + r.right;
}
"""}
    docs, summary = _chunk(tmp_path, files, 2048)
    total = summary["fidelity"]["total"]
    assert total["type_cycles"] == 1
    assert total["type_cycle_examples"] == ["fmt/cycle.cc: Left before Right"]
    assert summary["fidelity"]["by_project"]["fmt"]["type_cycle_examples"] == total["type_cycle_examples"]


# spdlog's bundled fmt core.h: small definitions side by side in a file laid out from its braces. Runs of small
# members were one unit, named after one definition, which hid the others from the order: `unformattable_const`
# came before `unformattable`, the specialization `is_named_arg<named_arg<...>>` before its primary template.
# Here (placed in base.h, which falls back) `count` and `unformattable` made one unit, a function that `mapped`
# calls, so `mapped`'s doc placed the type `unformattable_const` first, `count`'s unit and its base after it.
CORE_DEFS = r"""template <typename Char> struct named_arg_info {
  const Char* name;
  int id;
};
template <typename Char, typename T> struct named_arg {
  const Char* name;
  const T& value;
};
template <typename Char>
inline void init_named_args(named_arg_info<Char>*, int, int) {}
template <typename T> struct is_named_arg : std::false_type {};
template <typename T, typename Char>
struct is_named_arg<named_arg<Char, T>> : std::true_type {};
template <bool B = false> constexpr auto count() -> int {
  // the named arguments: one for each B that is true, none otherwise
  return B ? 1 : 0;
}
struct unformattable {};
struct unformattable_char : unformattable {};
struct unformattable_const : unformattable {};
struct unformattable_pointer : unformattable {};
template <typename T> auto map(T* v) -> unformattable_pointer { return {}; }
template <typename T> auto map(const T& v) -> unformattable_const { return {}; }
template <typename T> auto named(const T& arg, const unformattable_char* none) -> bool {
  return is_named_arg<T>::value && none == nullptr;
}
template <typename T> auto mapped(const T& arg, const unformattable_const* none) -> bool {
  return count<true>() == 1 && none == nullptr;
}
"""
CORE_H = BASE_H.replace("namespace detail {\n", "namespace detail {\n" + CORE_DEFS, 1)
CORE_PAIRS = [("struct unformattable {};", "struct unformattable_const : unformattable"),
              ("struct unformattable {};", "struct unformattable_pointer : unformattable"),
              ("struct unformattable {};", "struct unformattable_char : unformattable"),
              ("struct is_named_arg : std::false_type", "struct is_named_arg<named_arg<Char, T>>")]


@pytest.mark.parametrize("max_tokens", [128, 192, 256, 512, 2048])
def test_fallback_keeps_small_definitions_apart(tmp_path, max_tokens):
    count = lambda texts: [len(t) for t in texts]  # noqa: E731
    fu = parse_units(CORE_H, count, split_bytes=max_tokens)
    assert fu.parse_error_regions == 1  # laid out from its braces
    types = [u.name for u in fu.units if u.kind == "type"]
    for name in ("unformattable", "unformattable_char", "unformattable_const", "unformattable_pointer"):
        assert types.count(name) == 1, types
    assert types.count("is_named_arg") == 2, types
    docs, summary = _chunk(tmp_path, {"include/fmt/core.h": CORE_H}, max_tokens)
    together = dict.fromkeys(CORE_PAIRS, 0)
    for text in (d["text"] for d in docs if d["kind"] != "split"):
        for first, then in CORE_PAIRS:
            if first in text and then in text:
                together[(first, then)] += 1
                assert text.index(first) < text.index(then), (first, then, text)
    assert all(together.values()), together
    assert summary["fidelity"]["total"]["type_cycles"] == 0
