"""perfgate: profiling and regression gating for PyTorch workloads.

Importing the package imports no torch: the CLI, data model, comparison and reports run without it.
Workload authors import ``perfgate.workload`` (Workload, Built, Tolerance).
"""

__version__ = "0.1.0"
