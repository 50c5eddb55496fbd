"""An example perfgate workload: replace it with the code you want to keep fast.

perfgate imports every *.py file in workloads/ (the folder named by `workloads_dirs` in pyproject.toml)
inside a worker process and measures each Workload subclass with a `name`. `perfgate list` shows them;
`perfgate run` measures them. Writing workloads: perfgate's docs/workloads.md.

Code you already have can be gated without a class (see docs/workloads.md, "Existing code"):

    example = Workload.from_callable(my_step, make_inputs, name="my_step", sizes={...})
"""

import torch
from torch import nn

from perfgate.workload import Built, Tolerance, Workload

# Hidden layers of the model below. Each one is a quarter of the step's work at every size.
DEPTH = 4


class ExampleMLP(Workload):
    # the name used on the command line (`perfgate run -w example_mlp`), in reports and in baselines
    name = "example_mlp"
    description = "a small MLP (Linear + GELU layers) applied to a batch: replace with your own step"
    # Named sizes -> the parameters `build` and `step` receive. smoke: seconds on a laptop CPU, for pull
    # requests; pr: under a minute on a GPU; full: your real size. Add more sizes as you need them.
    sizes = {
        "smoke": {"batch": 64, "width": 256},
        "pr": {"batch": 1024, "width": 2048},
        "full": {"batch": 8192, "width": 4096},
    }
    # How far a toggle's output (compile, amp-bf16...) may drift from the eager fp32 reference.
    tolerance = Tolerance(rel_l2=2e-2)
    # the state is a 2-D batch, not an NCHW image: the channels-last toggle does not apply
    channels_last_applies = False

    def build(self, params, device, dtype, variants):
        """The model and the input of the first step, made once; not part of the timed work."""
        width = params["width"]
        layers = []
        for _ in range(DEPTH):
            layers += [nn.Linear(width, width), nn.GELU()]
        model = nn.Sequential(*layers).to(device=device, dtype=dtype)
        g = torch.Generator().manual_seed(0)  # the same input on every device
        x = torch.randn(params["batch"], width, generator=g)
        return Built(model=model, state=x.to(device=device, dtype=dtype))

    def step(self, model, state, built, params):
        """One step: what perfgate times (it must return its output)."""
        return model(state)
