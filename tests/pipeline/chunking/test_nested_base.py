"""Compilable mode: a type named through a qualified / nested name brings its enclosing type first.

Modelled on leveldb db/dumpfile.cc, where `class CorruptionReporter : public log::Reader::Reporter`
derives from a class nested in `log::Reader` (declared in db/log_reader.h): `Reporter` has no
unit of its own, so the dependency is `Reader`, which must be emitted before the derived class.
"""

import pytest
from cpp_projects import read_docs, write_jsonl

from nanodata.pipeline.chunkbuild import chunk_to_jsonl
from nanodata.pipeline.chunking.parse import parse_units

LOG_READER_H = """#pragma once
#include <cstdint>
#include "leveldb/status.h"
namespace leveldb {
class SequentialFile;
namespace log {
// Reads log records written by a log::Writer.
class Reader {
 public:
  // Interface for reporting errors.
  class Reporter {
   public:
    virtual ~Reporter();
    // Some corruption was detected.  "bytes" is the approximate number
    // of bytes dropped due to the corruption.
    virtual void Corruption(size_t bytes, const Status& status) = 0;
  };
  Reader(SequentialFile* file, Reporter* reporter, bool checksum, uint64_t initial_offset);
  ~Reader();
  bool ReadRecord(Slice* record, std::string* scratch);
 private:
  SequentialFile* const file_;
  Reporter* const reporter_;
};
}  // namespace log
}  // namespace leveldb
"""

STATUS_H = """#pragma once
#include <string>
namespace leveldb {
class Status {
 public:
  Status() noexcept : state_(nullptr) {}
  std::string ToString() const;
 private:
  const char* state_;
};
}  // namespace leveldb
"""

TEMPLATES_H = """#pragma once
namespace leveldb {
template <typename T>
struct Holder {
  struct Nested { T value; };
  typedef T value_type;
};
}  // namespace leveldb
"""

DUMPFILE_CC = """#include "leveldb/dumpfile.h"
#include <cstdio>
#include "db/log_reader.h"
#include "leveldb/templates.h"
namespace leveldb {
namespace {
// Notified when log reader encounters corruption.
class CorruptionReporter : public log::Reader::Reporter {
 public:
  void Corruption(size_t bytes, const Status& status) override {
    std::string r = "corruption: ";
    r.append(status.ToString());
    dst_->Append(r);
  }
  WritableFile* dst_;
};

// A base named through a template: Holder<int>::Nested.
struct IntNested : public Holder<int>::Nested {
  int twice() const { return value * 2; }
};

// Only the derived reporter is named here: Reader comes in through the nested base alone.
int CountCorruptions(WritableFile* dst) {
  CorruptionReporter reporter;
  reporter.dst_ = dst;
  return 0;
}

// Print contents of a log file, one line per record (leveldb's DumpLog).
Status DumpLog(Env* env, const std::string& fname, WritableFile* dst) {
  SequentialFile* file;
  CorruptionReporter reporter;
  reporter.dst_ = dst;
  log::Reader reader(file, &reporter, true, 0);
  return Status();
}

int UseNested() {
  IntNested n;
  typename Holder<int>::value_type v = n.twice();
  return v;
}
}  // namespace
}  // namespace leveldb
"""

# dumpfile.cc sorts (and is listed) before the headers: source order alone would put
# CorruptionReporter ahead of Reader.
FILES = {"db/dumpfile.cc": DUMPFILE_CC, "db/log_reader.h": LOG_READER_H,
         "include/leveldb/status.h": STATUS_H, "include/leveldb/templates.h": TEMPLATES_H}


def _run(tmp_path, source: str) -> list[dict]:
    out = tmp_path / "out.jsonl"
    if source == "project_dirs":
        root = tmp_path / "projects"
        for rel, text in FILES.items():
            path = root / "leveldb" / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        chunk_to_jsonl(out, project_dirs=[root], mode="compilable", max_tokens=2048)
    else:
        src = write_jsonl(tmp_path / "in.jsonl", list(FILES.values()))
        chunk_to_jsonl(out, inputs=[src], mode="compilable", max_tokens=2048)
    return read_docs(out)


@pytest.mark.parametrize("source", ["project_dirs", "inputs"])
def test_nested_base_brings_enclosing_class_first(tmp_path, source):
    docs = _run(tmp_path, source)
    holders = [d["text"] for d in docs if "class CorruptionReporter : public log::Reader::Reporter {" in d["text"]]
    roots = {name for name in ("int CountCorruptions(", "Status DumpLog(") for t in holders if name in t}
    assert roots == {"int CountCorruptions(", "Status DumpLog("}
    for text in holders:
        assert "class Reader {" in text, text
        assert "class Status {" in text
        reader, reporter = text.index("class Reader {"), text.index("class CorruptionReporter")
        assert text.index("class Status {") < reader < reporter
        # Reader is re-wrapped in its own namespaces, closed before the derived class
        assert "namespace log {" in text[:reader]


@pytest.mark.parametrize("source", ["project_dirs", "inputs"])
def test_template_scope_brings_its_template_first(tmp_path, source):
    docs = _run(tmp_path, source)
    (text,) = [d["text"] for d in docs if "int UseNested() {" in d["text"]]
    assert text.index("struct Holder {") < text.index("struct IntNested") < text.index("int UseNested() {")


def test_types_include_scopes_in_first_occurrence_order():
    fu = parse_units("""
class R : public a::B::C {};
template <typename T> struct S : Outer<T>::Inner {};
void f() { typename X::Y y; ::g::H h; auto k = Q::kValue; W::Z::make(); }
void R::g() { N1::N2::T t; }
""", lambda texts: [len(t) for t in texts])
    units = {u.name: u for u in fu.units}
    assert units["R"].types == ("a", "B", "C")  # `a` (a namespace) resolves to no type
    assert units["S"].types == ("T", "Outer", "Inner")
    assert units["f"].types == ("X", "Y", "g", "H", "Q", "W", "Z")
    assert units["g"].types == ("R", "N1", "N2", "T")
    # namespace names land in types too: they resolve to no type definition, and only a
    # qualified name's scope counts (never a namespace definition's own name)
    ns = parse_units("namespace a::b { void f() { c::D d; } }\nnamespace x = a::b;\n",
                     lambda texts: [len(t) for t in texts])
    assert [u.types for u in ns.units if u.name == "f"] == [("c", "D")]
