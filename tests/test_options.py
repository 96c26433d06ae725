import pytest

import bucketing
import bucketing.core as bc
from bucketing.options import make_options


@pytest.mark.parametrize(
    "options, name",
    [
        ({"bucket_cap_mb": 0}, "bucket_cap_mb"),
        ({"bucket_cap_mb": -1.0}, "bucket_cap_mb"),
        ({"bucket_cap_mb": "64"}, "bucket_cap_mb"),
        ({"bucket_cap_mb": True}, "bucket_cap_mb"),
        ({"collectives": ("all_gather", "all_to_all")}, "collectives"),
        ({"collectives": "all_gather"}, "collectives"),
        ({"max_bucket_count": 0}, "max_bucket_count"),
        ({"max_bucket_count": 1.5}, "max_bucket_count"),
        ({"multidtype": "yes"}, "multidtype"),
        ({"alignment_bytes": 12}, "alignment_bytes"),
        ({"alignment_bytes": 0}, "alignment_bytes"),
        ({"fuse_casts": 1}, "fuse_casts"),
        ({"gather_in_place": "yes"}, "gather_in_place"),
        ({"policy": "greedy"}, "policy"),
        ({"locality_flops": -1}, "locality_flops"),
        ({"locality_flops": "big"}, "locality_flops"),
        ({"memory_budget_mb": -1.0}, "memory_budget_mb"),
        ({"memory_budget_mb": float("nan")}, "memory_budget_mb"),
        ({"bucket_size": 3}, "bucket_size"),
    ],
)
def test_bad_option_names_itself_at_construction(options, name):
    with pytest.raises(ValueError, match=name):
        bc.BucketingPass(**options)
    with pytest.raises(ValueError, match=name):
        make_options(**options)


def test_gather_in_place_by_default_follows_inductors_reorder():
    import torch._inductor.config as inductor_config

    with inductor_config.patch(reorder_for_compute_comm_overlap=False):
        assert make_options().gathers_in_place() is False
        assert make_options(gather_in_place=True).gathers_in_place() is True
    with inductor_config.patch(reorder_for_compute_comm_overlap=True):
        assert make_options().gathers_in_place() is True
        assert make_options(gather_in_place=False).gathers_in_place() is False


def test_an_in_place_gather_keys_the_cache_by_rank(group_name, monkeypatch):
    """The slot an in-place gather writes is a constant of the compiled code, and
    Inductor's FX graph cache key holds no rank: ranks sharing a cache directory
    must get different keys then, and the same key otherwise."""
    import torch._inductor.config as inductor_config
    import torch.distributed as dist

    passes = {name: bc.BucketingPass(gather_in_place=value) for name, value in
              [("in_place", True), ("staging", False), ("auto", None)]}

    def uuids(reorder: bool) -> dict:
        with inductor_config.patch(reorder_for_compute_comm_overlap=reorder):
            return {name: p.uuid() for name, p in passes.items()}

    rank0 = {reorder: uuids(reorder) for reorder in (False, True)}
    real = dist.get_rank
    monkeypatch.setattr(dist, "get_rank", lambda group=None: real(group) + 1)
    rank1 = {reorder: uuids(reorder) for reorder in (False, True)}
    for reorder in (False, True):
        assert rank0[reorder]["in_place"] != rank1[reorder]["in_place"]
        assert rank0[reorder]["staging"] == rank1[reorder]["staging"]
    assert rank0[False]["auto"] == rank1[False]["auto"]
    assert rank0[True]["auto"] != rank1[True]["auto"]


def test_bucket_collectives_validates_before_touching_the_graph():
    import torch.fx as fx

    gm = fx.GraphModule({}, fx.Graph())
    with pytest.raises(ValueError, match="max_bucket_count"):
        bc.bucket_collectives(gm, max_bucket_count=-3)


def test_callable_cap_returning_garbage_names_the_option():
    opts = make_options(bucket_cap_mb=lambda i: -1)
    with pytest.raises(ValueError, match="bucket_cap_mb"):
        opts.cap_bytes(0)


def test_uuid_is_stable_and_tracks_every_option():
    base = bc.BucketingPass(bucket_cap_mb=64.0)
    assert base.uuid() == bc.BucketingPass(bucket_cap_mb=64.0).uuid()
    variants = [
        bc.BucketingPass(bucket_cap_mb=65.0),
        bc.BucketingPass(bucket_cap_mb=64.0, multidtype=False),
        bc.BucketingPass(bucket_cap_mb=64.0, max_bucket_count=8),
        bc.BucketingPass(bucket_cap_mb=64.0, collectives=("all_gather",)),
        bc.BucketingPass(bucket_cap_mb=64.0, alignment_bytes=32),
        bc.BucketingPass(bucket_cap_mb=64.0, fuse_casts=False),
        bc.BucketingPass(bucket_cap_mb=lambda i: 64.0),
        bc.BucketingPass(bucket_cap_mb=64.0, locality_flops=0),
        bc.BucketingPass(bucket_cap_mb=64.0, memory_budget_mb=1.0),
        bc.BucketingPass(bucket_cap_mb=64.0, policy="merge_all"),
        bc.BucketingPass(bucket_cap_mb=64.0, verify_plan_across_ranks=True),
    ]
    uuids = {v.uuid() for v in variants} | {base.uuid()}
    assert len(uuids) == len(variants) + 1


def test_callable_caps_with_different_code_differ():
    a = bc.BucketingPass(bucket_cap_mb=lambda i: 1.0 if i == 0 else 64.0)
    b = bc.BucketingPass(bucket_cap_mb=lambda i: 2.0 if i == 0 else 64.0)
    assert a.uuid() != b.uuid()


def test_a_torch_newer_than_the_tested_releases_warns_at_import_and_an_older_one_does_not():
    import subprocess
    import sys

    def import_with(version: str) -> str:
        code = ("import torch; torch.__version__ = %r; import bucketing" % version)
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stderr

    newest = bucketing.TESTED_TORCH_RELEASES[-1]
    major, minor = map(int, newest.split("."))
    assert f"torch {major}.{minor + 1}.0 is newer than the newest tested release ({newest})" in \
        import_with(f"{major}.{minor + 1}.0")
    assert "newer than" not in import_with(f"{newest}.1+cpu")


def test_the_tested_releases_are_the_ones_nox_runs():
    import ast
    import pathlib

    tree = ast.parse((pathlib.Path(__file__).parents[1] / "noxfile.py").read_text())
    (releases,) = [ast.literal_eval(n.value) for n in ast.walk(tree) if isinstance(n, ast.Assign)
                   and getattr(n.targets[0], "id", "") == "TORCH_RELEASES"]
    assert sorted(".".join(r.split(".")[:2]) for r in releases) == sorted(bucketing.TESTED_TORCH_RELEASES)


def test_the_fingerprint_covers_every_field_even_one_added_later():
    """The cache key is derived from the options' fields: a new field cannot be left out of it."""
    import dataclasses

    from bucketing.options import BucketingOptions

    base = BucketingOptions()
    for field in dataclasses.fields(BucketingOptions):
        assert f"{field.name}=" in base.fingerprint(), field.name
    Extended = dataclasses.make_dataclass("Extended", [("new_knob", int, dataclasses.field(default=0))],
                                          bases=(BucketingOptions,), frozen=True)
    assert Extended(new_knob=1).fingerprint() != Extended(new_knob=2).fingerprint()
    assert Extended().fingerprint() != base.fingerprint()
    changed = {"exact_reductions": True, "gather_in_place": True, "copy_out": "packed", "lower_copy_out": "never",
               "block_classes": ("Block",), "module_buckets": [["layers.0"]], "blocks_per_bucket": 2}
    prints = {BucketingOptions(**{name: value}).fingerprint() for name, value in changed.items()}
    assert len(prints | {base.fingerprint()}) == len(changed) + 1
