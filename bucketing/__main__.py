"""`python -m bucketing explain FILE.pt2 [options]`: print the plan a set of options gives a graph.

FILE is an exported program (`torch.export.save`), which keeps the tensor
metadata planning needs. Nothing runs: the graph is planned and rewritten on
a copy and the plan is printed.
"""

from __future__ import annotations

import argparse
import sys

import torch

from . import core


def load_graph(path: str) -> torch.fx.GraphModule:
    if not path.endswith(".pt2"):
        raise ValueError(f"{path}: expected an exported program saved with torch.export.save (.pt2)")
    return torch.export.load(path).graph_module


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bucketing", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    ex = sub.add_parser("explain", help="print the bucket plan for a saved graph")
    ex.add_argument("file")
    ex.add_argument("--bucket-cap-mb", type=float, default=None)
    ex.add_argument("--max-bucket-count", type=int, default=None)
    ex.add_argument("--no-multidtype", action="store_true")
    ex.add_argument("--collectives", default=None, help="comma-separated subset of all_gather,reduce_scatter,all_reduce")
    args = p.parse_args(argv)
    options = {"multidtype": not args.no_multidtype}
    if args.bucket_cap_mb is not None:
        options["bucket_cap_mb"] = args.bucket_cap_mb
    if args.max_bucket_count is not None:
        options["max_bucket_count"] = args.max_bucket_count
    if args.collectives:
        options["collectives"] = tuple(args.collectives.split(","))
    try:
        print(core.explain(load_graph(args.file), **options))
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
