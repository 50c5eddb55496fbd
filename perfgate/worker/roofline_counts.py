"""What the roofline reads of one step (perfgate.judging.roofline): its FLOPs (torch.utils.flop_counter
on the eager fp32 reference), the bytes its aten ops read and write (a TorchDispatchMode), and the
intensity and achieved rates derived from them. Torch is imported inside the functions."""

from __future__ import annotations

from typing import Any


def flops_per_step(spec: Any, workload: Any, ref: Any) -> float | None:
    """FLOPs of one step of the workload, counted once by torch.utils.flop_counter on the eager fp32
    reference: the algorithm's FLOPs, the same for every toggle (compiled code hides its aten calls)."""
    from torch.utils.flop_counter import FlopCounterMode

    from perfgate.worker import toggles as toggles_mod

    contexts = toggles_mod.step_contexts((), spec.device, workload.needs_grad)
    counter = FlopCounterMode(display=False)
    with counter, contexts():
        workload.step(ref.model, ref.state, ref, spec.param_dict)
    return float(counter.get_total_flops())


# aten ops that move no data: views and aliases (func.is_view), fresh allocations, autograd bookkeeping
_NO_TRAFFIC = ("empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "detach", "alias",
               "lift_fresh", "set_", "resize_", "record_stream")


def bytes_per_step(spec: Any, workload: Any, prepared: Any, ref: Any) -> tuple[float, str]:
    """Bytes one step reads and writes at the aten-op level, and which instance was counted.

    Every aten op the step dispatches adds the sizes of its tensor inputs and outputs (numel x element
    size; views, aliases and fresh allocations add nothing), counted by a TorchDispatchMode. Where the
    toggled model runs op by op (eager, amp, channels-last...) that model is counted, in its own dtypes;
    where a compiler or a graph hides the ops (compile, torchscript, cuda-graphs) the eager reference is
    counted under the case's autocast: the traffic before fusion, an upper bound of the compiled step's.
    Caches are not modelled: an op whose operands stay in cache counts as if it went to memory."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    from perfgate.worker import toggles as toggles_mod

    class BytesCounter(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.total = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
            out = func(*args, **(kwargs or {}))
            name = func.overloadpacket.__name__
            if not getattr(func, "is_view", False) and name not in _NO_TRAFFIC:
                for t in (*tree_flatten((args, kwargs or {}))[0], *tree_flatten(out)[0]):
                    if isinstance(t, torch.Tensor):
                        self.total += t.numel() * t.element_size()
            return out

    toggles = tuple(prepared.toggles)
    runs_op_by_op = (toggles_mod.compile_mode(toggles) is None and not prepared.captured
                     and "torchscript" not in toggles and not getattr(workload, "compile_mode", None))
    counter = BytesCounter()
    if runs_op_by_op:
        with counter:
            prepared.step(prepared.built.state)
        return float(counter.total), "this toggle's eager ops"
    amp = tuple(t for t in toggles if t in ("amp-fp16", "amp-bf16"))
    contexts = toggles_mod.step_contexts(amp, spec.device, workload.needs_grad)
    with counter, contexts():
        workload.step(ref.model, ref.state, ref, spec.param_dict)
    return float(counter.total), "eager reference ops (before fusion)"


def roofline_metrics(flops: float | None, traffic: float | None, step_s: float | None) -> dict[str, float]:
    """flops_per_step, bytes_per_step, arithmetic_intensity and the achieved rates from what was counted
    (None: that count failed). No intensity without a FLOP count: a count that failed is not 0 FLOPs, and
    an intensity of 0 made such a step memory-bound (perfgate.judging.roofline classifies it unclassified)."""
    out: dict[str, float] = {}
    if flops is not None:
        out["flops_per_step"] = flops
        if step_s and flops > 0:
            out["achieved_flops_per_s"] = flops / step_s
    if traffic:
        out["bytes_per_step"] = traffic
        if flops is not None:
            out["arithmetic_intensity"] = flops / traffic
        if step_s:
            out["achieved_bytes_per_s"] = traffic / step_s
    return out
