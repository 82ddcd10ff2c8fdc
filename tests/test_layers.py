"""The package's layers import one way (pyproject.toml's [tool.importlinter] contract, checked by lint-imports),
and the storage layer is a leaf: importing it loads no parquet, torch or higher nanodata module."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint_imports(root: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=root, capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(root)})


def test_the_layer_contract_is_kept():
    result = lint_imports(REPO)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "0 broken" in result.stdout


@pytest.mark.parametrize("module, line", [
    ("nanodata/storage/uri.py", "    from nanodata.dataset import corpus_location\n"),  # upward, inside a function
    ("nanodata/dataset.py", "from nanodata.loader import remote\n"),  # upward, at module level
    ("nanodata/loader/remote.py", "from nanodata.loader import source\n"),  # a cycle between siblings
])
def test_an_upward_import_or_a_cycle_breaks_the_build(tmp_path, module, line):
    """The contract is not vacuous: the same tree with one bad import added fails."""
    copy = tmp_path / "repo"
    shutil.copytree(REPO / "nanodata", copy / "nanodata", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", copy / "pyproject.toml")
    target = copy / module
    source = target.read_text()
    if line.startswith("    "):  # a function-level import: the first function of the module gets it
        head, sep, rest = source.partition("\ndef ")
        name, colon, body = rest.partition(":\n")
        source = f"{head}{sep}{name}{colon}{line}{body}"
    else:
        source = source.replace("\nfrom __future__ import annotations\n",
                                f"\nfrom __future__ import annotations\n{line}", 1)
    target.write_text(source)
    result = lint_imports(copy)
    assert result.returncode != 0 and "BROKEN" in result.stdout, result.stdout[-3000:]


STORAGE_MODULES = sorted(p.stem for p in (REPO / "nanodata" / "storage").glob("*.py") if p.stem != "__init__")


@pytest.mark.parametrize("module", ["nanodata.storage", *(f"nanodata.storage.{m}" for m in STORAGE_MODULES)])
def test_importing_storage_loads_no_parquet_torch_or_higher_layer(module):
    code = (f"import sys, {module}\n"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('pyarrow', 'torch') or "
            "(m.startswith('nanodata.') and not m.startswith(('nanodata.storage', 'nanodata.ranges', 'nanodata.errors'))))\n"
            "print(','.join(bad))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "", f"{module} loads {result.stdout.strip()}"
