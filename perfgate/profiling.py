"""The profile pass: after the timed samples, a short torch.profiler window over the unit of work.

Never active during timed samples. Fills ``result["metrics"]`` and ``result["profile"]``.
"""

from __future__ import annotations

import resource
from typing import Any


def profile_pass(cfg: dict[str, Any], spec: Any, workload: Any, prepared: Any, result: dict[str, Any]) -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    if spec.device.startswith("cuda"):
        activities.append(ProfilerActivity.CUDA)
    steps = workload.steps_per_unit(spec.param_dict)
    with profile(activities=activities) as prof:
        prepared.unit()
        if spec.device.startswith("cuda"):
            torch.cuda.synchronize()
    aten_calls = sum(e.count for e in prof.key_averages() if e.key.startswith("aten::"))
    result["metrics"]["aten_ops_per_step"] = aten_calls / steps
    result["metrics"]["peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
