"""Our pass with the copy-out lowered on every device (`lower_copy_out="always"`).

On the CPU the default keeps the copy-out as our op; this adapter runs the
lowered copies (the GPU's path) on gloo ranks, so their results are checked
byte for byte where there is no GPU.
"""

import dataclasses

from conformance import adapters


def _lowered_everywhere() -> adapters.PassAdapter:
    import bucketing.core as bc

    project = adapters.load("project")
    return dataclasses.replace(
        project,
        name="project-lowered",
        inductor_pass=lambda **options: bc.BucketingPass(**options, lower_copy_out="always"),
    )


ADAPTER = _lowered_everywhere()
