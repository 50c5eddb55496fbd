"""results.json as declared, but for its records: the documents inside a case that the model holds as
plain data (a process's GPU clocks, a case's profile and accuracy, a run's settings and expectations), each
field's type and what an error line says would be valid; the schema versions this perfgate reads, and the
upgrade of an older file (``readable``).

The records themselves (a case's spec, a process's samples, a case, a run; perfgate.model.results) are
declared once, as dataclasses, and their documents (SpecDocument, ProcessDocument, CaseDocument and
ResultsDocument, the whole file) generated from them. Readers validate a decoded document against
these (validation.check) and read the model's dataclasses back from the result; perfgate.judging.baselines wraps
a baseline around a results document; the JSON Schemas in docs/schemas/ are generated from them (python -m
perfgate.commands.schemas). Keys a model does not name are ignored, so a file a newer perfgate wrote with more
in it still reads.

Schema history (``perfgate.results/N``):
  1  first version: spec, status, per-process raw samples, metrics, profile, accuracy, environment.
  2  adds "expectations" (the run's rules, their outcomes per case; perfgate.judging.expect) and "ceilings" (the
     machine's measured peak FLOP/s and bandwidth from `perfgate calibrate`, spec-sheet peaks; perfgate.judging.roofline).
     A version-1 file reads as one with no rules and no ceilings.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import ConfigDict

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
    expected,
    field_error,
    int_range,
    model_validator,
    one_of,
)

SCHEMA = "perfgate.results/2"
SCHEMA_HISTORY = {
    "perfgate.results/1": "first version",
    "perfgate.results/2": "expectations (rules and outcomes) and ceilings (peak FLOP/s, bandwidth)",
}

MAX_SHARDS = 10_000
_Scalar = str | int | float | bool | None
EnvironmentValue = Annotated[_Scalar | list[_Scalar], expected("a string, number, true/false, null or a list of those")]
Tolerance = Annotated[Measured | dict[str, Measured | None], expected("a number, or an object of numbers (or null)")]


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


class AccuracyDocument(Document):
    """Numerical drift against the eager fp32 reference (perfgate.worker.drift.compare_outputs)."""

    model_config = ConfigDict(extra="allow")
    max_abs: Measured | None = None  # NaN and inf allowed: the drift of a broken toggle
    mean_abs: Measured | None = None
    rel_l2: Measured | None = None
    verdict: one_of(("ok", "drift")) | None = None  # type: ignore[valid-type]  # pydantic's Annotated type, built at import
    message: Text | None = None
    tolerance: Tolerance | None = None


class TopOpDocument(Document):
    """One op or kernel of a profile's ``top_ops`` (perfgate.worker.profiler_events.top_ops): what the op diffs read."""

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

