"""Roofline and bound class of a case: where its step sits against this machine's ceilings. No torch.

The measurements come from the worker (perfgate.worker.roofline_counts: FLOPs and bytes per step;
perfgate.worker.profiler_events: the profile window's op timing; perfgate.worker.ceilings: peak FLOP/s
and bandwidth measured by `perfgate calibrate`);
this module only decides, so the report layer can use it on any results.json. docs/roofline.md has
the rule, its thresholds and how good each figure is.

Bound class, first match wins:
  overhead-bound  the device idles between ops for more than IDLE_OVERHEAD of the step (launch, dispatch,
                  Python), or the ops are tiny: mean op time under the device's MEAN_OP_OVERHEAD_S
  compute-bound   arithmetic intensity (FLOPs / bytes per step) at or past the ridge point of the
                  ceilings (peak FLOP/s / peak bandwidth): the math units are the limit
  memory-bound    below the ridge point: moving bytes is the limit
  unclassified    not overhead-bound, and the FLOP count failed or is missing: the intensity is unknown, and
                  so is which of the two ceilings binds (a count that failed is not 0 FLOPs)
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from pydantic import ConfigDict, Field

from perfgate.model.results import STATUS_OK, CaseResult
from perfgate.util.paths import CEILINGS_FILE as CEILINGS_FILE  # where calibrate stores them (perfgate.util.paths)
from perfgate.util.paths import ceilings_path
from perfgate.util.storage import atomic_write_json
from perfgate.util.validation import (
    Count,
    Document,
    NonNegative,
    Positive,
    SchemaError,
    Text,
    check,
    read_json_file,
)

BOUNDS = ("compute-bound", "memory-bound", "overhead-bound")
# not overhead-bound, and no FLOP count to place the step against the ridge with: no class, and no advice
UNCLASSIFIED = "unclassified"

# More than half the step with the device waiting for the host: the ops themselves are not the limit.
IDLE_OVERHEAD = 0.5
# An op shorter than this spends most of its time being dispatched (CPU: a few us of the dispatcher per
# aten op; CUDA: ~5 us per launch), not computing or moving data.
MEAN_OP_OVERHEAD_S = {"cpu": 20e-6, "cuda": 10e-6}
# Ridge points used when this machine's ceilings are unknown (no `perfgate calibrate`, an unknown GPU):
# roughly a modern core's FMA rate over its share of DRAM bandwidth, and a data-centre GPU's (docs/roofline.md).
DEFAULT_RIDGE = {"cpu": 10.0, "cuda": 100.0}

# Spec-sheet peaks of known GPUs: the upper line of the roofline (dense math, no sparsity; FLOP/s by the
# dtype a matmul computes in, bandwidth of device memory in bytes/s). Matched on torch's device name.
# Sources: NVIDIA H100 Tensor Core GPU datasheet (SXM5 / PCIe columns); NVIDIA H200 Tensor Core GPU
# product brief; NVIDIA A100 Tensor Core GPU datasheet (40GB / 80GB SXM and PCIe); NVIDIA Ampere GA102
# GPU architecture whitepaper, appendix (GeForce RTX 3060 Ti / 3080 Ti: FP16 tensor with FP32 accumulate);
# NVIDIA L4 and T4 datasheets; NVIDIA V100 datasheet. The sheets print sparse tensor figures as twice these.
SPEC_SHEET: tuple[tuple[str, tuple[str, ...], dict[str, float], float], ...] = (
    ("H200", ("H200",), {"float32": 67e12, "tf32": 494.7e12, "float16": 989.4e12, "bfloat16": 989.4e12}, 4.8e12),
    ("H100 PCIe", ("H100 PCIe",), {"float32": 51.2e12, "tf32": 378e12, "float16": 756.5e12, "bfloat16": 756.5e12},
     2.0e12),
    ("H100 NVL", ("H100 NVL",), {"float32": 60e12, "tf32": 417.5e12, "float16": 835e12, "bfloat16": 835e12}, 3.9e12),
    ("H100 SXM", ("H100",), {"float32": 67e12, "tf32": 494.7e12, "float16": 989.4e12, "bfloat16": 989.4e12},
     3.35e12),
    ("A100 80GB", ("A100 80GB", "A100-SXM4-80GB", "A100-PCIE-80GB"),
     {"float32": 19.5e12, "tf32": 156e12, "float16": 312e12, "bfloat16": 312e12}, 1.935e12),
    ("A100 40GB", ("A100",), {"float32": 19.5e12, "tf32": 156e12, "float16": 312e12, "bfloat16": 312e12}, 1.555e12),
    ("RTX 3080 Ti", ("RTX 3080 Ti",), {"float32": 34.1e12, "tf32": 34.1e12, "float16": 68.2e12, "bfloat16": 68.2e12},
     912e9),
    ("RTX 3060 Ti", ("RTX 3060 Ti",), {"float32": 16.2e12, "tf32": 16.2e12, "float16": 32.4e12, "bfloat16": 32.4e12},
     448e9),
    ("L4", ("L4",), {"float32": 30.3e12, "tf32": 60e12, "float16": 121e12, "bfloat16": 121e12}, 300e9),
    ("T4", ("Tesla T4", " T4"), {"float32": 8.1e12, "float16": 65e12}, 320e9),
    ("V100", ("V100",), {"float32": 15.7e12, "float16": 125e12}, 900e9),
)


def spec_sheet(device_name: str | None) -> dict[str, Any] | None:
    """The spec-sheet peaks of a GPU by torch's device name ("NVIDIA H100 80GB HBM3"), or None."""
    if not device_name:
        return None
    for name, needles, flops, bandwidth in SPEC_SHEET:
        if any(n in device_name for n in needles):
            return {"name": name, "flops": dict(flops), "bandwidth": bandwidth}
    return None


def compute_dtype(toggles: tuple[str, ...]) -> str:
    """The dtype the case's matmuls run in, to pick the matching FLOP/s ceiling."""
    if "amp-fp16" in toggles:
        return "float16"
    if "amp-bf16" in toggles:
        return "bfloat16"
    if "tf32" in toggles:
        return "tf32"
    return "float32"


@dataclass(frozen=True)
class Roof:
    """The ceilings one case is placed against: peak FLOP/s for its dtype and peak bandwidth."""

    peak_flops: float | None
    peak_bandwidth: float | None
    source: str  # "measured (perfgate calibrate)", "spec sheet (H100 SXM)", or "default ridge"
    dtype: str = "float32"
    spec_flops: float | None = None  # the spec sheet's, drawn as the upper line where known
    spec_bandwidth: float | None = None

    @property
    def ridge(self) -> float | None:
        if self.peak_flops and self.peak_bandwidth:
            return self.peak_flops / self.peak_bandwidth
        return None


def device_kind(device: str) -> str:
    return "cuda" if device.startswith("cuda") else "cpu"


def _table(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


# The ceilings a device can have, FLOP/s and bytes/s: outside these a figure is a typo or a tampered file,
# not a measurement (the largest GPUs: ~2e15 dense FLOP/s and ~8e12 B/s; a slow core still does 1e6 of
# each), and one of 1e308 drew a roofline axis to infinity (OverflowError in `perfgate report`).
PLAUSIBLE = {"flops": (1e6, 1e18), "bandwidth": (1e6, 1e16)}


def _numbers(value: Any, what: str) -> dict[str, float]:
    """The numbers of a table within the PLAUSIBLE range of ``what`` (flops | bandwidth): results.json
    and ceilings.json are untrusted input."""
    lo, hi = PLAUSIBLE[what]
    return {k: float(v) for k, v in _table(value).items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and lo <= v <= hi}


def roof_for(ceilings: dict[str, Any] | None, device: str, dtype: str = "float32") -> Roof:
    """The ceilings of ``device`` for ``dtype``: measured first, then the spec sheet, else none."""
    ceilings = ceilings if isinstance(ceilings, dict) else {}
    kind = device_kind(device)
    measured = _table(ceilings.get(kind))
    spec = _table(ceilings.get("spec")) if kind == "cuda" else {}
    spec_table = _numbers(spec.get("flops"), "flops")
    spec_flops = spec_table.get(dtype) or spec_table.get("float32")
    spec_bw = _numbers({"bw": spec.get("bandwidth")}, "bandwidth").get("bw")
    flops_table = _numbers(measured.get("flops"), "flops")
    bw_table = _numbers(measured.get("bandwidth"), "bandwidth")
    peak_bw = max(bw_table.values()) if bw_table else None
    spec_name = f"spec sheet ({spec.get('name', 'GPU')})"
    # the case's own dtype first, measured or from the spec sheet: a float16 case placed against the float32
    # peak (its matmul not measured: unsupported, or a ceilings.json from before) has a ridge several times
    # too low, and reads compute-bound where it is memory-bound
    if flops_table.get(dtype) and peak_bw:
        return Roof(flops_table[dtype], peak_bw, "measured (perfgate calibrate)", dtype, spec_flops, spec_bw)
    if spec_table.get(dtype) and spec_bw:
        return Roof(spec_table[dtype], spec_bw, spec_name, dtype, spec_flops, spec_bw)
    if flops_table.get("float32") and peak_bw:
        return Roof(flops_table["float32"], peak_bw, f"measured (perfgate calibrate; float32, {dtype} not measured)",
                    dtype, spec_flops, spec_bw)
    if spec_flops and spec_bw:
        return Roof(spec_flops, spec_bw, spec_name, dtype, spec_flops, spec_bw)
    return Roof(None, None, "default ridge", dtype)


@dataclass
class Bound:
    """A case's bound class with the evidence that decided it."""

    bound: str
    reason: str
    ridge: float | None
    ridge_source: str
    evidence: dict[str, float | None] = field(default_factory=dict)
    flops_fraction: float | None = None  # achieved FLOP/s / peak FLOP/s
    bandwidth_fraction: float | None = None  # achieved bytes/s / peak bandwidth
    flops_note: str = ""  # why the step's FLOPs were not counted; "" when they were (0 included)

    @property
    def headroom(self) -> float | None:
        """How many times faster the step could get before it hits the ceiling that binds it."""
        if self.bound == UNCLASSIFIED:
            return None
        frac = self.flops_fraction if self.bound == "compute-bound" else self.bandwidth_fraction
        if self.bound == "overhead-bound":
            fracs = [f for f in (self.flops_fraction, self.bandwidth_fraction) if f]
            frac = max(fracs) if fracs else None
        return 1.0 / frac if frac and frac > 0 else None

    @property
    def headroom_text(self) -> str:
        h = self.headroom
        if h is None:
            return "-"
        which = {"compute-bound": "peak FLOP/s", "memory-bound": "peak bandwidth",
                 "overhead-bound": "the nearer ceiling"}[self.bound]
        frac = 1 / h
        if frac > 1:  # the ceiling was measured on a busier machine than the case, or the count is high
            return (f"{frac * 100:.3g}% of {which}: above the ceiling (measured on a busier machine? "
                    "re-run `perfgate calibrate` quietly)")
        return f"{frac * 100:.2g}% of {which} ({h:.3g}x headroom)"

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "headroom": self.headroom}


def _metric(case: CaseResult, name: str) -> float | None:
    """A metric as evidence: a finite number >= 0, else None (results.json is untrusted input; no metric
    the roofline reads can be negative)."""
    v = case.metrics.get(name)
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or v < 0:
        return None
    return float(v)


def flops_not_counted(case: CaseResult) -> str:
    """Why ``case``'s FLOPs per step were not counted ("" when they were, a real 0 included): the
    counter's own error (profile ``errors``, ``flops: ...``), a count that is not a finite number >= 0, or
    none recorded. A step of copies counts 0 FLOPs with no error, and stays a real 0."""
    errors = case.profile.get("errors") if isinstance(case.profile, dict) else None
    for err in errors if isinstance(errors, list) else []:
        if isinstance(err, str) and err.startswith("flops:"):
            return " ".join(err[len("flops:"):].split())[:200] or "the FLOP counter failed"
    v = case.metrics.get("flops_per_step")
    if v is None:
        # a results file with an intensity > 0 counted FLOPs, even without the count itself
        return "" if (_metric(case, "arithmetic_intensity") or 0.0) > 0 else "no FLOP count recorded"
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or v < 0:
        return f"the count is {v!r}, not a finite number >= 0"
    return ""


def classify(evidence: dict[str, float | None], device: str, roof: Roof,
             flops_note: str | None = None) -> tuple[str, str, float | None, str]:
    """(bound class, reason, ridge used, where the ridge came from) from a case's evidence; the class is
    "" when the evidence cannot tell (no op timing and no byte count). ``flops_note`` says why the FLOPs
    were not counted (case_bound reads it from the case); None: no FLOP count and no intensity in the
    evidence means not counted. Not counted is UNCLASSIFIED unless the overhead evidence decides."""
    kind = device_kind(device)
    idle = evidence.get("device_idle_fraction")
    mean_op = evidence.get("mean_op_s")
    limit = MEAN_OP_OVERHEAD_S[kind]
    ridge, ridge_source = roof.ridge, roof.source
    if ridge is None:
        ridge, ridge_source = DEFAULT_RIDGE[kind], f"default ridge for {kind} (no measured ceilings)"
    if idle is not None and idle > IDLE_OVERHEAD:
        return ("overhead-bound", f"the device idles {idle * 100:.0f}% of the step (> {IDLE_OVERHEAD * 100:.0f}%)",
                ridge, ridge_source)
    if mean_op is not None and mean_op < limit:
        return ("overhead-bound", f"mean op time {mean_op * 1e6:.3g} us < {limit * 1e6:.0f} us: dispatch and launch "
                f"dominate", ridge, ridge_source)
    ai = evidence.get("arithmetic_intensity")
    flops = evidence.get("flops_per_step")
    if flops_note is None:
        flops_note = "no FLOP count recorded" if flops is None and not ai else ""
    if ai is None and not evidence.get("bytes_per_step"):
        return "", "no byte count for this case", ridge, ridge_source
    if flops_note:
        # a count that failed is no count, not 0 FLOPs: placing it at intensity 0 made it memory-bound
        return (UNCLASSIFIED, f"FLOPs not counted ({flops_note}): compute- or memory-bound is unknown",
                ridge, ridge_source)
    if ai is None:
        ai = 0.0 if flops == 0 else None
    if ai is None:
        return "", "no byte count for this case", ridge, ridge_source
    if ai >= ridge:
        return "compute-bound", f"arithmetic intensity {ai:.3g} FLOP/B >= ridge {ridge:.3g} FLOP/B", ridge, ridge_source
    return "memory-bound", f"arithmetic intensity {ai:.3g} FLOP/B < ridge {ridge:.3g} FLOP/B", ridge, ridge_source


EVIDENCE = ("device_idle_fraction", "mean_op_s", "aten_ops_per_step", "kernels_per_step", "flops_per_step",
            "bytes_per_step", "arithmetic_intensity", "achieved_flops_per_s", "achieved_bytes_per_s")


def case_bound(case: CaseResult, ceilings: dict[str, Any] | None = None) -> Bound | None:
    """The bound class of an ok case with a profile; None when it has no evidence to judge by."""
    if case.status != STATUS_OK:
        return None
    evidence = {k: _metric(case, k) for k in EVIDENCE}
    if evidence["mean_op_s"] is None and evidence["bytes_per_step"] is None:
        return None
    flops_note = flops_not_counted(case)
    if flops_note:  # an intensity of 0 from a count that failed (results.json of the worker before) is none
        evidence.update(flops_per_step=None, arithmetic_intensity=None, achieved_flops_per_s=None)
    roof = roof_for(ceilings, case.spec.device, compute_dtype(case.spec.toggles))
    bound, reason, ridge, ridge_source = classify(evidence, case.spec.device, roof, flops_note)
    if not bound:
        return None
    flops_frac = bw_frac = None
    if roof.peak_flops and evidence["achieved_flops_per_s"]:
        flops_frac = evidence["achieved_flops_per_s"] / roof.peak_flops
    if roof.peak_bandwidth and evidence["achieved_bytes_per_s"]:
        bw_frac = evidence["achieved_bytes_per_s"] / roof.peak_bandwidth
        if bw_frac > 1 and str(case.profile.get("bytes_counted_on", "")).startswith("eager reference"):
            bw_frac = None  # bytes counted before fusion, time measured after it: no bandwidth to compare
    return Bound(bound, reason, ridge, ridge_source, evidence, flops_frac, bw_frac, flops_note)


# The toggles that attack the limit each bound class names (the recommendation's hint, docs/roofline.md).
PAYS_OFF = {
    "memory-bound": ("amp-fp16", "amp-bf16", "channels-last"),
    "compute-bound": ("amp-fp16", "amp-bf16", "tf32", "compile-max-autotune"),
    "overhead-bound": ("compile", "compile-reduce-overhead", "compile-max-autotune", "cuda-graphs"),
}


def toggle_hint(eager_bound: str, toggles: tuple[str, ...], action: str) -> str:
    """What the eager step's bound class says about a toggle's measured recommendation ("" for nothing)."""
    fits = [t for t in toggles if t in PAYS_OFF.get(eager_bound, ())]
    if not fits:
        return ""
    if action == "adopt":
        return f"as the roofline predicts: eager is {eager_bound} and {'+'.join(fits)} attacks that"
    if action in ("neutral", "avoid"):
        return (f"eager is {eager_bound}, so {'+'.join(fits)} should pay; it does not here: its profile says why")
    return ""


# What a bound class means for the recommendation: the toggles that attack the limit it names.
ADVICE = {
    "memory-bound": "memory-bound: fewer bytes pay here (amp-fp16 / amp-bf16 halve them, channels-last avoids "
                    "layout copies); more FLOP/s (a custom kernel, TF32) will not",
    "compute-bound": "compute-bound: faster math pays here (amp on tensor cores, TF32, max-autotune); "
                     "fewer launches will not",
    "overhead-bound": "overhead-bound: fewer launches and less Python pay here (compile, cuda-graphs, "
                      "compile-reduce-overhead, larger batches); faster kernels will not",
    UNCLASSIFIED: "unclassified: without a FLOP count, whether bytes or math limit the step is unknown, so the "
                  "roofline predicts no toggle",
}


# ---------------------------------------------------------------- where the ceilings are kept

CEILINGS_SCHEMA = "perfgate.ceilings/1"


class CeilingsEntry(Document):
    """One device's measured ceilings (perfgate.worker.ceilings.measure): peak FLOP/s per dtype, bandwidth per kernel."""

    model_config = ConfigDict(extra="allow")
    flops: dict[str, Positive] = {}
    bandwidth: dict[str, Positive] = {}
    errors: list[Text] = []  # what could not be measured, and why
    threads: Count | None = None
    matmul_n: Count | None = None
    stream_bytes: Count | None = None
    device_name: Text | None = None
    torch: Text | None = None
    seconds: NonNegative | None = None
    measured_at: Text | None = None


class CeilingsDocument(Document):
    """ceilings.json: this machine's measured ceilings, written by `perfgate calibrate --write`."""

    schema_version: Literal[CEILINGS_SCHEMA] = Field(alias="schema")  # type: ignore[valid-type]  # Literal of a constant
    cpu: CeilingsEntry | None = None
    cuda: CeilingsEntry | None = None


def ceilings_for_run(baselines_dir: Any, environment: dict[str, Any]) -> dict[str, Any]:
    """What a run carries in results.json ``ceilings``: this machine's measured ceilings when calibrate
    stored them, and the spec sheet of its GPU when known. A missing or unreadable file: none measured."""
    out: dict[str, Any] = {}
    path = ceilings_path(baselines_dir, str(environment.get("machine_key", "unknown-machine")))
    try:
        stored = check(CeilingsDocument, read_json_file(path, "ceilings"), str(path)) if path.is_file() else None
    except SchemaError as exc:  # a damaged file measured nothing; `perfgate calibrate --write` rewrites it
        stored = None
        why = f"{path} is damaged ({str(exc)[:200]}); `perfgate calibrate --write` rewrites it"
        out["source"], out["not_used"] = str(path), [f"cpu: {why}", f"cuda: {why}"]  # the report says why
    if stored is not None:
        not_used = []
        for kind in ("cpu", "cuda"):
            entry = getattr(stored, kind)
            if entry is None:
                continue
            foreign = _measured_elsewhere(kind, entry, environment)
            if foreign:
                not_used.append(f"{kind}: {foreign}")
            else:
                out[kind] = entry.model_dump(exclude_unset=True)
        out["source"] = str(path)
        if not_used:
            out["not_used"] = not_used
    spec = spec_sheet(environment.get("device_name"))
    if spec:
        out["spec"] = spec
    return out


def _measured_elsewhere(kind: str, entry: CeilingsEntry, environment: dict[str, Any]) -> str:
    """Why ``entry`` is not this run's ceilings ("" when it is): another GPU than the run's (a CPU machine key
    is shared by hosts with the same CPU and other GPUs), or another thread count than the run's."""
    if kind == "cuda":
        run_gpu = environment.get("device_name")
        if entry.device_name and isinstance(run_gpu, str) and run_gpu and entry.device_name != run_gpu:
            return f"measured on {entry.device_name}, this run's GPU is {run_gpu}"
        return ""
    threads = environment.get("threads")
    if entry.threads is not None and isinstance(threads, int) and not isinstance(threads, bool) \
            and entry.threads != threads:
        return f"measured with {entry.threads} thread(s), this run uses {threads}"
    return ""


def write_ceilings(path: Any, measured: dict[str, Any]) -> Any:
    """Store measured ceilings (perfgate.worker.ceilings.measure) atomically at ``path``; returns the path."""
    data = {"schema": CEILINGS_SCHEMA, **{k: v for k, v in measured.items() if k in ("cpu", "cuda")}}
    return atomic_write_json(path, data)


def _rate(x: float, unit: str) -> str:
    for prefix, size in (("T", 1e12), ("G", 1e9), ("M", 1e6)):
        if x >= size:
            return f"{x / size:.3g} {prefix}{unit}"
    return f"{x:.3g} {unit}"


def ceilings_lines(measured: dict[str, Any], device_name: str | None = None) -> list[str]:
    """What `perfgate calibrate` prints about the ceilings: per device, FLOP/s per dtype, bandwidth, ridge."""
    lines = []
    for kind in ("cpu", "cuda"):
        entry = measured.get(kind)
        if not isinstance(entry, dict):
            continue
        flops = ", ".join(f"{dt} {_rate(v, 'FLOP/s')}" for dt, v in entry.get("flops", {}).items())
        bw = ", ".join(f"{k} {_rate(v, 'B/s')}" for k, v in entry.get("bandwidth", {}).items())
        who = f" ({entry['device_name']})" if entry.get("device_name") else (
            f" ({entry['threads']} thread(s))" if entry.get("threads") else "")
        lines.append(f"ceilings {kind}{who}: peak {flops}; bandwidth {bw}; measured in {entry.get('seconds', '?')} s")
        roof = roof_for(measured, kind)
        if roof.ridge:
            lines.append(f"    ridge point (float32): {roof.ridge:.3g} FLOP/B; below it a step is memory-bound")
        for err in entry.get("errors", []):
            lines.append(f"    not measured: {err}")
    spec = spec_sheet(device_name)
    if spec:
        lines.append(f"spec sheet {spec['name']}: " + ", ".join(f"{dt} {_rate(v, 'FLOP/s')}" for dt, v in
                                                               spec["flops"].items())
                     + f"; bandwidth {_rate(spec['bandwidth'], 'B/s')}")
    return lines
