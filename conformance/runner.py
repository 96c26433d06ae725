"""Run the catalog on ranks someone else started: torchrun, one machine or many.

    torchrun --standalone --nproc-per-node 4 -m conformance run -k ag-bf16
    torchrun --nnodes 2 --nproc-per-node 8 --rdzv-backend c10d --rdzv-endpoint HOST:PORT \\
        -m conformance run --bucketing-pass torch --junitxml results.xml

Every rank joins the process group from the environment (NCCL where every
rank has a GPU, gloo otherwise), runs the selected cases in lockstep with the
same rank task and verdict as the pytest suite, and rank 0 prints each case
and the summary and writes JUnit XML. A case runs at the launcher's world
size wherever the process groups it uses exist (pairs, halves and strided
groups need an even world of 4 or more).

Failure: a case that raises on any rank, runs past --case-timeout, or loses a
rank stops every rank with the case id; rank 0 still writes the XML it has,
with that case as an error.
"""

from __future__ import annotations

import argparse
import dataclasses
import fnmatch
import os
import signal
import sys
import threading
import time
import xml.etree.ElementTree as ET
from datetime import timedelta

from . import adapters, catalog
from .checking import LEVELS, check_on_rank, expected_outcome


@dataclasses.dataclass
class Outcome:
    case_id: str
    status: str  # passed | failed | xfailed | xpassed | error | skipped
    seconds: float
    message: str = ""


def select(world_size: int, patterns: list[str], groups: set[str]) -> list[str]:
    """Case ids at this world size, in catalog order, whose groups exist and that match a pattern.

    A pattern with glob characters is a glob over the id; otherwise a substring.
    """
    out = []
    for case in catalog.CASES:
        case_id = f"{case.name}-w{world_size}"
        if not {s.group for s in case.steps} <= groups:
            continue
        if patterns and not any(fnmatch.fnmatchcase(case_id, p) if any(ch in p for ch in "*?[") else p in case_id
                                for p in patterns):
            continue
        out.append(case_id)
    return out


def write_junit(path: str, outcomes: list[Outcome], suite: str) -> None:
    counts = {s: sum(o.status == s for o in outcomes) for s in ("failed", "error", "xfailed", "skipped")}
    root = ET.Element("testsuites")
    ts = ET.SubElement(root, "testsuite", name=suite, tests=str(len(outcomes)), failures=str(counts["failed"]),
                       errors=str(counts["error"]), skipped=str(counts["xfailed"] + counts["skipped"]),
                       time=f"{sum(o.seconds for o in outcomes):.3f}")
    for o in outcomes:
        tc = ET.SubElement(ts, "testcase", classname=suite, name=o.case_id, time=f"{o.seconds:.3f}")
        if o.status in ("failed", "xpassed"):
            ET.SubElement(tc, "failure", message=o.message.splitlines()[0] if o.message else o.status).text = o.message
        elif o.status == "error":
            ET.SubElement(tc, "error", message=o.message.splitlines()[0] if o.message else "error").text = o.message
        elif o.status == "xfailed":
            ET.SubElement(tc, "skipped", type="pytest.xfail", message=o.message)
        elif o.status == "skipped":
            ET.SubElement(tc, "skipped", type="pytest.skip", message=o.message)
    ET.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python -m conformance", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run catalog cases on the ranks torchrun started")
    run.add_argument("--bucketing-pass", default="project", help="project | torch | identity | module:object")
    run.add_argument("-k", dest="patterns", action="append", default=[],
                     help="case id substring or glob (repeatable; default: every case)")
    run.add_argument("--level", choices=sorted(LEVELS), default="fx")
    run.add_argument("--junitxml", default=None, help="rank 0 writes JUnit XML here")
    run.add_argument("--case-timeout", type=float, default=300.0, help="seconds one case may take")
    run.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    missing = [k for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if k not in os.environ]
    if missing:
        print(f"conformance run: {', '.join(missing)} not set: start it with torchrun "
              f"(e.g. torchrun --standalone --nproc-per-node 4 -m conformance run)", file=sys.stderr)
        return 2
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch
    import torch.distributed as dist

    from .pool import RankContext, make_groups

    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    device = args.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() and torch.cuda.device_count() > 0 else "cpu"
    backend = "nccl" if device == "cuda" else "gloo"
    if device == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    timeout = timedelta(seconds=args.case_timeout)
    dist.init_process_group(backend, timeout=timeout)
    # Verdicts travel on a gloo group of their own, so a case that broke the
    # data group's sequence cannot desynchronize them.
    control = dist.new_group(backend="gloo", timeout=timeout * 2)
    ctx = RankContext(rank, world, backend, device, make_groups(world))
    adapter = adapters.load(args.bucketing_pass)
    case_ids = select(world, args.patterns, set(ctx.groups))
    suite = f"conformance.{args.level}.{adapter.name}.w{world}"
    outcomes: list[Outcome] = []
    current = {"case": None, "start": time.perf_counter()}

    def say(*parts):
        if rank == 0:
            print(*parts, flush=True)

    def finish(extra: Outcome | None = None) -> None:
        if rank == 0 and args.junitxml:
            write_junit(args.junitxml, outcomes + ([extra] if extra else []), suite)

    def stopped(signum, frame):  # the launcher stops us: another rank failed or died
        case = current["case"]
        print(f"conformance: rank {rank}: stopped by signal {signum} during case {case}", file=sys.stderr, flush=True)
        finish(Outcome(case or "(between cases)", "error", time.perf_counter() - current["start"],
                       f"stopped by signal {signum} during {case}: another rank failed or died"))
        os._exit(1)

    def overtime(case_id: str) -> None:
        print(f"conformance: rank {rank}: case {case_id} still running after {args.case_timeout:.0f}s; stopping",
              file=sys.stderr, flush=True)
        finish(Outcome(case_id, "error", args.case_timeout, f"ran past --case-timeout {args.case_timeout:.0f}s"))
        os._exit(3)

    signal.signal(signal.SIGTERM, stopped)
    print(f"conformance: rank {rank} pid {os.getpid()} ready", flush=True)
    say(f"conformance: {len(case_ids)} case(s), {args.level} level, pass {adapter.name}, "
        f"{world} ranks ({backend}, {device}), torch {torch.__version__}")
    if not case_ids:
        say("conformance: no case matches", args.patterns)
        finish()
        return 4

    for case_id in case_ids:
        expected = expected_outcome(adapter, case_id, args.level, backend)
        if expected.skip:  # the same answer on every rank: no collective is issued for it
            outcomes.append(Outcome(case_id, "skipped", 0.0, expected.skip))
            say(f"SKIPPED {case_id}: {expected.skip}")
            continue
        current.update(case=case_id, start=time.perf_counter())
        watchdog = threading.Timer(args.case_timeout, overtime, (case_id,))
        watchdog.daemon = True
        watchdog.start()
        try:
            status, message = check_on_rank(ctx, case_id, adapter, args.level, group=control)
        except BaseException as exc:
            print(f"conformance: rank {rank}: stopped in case {case_id}: a rank failed or died "
                  f"({type(exc).__name__}: {exc})", file=sys.stderr, flush=True)
            finish(Outcome(case_id, "error", time.perf_counter() - current["start"], f"a rank failed or died: {exc}"))
            os._exit(1)
        watchdog.cancel()
        seconds = time.perf_counter() - current["start"]
        if status == "broken":
            outcomes.append(Outcome(case_id, "error", seconds, message))
            say(f"ERROR   {case_id} ({seconds:.1f}s): {message}\nconformance: stopping: the ranks are out of step")
            break
        if expected.xfail:
            status, message = ("xpassed", f"expected to fail ({expected.xfail}) but passed") if status == "passed" \
                else ("xfailed", f"{expected.xfail}\n{message}")
        outcomes.append(Outcome(case_id, status, seconds, message))
        say(f"{status.upper():<7} {case_id} ({seconds:.1f}s)" +
            (f"\n{message}" if status in ("failed", "xpassed", "error") else ""))

    current["case"] = None
    summary = {s: sum(o.status == s for o in outcomes)
               for s in ("passed", "failed", "xfailed", "xpassed", "error", "skipped")}
    say("conformance: " + ", ".join(f"{n} {s}" for s, n in summary.items() if n) +
        f" in {sum(o.seconds for o in outcomes):.1f}s at world size {world}")
    finish()
    dist.destroy_process_group()
    bad = summary["failed"] + summary["xpassed"] + summary["error"]
    return 1 if bad else 0

