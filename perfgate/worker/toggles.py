"""Optimization toggles: what each one is, what it needs, and how it is applied to a workload.

The registry (names, groups, requirements) is plain data so the orchestrator can list and validate toggle
sets from the worker's catalog; applying a toggle imports torch and runs only inside a worker.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# Requirements a toggle may declare. Each maps to a check run in the worker (see unmet_requirement).
REQ_CUDA = "cuda"
REQ_CXX = "cxx-compiler"  # inductor on CPU compiles C++; on CUDA it needs triton instead
REQ_DYNAMO = "dynamo"  # a Python version that torch.compile supports
REQ_BF16 = "bf16"
REQ_NO_GRAD = "no-grad-workload"  # the workload's step does not need autograd
REQ_IMAGE_STATE = "4d-state"  # the workload's state is an NCHW image batch
REQ_TORCHSCRIPT = "torchscript"
REQ_TRAINING = "training-workload"  # the workload's step is a training step (perfgate.workload.TrainingWorkload)


@dataclass(frozen=True)
class Toggle:
    name: str
    description: str
    requires: tuple[str, ...] = ()
    # at most one toggle of a group per case: two compilers, or two autocast dtypes, cannot compose
    group: str | None = None

    def to_json(self, order: int) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "requires": list(self.requires),
            "group": self.group,
            "order": order,
        }


_COMPILE_REQS = (REQ_DYNAMO, REQ_CXX)

# Registry order is the canonical order of a composed name: "compile+amp-bf16", never "amp-bf16+compile".
TOGGLES: tuple[Toggle, ...] = (
    Toggle("eager", "fp32 eager execution: the reference every other toggle is compared with", group="eager"),
    Toggle("compile", "torch.compile, default mode (inductor)", _COMPILE_REQS, group="compiler"),
    Toggle(
        "compile-reduce-overhead",
        "torch.compile mode='reduce-overhead' (inductor + CUDA graphs)",
        _COMPILE_REQS + (REQ_CUDA,),
        group="compiler",
    ),
    Toggle(
        "compile-max-autotune", "torch.compile mode='max-autotune' (autotuned kernels)", _COMPILE_REQS, group="compiler"
    ),
    Toggle("torchscript", "torch.jit.script of the model", (REQ_TORCHSCRIPT,), group="compiler"),
    Toggle("amp-bf16", "torch.autocast to bfloat16", (REQ_BF16,), group="autocast"),
    Toggle("amp-fp16", "torch.autocast to float16", (), group="autocast"),
    Toggle("channels-last", "model and input in channels_last memory format", (REQ_IMAGE_STATE,)),
    Toggle("cudnn-benchmark", "torch.backends.cudnn.benchmark = True", (REQ_CUDA,)),
    Toggle("tf32", "TF32 matmuls and convolutions (fp32 reference runs with TF32 off)", (REQ_CUDA,)),
    Toggle("cuda-graphs", "the unit of work captured once in a CUDA graph and replayed", (REQ_CUDA,), group="graphs"),
    Toggle("inference-mode", "torch.inference_mode() instead of torch.no_grad()", (REQ_NO_GRAD,)),
    # a training step's optimizer (the reference runs torch.optim's single-tensor for-loop implementation)
    Toggle("optimizer-foreach", "the optimizer's foreach implementation (one kernel per op over all tensors)",
           (REQ_TRAINING,), group="optimizer"),
    Toggle("optimizer-fused", "the optimizer's fused implementation (one kernel for the whole update)",
           (REQ_TRAINING,), group="optimizer"),
    Toggle("set-to-none", "optimizer.zero_grad(set_to_none=True): gradients freed, not zeroed, between steps",
           (REQ_TRAINING,)),
)
# the toggle that picks each optimizer implementation of perfgate.workload.OPTIMIZER_IMPLEMENTATIONS
OPTIMIZER_TOGGLES = {"optimizer-foreach": "foreach", "optimizer-fused": "fused"}
TOGGLES_BY_NAME = {t.name: t for t in TOGGLES}


def catalog() -> list[dict[str, Any]]:
    """The registry as JSON-able dicts, in canonical order."""
    return [t.to_json(i) for i, t in enumerate(TOGGLES)]


# ---------------------------------------------------------------- requirement checks (torch imported)


def _cxx_compiler() -> str | None:
    for cand in (os.environ.get("CXX"), "g++", "c++", "clang++"):
        if cand and shutil.which(cand):
            return shutil.which(cand)
    return None


def unmet_requirement(req: str, device: str, workload: dict[str, Any] | None = None, *,
                      machine: bool = False) -> str | None:
    """None when ``req`` holds here for ``device``; otherwise the reason, in words, that it does not: for a
    case on ``device``, or with ``machine`` for this machine, ``device`` being the one it would measure on."""
    import torch

    is_cuda = device.startswith("cuda")
    if req == REQ_CUDA:
        if not is_cuda:
            return ("needs a CUDA device (this machine has none torch can use)" if machine
                    else f"needs a CUDA device (this case runs on {device})")
        if not torch.cuda.is_available():
            return "needs CUDA, and torch.cuda.is_available() is False here"
        return None
    if req == REQ_DYNAMO:
        try:
            from torch._dynamo.eval_frame import is_dynamo_supported

            if not is_dynamo_supported():
                return f"torch.compile (dynamo) does not support Python {sys.version.split()[0]} in torch {torch.__version__}"
        except Exception as exc:  # pragma: no cover - depends on the torch build
            return f"torch.compile is unavailable: {exc}"
        return None
    if req == REQ_CXX:
        if is_cuda:
            if importlib.util.find_spec("triton") is None:
                return "inductor on CUDA needs triton, which is not installed"
            return None
        if _cxx_compiler() is None:
            return "inductor on CPU needs a C++ compiler (g++ or clang++ on PATH, or $CXX)"
        return None
    if req == REQ_BF16:
        if is_cuda and torch.cuda.is_available():
            try:
                if not torch.cuda.is_bf16_supported():
                    return "this GPU does not support bfloat16"
            except Exception as exc:
                return f"cannot tell whether this GPU supports bfloat16: {exc}"
        return None
    if req == REQ_NO_GRAD:
        if workload and workload.get("needs_grad"):
            return "the workload's step needs autograd, which inference mode forbids"
        return None
    if req == REQ_IMAGE_STATE:
        if workload and not workload.get("channels_last_applies", True):
            return "the workload's state is not an NCHW image batch, so channels_last does not apply"
        return None
    if req == REQ_TRAINING:
        if workload is not None and not workload.get("trains"):
            return "the workload's step is no training step (it has no optimizer)"
        return None
    if req == REQ_TORCHSCRIPT:
        if not hasattr(torch, "jit") or not hasattr(torch.jit, "script"):
            return f"torch {torch.__version__} has no TorchScript"
        return None
    raise ValueError(f"unknown requirement {req!r}")


def skip_reason(toggles: tuple[str, ...], device: str, workload: dict[str, Any]) -> str | None:
    """Why this toggle set cannot run here for this workload, or None."""
    for name in toggles:
        declined = workload.get("unsupported_toggles", {}).get(name)
        if declined:
            return f"{name}: does not apply to this workload: {declined}"
        t = TOGGLES_BY_NAME.get(name)
        if t is None:  # a workload variant: it declares no requirements
            continue
        for req in t.requires:
            reason = unmet_requirement(req, device, workload)
            if reason:
                return f"{name}: {reason}"
    return None


def unavailable_here(name: str, device: str) -> str | None:
    """Why the toggle ``name`` cannot run on this machine, whose default device is ``device``, or None: for
    `perfgate list` and `perfgate doctor`, where the toggle heads the line and no case exists yet (a case's
    own reason is ``skip_reason``'s). What depends on a workload (``needs_grad``, an image state) is not
    the machine's to say."""
    for req in TOGGLES_BY_NAME[name].requires:
        reason = unmet_requirement(req, device, None, machine=True)
        if reason:
            return reason
    return None


# ---------------------------------------------------------------- application (torch imported)


@dataclass
class Prepared:
    """A workload with its toggles applied: call ``unit()`` to run one unit of work, or ``step(state)`` for
    one step (the profile pass's window) under exactly the same grad and autocast contexts.

    ``unit`` enters the toggles' grad-mode and autocast contexts on every call. The timer instead calls
    ``bare_unit`` inside one ``context()`` held for the whole measurement (``timed()``): the same work in
    the same modes, without a context entry and exit inside every timed unit (about 2.5% of the smoke
    rollout's 0.65 ms unit on CPU; docs/lab-record.md).
    """

    unit: Callable[[], Any]
    model: Any
    built: Any
    toggles: tuple[str, ...]
    variants: frozenset[str]
    step: Callable[[Any], Any] | None = None
    # True when ``unit`` replays a captured CUDA graph: ``step`` then runs uncaptured work
    captured: bool = False
    bare_unit: Callable[[], Any] | None = None
    context: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext

    def timed(self) -> tuple[Callable[[], Any], Callable[[], contextlib.AbstractContextManager]]:
        """The function to time and the context to hold around all of its calls."""
        if self.bare_unit is None:
            return self.unit, contextlib.nullcontext
        return self.bare_unit, self.context


def set_global_flags(toggles: tuple[str, ...], device: str) -> None:
    """Backend flags. The fp32 reference runs with TF32 off, so 'tf32' is a change one can measure."""
    import torch

    tf32 = "tf32" in toggles
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.set_float32_matmul_precision("high" if tf32 else "highest")
    torch.backends.cudnn.benchmark = "cudnn-benchmark" in toggles


def _to_channels_last(state: Any) -> Any:
    import torch

    if isinstance(state, torch.Tensor):
        return state.contiguous(memory_format=torch.channels_last) if state.dim() == 4 else state
    if isinstance(state, (tuple, list)):
        return type(state)(_to_channels_last(s) for s in state)
    return state


def compile_mode(toggles: tuple[str, ...]) -> str | None:
    for name, mode in (
        ("compile", "default"),
        ("compile-reduce-overhead", "reduce-overhead"),
        ("compile-max-autotune", "max-autotune"),
    ):
        if name in toggles:
            return mode
    return None


def grad_context(toggles: tuple[str, ...], needs_grad: bool) -> Callable[[], contextlib.AbstractContextManager]:
    import torch

    if "inference-mode" in toggles:
        return torch.inference_mode
    if needs_grad:
        return contextlib.nullcontext
    return torch.no_grad


def autocast_context(toggles: tuple[str, ...], device: str) -> Callable[[], contextlib.AbstractContextManager]:
    import torch

    device_type = "cuda" if device.startswith("cuda") else "cpu"
    if "amp-bf16" in toggles:
        return lambda: torch.autocast(device_type=device_type, dtype=torch.bfloat16)
    if "amp-fp16" in toggles:
        return lambda: torch.autocast(device_type=device_type, dtype=torch.float16)
    return contextlib.nullcontext


AUTOCAST_TOGGLES = {"amp-bf16": "bfloat16", "amp-fp16": "float16"}


def training_options(toggles: tuple[str, ...], mode: str | None) -> Any:
    """How ``toggles`` run a training workload's step (perfgate.workload.TrainingOptions)."""
    from perfgate.workload import TrainingOptions

    return TrainingOptions(
        autocast=next((dtype for name, dtype in AUTOCAST_TOGGLES.items() if name in toggles), None),
        optimizer=next((impl for name, impl in OPTIMIZER_TOGGLES.items() if name in toggles), "for-loop"),
        set_to_none="set-to-none" in toggles,
        compile_mode=mode,
    )


def prepare(
    workload: Any, params: dict[str, Any], device: str, toggles: tuple[str, ...], variants: frozenset[str]
) -> Prepared:
    """Build the workload and apply ``toggles`` in a fixed order: flags, build, layout, compiler, contexts,
    graph capture."""
    import torch

    set_global_flags(toggles, device)
    dev = torch.device(device)
    mode = compile_mode(toggles)
    if workload.applies_compile:  # the workload compiles inside its own timed work (see Workload)
        workload.compile_mode = mode
    built = workload.build(params, dev, torch.float32, variants)
    trains = bool(getattr(workload, "trains", False))
    if trains:
        built.training = training_options(toggles, mode)
    model = built.model
    if "channels-last" in toggles:
        if isinstance(model, torch.nn.Module):
            model = model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]  # torch's stubs omit memory_format
        built.state = _to_channels_last(built.state)
    if "torchscript" in toggles:
        model = torch.jit.script(model)
    if mode is not None and not device.startswith("cuda"):
        enable_cpu_kernel_profile()  # self-compiling workloads too: same inductor cache key in every process
    if mode is not None and not workload.applies_compile:
        model = torch.compile(model, mode=mode)
    # a training step autocasts its forward and loss itself, never its backward and optimizer step
    contexts = step_contexts(tuple(t for t in toggles if not (trains and t in AUTOCAST_TOGGLES)), device,
                             workload.needs_grad)

    def steps() -> Any:
        with contexts():
            return workload.run_unit(model, built, params)

    def start() -> None:
        workload.start_unit(built, params)

    def bare_unit() -> Any:
        start()
        return workload.run_unit(model, built, params)

    def unit() -> Any:
        start()
        return steps()

    def step(state: Any) -> Any:
        with contexts():
            return workload.step(model, state, built, params)

    captured = "cuda-graphs" in toggles
    if captured:  # the replay needs no context: the modes are baked into the graph
        replay = capture_cuda_graph(steps, start=start, generators=workload.generators(built))
        return Prepared(unit=replay, model=model, built=built, toggles=toggles,
                        variants=variants, step=step, captured=True)
    return Prepared(unit=unit, model=model, built=built, toggles=toggles, variants=variants, step=step,
                    bare_unit=bare_unit, context=contexts)


def step_contexts(toggles: tuple[str, ...], device: str, needs_grad: bool
                  ) -> Callable[[], contextlib.AbstractContextManager]:
    """The contexts every step of a toggled workload runs under (grad mode, then autocast), as one factory:
    the timed unit, the profile window and the fp32 reference (``toggles=()``) all use it."""
    grad_ctx = grad_context(toggles, needs_grad)
    amp_ctx = autocast_context(toggles, device)

    @contextlib.contextmanager
    def contexts():
        with grad_ctx(), amp_ctx():
            yield

    return contexts


def enable_cpu_kernel_profile() -> None:
    """Make inductor's C++ kernels visible to torch.profiler by name (a RECORD_FUNCTION per fused kernel).

    Set before compiling, in every process of a case, so the inductor cache key is the same for all of
    them (process 1 must hit what process 0 compiled). With no profiler active the guard costs one check
    per kernel call."""
    try:
        import torch._inductor.config as inductor_config

        cpp = getattr(inductor_config, "cpp", None)
        if cpp is not None and hasattr(cpp, "enable_kernel_profile"):
            cpp.enable_kernel_profile = True
    except Exception:  # an inductor without the option: fused kernels stay anonymous, counts still work
        pass


class ToggleUnsupported(RuntimeError):
    """A toggle that cannot apply to this workload here, found only by trying (a CUDA graph capture that
    fails): the case is classified ``unsupported`` with this message, not ``error``."""


def register_generators(graph: Any, generators: Any) -> int:
    """Register each CUDA generator in ``generators`` with ``graph`` (``CUDAGraph.register_generator_state``)
    before capture, so its random numbers advance on every replay as in an eager unit; CPU generators are
    left alone (a graph records no CPU work). Returns how many were registered; raises ToggleUnsupported
    when this torch's CUDAGraph has no way to register one."""
    cuda_generators = [g for g in generators if getattr(getattr(g, "device", None), "type", None) == "cuda"]
    if not cuda_generators:
        return 0
    register = getattr(graph, "register_generator_state", None)
    if register is None:
        import torch

        raise ToggleUnsupported(
            f"cuda-graphs: the workload draws from its own CUDA generator, and torch {torch.__version__}'s "
            "CUDAGraph has no register_generator_state to capture it (a newer torch has)")
    for g in cuda_generators:
        register(g)
    return len(cuda_generators)


def capture_cuda_graph(unit: Callable[[], Any], warmup: int = 3, *, start: Callable[[], None] = lambda: None,
                       generators: Any = ()) -> Callable[[], Any]:
    """Capture ``unit`` in a CUDA graph (after warm-up on a side stream); return a function that replays it.

    The unit must start from fixed input tensors (the workload's initial state), which is how perfgate's
    units are defined, so a replay repeats exactly the captured work. ``start`` (the workload's
    ``start_unit``: reseeding its generators) runs before every warm-up unit, before the capture and
    before every replay, always outside the graph; ``generators`` are registered with the graph first
    (``register_generators``), so a replay draws the same random numbers as an eager unit. An exception
    during capture raises ToggleUnsupported naming it.
    """
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup):
            start()
            unit()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    register_generators(graph, generators)
    start()
    try:
        with torch.cuda.graph(graph):
            static_out = unit()
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [""])[0]
        hint = ("; a workload that draws from its own generator declares it in generators(built) and "
                "reseeds it in start_unit (docs/workloads.md)") if "generator" in first.lower() else ""
        raise ToggleUnsupported(f"cuda-graphs: the unit cannot be captured in a CUDA graph: "
                                f"{type(exc).__name__}: {first}{hint}") from exc

    def replay() -> Any:
        start()
        graph.replay()
        return static_out

    return replay
