"""The data model: what was measured (CaseSpec), what came of it (CaseResult), a whole run (RunResult).

No torch here: results are read, compared and reported on machines without a GPU or torch.
Derived statistics are computed from the raw samples when asked, so nothing stored can go stale.
Nothing here judges: the outcomes of a run's expectation rules are evaluated by perfgate.judging.expect (``judge``,
called by the writers of results.json and baselines) and carried here as plain data. The model imports
only its vocabulary, the rule language, statistics and validation (tests/test_layering.py). Each record is
declared once, as a dataclass whose field types are what its file must hold; its document is generated from it
(below each). The documents inside a record that it keeps as plain data, the schema versions and their upgrade
are perfgate.model.results_file's; a comparison of runs is perfgate.model.comparison's.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel

from perfgate.model.results_file import (
    SCHEMA,
    AccuracyDocument,
    EnvironmentValue,
    ExpectationsDocument,
    GpuClocksDocument,
    ProfileDocument,
    SettingsDocument,
    readable,
)
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
    VERSION,
    Count,
    Index,
    Measured,
    Name,
    NonNegative,
    SchemaError,
    Stored,
    Text,
    check,
    document,
    from_document,
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

# Each record below is declared once, as a dataclass whose field types say what its file must hold
# (validation's value types: Name, Count...), and ``Stored(...)`` where the file holds it in another shape
# (another type, key or default, or inside another field: a run's expectations and their outcomes share one
# object); its Document (SpecDocument, ProcessDocument, CaseDocument, ResultsDocument) is generated from it
# (validation.document) and a validated document read back into it (validation.from_document).
# tests/test_model.py holds each writer to the fields its document reads.


def _freeze_params(params: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted(params.items()))


def _dumped(doc: BaseModel | None) -> dict[str, Any] | None:
    """A free-form sub-document as the record holds it: the keys the file set, checked ones and the rest."""
    return doc.model_dump(exclude_unset=True) if doc is not None else None


@dataclass(frozen=True)
class CaseSpec:
    """What is measured: one workload x size x toggle-set x device. Hashable; the baseline key."""

    workload: Name
    size: Name
    toggles: Annotated[tuple[str, ...], Stored(list[Name], read=tuple)]
    device: Name
    # sorted (name, value) pairs, so that the spec hashes; an object in the file
    params: Annotated[tuple[tuple[str, Any], ...], Stored(dict[str, Any], default={}, read=_freeze_params)] = ()
    dtype: Name = "float32"

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
        return from_document(cls, check(SpecDocument, data, source, where))


SpecDocument = document(CaseSpec, "SpecDocument")


@dataclass
class ProcessSamples:
    """The raw timing of one worker process: the first call, warm-up, then samples of the unit of work.

    ``samples_ns`` are nanoseconds per sample; one sample is ``loops`` units of ``steps_per_unit`` steps.
    """

    samples_ns: list[NonNegative]
    loops: Count = 1
    steps_per_unit: Count = 1
    first_call_s: NonNegative | None = None
    warmup_units: Index = 0
    timer: Text = "perf_counter_ns"
    process_index: Index = 0
    # bytes this process allocated before anything of the workload (its layout's heap_offset); None in
    # results written before heap offsets existed
    heap_offset: Index | None = None
    # the memory layout this process drew (perfgate.protocol.layout: policy, seed, heap_offset, mmap_pages); None in
    # results written before layouts were drawn
    layout: dict[str, Any] | None = None
    # samples per memory layout when the process sampled several, one after the other (perfgate.protocol.layout), else None
    layout_groups: list[Count] | None = None
    # samples per burst when sampled in lockstep with a paired process (``--against``), else None; compare.py
    # checks their sum against the samples
    bursts: list[Index] | None = None
    # the GPU's SM clock and clocks-event (throttle) reasons before and after the samples, read through
    # NVML (perfgate.worker.gpu_clocks); None on CPU, without nvidia-ml-py, and in results written before it
    gpu_clocks: Annotated[dict[str, Any] | None, Stored(GpuClocksDocument | None, read=_dumped)] = None
    # this process's peak memory after its timed samples (perfgate.worker.peak_memory.process_peaks): its peak
    # resident set, and on CUDA the allocator's peak over one unit; None in results written before them
    peak_rss_bytes: NonNegative | None = None
    peak_cuda_allocated_bytes: NonNegative | None = None
    peak_cuda_reserved_bytes: NonNegative | None = None

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
        return from_document(cls, check(ProcessDocument, data, source, where))


ProcessDocument = document(ProcessSamples, "ProcessDocument")


@dataclass
class CaseResult:
    """What came of one case: status, raw samples per process, and the metrics of the profile pass."""

    spec: Annotated[CaseSpec, Stored(SpecDocument)]
    status: Annotated[str, Stored(one_of(STATUSES))]
    processes: Annotated[list[ProcessSamples], Stored(list[ProcessDocument])] = field(default_factory=list)
    failure_class: Name | None = None
    message: Text | None = None
    # deterministic, memory and compile metrics by name (kernels_per_step, peak_cuda_bytes, graph_breaks...)
    metrics: Annotated[dict[str, float], Stored(dict[str, Measured])] = field(default_factory=dict)
    # free-form profile detail: top ops/kernels, graph-break reasons, trace paths; the fields the reports read
    # are checked (ProfileDocument)
    profile: Annotated[dict[str, Any], Stored(ProfileDocument, default=ProfileDocument(), read=_dumped)] = \
        field(default_factory=dict)
    # numerical drift against the eager fp32 reference: max_abs, mean_abs, rel_l2, verdict ok|drift
    accuracy: Annotated[dict[str, Any], Stored(AccuracyDocument, default=AccuracyDocument(), read=_dumped)] = \
        field(default_factory=dict)
    duration_s: Annotated[float, Stored(NonNegative, read=float)] = 0.0
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
        return from_document(cls, check(CaseDocument, data, source, where))


# what a file holds of a case besides: its spec's key, and statistics for readers (recomputed, never read back)
CaseDocument = document(CaseResult, "CaseDocument", key=(Text | None, None), derived=(dict[str, Any], {}))


def _rules(expectations: ExpectationsDocument) -> list[dict[str, Any]]:
    """A run's expectation rules of the file's "expectations" (they are checked as rules after reading)."""
    return [dict(r) for r in expectations.rules]


def _outcomes(expectations: ExpectationsDocument) -> dict[str, Any]:
    """What came of a run's expectation rules: the file's "expectations" but for the rules, as it holds them."""
    return {k: v for k, v in expectations.model_dump(exclude_unset=True).items() if k != "rules"}


@dataclass
class RunResult:
    """One run of perfgate: its environment fingerprint and one CaseResult per case."""

    run_id: Name
    suite: Annotated[str | None, Stored(Name | None, default=None)]
    environment: Annotated[dict[str, Any], Stored(dict[str, EnvironmentValue], default={})]
    cases: Annotated[list[CaseResult], Stored(list[CaseDocument])] = field(default_factory=list)
    started_at: Text = ""
    finished_at: Text | None = None
    # how the run was made (threads, processes, timing budget, its shard...)
    settings: Annotated[dict[str, Any], Stored(SettingsDocument, default=SettingsDocument(), read=_dumped)] = \
        field(default_factory=dict)
    # the expectation rules this run is checked against (perfgate.model.rules.Rule.to_json); the file holds them
    # in "expectations", beside their outcomes
    expectations: Annotated[list[dict[str, Any]], Stored(ExpectationsDocument, default=..., read=_rules)] = \
        field(default_factory=list)
    # what came of those rules on this run's cases, as perfgate.judging.expect.judge stored it (outcomes, unmatched,
    # counts, gate_failed), or as the file read held it; plain data, written as it is. A copy with other
    # cases keeps it as it was: the writers of results.json and baselines judge the run again
    expectation_outcomes: Annotated[dict[str, Any], Stored(key="expectations", read=_outcomes)] = \
        field(default_factory=dict)
    # this machine's ceilings (perfgate.judging.roofline): {"measured": {...}, "spec": {...}}, empty when unknown
    ceilings: dict[str, Any] = field(default_factory=dict)
    # the file's schema version: an older one reads as this one (results_file.upgrade)
    schema: Annotated[str, Stored(key=VERSION)] = SCHEMA

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
        """The run-to-run term (relative sd) of ``case``: what a figure meant to hold another run's, or compared
        with a case measured at another time, adds. The term its sampling recorded (``sampling.run_to_run``:
        the case's calibration on this machine, else the device's default, as its settle line said); in a
        run without one, the device's as the run recorded ``[tool.perfgate.gate]`` (``run_to_run``, or
        ``run_to_run_cuda`` on a GPU; their defaults where none was set)."""
        sampling = case.metadata.get("sampling")
        recorded = sampling.get("run_to_run") if isinstance(sampling, dict) else None
        if not isinstance(recorded, bool) and isinstance(recorded, (int, float)) and 0 <= recorded <= RUN_TO_RUN_MAX:
            return float(recorded)
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
        return checked(from_document(cls, check(ResultsDocument, readable(data, source, where), source, where)), source)


# results.json: a run as RunResult declares it, named by its schema version, and each case's statistics for
# readers (CaseDocument's "derived")
ResultsDocument = document(
    RunResult, "ResultsDocument", version=SCHEMA,
    doc="results.json: one run of perfgate, its environment fingerprint and every case with its raw samples.")


def checked(run: RunResult, source: str = "results") -> RunResult:
    """``run`` as read from ``source``, once its expectation rules are known to be rules: a malformed rule is
    a malformed file, said at load (SchemaError)."""
    try:
        for r in run.expectations:
            Rule.from_json(r)
    except (KeyError, TypeError, ValueError) as exc:
        raise SchemaError(f"{source}: malformed results ({type(exc).__name__}: {exc})") from exc
    return run


def load_results(path: str | Path) -> RunResult:
    """Read a results.json; raises SchemaError naming the file for anything unreadable."""
    p = Path(path)
    if p.is_dir():
        p = p / "results.json"
    return RunResult.from_json(read_json_file(p, "results"), source=str(p))

