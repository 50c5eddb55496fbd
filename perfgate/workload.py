"""The workload API: what a workload file subclasses (Workload, TrainingWorkload), what ``build`` returns
(Built), the drift it tolerates (Tolerance), and the checks and trainer perfgate runs a workload's step with.
Imported by workers only (workloads import torch).

A workload is a Python file in a workloads directory defining one or more subclasses of
:class:`Workload`; perfgate finds them the way pytest finds tests (perfgate.worker.discovery), with no
registration elsewhere. See docs/workloads.md for a complete example.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Tolerance:
    """How far a toggle's output may drift from the eager fp32 reference and still be ``ok``.

    A case is ``ok`` when its relative L2 error is at most ``rel_l2`` and its max abs error at most
    ``max_abs`` (either may be None to skip that check).
    """

    rel_l2: float | None = 1e-2
    max_abs: float | None = None

    def to_json(self) -> dict[str, float | None]:
        return {"rel_l2": self.rel_l2, "max_abs": self.max_abs}


@dataclass
class Built:
    """What ``Workload.build`` returns: the model the toggles transform and the initial state.

    ``model`` is usually a ``torch.nn.Module`` (compile, torchscript and channels-last apply to it).
    ``state`` is a tensor or a tuple of tensors: the input of the first step.
    ``extra`` carries anything else ``step`` needs (constants, preallocated buffers).
    ``training`` and ``trainer`` are perfgate's, for a :class:`TrainingWorkload`: how the case's toggles
    run its step (set by the worker after ``build``; None: a plain fp32 step) and the optimizer, gradient
    scaler and initial parameters that carry its state across steps (made at its first step).
    """

    model: Any
    state: Any
    extra: dict[str, Any] = field(default_factory=dict)
    training: TrainingOptions | None = None
    trainer: Trainer | None = None


class Workload:
    """Base class of a standard workload. Subclass it in a file under a workloads directory.

    Class attributes a subclass sets:
      name         unique workload name (used on the command line and as the baseline key)
      description  one line: what it models
      sizes        {"smoke": {...}, "pr": {...}, "full": {...}}: named sizes -> real parameters
      length_parameters  the size parameters that only repeat a step (default ("steps",); the rollout's
                   "T"): they change how long a unit lasts, not what one step does, so `perfgate calibrate
                   --sizes` cuts them to keep `full` cheap and grows only the others (grid, batch, points...)
      tolerance    Tolerance on the output after one unit of work
      variants     {"groupnorm": "one line"}: workload-specific toggles, composable with '+'
      needs_grad   True when the step needs autograd (forces from energies); else steps run in no_grad
      trains       True for a TrainingWorkload (its step is a training step: forward, loss, backward, optimizer)
      channels_last_applies  False when the state is not a 4-D image batch
      unsupported_toggles    {"cuda-graphs": "why"}: toggles that cannot apply to this workload; a case
                   with one is skipped with that reason, never failed
      expectations {"*/smoke/eager/cpu": ["status == ok"], ...}: claims about this workload's cases, checked
                   on every run (same form as [tool.perfgate.expect]; docs/expectations.md)
      applies_compile  True when the workload calls torch.compile itself (e.g. inside a construction it
                   times): perfgate then sets ``self.compile_mode`` ("default", "reduce-overhead",
                   "max-autotune", or None for no compile toggle) before ``build`` and does not wrap
                   ``built.model``
      depends_on   ("src/sim/**", "kernels/*.cu"): files this workload's cases depend on besides its own file,
                   as glob patterns relative to the project's root (the folder of its pyproject.toml; ``*``
                   within a folder, ``**`` across folders, a trailing ``/`` for everything below a folder).
                   `perfgate run --changed-since REF` runs a workload's cases when its file or one of these
                   changed, and skips them when only other workloads' files did (docs/ci.md)

    Methods a subclass implements:
      build(params, device, dtype, variants) -> Built
      step(model, state, built, params) -> new state
    and may override steps_per_unit(params) (default: params["steps"]), output(state),
    metrics(built) (workload-specific figures added to the case's metrics after timing),
    start_unit(built, params) (host-side preparation before every unit: reseeding its own generators) and
    generators(built) (the torch.Generators its steps draw from; cuda-graphs registers them for capture).
    """

    name: str = ""
    description: str = ""
    sizes: dict[str, dict[str, Any]] = {}
    length_parameters: tuple[str, ...] = ("steps",)
    tolerance: Tolerance = Tolerance()
    variants: dict[str, str] = {}
    needs_grad: bool = False
    trains: bool = False
    channels_last_applies: bool = True
    unsupported_toggles: dict[str, str] = {}
    applies_compile: bool = False
    compile_mode: str | None = None
    expectations: dict[str, Any] = {}
    depends_on: tuple[str, ...] = ()

    def build(self, params: dict[str, Any], device: Any, dtype: Any, variants: frozenset[str]) -> Built:
        raise NotImplementedError(f"{type(self).__name__}.build")

    def step(self, model: Any, state: Any, built: Built, params: dict[str, Any]) -> Any:
        raise NotImplementedError(f"{type(self).__name__}.step")

    def steps_per_unit(self, params: dict[str, Any]) -> int:
        """Steps in one timed unit of work; step time is the unit's time divided by this."""
        return int(params.get("steps", 1))

    def output(self, state: Any) -> Any:
        """The tensor compared against the eager fp32 reference (default: the state, or its first item)."""
        if isinstance(state, (tuple, list)):
            return state[0]
        return state

    def start_unit(self, built: Built, params: dict[str, Any]) -> None:
        """Prepare one unit before its first step: reseed the workload's own generators, allocate buffers.

        perfgate calls it before every unit it runs (timed, reference, profiled), and under ``cuda-graphs``
        before every replay, outside the captured graph: reseeding a CUDA generator is host-side work a
        graph cannot record. Default: nothing."""

    def generators(self, built: Built) -> tuple[Any, ...]:
        """The ``torch.Generator`` objects the steps draw random numbers from (besides torch's global ones).

        ``cuda-graphs`` registers each CUDA one with the graph before capture, so a replay draws what an
        eager unit draws; an undeclared one fails the capture (``unsupported``). Default: none."""
        return ()

    def metrics(self, built: Built) -> dict[str, float]:
        """Workload-specific metrics measured while the case ran (names in perfgate.model.results.METRIC_KINDS)."""
        return {}

    def run_unit(self, model: Any, built: Built, params: dict[str, Any]) -> Any:
        """One unit of work from the initial state: ``steps_per_unit`` steps. What the timer measures
        (after ``start_unit``; under ``cuda-graphs`` this is what is captured)."""
        state = built.state
        for _ in range(self.steps_per_unit(params)):
            state = self.step(model, state, built, params)
        return state

    @classmethod
    def own_expectations(cls) -> dict[str, Any]:
        """The claims this workload carries: those of the class that declares ``expectations``, when that
        class measures the same workload (same ``name``). A subclass under a new name (a variant of a
        standard workload) starts with none: its parent's claims were measured on the parent's cases."""
        for klass in cls.__mro__:
            if "expectations" in vars(klass):
                return dict(klass.expectations) if getattr(klass, "name", None) == cls.name else {}  # type: ignore[attr-defined]  # checked: in vars(klass)
        return {}

    @classmethod
    def from_callable(
        cls,
        fn: Callable[..., Any],
        make_inputs: Callable[[dict[str, Any], Any], Any],
        *,
        sizes: dict[str, dict[str, Any]],
        name: str | None = None,
        description: str | None = None,
        tolerance: Tolerance | None = None,
        needs_grad: bool = False,
        channels_last_applies: bool = False,
    ) -> type[Workload]:
        """A workload class for code that already exists: each step is ``fn(*make_inputs(params, device))``.

        ``fn`` is a function or a ``torch.nn.Module`` (a module is copied to the case's device; a function
        is wrapped in one, so compile and the other toggles apply to it). ``make_inputs(params, device)``
        returns the input tensor or a tuple of them, made once per worker (not timed). A unit is
        ``params["steps"]`` calls (default 1) on the same inputs; the last output is the one checked
        against the eager reference. Assign the result at the top level of a file in a workloads folder
        (``my_step = Workload.from_callable(...)``) so discovery finds it.
        """
        if not callable(fn) or not callable(make_inputs):
            raise TypeError("Workload.from_callable(fn, make_inputs, sizes=...): fn and make_inputs must be callable")
        workload_name = name or getattr(fn, "__name__", None) or type(fn).__name__
        doc = (getattr(fn, "__doc__", None) or "").strip().splitlines()
        caller = sys._getframe(1).f_globals.get("__name__", __name__)  # discovery keeps classes of its module

        def build(self: Workload, params: dict[str, Any], device: Any, dtype: Any, variants: frozenset[str]) -> Built:
            import copy

            import torch

            if isinstance(fn, torch.nn.Module):
                model = copy.deepcopy(fn).to(device=device, dtype=dtype)
            else:
                model = _as_module(fn)
            inputs = make_inputs(dict(params), device)
            inputs = tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)
            inputs = tuple(x.to(dtype) if torch.is_tensor(x) and x.is_floating_point() else x for x in inputs)
            return Built(model=model, state=inputs)

        def run_unit(self: Workload, model: Any, built: Built, params: dict[str, Any]) -> Any:
            out = None
            for _ in range(self.steps_per_unit(params)):
                out = model(*built.state)
            return out

        def step(self: Workload, model: Any, state: Any, built: Built, params: dict[str, Any]) -> Any:
            return model(*built.state)

        attrs = {
            "__module__": caller,
            "__doc__": f"Workload.from_callable({workload_name})",
            "name": workload_name,
            "description": description or (doc[0] if doc else f"{workload_name} from existing code"),
            "sizes": {k: dict(v) for k, v in sizes.items()},
            "tolerance": tolerance or Tolerance(),
            "needs_grad": needs_grad,
            "channels_last_applies": channels_last_applies,
            "build": build,
            "run_unit": run_unit,
            "step": step,
            "output": lambda self, state: state[0] if isinstance(state, (tuple, list)) else state,
        }
        return type(f"CallableWorkload_{workload_name}", (Workload,), attrs)

    @classmethod
    def describe(cls) -> dict[str, Any]:
        return {
            "name": cls.name,
            "description": cls.description,
            "sizes": {k: dict(v) for k, v in cls.sizes.items()},
            "length_parameters": list(cls.length_parameters),
            "variants": dict(cls.variants),
            "tolerance": cls.tolerance.to_json(),
            "needs_grad": cls.needs_grad,
            "trains": cls.trains,
            "channels_last_applies": cls.channels_last_applies,
            "unsupported_toggles": dict(cls.unsupported_toggles),
            "applies_compile": cls.applies_compile,
            "expectations": cls.own_expectations(),
            "depends_on": list(cls.depends_on),
        }


def _as_module(fn: Callable[..., Any]) -> Any:
    """``fn`` wrapped in a ``torch.nn.Module`` whose forward calls it (compile and torchscript take modules)."""
    import torch

    class CallableModule(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fn = fn

        def forward(self, *inputs: Any) -> Any:
            return self.fn(*inputs)

    return CallableModule()


class WorkloadError(Exception):
    """A workload file that cannot be loaded or a workload that breaks the API."""


def _is_tensors(value: Any) -> bool:
    import torch

    if isinstance(value, torch.Tensor):
        return True
    return isinstance(value, (tuple, list)) and len(value) > 0 and all(_is_tensors(v) for v in value)


def check_step_output(workload: str, value: Any) -> None:
    """Raise WorkloadError unless ``value`` (what a unit of work, i.e. its last step, returned) is a tensor
    or a tuple of tensors: anything else (a string, None, a number) would be timed and compared as if it
    were the workload's output."""
    if not _is_tensors(value):
        shown = repr(value)
        shown = shown if len(shown) <= 80 else shown[:77] + "..."
        raise WorkloadError(f"workload {workload!r}: step returned {type(value).__name__} {shown}, "
                            "not a tensor or a tuple of tensors")


# ---------------------------------------------------------------- training steps

# the optimizer implementations a training case may ask for, as torch.optim's keyword arguments; the
# reference (and every case without an optimizer toggle) takes the single-tensor for-loop one
OPTIMIZER_IMPLEMENTATIONS: dict[str, dict[str, bool]] = {
    "for-loop": {"foreach": False}, "foreach": {"foreach": True}, "fused": {"fused": True}}


@dataclass(frozen=True)
class TrainingOptions:
    """How a case's toggles run a training step: the autocast dtype of forward and loss (``"float16"``
    adds a gradient scaler), the optimizer implementation, ``zero_grad(set_to_none=...)``, and the
    ``torch.compile`` mode of the whole step (None: eager)."""

    autocast: str | None = None
    optimizer: str = "for-loop"
    set_to_none: bool = False
    compile_mode: str | None = None


class TrainingWorkload(Workload):
    """A workload whose step is a training step: zero the gradients, forward and loss (under the case's
    autocast), backward (through a gradient scaler under ``amp-fp16``), optimizer step.

    A subclass implements ``build`` (the model, and in ``state`` the batch its loss reads: inputs and
    targets) and ``loss(model, batch, built, params)``; it may override ``make_optimizer``. perfgate keeps
    the state a step carries to the next (parameters, optimizer state, gradient scaler) and restores the
    initial parameters and a fresh optimizer state before every unit, so each unit repeats the same
    ``steps_per_unit`` steps from the same start. A step returns the trained parameters: the output
    checked against the fp32 reference is them, flattened into one vector (drift after N steps).
    """

    needs_grad = True
    trains = True
    # the whole step is compiled by the trainer (Trainer), not the model alone
    applies_compile = True
    unsupported_toggles = {
        "cuda-graphs": "a training step's optimizer and gradient scaler read and write host-side state "
                       "between steps, which a replayed graph cannot (compile the step instead)",
    }

    def loss(self, model: Any, batch: Any, built: Built, params: dict[str, Any]) -> Any:
        """Forward and loss on ``batch`` (``built.state``): a one-element tensor that requires grad."""
        raise NotImplementedError(f"{type(self).__name__}.loss")

    def make_optimizer(self, parameters: tuple[Any, ...], params: dict[str, Any], implementation: dict[str, bool]
                       ) -> Any:
        """The optimizer of ``parameters``; ``implementation`` is torch.optim's ``foreach``/``fused`` keyword
        the case's toggles chose. Default: AdamW with ``params["lr"]`` (default 1e-3)."""
        import torch

        return torch.optim.AdamW(parameters, lr=float(params.get("lr", 1e-3)), foreach=implementation.get("foreach"),
                                 fused=implementation.get("fused"))

    def trainer(self, model: Any, built: Built, params: dict[str, Any]) -> Trainer:
        """``built``'s trainer, made on first use from ``built.training`` (a plain fp32 step when None)."""
        if built.trainer is None:
            built.trainer = Trainer(self, model, built, params)
        return built.trainer

    def step(self, model: Any, state: Any, built: Built, params: dict[str, Any]) -> Any:
        """One training step on the batch ``built.state`` (``state``, the parameters the step before
        returned, is not read); returns the trained parameters."""
        trainer = self.trainer(model, built, params)
        trainer.train_step(model, built.state, built, params)
        return trainer.parameters

    def run_unit(self, model: Any, built: Built, params: dict[str, Any]) -> Any:
        """``steps_per_unit`` training steps from the initial parameters and a fresh optimizer state."""
        self.trainer(model, built, params).restore()
        state = built.state
        for _ in range(self.steps_per_unit(params)):
            state = self.step(model, state, built, params)
        return state

    def output(self, state: Any) -> Any:
        """The parameters a step returned, flattened and joined into one vector."""
        import torch

        if isinstance(state, (tuple, list)) and all(isinstance(t, torch.Tensor) for t in state):
            return torch.cat([t.detach().reshape(-1) for t in state])
        return state


def check_loss(workload: str, loss: Any) -> None:
    """Raise WorkloadError unless ``loss`` is a one-element tensor that requires grad: what a training
    step can backpropagate."""
    import torch

    if isinstance(loss, torch.Tensor):
        if loss.numel() == 1 and loss.requires_grad:
            return
        what = (f"a tensor of shape {tuple(loss.shape)}" if loss.numel() != 1
                else "a tensor that does not require grad (computed without autograd)")
    else:
        shown = repr(loss)
        what = f"{type(loss).__name__} {shown if len(shown) <= 80 else shown[:77] + '...'}"
    raise WorkloadError(f"workload {workload!r}: loss() returned {what}, not a one-element tensor that "
                        "requires grad (the loss a training step backpropagates)")


class Trainer:
    """What carries a training workload's state across steps: its optimizer, its gradient scaler (fp16
    autocast), and a copy of the initial parameters; ``train_step`` is one step, compiled whole when the
    case compiles."""

    def __init__(self, workload: TrainingWorkload, model: Any, built: Built, params: dict[str, Any]) -> None:
        import torch

        options = built.training or TrainingOptions()
        self.workload = workload.name
        self.options = options
        self.parameters = tuple(p for p in model.parameters() if p.requires_grad)
        if not self.parameters:
            raise WorkloadError(f"workload {workload.name!r}: the model has no parameters that require grad: "
                                "a training step has nothing to train")
        self.optimizer = workload.make_optimizer(self.parameters, params, OPTIMIZER_IMPLEMENTATIONS[options.optimizer])
        self.initial = tuple(p.detach().clone() for p in self.parameters)
        self.device_type = self.parameters[0].device.type
        self.autocast = getattr(torch, options.autocast) if options.autocast else None
        self.scaler = torch.amp.GradScaler(self.device_type) if options.autocast == "float16" else None
        self.scaler_initial = self.scaler.state_dict() if self.scaler is not None else None
        self._loss = workload.loss
        self.train_step: Callable[..., Any] = self._step
        if options.compile_mode is not None:
            self.train_step = torch.compile(self._step, mode=options.compile_mode)

    def _step(self, model: Any, batch: Any, built: Built, params: dict[str, Any]) -> Any:
        import torch

        self.optimizer.zero_grad(set_to_none=self.options.set_to_none)
        if self.autocast is not None:
            with torch.autocast(self.device_type, dtype=self.autocast):
                loss = self._loss(model, batch, built, params)
        else:
            loss = self._loss(model, batch, built, params)
        check_loss(self.workload, loss)
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            loss.backward()
            self.optimizer.step()
        return loss.detach()

    def restore(self) -> None:
        """The initial parameters back, the optimizer state zeroed in place (a fresh state for Adam, AdamW
        and SGD without dampening; in place, so a compiled step finds the tensors it was compiled for) and
        the gradient scaler's initial scale."""
        import torch

        with torch.no_grad():
            for p, p0 in zip(self.parameters, self.initial, strict=True):
                p.copy_(p0)
            for state in self.optimizer.state.values():
                for value in state.values():
                    if isinstance(value, torch.Tensor):
                        value.zero_()
        if self.scaler is not None and self.scaler_initial is not None:
            self.scaler.load_state_dict(self.scaler_initial)

    def describe(self) -> dict[str, Any]:
        """What the step did, for the case's metadata (``metadata.training``)."""
        return {
            "optimizer": type(self.optimizer).__name__,
            "implementation": self.options.optimizer,
            "zero_grad": "set_to_none" if self.options.set_to_none else "zeros",
            "autocast": self.options.autocast,
            "grad_scaler": None if self.scaler is None else {
                "init_scale": float(self.scaler_initial["scale"]) if self.scaler_initial else None,
                "scale": float(self.scaler.get_scale())},
            "compiled_step": self.options.compile_mode,
            "parameters": int(sum(p.numel() for p in self.parameters)),
        }


StepFn = Callable[[Any, Any, Built, dict[str, Any]], Any]
