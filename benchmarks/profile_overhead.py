"""Does the profile pass leak into timing? Step time with and without it, side by side in one run.

Worker processes of one case (default: the smoke rollout, eager, CPU) alternate profile off / on in an
A B B A pattern, each process timing its samples exactly as `perfgate run` does; the profile pass, when
on, runs after the samples. Prints the median step time each way (over all samples of all processes),
the per-process medians, the ratio on/off with a conservative interval, and the wall time the pass adds.

    python benchmarks/profile_overhead.py [--pairs 4] [--workload operator_rollout] [--toggles eager]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from perfgate.model import config  # noqa: E402
from perfgate.model.results import CaseSpec, ProcessSamples  # noqa: E402
from perfgate.running import runner, workers  # noqa: E402
from perfgate.util.stats import format_seconds, ratio_of, summarize  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=4, help="off/on pairs of worker processes")
    parser.add_argument("--workload", default="operator_rollout")
    parser.add_argument("--size", default="smoke")
    parser.add_argument("--toggles", default="eager")
    parser.add_argument("--samples", type=int, default=12)
    args = parser.parse_args()

    settings = config.load()
    probe = workers.run_probe(settings.workloads_dirs, settings.threads)
    info = probe["workloads"][args.workload]
    spec = CaseSpec(workload=args.workload, size=args.size, toggles=tuple(args.toggles.split("+")), device="cpu",
                    params=tuple(sorted(info["sizes"][args.size].items())))
    run_dir = Path(tempfile.mkdtemp(prefix="perfgate-profile-overhead-"))
    timing = settings.timing.__dict__ | {"samples": args.samples}
    order = [flag for _ in range(args.pairs) for flag in (False, True)]
    order = [f if (i // 2) % 2 == 0 else (not f) for i, f in enumerate(order)]  # A B B A ...
    samples: dict[bool, list[list[float]]] = {False: [], True: []}
    pair_medians: list[dict[bool, float]] = []
    wall: dict[bool, list[float]] = {False: [], True: []}
    print(f"load before: {os.getloadavg()[0]:.2f} (1-min), {len(order)} worker processes, case {spec.key}")
    for i, profile in enumerate(order):
        cfg = runner.case_config(spec, info["file"], settings, i, run_dir, profile=profile)
        cfg["timing"] = timing
        t0 = time.perf_counter()
        outcome = workers.run_worker(cfg, settings.timeout_s, settings.threads, run_dir / ".work")
        res = outcome.result
        if res.get("status") != "ok":
            print(f"worker {i} failed: {res.get('message')}")
            return 3
        wall[profile].append(time.perf_counter() - t0)
        steps = ProcessSamples.from_json(res["process"]).step_times_s
        samples[profile].append(steps)
        if i % 2 == 0:
            pair_medians.append({})
        pair_medians[-1][profile] = statistics.median(steps)
    summaries = {}
    for profile in (False, True):
        groups = samples[profile]
        summaries[profile] = summarize([t for g in groups for t in g], groups=groups)
        label = "with profile pass   " if profile else "without profile pass"
        per_proc = ", ".join(format_seconds(statistics.median(g)) for g in groups)
        print(f"{label}: median step {format_seconds(summaries[profile].median)}  "
              f"(per process: {per_proc}); worker wall {statistics.median(wall[profile]):.2f} s")
    r = ratio_of(summaries[True], summaries[False])
    print(f"step time with / without (all samples): {r.format(3) if r else '-'}")
    # back-to-back pairs cancel slow drift of a shared machine; their median ratio is the robust figure
    pair_ratios = [p[True] / p[False] for p in pair_medians if len(p) == 2]
    print("per-pair ratios with / without: " + ", ".join(f"{x:.3f}" for x in pair_ratios)
          + f"; median {statistics.median(pair_ratios):.3f}")
    print(f"profile pass adds {statistics.median(wall[True]) - statistics.median(wall[False]):.2f} s of worker wall time")
    print(f"load after: {os.getloadavg()[0]:.2f} (1-min)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
