"""Which module a collective belongs to, from the graph's own module metadata.

Forward nodes carry `nn_module_stack`, backward nodes `fwd_nn_module_stack`
(the forward module they differentiate): outermost first, each entry a
(path, class) pair whose path is written the way Dynamo reached the module
(`L['self'].layers.0`, `L['fn']._modules['layers']['0']`). Paths are read
here as the FQNs a user writes (`layers.0`), so a plan names modules the way
`named_modules()` does. A module Dynamo reached another way than through
the module tree (torchtitan's SimpleFSDP keeps its parametrization module in
the closure of a property: `dict(type(L['self'].layers.0.wo).__dict__)
['weight'].fget.__closure__[0].cell_contents`) has no FQN and is left out of
the stack; the modules around it still place the collective.

Three ways to pick a collective's unit, in this order:

- `module_buckets` entries (torch's `module_bucket_plans` format: a module FQN,
  or a list of FQNs that share one bucket) -- what the user asked for;
- `block_classes`: the outermost module of one of these classes;
- otherwise the outermost indexed module (a `ModuleList`/`ModuleDict` entry
  whose name is a number: `layers.3`), the block sharded training gathers and
  frees.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import torch.fx as fx

# Dynamo's root (`L['self']`, `L['fn']`, `L["model"]`, a global `G['model']`) and wrapper modules
# that add a path component the user's FQN does not have.
_ROOT_PATTERN = r"""[LG]\[['"][^'"]+['"]\]"""
_ROOT = re.compile("^" + _ROOT_PATTERN)
_WRAPPERS = ("_orig_mod", "_checkpoint_wrapped_module", "_fsdp_wrapped_module")
# torch.nn.utils.parametrize's ModuleDict of ParametrizationLists: what follows it is not the user's tree.
_PARAMETRIZATIONS = "parametrizations"
_SUBSCRIPT = re.compile(r"""(?:\._modules)?\[['"]?([^'"\]]+)['"]?\]""")
# A path through the module tree: a root, then attributes and subscripts only.
_TREE_PATH = re.compile(rf"""^(?:{_ROOT_PATTERN}|self)?(?:\.\w+|\[(?:'[^']*'|"[^"]*"|\d+)\])*$""")


def fqn(path: str) -> str:
    """`L['fn']._modules['layers']['0'].attention` -> `layers.0.attention`.

    A parametrization belongs to the module it parametrizes:
    `tok_embeddings.parametrizations.weight.0` -> `tok_embeddings` (the
    trailing index is the entry of a `ParametrizationList`, not a block).
    """
    path = _ROOT.sub("", path)
    path = _SUBSCRIPT.sub(lambda m: "." + m.group(1), path).lstrip(".")
    parts = [p for p in path.split(".") if p and p not in _WRAPPERS]
    if parts and parts[0] == "self":
        parts = parts[1:]
    if _PARAMETRIZATIONS in parts:
        parts = parts[:parts.index(_PARAMETRIZATIONS)]
    return ".".join(parts)


def in_module_tree(path: str) -> bool:
    """Whether Dynamo reached the module at `path` through the module tree (attributes, subscripts)."""
    return _TREE_PATH.match(path) is not None


def module_stack(node: fx.Node) -> tuple[tuple[str, str], ...]:
    """(FQN, class name) of every module of the tree around `node`, outermost first."""
    stack = node.meta.get("nn_module_stack") or node.meta.get("fwd_nn_module_stack")
    if not stack:
        return ()
    out = []
    for entry in stack.values():
        path, cls = entry[0], entry[1] if len(entry) > 1 else ""
        if not isinstance(path, str) or not in_module_tree(path):
            continue
        name = cls if isinstance(cls, str) else getattr(cls, "__name__", str(cls))
        out.append((fqn(path), name.rsplit(".", 1)[-1]))
    return tuple(out)


def _within(path: str, module: str) -> bool:
    return path == module or path.startswith(module + ".")


def auto_block(stack: tuple[tuple[str, str], ...]) -> str | None:
    """The outermost indexed module: the path up to its first numeric component."""
    if not stack:
        return None
    parts = stack[-1][0].split(".")
    for i, part in enumerate(parts):
        if part.isdigit():
            return ".".join(parts[: i + 1])
    return None


def class_block(stack: tuple[tuple[str, str], ...], classes: tuple[str, ...]) -> str | None:
    """The outermost module whose class is named in `classes`."""
    for path, cls in stack:
        if cls in classes:
            return path
    return None


def check_module_buckets(value: object) -> tuple[tuple[str, ...], ...] | None:
    """Validate a `module_buckets` plan; returns it as a tuple of FQN tuples."""
    if value is None:
        return None
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise ValueError(
            f"module_buckets must be a list whose entries are a module FQN or a list of FQNs, got {value!r}"
        )
    entries = []
    for entry in value:
        names = (entry,) if isinstance(entry, str) else entry
        if isinstance(names, str) or not isinstance(names, Sequence) or not names \
                or not all(isinstance(n, str) and fqn(n) for n in names):
            raise ValueError(f"module_buckets entry {entry!r} must be a module FQN or a non-empty list of FQNs")
        entries.append(tuple(fqn(n) for n in names))
    flat = [n for names in entries for n in names]
    for i, a in enumerate(flat):
        for b in flat[i + 1:]:
            if _within(a, b) or _within(b, a):
                raise ValueError(f"module_buckets names overlapping modules {a!r} and {b!r}; entries must be disjoint")
    return tuple(entries)


def check_block_classes(value: object) -> tuple[str, ...] | None:
    if value is None:
        return None
    names = (value,) if isinstance(value, str) else value
    if not isinstance(names, Sequence) or not names or not all(isinstance(n, str) and n for n in names):
        raise ValueError(f"block_classes must be None or module class names, got {value!r}")
    return tuple(names)


def plan_entry(stack: tuple[tuple[str, str], ...], plan: tuple[tuple[str, ...], ...]) -> int | None:
    """Index of the `module_buckets` entry holding the innermost module, if any."""
    if not stack:
        return None
    path = stack[-1][0]
    for i, names in enumerate(plan):
        if any(_within(path, name) for name in names):
            return i
    return None


def entry_label(names: tuple[str, ...]) -> str:
    return "+".join(names)
