"""Undo a rewrite that failed half way: the graph as it was, node for node.

The rewrite only adds nodes, rewires inputs and moves nodes until it commits;
the members it replaces are erased last (erase_replaced), once nothing
can fail. So the graph before the rewrite is its node order and each node's
inputs, and restoring means: every original node's args and kwargs back (which
drops every use of a new node), the new nodes erased, the original order back.
The original Node objects, names and metadata are kept, so a compile that goes
on after a failed pass sees the graph it handed over.
"""

from __future__ import annotations

import torch.fx as fx

from .placement import move_into


class RestoreFailed(RuntimeError):
    pass


class GraphCheckpoint:
    def __init__(self, graph: fx.Graph):
        self.order: list[fx.Node] = list(graph.nodes)
        self.inputs: dict[fx.Node, tuple] = {node: (node.args, node.kwargs) for node in self.order}

    def restore(self, graph: fx.Graph) -> None:
        """Put `graph` back as it was; raises RestoreFailed where it cannot
        (an original node was erased)."""
        present = list(graph.nodes)
        in_graph = set(present)
        missing = [n.name for n in self.order if n not in in_graph]
        if missing:
            raise RestoreFailed(f"bucketing: cannot restore the graph, nodes were erased: {missing[:5]}")
        for node in present:
            saved = self.inputs.get(node)
            if saved is not None:
                args, kwargs = saved
                if node.args is not args:
                    node.args = args
                if node.kwargs is not kwargs:
                    node.kwargs = kwargs
        # New nodes are now used by new nodes only: erase users first.
        pending = [n for n in reversed(present) if n not in self.inputs]
        while pending:
            left = []
            for node in pending:
                if node.users:
                    left.append(node)
                else:
                    graph.erase_node(node)
            if len(left) == len(pending):
                raise RestoreFailed(f"bucketing: cannot restore the graph, new nodes still in use: {left[0].name}")
            pending = left
        move_into(graph, self.order)
