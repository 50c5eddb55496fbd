"""perfgate's pytest plugin: the ``perfgate_counts`` fixture, a callable's exact counts inside a unit test.

``perfgate_counts(fn, *args, backend="eager")`` calls ``fn`` (compiled with ``torch.compile`` when a
backend is given), and returns its deterministic counts as :class:`Counts`: graph breaks with dynamo's
reasons and source lines, recompiles with the guard that failed, unique graphs, aten ops per step,
kernels, syncs and memcpys per step on CUDA (None on CPU), FLOPs per step and peak memory. No timing.
``perfgate_counts.case("workload", "smoke", toggles="amp-bf16")`` counts a step of a workload case. The
same case asked twice in a session (same callable, backend and input shapes) is measured once.

Registered through the ``pytest11`` entry point, it is inert until a test asks for the fixture: this
module imports no torch; the fixture's calls do. The counting reuses the profile pass (perfgate.worker.profiling):
the compile counters, the profiler window's per-step counts and the FLOP counter. docs/pytest.md.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from perfgate.worker import compile_stats, peak_memory, profiler_events, profiling

STEPS = 3  # profiled calls after one unprofiled warm-up call: the counts are per call ("per step")


@dataclass(frozen=True)
class GraphBreak:
    """One graph break: dynamo's reason and where in user code (from dynamo's graph-break log, else from
    ``torch._dynamo.explain``)."""

    reason: str
    file: str | None = None
    line: int | None = None
    function: str | None = None
    source: str | None = None

    def describe(self) -> str:
        where = f"{self.file}:{self.line}" if self.file else "(no user frame recorded)"
        where += f" in {self.function}" if self.file and self.function else ""
        text = f"{where}\n      {self.source.strip()}" if self.source else where
        return f"{_first_line(self.reason)}\n    at {text}"


@dataclass
class Counts:
    """The deterministic counts of one callable. Per-step figures are per call of ``fn``; a figure that
    does not apply (kernels on CPU) or could not be counted is None, with the reason under ``errors``."""

    name: str
    device: str
    backend: str | None
    steps: int
    graph_breaks: int = 0
    graph_break_reasons: list[str] = field(default_factory=list)
    breaks: list[GraphBreak] = field(default_factory=list)
    recompiles: int | None = 0
    recompile_reasons: list[str] = field(default_factory=list)
    unique_graphs: int = 0
    aten_ops_per_step: float | None = None
    kernels_per_step: float | None = None
    syncs_per_step: float | None = None
    memcpy_per_step: float | None = None
    memset_per_step: float | None = None
    flops_per_step: float | None = None
    peak_memory_bytes: float | None = None
    peak_cuda_allocated_bytes: float | None = None
    ops_per_step: dict[str, float] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    cached: bool = False

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    # ---------------------------------------------------------------- assertions that explain themselves

    def assert_no_graph_breaks(self) -> None:
        """Fail, naming each break's reason and source line, when dynamo broke the graph."""
        __tracebackhide__ = True  # the failure points at the test's line
        self.assert_max_graph_breaks(0)

    def assert_max_graph_breaks(self, n: int) -> None:
        __tracebackhide__ = True  # the failure points at the test's line
        if self.graph_breaks > n:
            raise AssertionError(f"{self.name}: {self.graph_breaks} graph break(s), at most {n} allowed\n"
                                 + self._breaks_text())

    def assert_max_recompiles(self, n: int) -> None:
        """Fail, naming the guard that failed for each recompile, when ``fn`` recompiled more than ``n`` times."""
        __tracebackhide__ = True  # the failure points at the test's line
        if self.recompiles is None:
            raise AssertionError(f"{self.name}: this torch's dynamo does not report recompiles")
        if self.recompiles > n:
            reasons = "\n".join(f"  {i}. {r}" for i, r in enumerate(self.recompile_reasons, 1))
            raise AssertionError(f"{self.name}: {self.recompiles} recompile(s), at most {n} allowed; the guards "
                                 f"that failed:\n{reasons}")

    def assert_max_unique_graphs(self, n: int) -> None:
        __tracebackhide__ = True  # the failure points at the test's line
        if self.unique_graphs > n:
            raise AssertionError(f"{self.name}: {self.unique_graphs} graphs handed to the backend, at most {n} "
                                 "allowed\n" + self._breaks_text())

    def assert_max_syncs_per_step(self, n: float) -> None:
        """Fail when a call blocks the host on the device more than ``n`` times (CUDA; nothing to check on
        CPU, where ``syncs_per_step`` is None)."""
        __tracebackhide__ = True  # the failure points at the test's line
        if self.syncs_per_step is not None and self.syncs_per_step > n:
            raise AssertionError(f"{self.name}: {self.syncs_per_step:g} host-device syncs per step, at most {n:g} "
                                 f"allowed; the most frequent ops and kernels per step: {self._ops_text()}")

    def _breaks_text(self) -> str:
        if self.breaks:
            return "\n".join(f"  {i}. {b.describe()}" for i, b in enumerate(self.breaks, 1))
        if self.graph_break_reasons:
            return "\n".join(f"  {i}. {_first_line(r)}" for i, r in enumerate(self.graph_break_reasons, 1))
        return "  (dynamo gave no reason)"

    def _ops_text(self) -> str:
        return ", ".join(f"{name} x{n:g}" for name, n in list(self.ops_per_step.items())[:8]) or "none recorded"


def _first_line(text: str) -> str:
    return (str(text).strip().splitlines() or [""])[0]


# ---------------------------------------------------------------- counting (torch imported here only)


def _tensors(value: Any) -> list[Any]:
    import torch
    from torch.utils._pytree import tree_flatten

    return [t for t in tree_flatten(value)[0] if isinstance(t, torch.Tensor)]


def _device_of(args: Any) -> str:
    tensors = _tensors(args)
    return str(tensors[0].device) if tensors else "cpu"


def _original(fn: Any) -> Any:
    """The eager callable under a ``torch.compile`` wrapper (a compiled module or function), else ``fn``."""
    return getattr(fn, "_orig_mod", None) or getattr(fn, "_torchdynamo_orig_callable", None) or fn


def _name(fn: Any) -> str:
    fn = _original(fn)
    return getattr(fn, "__qualname__", None) or type(fn).__qualname__


def _explain_breaks(explain: Callable[[], Any]) -> list[GraphBreak]:
    """Each graph break of one call with its user frame, from ``torch._dynamo.explain`` (``explain()``
    returns its output; a second trace, run only when the counters saw a break: they keep reasons but no
    source lines)."""
    import linecache

    out = []
    for r in explain().break_reasons:
        frames = list(getattr(r, "user_stack", None) or [])
        frame = frames[-1] if frames else None
        if frame is None:
            out.append(GraphBreak(reason=str(r.reason)))
            continue
        source = frame.line or linecache.getline(frame.filename, frame.lineno or 0)
        out.append(GraphBreak(reason=str(r.reason), file=frame.filename, line=frame.lineno, function=frame.name,
                              source=source or None))
    return out


# dynamo's "graph_breaks" log artifact: one record per break, every break, with its user frame
GRAPH_BREAK_LOGGER = "torch._dynamo.symbolic_convert.__graph_breaks"
_BREAK_AT = re.compile(r"^Graph break in user code at (?P<file>.+):(?P<line>\d+)\s*$", re.M)
_FRAME = re.compile(r'^\s*File "(?P<file>.+)", line (?P<line>\d+), in (?P<function>.+)$', re.M)
_NOT_THE_REASON = ("Encountered graph break", "Explanation:", "Hint:", "Developer debug context", "For more details")


class _BreakRecords(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@contextlib.contextmanager
def _logged_breaks() -> Iterator[_BreakRecords]:
    """Dynamo's graph-break records while held (its logger at DEBUG, kept from the root logger and so from
    pytest's log capture), as torch's TORCH_LOGS=graph_breaks shows them."""
    log = logging.getLogger(GRAPH_BREAK_LOGGER)
    handler = _BreakRecords()
    level, propagate = log.level, log.propagate
    log.setLevel(logging.DEBUG)
    log.propagate = False
    log.addHandler(handler)
    try:
        yield handler
    finally:
        log.removeHandler(handler)
        log.setLevel(level)
        log.propagate = propagate


def _parse_break(message: str) -> GraphBreak | None:
    """A GraphBreak from one record of the graph_breaks log, or None where its form is not the one known."""
    import linecache

    at = _BREAK_AT.search(message)
    if at is None or "Graph Break Reason:" not in message:
        return None
    text = message.split("Graph Break Reason:", 1)[1].split("User code traceback:", 1)[0]
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    reason = next((line for line in lines if not line.startswith(_NOT_THE_REASON)), lines[0] if lines else "")
    file, line = at["file"], int(at["line"])
    function = next((f["function"].strip() for f in _FRAME.finditer(message)
                     if f["file"] == file and int(f["line"]) == line), None)
    return GraphBreak(reason=reason, file=file, line=line, function=function,
                      source=linecache.getline(file, line) or None)


def _breaks_from_log(messages: list[str]) -> list[GraphBreak] | None:
    """Each break the log recorded, once per place and reason; None when a record could not be read."""
    breaks: list[GraphBreak] = []
    for message in messages:
        parsed = _parse_break(message)
        if parsed is None:
            return None
        if parsed not in breaks:
            breaks.append(parsed)
    return breaks


def _peak_from_trace(trace: Path, device: str) -> float | None:
    """The highest the bytes allocated on ``device`` rose above where they stood when the window began:
    the running sum of the profiler's ``[memory]`` events, in time order."""
    try:
        events = json.loads(trace.read_text()).get("traceEvents", [])
    except (OSError, json.JSONDecodeError):
        return None
    device_type = 1 if device.startswith("cuda") else 0
    changes = sorted((ev.get("ts", 0), ev["args"]["Bytes"]) for ev in events
                     if ev.get("name") == "[memory]" and ev.get("args", {}).get("Device Type", 0) == device_type
                     and isinstance(ev.get("args", {}).get("Bytes"), (int, float)))
    level = peak = 0.0
    for _, change in changes:
        level += change
        peak = max(peak, level)
    return peak


def _window(call: Callable[[], Any], device: str, steps: int) -> tuple[dict[str, float], dict[str, float],
                                                                         float | None]:
    """torch.profiler over one warm-up and ``steps`` recorded calls: (per-step counts, calls per step of each
    op or kernel by name, most frequent first, peak bytes). Counts only: the profiler's times are dropped."""
    from torch.profiler import ProfilerActivity, profile, schedule

    activities = [ProfilerActivity.CPU]
    if device.startswith("cuda"):
        activities.append(ProfilerActivity.CUDA)
    with tempfile.TemporaryDirectory(prefix="perfgate-pytest-") as tmp:
        trace = Path(tmp) / "trace.json"
        with profile(activities=activities, schedule=schedule(wait=0, warmup=1, active=steps, repeat=1),
                     profile_memory=True, record_shapes=False,
                     on_trace_ready=lambda prof: prof.export_chrome_trace(str(trace))) as prof:
            for _ in range(1 + steps):
                call()
                profiling._sync(device)
                prof.step()
        events = list(prof.events())
        metrics, recorded = profiler_events.window_counts(events, device)
        rows = profiler_events.top_ops(list(prof.key_averages()), recorded, n=len(events))
        by_name = sorted(((r["name"], r["count_per_step"]) for r in rows), key=lambda r: (-r[1], r[0]))
        peak = _peak_from_trace(trace, device)
    return metrics, dict(by_name), peak


def _flops(eager_call: Callable[[], Any]) -> float:
    """FLOPs of one eager call (torch.utils.flop_counter), as the profile pass counts them on its reference."""
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with counter:
        eager_call()
    return float(counter.get_total_flops())


@contextlib.contextmanager
def _quiet_trace_log() -> Iterator[None]:
    """Keep pytest's log capture off dynamo's structured trace logger (``torch.__trace``) while counting.

    pytest attaches its handlers to every logger that does not propagate, that one too; dynamo then
    builds its trace records (every trace_structured call is live while the logger has a handler) and a
    failing test prints hundreds of DEBUG lines. A TORCH_TRACE handler of torch's own stays."""
    trace_log = logging.getLogger("torch.__trace")
    pytest_handlers = [h for h in trace_log.handlers if type(h).__module__.startswith("_pytest")]
    for handler in pytest_handlers:
        trace_log.removeHandler(handler)
    try:
        yield
    finally:
        for handler in pytest_handlers:
            trace_log.addHandler(handler)


def count(fn: Callable[..., Any], args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None, *,
          backend: str | None = None, steps: int = STEPS, also: tuple[tuple[Any, ...], ...] = ()) -> Counts:
    """Measure ``fn(*args, **kwargs)``: compiled with ``torch.compile(fn, backend=backend)`` when a backend
    is given (else called as it is: eager, or compiled by the caller), called once, then once with each
    argument tuple in ``also`` (other shapes: their recompiles count), then profiled over ``steps`` calls."""
    with _quiet_trace_log():
        import torch
        import torch._dynamo

        kwargs = dict(kwargs or {})
        counts = Counts(name=_name(fn), device=_device_of((args, kwargs)), backend=backend, steps=steps)
        compile_stats.reset_compile_counters()  # what the counters read next belongs to this call
        target = torch.compile(fn, backend=backend) if backend else fn
        eager = _original(fn)
        def again(more: tuple[Any, ...]) -> Callable[[], Any]:
            return lambda: target(*more)

        return _measure(counts, lambda: target(*args, **kwargs), [again(more) for more in also],
                        lambda: eager(*args, **kwargs), lambda: torch._dynamo.explain(eager)(*args, **kwargs))


def count_case(workload: str, size: str, *, toggles: tuple[str, ...] = (), backend: str | None = None,
               workloads_dirs: Sequence[str | Path], device: str = "cpu", steps: int = STEPS) -> Counts:
    """Measure one step of a perfgate workload case: the workload found in ``workloads_dirs`` as a run finds
    it, built at ``size`` with ``toggles`` applied (perfgate.worker.toggles.prepare), its model compiled with
    ``torch.compile(model, backend=backend)`` when a backend is given; a step from the initial state is
    the call counted. A case that cannot run here is skipped with the reason, as a run skips it."""
    from perfgate.worker import toggles as toggles_mod
    from perfgate.worker.discovery import find

    cls, _ = find(workloads_dirs, workload)
    if size not in cls.sizes:
        raise ValueError(f"workload {workload!r} has no size {size!r} (sizes: {', '.join(cls.sizes)})")
    unknown = [t for t in toggles if t not in toggles_mod.TOGGLES_BY_NAME and t not in cls.variants]
    if unknown:
        raise ValueError(f"{unknown[0]!r} is neither a perfgate toggle nor a variant of workload {workload!r}")
    if "cuda-graphs" in toggles:
        raise ValueError("cuda-graphs replays a captured unit: there is no step to count op by op")
    reason = toggles_mod.skip_reason(tuple(toggles), device, cls.describe())
    if reason:
        pytest.skip(f"{workload}/{size}/{'+'.join(toggles) or 'eager'}/{device}: {reason}")
    with _quiet_trace_log():
        import torch
        import torch._dynamo

        name = f"{workload}/{size}/{'+'.join(toggles) or 'eager'}/{device}"
        counts = Counts(name=name, device=device, backend=backend, steps=steps)
        compile_stats.reset_compile_counters()
        instance = cls()
        params = dict(cls.sizes[size])
        variants = frozenset(t for t in toggles if t in cls.variants)
        prepared = toggles_mod.prepare(instance, params, device, tuple(t for t in toggles if t not in variants),
                                       variants)
        built = prepared.built
        target = torch.compile(prepared.model, backend=backend) if backend else prepared.model
        contexts = toggles_mod.step_contexts(prepared.toggles, device, instance.needs_grad)

        def step(model: Any) -> Any:
            with contexts():
                return instance.step(model, built.state, built, params)

        def explain() -> Any:
            # what torch.compile(model) traces: the model's forward on the arguments a step hands it
            seen: list[tuple[Any, Any]] = []
            def record(_module: Any, args: Any, kwargs: Any) -> None:
                seen.append((args, kwargs))

            hook = built.model.register_forward_pre_hook(record, with_kwargs=True)
            try:
                step(built.model)
            finally:
                hook.remove()
            with contexts():
                return torch._dynamo.explain(built.model)(*seen[0][0], **seen[0][1])

        return _measure(counts, lambda: step(target), [], lambda: step(built.model), explain)


def _measure(counts: Counts, call: Callable[[], Any], more_calls: list[Callable[[], Any]],
             eager_call: Callable[[], Any], explain: Callable[[], Any]) -> Counts:
    """The counts of ``call``: once (the compile), each of ``more_calls``, once more; the compile counters;
    the profiler window; the FLOPs of ``eager_call``; ``explain`` for the breaks' source lines."""
    device = counts.device
    with _logged_breaks() as logged:
        call()
        for more in more_calls:
            more()
        call()
    metrics, reasons, detail = compile_stats.compile_counters()
    counts.graph_breaks = int(metrics.get("graph_breaks", 0))
    counts.graph_break_reasons = reasons
    counts.unique_graphs = int(metrics.get("unique_graphs", 0))
    counts.recompiles = int(metrics["recompiles"]) if "recompiles" in metrics else None
    counts.recompile_reasons = list(detail.get("recompile_reasons", []))
    # a section that fails costs its own figures, said under errors, as in the profile pass
    try:
        window, counts.ops_per_step, counts.peak_memory_bytes = _window(call, device, counts.steps)
        counts.aten_ops_per_step = window.get("aten_ops_per_step")
        for name in ("kernels_per_step", "syncs_per_step", "memcpy_per_step", "memset_per_step"):
            setattr(counts, name, window.get(name) if device.startswith("cuda") else None)
    except Exception as exc:
        counts.errors.append(f"profiler window: {type(exc).__name__}: {exc}")
    counts.peak_cuda_allocated_bytes = peak_memory.cuda_peaks_over(call, device).get("peak_cuda_allocated_bytes")
    try:
        counts.flops_per_step = _flops(eager_call)
    except Exception as exc:  # an op the counter cannot dispatch through
        counts.errors.append(f"flops: {type(exc).__name__}: {exc}")
    from_log = _breaks_from_log(logged.messages)
    if from_log:
        counts.breaks = from_log
    elif counts.graph_breaks:  # no record of its own form: torch._dynamo.explain finds the frames
        try:
            counts.breaks = _explain_breaks(explain)
        except Exception as exc:
            counts.errors.append(f"explain: {type(exc).__name__}: {exc}")
    return counts


# ---------------------------------------------------------------- the session cache and the fixture


def _shape_key(value: Any) -> Any:
    """What of an argument the counts depend on: a tensor's shape, dtype, device and grad flag; any other
    value itself (its repr, so an unhashable one still keys)."""
    import torch

    if isinstance(value, torch.Tensor):
        return ("tensor", tuple(value.shape), str(value.dtype), str(value.device), value.requires_grad)
    if isinstance(value, (tuple, list)):
        return (type(value).__name__, *(_shape_key(v) for v in value))
    if isinstance(value, dict):
        return ("dict", *sorted((str(k), _shape_key(v)) for k, v in value.items()))
    return ("value", repr(value))


def _callable_key(fn: Any) -> tuple[Any, ...]:
    """A module by its class and structure (its repr: layers and their sizes; its parameters' dtypes and
    devices; each submodule's train or eval mode; not its weights' values); a plain function by where it is
    defined; anything else (a closure, a bound method) by its identity. A callable the caller compiled is
    never the same case as the eager one under it."""
    import torch

    inner = _original(fn)
    compiled = inner is not fn
    if isinstance(inner, torch.nn.Module):
        placed = sorted({(str(p.dtype), str(p.device)) for p in inner.parameters()})
        modes = tuple(m.training for m in inner.modules())
        return ("module", compiled, type(inner).__module__, type(inner).__qualname__, repr(inner), tuple(placed), modes)
    code = getattr(inner, "__code__", None)
    if code is not None and not getattr(inner, "__closure__", None) and not hasattr(inner, "__self__"):
        return ("function", compiled, inner.__module__, inner.__qualname__, code.co_filename, code.co_firstlineno)
    return ("object", compiled, id(fn))


def _check_steps(steps: Any) -> None:
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"perfgate_counts: steps must be a positive whole number, not {steps!r}")


class CountsCache:
    """Counts already measured in this pytest process (an xdist worker has its own), by case key; each
    entry keeps its callable alive, so an identity key cannot be reused by another object."""

    def __init__(self) -> None:
        self._entries: dict[Any, tuple[Any, Counts]] = {}
        self.measured = 0

    def get_or_count(self, key: Any, fn: Any, measure: Callable[[], Counts]) -> Counts:
        if key in self._entries:
            return replace(self._entries[key][1], cached=True)
        counts = measure()
        self.measured += 1
        self._entries[key] = (fn, counts)
        return counts


class CountsFixture:
    """What the ``perfgate_counts`` fixture gives a test: call it as ``perfgate_counts(fn, *args, ...)``."""

    def __init__(self, cache: CountsCache, rootpath: Path) -> None:
        self.cache = cache
        self.rootpath = rootpath

    def __call__(self, fn: Callable[..., Any], *args: Any, backend: str | None = None, steps: int = STEPS,
                 also: tuple[tuple[Any, ...], ...] | list[tuple[Any, ...]] = (), kwargs: dict[str, Any] | None = None,
                 cache: bool = True) -> Counts:
        """The counts of ``fn(*args, **kwargs)`` (see :func:`count`); ``cache=False`` measures anew even when
        this session already measured the same case."""
        if not callable(fn):
            raise TypeError(f"perfgate_counts: {fn!r} is not callable")
        _check_steps(steps)
        also = tuple(tuple(a) if isinstance(a, (tuple, list)) else (a,) for a in also)

        def measure() -> Counts:
            return count(fn, tuple(args), kwargs, backend=backend, steps=steps, also=also)

        if not cache:
            return measure()
        key = (_callable_key(fn), backend, steps, _shape_key(args), _shape_key(kwargs or {}), _shape_key(also))
        return self.cache.get_or_count(key, fn, measure)

    def case(self, workload: str, size: str = "smoke", *, toggles: str | tuple[str, ...] = (),
             backend: str | None = None, device: str = "cpu", workloads_dir: str | Path | None = None,
             steps: int = STEPS, cache: bool = True) -> Counts:
        """The counts of one step of a perfgate workload case (see :func:`count_case`); ``toggles`` as on
        the command line (``"compile+amp-bf16"``) or a tuple; the workloads from ``workloads_dir``, else
        ``[tool.perfgate] workloads_dirs`` of the pyproject.toml above pytest's root folder."""
        from perfgate.model import config

        _check_steps(steps)
        names = tuple(t for t in toggles.split("+") if t and t != "eager") if isinstance(toggles, str) else \
            tuple(t for t in toggles if t != "eager")
        dirs = [Path(workloads_dir)] if workloads_dir is not None else \
            list(config.load(cwd=self.rootpath).workloads_dirs)

        def measure() -> Counts:
            return count_case(workload, size, toggles=names, backend=backend, workloads_dirs=dirs, device=device,
                              steps=steps)

        if not cache:
            return measure()
        key = ("case", tuple(str(d.resolve()) for d in dirs), workload, size, names, backend, device, steps)
        return self.cache.get_or_count(key, None, measure)


@pytest.fixture(scope="session")
def perfgate_counts_cache() -> CountsCache:
    """The counts measured in this session (this process), shared by every test that asks for them."""
    return CountsCache()


@pytest.fixture
def perfgate_counts(perfgate_counts_cache: CountsCache, request: pytest.FixtureRequest) -> CountsFixture:
    """Measure deterministic counts: ``perfgate_counts(model, x, backend="eager")`` for a callable,
    ``perfgate_counts.case("my_workload", "smoke", backend="eager")`` for a workload case."""
    return CountsFixture(perfgate_counts_cache, request.config.rootpath)
