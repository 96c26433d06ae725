"""conformance.results_table reads pytest's JUnit XML into a per-pass table."""

from conformance import results_table

JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">
<testcase classname="conformance.multiproc.test_fx_catalog" name="test_fx_case[project-ag-pair-bf16-f32-w2]"/>
<testcase classname="conformance.multiproc.test_fx_catalog" name="test_fx_case[torch-ag-pair-bf16-f32-w2]">
  <skipped type="pytest.xfail" message="ag-pair-bf16-f32-w2: views the bucket through the smallest dtype (expected for torch; passing means the entry is stale)"/></testcase>
<testcase classname="conformance.multiproc.test_fx_catalog" name="test_fx_case[torch-policy-layers-merge-all-w2]">
  <skipped type="pytest.skip" message="needs option(s) ['policy'], which torch does not honour"/></testcase>
<testcase classname="conformance.multiproc.test_inductor" name="test_inductor_case[torch-overlap-ag-views-bool-w2]">
  <failure message="differs">differs</failure></testcase>
</testsuite></testsuites>"""


def test_counts_per_pass_and_family_and_reasons(tmp_path):
    path = tmp_path / "run.xml"
    path.write_text(JUNIT)
    summary = results_table.summarize([str(path)])
    assert summary["table"][("project", "FX catalog")]["passed"] == 1
    assert summary["table"][("torch", "FX catalog")]["xfailed"] == 1
    assert summary["table"][("torch", "FX catalog")]["skipped"] == 1
    assert summary["table"][("torch-overlap", "Inductor subset")]["failed"] == 1
    assert summary["reasons"]["torch"] == {"views the bucket through the smallest dtype": 1}
    text = results_table.render(summary)
    assert "| torch | FX catalog | 0 | 1 | 1 | 0 |" in text and "1 x views the bucket" in text
