"""The suite's shape: no import cycle in `conformance`, a pass package that imports
nothing of the suite, test files that import no other test file, and a public face
(`import conformance`) that stays cheap."""

from __future__ import annotations

import ast
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
# Calls that import the module named by their first argument.
IMPORTING_CALLS = {"import_module", "__import__", "find_spec", "run_module"}


def _modules(package: str) -> dict[str, pathlib.Path]:
    """Dotted module name -> source file, for every module of `package` (subpackages included)."""
    out = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _called_name(func: ast.expr) -> str | None:
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None


def _imports(module: str, path: pathlib.Path, known: set[str]) -> set[str]:
    """The modules `module` imports anywhere in its file: module level, in functions, under
    `if TYPE_CHECKING:`, relative or absolute, or by a constant string (importlib). `from
    package import name` imports `package.name` where that is a module, else `package`."""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            prefix = ".".join(base + ([node.module] if node.module else []))
            for alias in node.names:
                name = f"{prefix}.{alias.name}"
                out.add(name if name in known else prefix)
        elif (isinstance(node, ast.Call) and _called_name(node.func) in IMPORTING_CALLS and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            out.add(node.args[0].value.partition(":")[0])  # "pkg.mod" or a task's "pkg.mod:fn"
    return out


def _import_graph(package: str, node_of=lambda module: module) -> dict[str, set[str]]:
    """Module (or what `node_of` groups it into) -> those of `package` it imports."""
    modules = _modules(package)
    graph: dict[str, set[str]] = {node_of(m): set() for m in modules}
    for module, path in modules.items():
        for name in _imports(module, path, set(modules)):
            while name and name not in modules:  # `import pkg.mod.attr` style: the module it names
                name = name.rpartition(".")[0]
            if name and node_of(name) != node_of(module):
                graph[node_of(module)].add(node_of(name))
    return graph


def _a_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, str] = {}

    def visit(node, path):
        if state.get(node) == "open":
            return path[path.index(node):] + [node]
        if state.get(node) == "done":
            return None
        state[node] = "open"
        for dep in sorted(graph.get(node, ())):
            cycle = visit(dep, path + [node])
            if cycle:
                return cycle
        state[node] = "done"
        return None

    for node in sorted(graph):
        cycle = visit(node, [])
        if cycle:
            return cycle
    return None


def test_no_import_cycle_among_the_suites_modules():
    cycle = _a_cycle(_import_graph("conformance"))
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_no_import_cycle_among_the_suites_packages():
    """The subpackages as wholes (conformance.models, conformance.multiproc, ...): the models
    build on the checking core, which never reaches back into them."""
    cycle = _a_cycle(_import_graph("conformance", lambda module: ".".join(module.split(".")[:2])))
    assert cycle is None, "import cycle between packages: " + " -> ".join(cycle)


def test_the_pass_imports_nothing_of_the_suite_benchmarks_or_tests():
    modules = _modules("bucketing")
    found = {module: sorted(name for name in _imports(module, path, set(modules))
                            if name.partition(".")[0] in ("conformance", "benchmarks", "tests"))
             for module, path in modules.items()}
    imports = {m: names for m, names in found.items() if names}
    assert not imports, imports


def test_no_module_imports_a_test_file():
    """Shared test helpers live in library modules (tests/graphs.py, conformance/codegen.py, ...)."""
    for package in ("conformance", "tests"):
        modules = _modules(package)
        for module, path in modules.items():
            test_files = sorted(name for name in _imports(module, path, set(modules)) if name in modules
                                and name.rpartition(".")[2].startswith(("test_", "conftest")))
            assert not test_files, f"{module} imports {test_files}"


def _modules_loaded_by(code: str) -> list[str]:
    run = subprocess.run([sys.executable, "-c", f"import sys\n{code}\nprint(' '.join(sorted(sys.modules)))"],
                         cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    return run.stdout.split()


def test_importing_the_suite_loads_neither_torch_nor_a_test_file():
    # pytest imports the package for its plugin in every session.
    loaded = _modules_loaded_by("import conformance, conformance.plugin")
    assert not [m for m in loaded if m.partition(".")[0] == "torch"]
    assert [m for m in loaded if m.startswith("conformance")] == ["conformance", "conformance.plugin"]


@pytest.mark.first_release  # imports torch in a fresh process; the same on every release
def test_the_public_names_come_from_library_modules():
    loaded = _modules_loaded_by("import conformance\nfor name in conformance.__all__: getattr(conformance, name)")
    tests_of_the_suite = [m for m in loaded if m.startswith(("conformance.multiproc", "conformance.codegen_checks"))
                          or m.rpartition(".")[2].startswith("test_")]
    assert not tests_of_the_suite


def test_the_public_names():
    import conformance
    import conformance.multiproc
    from conformance import adapters, catalog, unittest_front

    assert {"PassAdapter", "Case", "register", "FxConformance", "InductorConformance"} <= set(conformance.__all__)
    assert conformance.PassAdapter is adapters.PassAdapter and conformance.register is catalog.register
    assert conformance.FxConformance is unittest_front.FxConformance
    assert conformance.multiproc.FxConformance is conformance.FxConformance  # the path unittest files used
    builtin = {name: getattr(conformance, name) for name in conformance.__all__
               if isinstance(getattr(conformance, name), adapters.PassAdapter)}
    assert sorted(a.name for a in builtin.values()) == sorted(adapters.BUILTIN)
