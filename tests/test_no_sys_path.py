"""Nothing the project ships, drives or tests changes the import path: every module imports
through the installed packages, and no file loads another by its path. Read with `ast` (for
Python) and as text (for the shell drivers), not run."""
from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("convqa", "retrievers", "readers", "phrase_index", "apps")


def _touches_sys_path(path: Path) -> list[int]:
    """Lines of `path` that read or write `sys.path` or load a file as a module."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    lines = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and node.attr == "path"
                and isinstance(node.value, ast.Name) and node.value.id == "sys"):
            lines.append(node.lineno)
        elif isinstance(node, ast.Attribute) and node.attr == "spec_from_file_location":
            lines.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and node.module == "sys" and any(
                alias.name == "path" for alias in node.names):
            lines.append(node.lineno)
    return lines


def _python_files() -> list[Path]:
    files = [path for package in PACKAGES for path in (ROOT / package).rglob("*.py")]
    for folder in ("scripts", "tests", "benchmarks", "examples"):
        files += (ROOT / folder).rglob("*.py")
    return sorted(files)


def test_the_check_sees_a_sys_path_insert(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import sys\nfrom pathlib import Path\n\n"
                   "sys.path.insert(0, str(Path(__file__).parent))\n")
    assert _touches_sys_path(bad) == [4]
    loader = tmp_path / "loader.py"
    loader.write_text("import importlib.util\n"
                      "spec = importlib.util.spec_from_file_location('x', 'x.py')\n")
    assert _touches_sys_path(loader) == [2]


def test_no_module_or_script_touches_sys_path():
    files = _python_files()
    assert len(files) > 100  # the packages were found
    found = {str(path.relative_to(ROOT)): lines for path in files
             if (lines := _touches_sys_path(path))}
    assert found == {}


def test_shell_drivers_neither_set_pythonpath_nor_run_python_files_of_scripts():
    drivers = [path for path in sorted((ROOT / "scripts").iterdir()) if path.suffix == ".sh"]
    assert drivers
    for path in drivers:
        text = path.read_text(encoding="utf-8")
        assert not re.search(r"PYTHONPATH=", text), path.name
        assert not re.search(r"scripts/\w+\.py", text), path.name
