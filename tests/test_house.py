"""The house rules the tree keeps: packages by layer, a pure core, small modules.

Read from the source with ast (no third-party tool, nothing imported), so a rule
broken anywhere in fleet/ fails here with the file and line that broke it.
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path

FLEET = Path(__file__).resolve().parents[1] / "fleet"
PACKAGES = sorted(p.name for p in FLEET.iterdir() if p.is_dir() and (p / "__init__.py").exists())

# Who may import whom, bottom up (see docs/design-decisions.md, "The house").
MAY_IMPORT = {
    "core": set(),
    "wire": {"core"},
    "node": {"core", "wire"},
    "site": {"core", "wire", "node"},
    "report": {"core", "wire"},
    "control": {"core", "wire", "node", "site"},
}

MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 60
WHOLE_MARK = "better whole"  # a module docstring sentence that says why a long function stays whole


def modules() -> list[Path]:
    return sorted(p for p in FLEET.rglob("*.py") if "__pycache__" not in p.parts)


def package_of(path: Path) -> str:
    rel = path.relative_to(FLEET).parts
    return rel[0] if len(rel) > 1 else ""  # "" for fleet/cli.py, fleet/__init__.py ...


def imports(path: Path) -> list[tuple[int, str]]:
    """Every module an import statement names, absolute, with its line."""
    tree = ast.parse(path.read_text(), str(path))
    here = ["fleet", *path.relative_to(FLEET).with_suffix("").parts]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = ".".join(here[:len(here) - node.level] + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            out.append((node.lineno, base))
            out += [(node.lineno, f"{base}.{a.name}") for a in node.names]
    return out


def fleet_package(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "fleet" or len(parts) < 2:
        return None
    return parts[1] if parts[1] in PACKAGES else None


def test_every_package_has_a_place_in_the_layer_table():
    assert set(PACKAGES) == set(MAY_IMPORT), "a package was added or removed: give it its place in MAY_IMPORT"


def test_the_core_imports_only_the_standard_library_and_itself():
    # tomli is tomllib before Python 3.11, imported only there.
    stdlib = set(sys.stdlib_module_names) | {"__future__", "tomli"}
    bad = []
    for path in modules():
        if package_of(path) != "core":
            continue
        for line, name in imports(path):
            top = name.split(".")[0]
            if top == "fleet":
                if name.split(".")[1:2] != ["core"]:
                    bad.append(f"{path.relative_to(FLEET.parent)}:{line}: {name}")
            elif top not in stdlib:
                bad.append(f"{path.relative_to(FLEET.parent)}:{line}: {name} (not the standard library)")
    assert not bad, "fleet/core must stay pure:\n" + "\n".join(bad)


def test_no_package_imports_one_above_it():
    bad = []
    for path in modules():
        pkg = package_of(path)
        if not pkg:
            continue
        for line, name in imports(path):
            other = fleet_package(name)
            if other and other != pkg and other not in MAY_IMPORT[pkg]:
                bad.append(f"{path.relative_to(FLEET.parent)}:{line}: {pkg} imports {name}")
    assert not bad, "imports against the layers:\n" + "\n".join(sorted(set(bad)))


def test_no_two_packages_import_each_other_in_a_circle():
    edges: dict[str, set[str]] = defaultdict(set)
    for path in modules():
        pkg = package_of(path)
        for _, name in imports(path):
            other = fleet_package(name)
            if pkg and other and other != pkg:
                edges[pkg].add(other)
    cycles = []

    def visit(node: str, trail: list[str]) -> None:
        for nxt in sorted(edges[node]):
            if nxt in trail:
                cycles.append(" -> ".join(trail[trail.index(nxt):] + [nxt]))
            elif len(trail) < len(PACKAGES):
                visit(nxt, trail + [nxt])

    for pkg in PACKAGES:
        visit(pkg, [pkg])
    assert not cycles, "packages in a circle:\n" + "\n".join(sorted(set(cycles)))


def test_the_layer_check_sees_a_circle_and_an_upward_import(tmp_path, monkeypatch):
    # The checks above must be able to fail: a tree with core -> report -> core.
    fake = tmp_path / "fleet"
    for pkg in PACKAGES:
        (fake / pkg).mkdir(parents=True)
        (fake / pkg / "__init__.py").write_text("")
    (fake / "core" / "a.py").write_text("from fleet.report import b\n")
    (fake / "report" / "b.py").write_text("from fleet.core import a\n")
    monkeypatch.setattr(sys.modules[__name__], "FLEET", fake)
    for check in (test_no_package_imports_one_above_it, test_no_two_packages_import_each_other_in_a_circle,
                  test_the_core_imports_only_the_standard_library_and_itself):
        try:
            check()
        except AssertionError:
            continue
        raise AssertionError(f"{check.__name__} passed on a tree that breaks it")


def test_no_module_over_500_lines_and_no_function_over_60_unless_its_module_says_why():
    bad = []
    for path in modules():
        text = path.read_text()
        tree = ast.parse(text)
        doc = ast.get_docstring(tree) or ""
        rel = path.relative_to(FLEET.parent)
        lines = text.count("\n")
        if lines > MAX_MODULE_LINES and WHOLE_MARK not in doc:
            bad.append(f"{rel}: {lines} lines")
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES and WHOLE_MARK not in doc:
                    bad.append(f"{rel}:{node.lineno}: {node.name} is {n} lines")
    assert not bad, ("split along a seam, or say in the module docstring why it is " + WHOLE_MARK
                     + ":\n" + "\n".join(bad))


def test_no_two_test_files_share_a_name():
    # tests/ has no packages: pytest refuses to collect a second test module of a name
    # already taken (an "import file mismatch" that fails the whole run).
    seen = defaultdict(list)
    for path in Path(__file__).parent.rglob("test_*.py"):
        seen[path.name].append(str(path.relative_to(Path(__file__).parent)))
    assert not {k: v for k, v in seen.items() if len(v) > 1}
