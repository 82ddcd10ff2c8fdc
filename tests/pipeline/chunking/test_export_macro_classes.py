"""`class EXPORT_MACRO Name : public Base {` (leveldb's `class LEVELDB_EXPORT EnvWrapper : public Env`): tree-sitter
reads it as a function (and loses the class's structure); the chunker parses it with the macro blanked
(syntax.parse_tree), so the class has its name, bases and members, and compilable docs put a class deriving from
it after it. The docs keep the macro: only the parse sees the blank."""

from cpp_projects import read_docs

from nanodata.pipeline.chunkbuild import chunk_to_jsonl
from nanodata.pipeline.chunking.pack import counter_for
from nanodata.pipeline.chunking.parse import parse_units

HEADER = """#pragma once
#define MY_EXPORT __attribute__((visibility("default")))
namespace lib {
class MY_EXPORT Env {
 public:
  virtual ~Env();
  virtual int Remove(int f) = 0;
};

class MY_EXPORT EnvWrapper : public Env {
 public:
  int Remove(int f) override { return target_->Remove(f); }

 private:
  Env* target_;
};
}  // namespace lib
"""

TEST = """#include "env.h"
namespace lib {
class FaultEnv : public EnvWrapper {
 public:
  int Remove(int f) override;
};

int FaultEnv::Remove(int f) { return f + 1; }

int Use(FaultEnv* env) { return env->Remove(2); }
}  // namespace lib
"""


def test_a_class_after_an_export_macro_is_a_type_with_its_bases():
    fu = parse_units(HEADER, counter_for("cl100k_base").count_batch, True, 2048)
    types = {u.name: u.bases for u in fu.units if u.kind == "type"}
    assert types == {"Env": (), "EnvWrapper": ("Env",)} and fu.parse_error_regions == 0
    assert fu.whole_text() == HEADER


def test_compilable_puts_the_base_first(tmp_path):
    tree = tmp_path / "tree" / "lib"
    tree.mkdir(parents=True)
    (tree / "env.h").write_text(HEADER)
    (tree / "fault_test.cc").write_text(TEST)
    out = tmp_path / "out.jsonl"
    chunk_to_jsonl(out, project_dirs=[tmp_path / "tree"], mode="compilable", max_tokens=2048, dedup="exact")
    docs = [d["text"] for d in read_docs(out) if "class FaultEnv" in d["text"]]
    assert docs and all(-1 < d.find("class MY_EXPORT Env {") < d.find("class MY_EXPORT EnvWrapper")
                        < d.find("class FaultEnv") for d in docs)
