"""The package's shape: no import cycles, a cache key over every source file of the pass,
new nodes that point at the user's code, no dependence on an ambient fake mode."""

import ast
import os

import torch
from torch._inductor.custom_graph_pass import get_hash_for_files
from torch._subclasses.fake_tensor import FakeTensorMode

import bucketing.core as bc

from .graphs import ag, rs, trace

bf16, f32 = torch.bfloat16, torch.float32
PACKAGE = os.path.dirname(bc.__file__)


def _sources() -> dict[str, str]:
    """Module name relative to the package ("plan.assign"; a package by its own
    name, "plan") -> its path, every depth."""
    out = {}
    for root, _, files in os.walk(PACKAGE):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(root, name)
                parts = os.path.relpath(path, PACKAGE)[:-3].split(os.sep)
                if parts[-1] == "__init__":
                    parts = parts[:-1] or ["__init__"]
                out[".".join(parts)] = path
    return dict(sorted(out.items()))


def _package_imports() -> dict[str, set[str]]:
    """Module name -> the package modules it imports (relative imports, any
    depth in the file, `if TYPE_CHECKING:` blocks included)."""
    sources = _sources()
    graph = {}
    for module, path in sources.items():
        is_package = path.endswith("__init__.py")
        here = [] if module == "__init__" else module.split(".")
        base_parts = here if is_package else here[:-1]
        deps = set()
        for node in ast.walk(ast.parse(open(path).read())):
            if isinstance(node, ast.ImportFrom) and node.level >= 1:
                base = base_parts[:len(base_parts) - (node.level - 1)]
                names = [node.module] if node.module else [a.name for a in node.names]
                for name in names:
                    target = ".".join(base + name.split("."))
                    deps.add(target if target in sources else ".".join(base) or "__init__")
        graph[module] = deps - {module}
    return graph
def test_the_package_import_graph_has_no_cycle():
    graph = _package_imports()
    state: dict[str, str] = {}

    def visit(module, path):
        if state.get(module) == "done":
            return
        assert state.get(module) != "open", f"import cycle: {' -> '.join(path + [module])}"
        state[module] = "open"
        for dep in sorted(graph.get(module, ())):
            visit(dep, path + [module])
        state[module] = "done"

    for module in graph:
        visit(module, [])


def test_the_cache_key_hashes_every_source_file_of_the_pass(tmp_path, monkeypatch):
    assert set(bc.SOURCE_FILES) == set(_sources().values())
    # Any edit of any of them changes the key; nothing else does.
    def key_now():
        get_hash_for_files.cache_clear()  # torch caches the last answer by path
        return bc.BucketingPass().uuid()

    key = key_now()
    copies = []
    for f in bc.SOURCE_FILES:
        copy = tmp_path / os.path.relpath(f, PACKAGE).replace(os.sep, "_")
        copy.write_text(open(f).read())
        copies.append(str(copy))
    monkeypatch.setattr(bc, "SOURCE_FILES", tuple(copies))
    assert key_now() == key
    (tmp_path / "unrelated.py").write_text("# not the pass\n")
    assert key_now() == key
    with open(copies[-1], "a") as f:
        f.write("# an edit\n")
    assert key_now() != key


def test_new_nodes_carry_the_members_provenance(group_name):
    gm = trace(lambda a, b: (ag(a, group_name), ag(b, group_name)), ((3,), f32), ((5,), bf16))
    collectives = [n for n in gm.graph.nodes if n.target is torch.ops._c10d_functional.all_gather_into_tensor.default]
    waits = [next(iter(n.users)) for n in collectives]
    for k, (c, w) in enumerate(zip(collectives, waits)):
        c.meta["stack_trace"] = f'File "model.py", line {10 + k}, in forward'
        c.meta["nn_module_stack"] = {"L__self___layers_0": ("L['self'].layers.0", torch.nn.Linear)}
        w.meta["stack_trace"] = f'File "model.py", line {20 + k}, in forward'
    old = set(gm.graph.nodes)
    plan = bc.bucket_collectives(gm)
    assert len(plan.buckets) == 1
    new = [n for n in gm.graph.nodes if n not in old and n.op == "call_function"]
    assert new
    for node in new:
        assert "model.py" in node.meta.get("stack_trace", ""), node.format_node()
        assert "L__self___layers_0" in node.meta.get("nn_module_stack", {}), node.format_node()
    merged = next(n for n in new if n.target is torch.ops._c10d_functional.all_gather_into_tensor.default)
    assert "line 10" in merged.meta["stack_trace"]
    # Each member's output points at its own wait.
    outputs = [n for n in new if n.target is torch.ops.aten.view.default]  # the CPU's copy-out: views of members
    assert [o.meta["stack_trace"].rsplit("line ", 1)[1][:2] for o in outputs] == ["20", "21"]


def test_an_ambient_fake_mode_changes_nothing(group_name):
    def program(a, b, c):
        return ag(a, group_name), ag(b, group_name), rs(c, group_name), rs(c * 2, group_name)

    specs = (((3,), f32), ((5,), bf16), ((8,), f32))
    plain = trace(program, *specs)
    bc.bucket_collectives(plain)
    ambient = trace(program, *specs)
    with FakeTensorMode():
        plan = bc.bucket_collectives(ambient)
    assert len(plan.buckets) == 2
    assert ambient.code == plain.code


def test_reported_positions_are_positions_in_the_bucketed_graph(group_name):
    gm = trace(lambda a, b: (ag(a, group_name) + 1, ag(b, group_name) * 2), ((3,), f32), ((5,), f32))
    (b,) = bc.bucket_collectives(gm).buckets
    nodes = list(gm.graph.nodes)
    assert nodes[b.issued_at].name == b.collective
    first_user = nodes[b.first_use]
    assert first_user.target in (torch.ops.aten.add.Tensor, torch.ops.aten.mul.Tensor), first_user.format_node()
    assert "(positions in the bucketed graph)" in bc.explain(bc.Plan([b], []))


def test_no_module_over_400_lines_and_no_function_over_60():
    """The pass reads top-down in small pieces: a module holds one concept, a function one step."""
    long_modules, long_functions = [], []
    for module, path in _sources().items():
        source = open(path).read()
        if source.count("\n") > 400:
            long_modules.append(module)
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno >= 60:
                long_functions.append(f"{module}.{node.name}")
    assert (long_modules, long_functions) == ([], [])


def _names(path: str) -> set[str]:
    """Every identifier a module uses or imports (not its comments or strings)."""
    out = set()
    for node in ast.walk(ast.parse(open(path).read())):
        if isinstance(node, ast.Name):
            out.add(node.id)
        elif isinstance(node, ast.Attribute):
            out.add(node.attr)
        elif isinstance(node, (ast.ImportFrom, ast.Import)):
            out.update(a.asname or a.name for a in node.names)
            out.update((node.module or "").split(".") if isinstance(node, ast.ImportFrom) else ())
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.arg)):
            out.add(getattr(node, "name", None) or node.arg)
    return out


def test_torch_estimates_are_the_estimate_policys_alone():
    """Device estimates reach no module but the estimate policy (and the estimates
    themselves); members copied out ahead are its idea, the rest of the pass
    knows them as members set apart."""
    sources = _sources()
    estimating = {"plan.estimates", "plan.costs"}
    uses_costs = {m for m, p in sources.items() if {"costs", "DeviceCosts", "device_costs"} & _names(p)}
    uses_ahead = {m for m, p in sources.items() if any("ahead" in n for n in _names(p))}
    assert uses_costs <= estimating, uses_costs
    assert uses_ahead <= {"plan.estimates"}, uses_ahead
    assert "plan.estimates" in uses_costs and "plan.estimates" in uses_ahead
