"""Seeing a plan: explain(), the CLI, and the bucketing log."""

import logging
import subprocess
import sys

import torch

import bucketing.core as bc

from .graphs import ag, rs, trace

bf16, f32 = torch.bfloat16, torch.float32


def test_explain_a_graph_leaves_it_untouched(group_name):
    gm = trace(lambda a, b, c: (ag(a, group_name), ag(b, group_name), rs(c, group_name)),
               ((3,), f32), ((5,), bf16), ((8,), f32))
    code = gm.code
    text = bc.explain(gm, bucket_cap_mb=64.0)
    assert gm.code == code
    assert "all_gather[0]" in text and "members=2" in text and "dtypes=float32,bfloat16" in text


def test_plan_lines_are_logged(group_name, caplog):
    gm = trace(lambda a, b: (ag(a, group_name), ag(b, group_name)), ((3,), f32), ((5,), bf16))
    with caplog.at_level(logging.INFO, logger="bucketing"):
        bc.bucket_collectives(gm)
    assert any("all_gather[0]" in r.getMessage() and "members=2" in r.getMessage() for r in caplog.records)


def test_torch_logs_knows_the_bucketing_log():
    out = subprocess.run(
        [sys.executable, "-c", "import bucketing, torch._logging._internal as t; "
         "print('bucketing' in t.log_registry.log_alias_to_log_qnames)"],
        capture_output=True, text=True, timeout=120,
    )
    assert out.stdout.strip() == "True", out.stderr[-2000:]


def test_cli_explains_an_exported_program(group_name, tmp_path, capsys):
    c10d = torch.ops._c10d_functional

    class Gathers(torch.nn.Module):
        def forward(self, a, b):
            x = c10d.wait_tensor(c10d.all_gather_into_tensor(a, 4, group_name))
            y = c10d.wait_tensor(c10d.all_gather_into_tensor(b, 4, group_name))
            return x * 2, y

    path = tmp_path / "gathers.pt2"
    torch.export.save(torch.export.export(Gathers(), (torch.randn(3), torch.randn(5).to(bf16))), str(path))
    from bucketing.__main__ import main

    assert main(["explain", str(path), "--bucket-cap-mb", "64"]) == 0
    assert "1 bucket(s)" in capsys.readouterr().out
    assert main(["explain", str(path), "--no-multidtype"]) == 0
    assert "0 bucket(s)" in capsys.readouterr().out  # one f32 and one bf16: nothing to merge
    assert main(["explain", str(tmp_path / "graph.pt")]) == 2
