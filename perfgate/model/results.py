"""The data model: what was measured (CaseSpec), what came of it (CaseResult), a whole run (RunResult).

No torch here: results are read, compared and reported on machines without a GPU or torch.
Derived statistics are computed from the raw samples when asked, so nothing stored can go stale.
Nothing here judges: the outcomes of a run's expectation rules are evaluated by perfgate.judging.expect (``judge``,
called by the writers of results.json and baselines) and carried here as plain data. The model imports
only its vocabulary, the rule language, statistics and validation (tests/test_layering.py).

Schema history (``perfgate.results/N``):
  1  first version: spec, status, per-process raw samples, metrics, profile, accuracy, environment.
  2  adds "expectations" (the run's rules, their outcomes per case; perfgate.judging.expect) and "ceilings" (the
     machine's measured peak FLOP/s and bandwidth from `perfgate calibrate`, spec-sheet peaks; perfgate.judging.roofline).
     A version-1 file reads as one with no rules and no ceilings.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field

from perfgate.model.rules import Rule
from perfgate.util.stats import (
    PEAK_RATIO_MEANS,
    PROCESS_QUANTILE,
    RUN_TO_RUN_CPU,
    RUN_TO_RUN_CUDA,
    RUN_TO_RUN_MAX,
    Ratio,
    SampleSummary,
    peak_ratio,
    process_step_time,
    speedup_of,
    summarize,
)
from perfgate.util.validation import (
    Count,
    Document,
    Index,
    Measured,
    Name,
    NonNegative,
    Number,
    SchemaError,
    Text,
    check,
    expected,
    field_error,
    int_range,
    model_validator,
    one_of,
)
from perfgate.util.validation import read_json_file as read_json_file  # the one reader of JSON files

# The vocabulary of results lives in perfgate.util.vocabulary (the expectation rules use it too); readers keep
# importing it from here.
from perfgate.util.vocabulary import DERIVED_METRICS as DERIVED_METRICS
from perfgate.util.vocabulary import FAILURE_CLASSES as FAILURE_CLASSES
from perfgate.util.vocabulary import METRIC_KINDS as METRIC_KINDS
from perfgate.util.vocabulary import METRICS as METRICS
from perfgate.util.vocabulary import PEAK_METRICS as PEAK_METRICS
from perfgate.util.vocabulary import SKIPPED_UNCHANGED as SKIPPED_UNCHANGED
from perfgate.util.vocabulary import STATUS_FAILED as STATUS_FAILED
from perfgate.util.vocabulary import STATUS_OK as STATUS_OK
from perfgate.util.vocabulary import STATUS_SKIPPED as STATUS_SKIPPED
from perfgate.util.vocabulary import STATUSES as STATUSES
from perfgate.util.vocabulary import Metric as Metric
from perfgate.util.vocabulary import higher_is_better as higher_is_better

SCHEMA = "perfgate.results/2"
SCHEMA_HISTORY = {
    "perfgate.results/1": "first version",
    "perfgate.results/2": "expectations (rules and outcomes) and ceilings (peak FLOP/s, bandwidth)",
}

# The verdict kinds of a comparison, per case and metric. "acknowledged": a regression that an entry of
# [[tool.perfgate.acknowledge]] in force covers (perfgate.model.acknowledge); it does not fail the gate.
VERDICT_KINDS = (
    "regression", "acknowledged", "win", "unchanged", "inconclusive", "new", "missing", "newly-failing", "fixed",
    "skipped",
)
GATE_FAILING_VERDICTS = ("regression", "newly-failing")

# What an acknowledgement did with a regression it matched (perfgate.model.acknowledge): covered it, or left it a
# regression because the entry expired or the ratio is past the entry's bound.
ACK_OUTCOMES = ("acknowledged", "expired", "past-bound")
# An entry's state in a comparison: in force and matched a regression, expired, or in force and matched none.
ACK_STATES = ("in-force", "expired", "unmatched")


# ---------------------------------------------------------------- the files, as declared
#
# results.json and comparison.json (and, in perfgate.judging.baselines, a baseline around a results document):
# each field's type and what an error line says would be valid. Readers validate a decoded document
# against these (validation.check) and build the dataclasses below from the result; the JSON Schemas in
# docs/schemas/ are generated from them (python -m perfgate.commands.schemas). Keys a model does not name are
# ignored, so a file a newer perfgate wrote with more in it still reads.

MAX_SHARDS = 10_000
_Scalar = str | int | float | bool | None
EnvironmentValue = Annotated[_Scalar | list[_Scalar], expected("a string, number, true/false, null or a list of those")]
Tolerance = Annotated[Measured | dict[str, Measured | None], expected("a number, or an object of numbers (or null)")]


class VerdictDocument(Document):
    """One case x metric judged against a baseline, with the numbers that made the decision."""

    case_key: Name
    metric: Name
    kind: one_of(VERDICT_KINDS)  # type: ignore[valid-type]  # pydantic's Annotated type, built at import
    baseline: Measured | None = None
    current: Measured | None = None
    ratio: Measured | None = None
    ratio_low: Measured | None = None
    ratio_high: Measured | None = None
    p_value: Measured | None = None
    threshold: Measured | None = None
    rule: Text = ""
    advice: Text | None = None


class AckMatchDocument(Document):
    """A regression an acknowledgement matched, and what it did with it."""

    case_key: Name
    metric: Name
    outcome: one_of(ACK_OUTCOMES)  # type: ignore[valid-type]  # pydantic's Annotated type, built at import
    ratio: Measured | None = None


class AcknowledgementDocument(Document):
    """One [[tool.perfgate.acknowledge]] entry as a comparison applied it (perfgate.model.acknowledge)."""

    entry: Name  # where it stands in the configuration: "acknowledge[0]"
    case: Name
    metric: Name
    reason: Text
    expires: Text | None = None  # ISO date, the last day it is in force
    bound: Text | None = None  # "ratio <= 1.12"
    state: one_of(ACK_STATES)  # type: ignore[valid-type]  # pydantic's Annotated type, built at import
    matches: list[AckMatchDocument] = []


class ComparisonDocument(Document):
    """comparison.json: every verdict of one comparison, a run against a stored baseline or a base ref."""

    mode: one_of(("baseline", "against")) = "baseline"  # type: ignore[valid-type]  # pydantic's Annotated type, built at import
    baseline_source: Text | None = None
    environment_diff: dict[str, list[Any]] = {}
    warnings: list[Text] = []
    gate_failed: bool | None = None  # written for readers; recomputed from the verdicts
    verdicts: list[VerdictDocument]
    acknowledgements: list[AcknowledgementDocument] = []
    acknowledged_on: Text | None = None  # the date the acknowledgements' expiry was judged on (ISO)


class SpecDocument(Document):
    """What is measured: one workload x size x toggle-set x device."""

    workload: Name
    size: Name
    toggles: list[Name]
    device: Name
    dtype: Name = "float32"
    params: dict[str, Any] = {}


class GpuClocksDocument(Document):
    """A CUDA process's SM clock and throttle reasons around its samples (perfgate.worker.gpu_clocks, NVML)."""

    model_config = ConfigDict(extra="allow")
    sm_clock_mhz_before: NonNegative | None = None
    sm_clock_mhz_after: NonNegative | None = None
    max_sm_clock_mhz: NonNegative | None = None
    power_w: NonNegative | None = None
    temperature_c: Number | None = None
    throttle_reasons_before: list[Name] | None = None
    throttle_reasons_after: list[Name] | None = None
    nvml_device: Text | None = None
    error: Text | None = None


class ProcessDocument(Document):
    """The raw timing of one worker process: nanoseconds per sample of ``loops`` units of work."""

    samples_ns: list[NonNegative]
    loops: Count = 1
    steps_per_unit: Count = 1
    first_call_s: NonNegative | None = None
    warmup_units: Index = 0
    timer: Text = "perf_counter_ns"
    process_index: Index = 0
    heap_offset: Index | None = None
    layout: dict[str, Any] | None = None  # the memory layout this process drew (perfgate.protocol.layout)
    layout_groups: list[Count] | None = None  # samples per memory layout, when it sampled several
    bursts: list[Index] | None = None  # compare.py checks their sum against the samples
    gpu_clocks: GpuClocksDocument | None = None
    peak_rss_bytes: NonNegative | None = None  # this process's peak memory (memory_vs_eager's samples)
    peak_cuda_allocated_bytes: NonNegative | None = None
    peak_cuda_reserved_bytes: NonNegative | None = None


class AccuracyDocument(Document):
    """Numerical drift against the eager fp32 reference (perfgate.worker.profiling.compare_outputs)."""

    model_config = ConfigDict(extra="allow")
    max_abs: Measured | None = None  # NaN and inf allowed: the drift of a broken toggle
    mean_abs: Measured | None = None
    rel_l2: Measured | None = None
    verdict: one_of(("ok", "drift")) | None = None  # type: ignore[valid-type]  # pydantic's Annotated type, built at import
    message: Text | None = None
    tolerance: Tolerance | None = None


class TopOpDocument(Document):
    """One op or kernel of a profile's ``top_ops`` (perfgate.worker.profiling.top_ops): what the op diffs read."""

    model_config = ConfigDict(extra="allow")
    name: Text
    kind: Text = "op"
    count_per_step: Measured | None = None
    self_time_us_per_step: Measured | None = None


class MemorySiteDocument(Document):
    """One allocation site of a step (perfgate.worker.allocations): what a memory regression's report diffs."""

    model_config = ConfigDict(extra="allow")
    site: Text
    op: Text | None = None
    file: Text | None = None
    line: Index | None = None
    bytes_per_step: NonNegative = 0.0
    allocations_per_step: NonNegative = 0.0


class MemorySitesDocument(Document):
    """Where one step of a case allocates: its top sites, most bytes first."""

    model_config = ConfigDict(extra="allow")
    source: Text | None = None
    steps: Count = 1
    total_bytes_per_step: NonNegative | None = None
    sites: list[MemorySiteDocument] = []


class ProfileDocument(Document):
    """A case's profile detail: free-form, but for the fields the reports read (a number where report.html
    joins a list, or a list where it builds a path, crashed it: exit 3, "a perfgate bug")."""

    model_config = ConfigDict(extra="allow")
    top_ops: list[TopOpDocument] | None = None
    graph_break_reasons: list[Text] | None = None
    trace_dir: Text | None = None
    trace_file: Text | None = None
    errors: list[Text] | None = None
    memory_sites: MemorySitesDocument | None = None
    memory_snapshot: Text | None = None  # the CUDA allocator's snapshot, relative to the run folder


class CaseDocument(Document):
    """What came of one case: status, raw samples per process, the metrics of the profile pass."""

    spec: SpecDocument
    key: Text | None = None  # written for readers: the spec's key
    status: one_of(STATUSES)  # type: ignore[valid-type]  # pydantic's Annotated type, built at import
    failure_class: Name | None = None
    message: Text | None = None
    processes: list[ProcessDocument] = []
    metrics: dict[str, Measured] = {}
    profile: ProfileDocument = ProfileDocument()
    accuracy: AccuracyDocument = AccuracyDocument()
    duration_s: NonNegative = 0.0
    metadata: dict[str, Any] = {}
    derived: dict[str, Any] = {}  # statistics written for readers; recomputed, never read back


class ShardDocument(Document):
    """settings.shard as `run --shard` and `merge` write it (perfgate.gating.merge reads every field)."""

    model_config = ConfigDict(extra="allow")
    index: Count | None = None
    count: int_range(1, MAX_SHARDS)  # type: ignore[valid-type]  # merge walks 1..count: a huge count would hang it
    merged: list[Count] | None = None
    plan: list[Name] | None = None
    missing_cases: list[Name] | None = None
    cases_total: Index | None = None
    cost_source: Text | None = None

    @model_validator(mode="after")
    def _index_within_count(self) -> ShardDocument:
        if self.index is not None and self.index > self.count:
            raise field_error("index", f"an integer from 1 to count ({self.count})")
        return self


class SettingsDocument(Document):
    """How the run was made (threads, processes, timing budget...); free-form but for its shard record."""

    model_config = ConfigDict(extra="allow")
    shard: ShardDocument | None = None


class ExpectationsDocument(Document):
    """The run's rules (perfgate.model.rules) and their outcomes, judged when the run is written (perfgate.judging.expect)."""

    model_config = ConfigDict(extra="allow")
    rules: list[dict[str, Any]] = []
    outcomes: list[dict[str, Any]] = []
    unmatched: list[Any] = []


class ResultsDocument(Document):
    """results.json: one run of perfgate, its environment fingerprint and every case with its raw samples."""

    schema_version: Literal[SCHEMA] = Field(alias="schema")  # type: ignore[valid-type]  # older versions are upgraded before
    run_id: Name
    suite: Name | None = None
    started_at: Text = ""
    finished_at: Text | None = None
    environment: dict[str, EnvironmentValue] = {}
    settings: SettingsDocument = SettingsDocument()
    cases: list[CaseDocument] = []
    ceilings: dict[str, Any] = {}
    expectations: ExpectationsDocument


@dataclass(frozen=True)
class Verdict:
    """One case x metric judged against a baseline, with the numbers that made the decision."""

    case_key: str
    metric: str  # "step_time", "accuracy", "status", or a METRIC_KINDS name
    kind: str  # one of VERDICT_KINDS
    baseline: float | None = None
    current: float | None = None
    ratio: float | None = None  # current / baseline
    ratio_low: float | None = None
    ratio_high: float | None = None
    p_value: float | None = None
    threshold: float | None = None  # the relative change that counts as large, or the tolerance used
    rule: str = ""  # the rule applied, in words
    advice: str | None = None

    @property
    def fails_gate(self) -> bool:
        return self.kind in GATE_FAILING_VERDICTS

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Any, source: str = "comparison", where: str = "verdict") -> Verdict:
        """A Verdict read back from a comparison.json; SchemaError naming the field when malformed."""
        doc = check(VerdictDocument, data, source, where)
        return cls(**{name: getattr(doc, name) for name in VerdictDocument.model_fields})


def _freeze_params(params: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted(params.items()))


@dataclass(frozen=True)
class CaseSpec:
    """What is measured: one workload x size x toggle-set x device. Hashable; the baseline key."""

    workload: str
    size: str
    toggles: tuple[str, ...]
    device: str
    params: tuple[tuple[str, Any], ...] = ()
    dtype: str = "float32"

    @property
    def toggle_name(self) -> str:
        return "+".join(self.toggles)

    @property
    def key(self) -> str:
        """Stable identity across runs: workload/size/toggles/device."""
        return f"{self.workload}/{self.size}/{self.toggle_name}/{self.device}"

    @property
    def param_dict(self) -> dict[str, Any]:
        return dict(self.params)

    def to_json(self) -> dict[str, Any]:
        return {
            "workload": self.workload,
            "size": self.size,
            "toggles": list(self.toggles),
            "device": self.device,
            "dtype": self.dtype,
            "params": self.param_dict,
        }

    @classmethod
    def from_json(cls, data: Any, source: str = "results", where: str = "spec") -> CaseSpec:
        return cls.from_document(check(SpecDocument, data, source, where))

    @classmethod
    def from_document(cls, doc: SpecDocument) -> CaseSpec:
        return cls(workload=doc.workload, size=doc.size, toggles=tuple(doc.toggles), device=doc.device,
                   dtype=doc.dtype, params=_freeze_params(doc.params))


@dataclass
class ProcessSamples:
    """The raw timing of one worker process: the first call, warm-up, then samples of the unit of work.

    ``samples_ns`` are nanoseconds per sample; one sample is ``loops`` units of ``steps_per_unit`` steps.
    """

    samples_ns: list[int]
    loops: int = 1
    steps_per_unit: int = 1
    first_call_s: float | None = None
    warmup_units: int = 0
    timer: str = "perf_counter_ns"
    process_index: int = 0
    # bytes this process allocated before anything of the workload (its layout's heap_offset); None in
    # results written before heap offsets existed
    heap_offset: int | None = None
    # the memory layout this process drew (perfgate.protocol.layout: policy, seed, heap_offset, mmap_pages); None in
    # results written before layouts were drawn
    layout: dict[str, Any] | None = None
    # samples per memory layout when the process sampled several, one after the other (perfgate.protocol.layout), else None
    layout_groups: list[int] | None = None
    # samples per burst when sampled in lockstep with a paired process (``--against``), else None
    bursts: list[int] | None = None
    # the GPU's SM clock and clocks-event (throttle) reasons before and after the samples, read through
    # NVML (perfgate.worker.gpu_clocks); None on CPU, without nvidia-ml-py, and in results written before it
    gpu_clocks: dict[str, Any] | None = None
    # this process's peak memory after its timed samples (perfgate.worker.profiling.process_peaks): its peak
    # resident set, and on CUDA the allocator's peak over one unit; None in results written before them
    peak_rss_bytes: float | None = None
    peak_cuda_allocated_bytes: float | None = None
    peak_cuda_reserved_bytes: float | None = None

    @property
    def step_times_s(self) -> list[float]:
        per = 1e-9 / (self.loops * self.steps_per_unit)
        return [ns * per for ns in self.samples_ns]

    def step_time(self, quantile: float) -> float:
        """The process's step time as the gate judges it (``stats.process_step_time``), seconds."""
        return process_step_time(self.step_times_s, quantile, self.layout_groups)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Any, source: str = "results", where: str = "process") -> ProcessSamples:
        return cls.from_document(check(ProcessDocument, data, source, where))

    @classmethod
    def from_document(cls, doc: ProcessDocument) -> ProcessSamples:
        fields = {name: getattr(doc, name) for name in ProcessDocument.model_fields}
        if doc.gpu_clocks is not None:
            fields["gpu_clocks"] = doc.gpu_clocks.model_dump(exclude_unset=True)
        return cls(**fields)


@dataclass
class CaseResult:
    """What came of one case: status, raw samples per process, and the metrics of the profile pass."""

    spec: CaseSpec
    status: str
    processes: list[ProcessSamples] = field(default_factory=list)
    failure_class: str | None = None
    message: str | None = None
    # deterministic, memory and compile metrics by name (kernels_per_step, peak_cuda_bytes, graph_breaks...)
    metrics: dict[str, float] = field(default_factory=dict)
    # free-form profile detail: top ops/kernels, graph-break reasons, trace paths
    profile: dict[str, Any] = field(default_factory=dict)
    # numerical drift against the eager fp32 reference: max_abs, mean_abs, rel_l2, verdict ok|drift
    accuracy: dict[str, Any] = field(default_factory=dict)
    duration_s: float = 0.0
    # how the numbers were obtained: warm-up rule, sample budget, threads, seed
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return self.spec.key

    @property
    def skipped_as_unchanged(self) -> bool:
        """Skipped by `run --changed-since`: nothing its workload depends on changed (perfgate.running.changes)."""
        return self.status == STATUS_SKIPPED and isinstance(self.metadata, dict) \
            and self.metadata.get("skipped_as") == SKIPPED_UNCHANGED

    @property
    def step_samples_s(self) -> list[float]:
        """Every step-time sample of every process, in seconds per step."""
        return [t for p in self.processes for t in p.step_times_s]

    def step_time(self, quantile: float = PROCESS_QUANTILE, confidence: float = 0.95,
                  run_to_run: float = 0.0) -> SampleSummary | None:
        """The case's step-time summary (``stats.summarize``): its interval from the processes' ``quantile``
        step times at ``confidence``, with ``run_to_run`` added (``RunResult.step_time`` passes the run's)."""
        samples = self.step_samples_s
        if self.status != STATUS_OK or not samples:
            return None
        return summarize(samples, groups=[p.step_times_s for p in self.processes], confidence=confidence,
                         quantile_of_process=quantile, layouts=[p.layout_groups for p in self.processes],
                         run_to_run=run_to_run)

    @property
    def first_call_s(self) -> float | None:
        firsts = [p.first_call_s for p in self.processes if p.first_call_s is not None]
        return max(firsts) if firsts else None

    def peaks(self, metric: str) -> list[float]:
        """The case's peak memory ``metric`` (a PEAK_METRICS name) per worker process; where its processes
        recorded none (results written before they did), the profile pass's one value; [] without either."""
        def finite(v: Any) -> float | None:
            ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
            return float(v) if ok else None

        per_process = [finite(getattr(p, metric, None)) for p in self.processes]
        if per_process and all(v is not None for v in per_process):
            return [v for v in per_process if v is not None]
        v = finite(self.metrics.get(metric))
        return [v] if v is not None else []

    def to_json(self) -> dict[str, Any]:
        return {
            "spec": self.spec.to_json(),
            "key": self.key,
            "status": self.status,
            "failure_class": self.failure_class,
            "message": self.message,
            "processes": [p.to_json() for p in self.processes],
            "metrics": self.metrics,
            "profile": self.profile,
            "accuracy": self.accuracy,
            "duration_s": self.duration_s,
            "metadata": self.metadata,
            "derived": self.derived_json(self.step_time()),
        }

    def derived_json(self, st: SampleSummary | None, memory: tuple[str, Ratio] | None = None) -> dict[str, Any]:
        """Convenience copy of the statistics (``st``: the case's step time; ``memory``: its peak memory
        against eager's, ``RunResult.memory_vs_eager``) for readers of the file; recomputed, never read back."""
        if st is None:
            return {}
        return {
            "step_time_s": st.to_json(),
            "throughput_steps_per_s": 1.0 / st.value if st.value > 0 else None,
            "first_call_s": self.first_call_s,
            **({"memory_vs_eager": {**memory[1].to_json(), "metric": memory[0]}} if memory else {}),
        }

    @classmethod
    def from_json(cls, data: Any, source: str = "results", where: str = "case") -> CaseResult:
        return cls.from_document(check(CaseDocument, data, source, where))

    @classmethod
    def from_document(cls, doc: CaseDocument) -> CaseResult:
        return cls(
            spec=CaseSpec.from_document(doc.spec),
            status=doc.status,
            processes=[ProcessSamples.from_document(p) for p in doc.processes],
            failure_class=doc.failure_class,
            message=doc.message,
            metrics=dict(doc.metrics),
            profile=doc.profile.model_dump(exclude_unset=True),
            accuracy=doc.accuracy.model_dump(exclude_unset=True),
            duration_s=float(doc.duration_s),
            metadata=dict(doc.metadata),
        )


@dataclass
class RunResult:
    """One run of perfgate: its environment fingerprint and one CaseResult per case."""

    run_id: str
    suite: str | None
    environment: dict[str, Any]
    cases: list[CaseResult] = field(default_factory=list)
    started_at: str = ""
    finished_at: str | None = None
    settings: dict[str, Any] = field(default_factory=dict)
    # the expectation rules this run is checked against (perfgate.model.rules.Rule.to_json)
    expectations: list[dict[str, Any]] = field(default_factory=list)
    # what came of those rules on this run's cases, as perfgate.judging.expect.judge stored it (outcomes, unmatched,
    # counts, gate_failed), or as the file read held it; plain data, written as it is. A copy with other
    # cases keeps it as it was: the writers of results.json and baselines judge the run again
    expectation_outcomes: dict[str, Any] = field(default_factory=dict)
    # this machine's ceilings (perfgate.judging.roofline): {"measured": {...}, "spec": {...}}, empty when unknown
    ceilings: dict[str, Any] = field(default_factory=dict)
    schema: str = SCHEMA

    @property
    def what_ran(self) -> str:
        """The run named for a reader: ``suite 'smoke'``, or for cases chosen on the command line without
        ``--suite`` (``settings["selection"]``), the selection and the suite its other choices came from."""
        selection = self.settings.get("selection")
        if selection:
            return f"a selection ({selection}) with defaults from suite {self.suite!r}"
        return f"suite {self.suite!r}" if self.suite else "no suite"

    @property
    def part_of_suite(self) -> str:
        """Why the run holds only part of its suite's cases, in words ('shard 1/3', 'a selection (workloads x)',
        'a merge missing 2 planned case(s)'), or '' for a run of the whole suite."""
        settings = self.settings if isinstance(self.settings, dict) else {}
        shard = settings.get("shard")
        if isinstance(shard, dict):
            if shard.get("index") is not None:
                return f"shard {shard.get('index')}/{shard.get('count')}"
            missing = shard.get("missing_cases")
            if isinstance(missing, list) and missing:
                return f"a merge missing {len(missing)} planned case(s)"
        chosen = settings.get("selection") or settings.get("filters")
        if chosen:
            return f"a selection ({chosen})"
        changed = settings.get("changed_since")  # `run --changed-since` chose workloads (not everything)
        if isinstance(changed, dict) and isinstance(changed.get("workloads"), list):
            return f"the cases a change since {str(changed.get('since'))[:100]} touches"
        return ""

    def gate_setting(self, key: str, default: float, low: float, high: float) -> float:
        """A number from the run's recorded ``[tool.perfgate.gate]`` (``settings["gate"]``): a results.json is
        untrusted, so ``default`` where it recorded none, or something other than a number in [low, high]."""
        settings = self.settings if isinstance(self.settings, dict) else {}
        gate = settings.get("gate")
        value = gate.get(key, default) if isinstance(gate, dict) else default
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
            return default
        return float(value)

    @property
    def process_quantile(self) -> float:
        """The quantile of each process's samples the gate judged this run's step times by (``[tool.perfgate.gate]
        process_quantile`` as recorded; stats.PROCESS_QUANTILE where none or nonsense was)."""
        return self.gate_setting("process_quantile", PROCESS_QUANTILE, 0.0, 0.5)

    def case(self, key: str) -> CaseResult | None:
        for c in self.cases:
            if c.key == key:
                return c
        return None

    def with_case(self, result: CaseResult) -> RunResult:
        """A copy with ``result`` added, replacing an earlier result for the same case."""
        cases = [c for c in self.cases if c.key != result.key] + [result]
        return replace(self, cases=cases)

    def eager_for(self, case: CaseResult) -> CaseResult | None:
        """The eager case of the same workload, size and device in this run: the speedup reference."""
        spec = case.spec
        return self.case(f"{spec.workload}/{spec.size}/eager/{spec.device}")

    @property
    def confidence(self) -> float:
        """The confidence of the run's intervals (``[tool.perfgate.gate] confidence`` as recorded)."""
        return self.gate_setting("confidence", 0.95, 0.5, 0.999)

    def run_to_run(self, case: CaseResult) -> float:
        """The run-to-run term (relative sd) of ``case``'s device as the run recorded ``[tool.perfgate.gate]``
        (``run_to_run``, or ``run_to_run_cuda`` on a GPU; their defaults where none was set): what a figure
        meant to hold another run's, or compared with a case measured at another time, adds."""
        if case.spec.device.startswith("cuda"):
            return self.gate_setting("run_to_run_cuda", RUN_TO_RUN_CUDA, 0.0, RUN_TO_RUN_MAX)
        return self.gate_setting("run_to_run", RUN_TO_RUN_CPU, 0.0, RUN_TO_RUN_MAX)

    def step_time(self, case: CaseResult) -> SampleSummary | None:
        """``case``'s step time with the interval every report prints: from its processes' step times (the
        run's ``process_quantile``) at the run's confidence, plus the run-to-run term (``run_to_run``), so
        that it is meant to hold the case's median in another run on this machine (docs/reports.md)."""
        return case.step_time(self.process_quantile, self.confidence, self.run_to_run(case))

    def speedup(self, case: CaseResult) -> Ratio | None:
        """Speedup of ``case`` against eager in this run (eager time / case time) with its interval: both
        cases' processes, plus the run-to-run term, since the two ran at different times (``ratio_of``).
        Eager against itself is 1 by definition, not a noisy ratio."""
        eager = self.eager_for(case)
        if eager is None:
            return None
        return speedup_of(self.step_time(eager), self.step_time(case), eager is case, self.run_to_run(case))

    def memory_vs_eager(self, case: CaseResult) -> tuple[str, Ratio] | None:
        """(the peak metric compared, ``case``'s peak memory / eager's in this run with its interval over both
        cases' worker processes, ``stats.peak_ratio``): CUDA allocated on a GPU, the process's resident set
        on CPU (PEAK_METRICS, the first both cases measured). Eager against itself is 1 by definition. None
        without an eager case that ran, or a peak on either side."""
        eager = self.eager_for(case)
        if eager is None or case.status != STATUS_OK or eager.status != STATUS_OK:
            return None
        for metric in PEAK_METRICS:
            mine, theirs = case.peaks(metric), eager.peaks(metric)
            if mine and theirs:
                if eager is case:
                    return metric, Ratio(1.0, 1.0, 1.0, PEAK_RATIO_MEANS)
                ratio = peak_ratio(mine, theirs, self.confidence)
                return (metric, ratio) if ratio is not None else None
        return None

    def counts(self) -> dict[str, int]:
        out = dict.fromkeys(STATUSES, 0)
        for c in self.cases:
            out[c.status] += 1
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": self.schema,
            "run_id": self.run_id,
            "suite": self.suite,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "environment": self.environment,
            "settings": self.settings,
            "cases": [{**c.to_json(), "derived": c.derived_json(self.step_time(c), self.memory_vs_eager(c))}
                      for c in self.cases],
            "ceilings": self.ceilings,
            "expectations": {"rules": self.expectations, "outcomes": [], "unmatched": [],
                             **self.expectation_outcomes},
        }

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=1, sort_keys=False, default=str) + "\n"

    @classmethod
    def from_json(cls, data: Any, source: str = "results", where: str = "") -> RunResult:
        """A RunResult from a decoded results document of any readable version; SchemaError naming
        ``source`` and the field for anything wrong."""
        return cls.from_document(check(ResultsDocument, readable(data, source, where), source, where), source)

    @classmethod
    def from_document(cls, doc: ResultsDocument, source: str = "results") -> RunResult:
        rules = doc.expectations.rules
        try:
            for r in rules:  # a malformed rule is a malformed file, said at load
                Rule.from_json(r)
        except (KeyError, TypeError, ValueError) as exc:
            raise SchemaError(f"{source}: malformed results ({type(exc).__name__}: {exc})") from exc
        outcomes = {k: v for k, v in doc.expectations.model_dump(exclude_unset=True).items() if k != "rules"}
        return cls(
            run_id=doc.run_id,
            suite=doc.suite,
            environment=dict(doc.environment),
            cases=[CaseResult.from_document(c) for c in doc.cases],
            started_at=doc.started_at,
            finished_at=doc.finished_at,
            settings=doc.settings.model_dump(exclude_unset=True),
            expectations=[dict(r) for r in rules],
            expectation_outcomes=outcomes,
            ceilings=dict(doc.ceilings),
            schema=SCHEMA,
        )


def readable(data: Any, source: str, where: str = "") -> Any:
    """``data`` brought up to the current results schema; SchemaError when it is not a results document
    of a version this perfgate reads."""
    if not isinstance(data, dict):
        raise SchemaError(f"{source}: {where + ': ' if where else ''}expected a JSON object, got {type(data).__name__}")
    schema = data.get("schema")
    if not isinstance(schema, str) or schema not in SCHEMA_HISTORY:
        raise SchemaError(
            f"{source}: unknown schema {schema!r}; this perfgate reads {', '.join(SCHEMA_HISTORY)}"
        )
    return upgrade(data)


def upgrade(data: dict[str, Any]) -> dict[str, Any]:
    """Bring an older results document up to the current schema, one version at a time."""
    if data.get("schema") == "perfgate.results/1":
        data = {**data, "schema": "perfgate.results/2", "expectations": {"rules": [], "outcomes": []}, "ceilings": {}}
    return data


def load_results(path: str | Path) -> RunResult:
    """Read a results.json; raises SchemaError naming the file for anything unreadable."""
    p = Path(path)
    if p.is_dir():
        p = p / "results.json"
    return RunResult.from_json(read_json_file(p, "results"), source=str(p))


@dataclass(frozen=True)
class AckMatch:
    """A regression an acknowledgement matched: ``outcome`` is one of ACK_OUTCOMES."""

    case_key: str
    metric: str
    outcome: str
    ratio: float | None = None


@dataclass(frozen=True)
class Acknowledgement:
    """One [[tool.perfgate.acknowledge]] entry as a comparison applied it: the entry's terms, its ``state``
    (ACK_STATES) and the regressions it matched. perfgate.model.acknowledge makes these."""

    entry: str  # "acknowledge[0]": its place in the configuration, as error lines name it
    case: str
    metric: str
    reason: str
    state: str
    expires: str | None = None
    bound: str | None = None
    matches: tuple[AckMatch, ...] = ()

    @property
    def terms(self) -> str:
        """'until 2026-12-31, while ratio <= 1.12': what keeps it in force."""
        parts = ([f"until {self.expires}"] if self.expires else []) + ([f"while {self.bound}"] if self.bound else [])
        return ", ".join(parts)

    def matched(self, outcome: str) -> list[AckMatch]:
        return [m for m in self.matches if m.outcome == outcome]

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "matches": [asdict(m) for m in self.matches]}

    @classmethod
    def from_json(cls, data: Any, source: str = "comparison", where: str = "acknowledgements") -> Acknowledgement:
        doc = check(AcknowledgementDocument, data, source, where)
        return cls(entry=doc.entry, case=doc.case, metric=doc.metric, reason=doc.reason, state=doc.state,
                   expires=doc.expires, bound=doc.bound,
                   matches=tuple(AckMatch(m.case_key, m.metric, m.outcome, m.ratio) for m in doc.matches))


@dataclass
class Comparison:
    """Every verdict of one comparison: a run against a stored baseline or against a base ref's run.

    Produced by perfgate.judging.compare; consumed by the console, the exporters and the gate's exit code.
    """

    verdicts: list[Verdict]
    mode: str = "baseline"  # "baseline" (a stored file) or "against" (base and head in the same job)
    baseline_source: str | None = None  # the baseline file's path, or "git:REF"
    baseline: RunResult | None = None
    # environment keys that differ: {key: [baseline value, current value]}
    environment_diff: dict[str, list[Any]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    # every [[tool.perfgate.acknowledge]] entry as applied (perfgate.model.acknowledge.apply), and the date its
    # expiry was judged on (ISO); empty and None when none was applied
    acknowledgements: list[Acknowledgement] = field(default_factory=list)
    acknowledged_on: str | None = None

    @property
    def gate_failed(self) -> bool:
        return any(v.fails_gate for v in self.verdicts)

    def counts(self) -> dict[str, int]:
        out = dict.fromkeys(VERDICT_KINDS, 0)
        for v in self.verdicts:
            out[v.kind] += 1
        return out

    def for_case(self, key: str) -> list[Verdict]:
        return [v for v in self.verdicts if v.case_key == key]

    def to_json(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "baseline_source": self.baseline_source,
            "environment_diff": self.environment_diff,
            "warnings": self.warnings,
            "gate_failed": self.gate_failed,
            "verdicts": [v.to_json() for v in self.verdicts],
            "acknowledgements": [a.to_json() for a in self.acknowledgements],
            "acknowledged_on": self.acknowledged_on,
        }


@dataclass(frozen=True)
class Evidence:
    """What a comparison of ``run`` rests on, counted over the run's cases. A case carried evidence when it
    ran now and was judged against the base (``compared``: it ran on both sides; or it is new to the base,
    or fixed), or when its status fails the gate (newly failing). One skipped now, or failing now as it did
    in the base (or new to it), carried none: a gate with no case that carried evidence cannot pass."""

    cases: int
    carried: int
    compared: int
    skipped: int  # of those that carried none
    unchanged: int = 0  # cases `run --changed-since` skipped: not among ``cases``, evidence of nothing either way

    @property
    def unjudged(self) -> str:
        """Why the cases that carried none did: '1 skipped, 1 failed as in the base or new to it'."""
        return f"{self.skipped} skipped, {self.cases - self.carried - self.skipped} failed as in the base or new to it"

    @property
    def none_compared(self) -> str:
        """Why a gate on this evidence cannot pass ('' when it can): no case ran to be judged, or none was
        compared with the base (each new to it, or fixed: nothing says how the head's figures compare). A run
        whose every case was skipped as unchanged by the change has nothing to pass on and nothing to doubt."""
        if self.cases == 0 and self.unchanged:
            return ""
        if self.carried == 0:
            return f"none of the {self.cases} case(s) ran to be judged ({self.unjudged})"
        if self.compared == 0:
            return f"none of the {self.cases} case(s) was compared with the base (each is new to it or fixed)"
        return ""

    @property
    def text(self) -> str:
        """'evidence: 2 of 3 case(s) ran and were judged (2 compared with the base); 1 carried none (...)'."""
        none = self.cases - self.carried
        return (f"evidence: {self.carried} of {self.cases} case(s) ran and were judged ({self.compared} compared "
                f"with the base)" + (f"; {none} carried none ({self.unjudged})" if none else ""))


def evidence(run: RunResult, comparison: Comparison) -> Evidence:
    """The evidence ``comparison`` of ``run`` rests on (Evidence)."""
    failing = {v.case_key for v in comparison.verdicts if v.fails_gate}
    compared = {v.case_key for v in comparison.verdicts if v.metric != "status"}
    cases = [c for c in run.cases if not c.skipped_as_unchanged or c.key in failing]
    none = [c for c in cases if c.status != STATUS_OK and c.key not in failing]
    return Evidence(cases=len(cases), carried=len(cases) - len(none),
                    compared=sum(1 for c in cases if c.key in compared),
                    skipped=sum(1 for c in none if c.status == STATUS_SKIPPED),
                    unchanged=len(run.cases) - len(cases))
