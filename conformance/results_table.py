"""Per-pass results of a conformance run, as a Markdown table.

    pytest conformance --bucketing-pass=project,torch,torch-overlap,identity --junitxml=run.xml
    python -m conformance.results_table run.xml

One row per adapter and test family (FX catalog, Inductor subset, models,
codegen, fuzz): passed, expected failures (with their reasons, counted),
skipped (options the pass does not honour, no Inductor form), failed.
"""

from __future__ import annotations

import argparse
import collections
import re
import xml.etree.ElementTree as ET

FAMILIES = {
    "test_fx_catalog": "FX catalog", "test_inductor": "Inductor subset", "test_models": "models",
    "test_codegen": "codegen checks", "test_kernels": "kernel counts", "test_fuzz": "fuzz",
    "test_fsdp_autograd": "FSDP autograd",
}


def _outcome(case: ET.Element) -> tuple[str, str]:
    for child in case:
        if child.tag in ("failure", "error"):
            return "failed", ""
        if child.tag == "skipped":
            message = child.get("message", "")
            if child.get("type") == "pytest.xfail" or message.startswith("xfail"):
                return "xfailed", message
            return "skipped", message
    return "passed", ""


def summarize(paths: list[str]) -> dict:
    table: dict = collections.defaultdict(collections.Counter)
    reasons: dict = collections.defaultdict(collections.Counter)
    for path in paths:
        for case in ET.parse(path).iter("testcase"):
            module = case.get("classname", "").rsplit(".", 1)[-1]
            family = FAMILIES.get(module)
            match = re.search(r"\[([^\]-]+(?:-manual|-overlap)?)", case.get("name", ""))
            if family is None or match is None:
                continue
            adapter = match.group(1)
            status, message = _outcome(case)
            table[(adapter, family)][status] += 1
            if status == "xfailed":
                # "<check id>: <reason> (expected for ...)": count reasons, not ids
                reason = re.sub(r"^.*?: ", "", message.split(" (expected for")[0], count=1)
                reasons[adapter][reason] += 1
    return {"table": table, "reasons": reasons}


def render(summary: dict) -> str:
    lines = ["| pass | family | passed | expected failures | skipped | failed |", "|---|---|---|---|---|---|"]
    for (adapter, family), c in sorted(summary["table"].items()):
        lines.append(f"| {adapter} | {family} | {c['passed']} | {c['xfailed']} | {c['skipped']} | {c['failed']} |")
    for adapter, counter in sorted(summary["reasons"].items()):
        lines.append(f"\nExpected failures of {adapter}, by reason:\n")
        lines += [f"- {n} x {reason}" for reason, n in counter.most_common()]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("junit", nargs="+", help="JUnit XML files written by pytest --junitxml")
    print(render(summarize(parser.parse_args(argv).junit)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
