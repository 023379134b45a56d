"""The library under the tools and the scripts of benchmarks/ (docs/measuring.md is the method):

inputs.py    the one input builder of selective_state_update (tests and tools)
timer.py     the cold-L2 CUDA-graph timer, and interleaved rounds of it
ceiling.py   the same-bytes ceiling, the large-transfer peak, the gather ceiling
fanout.py    the 1 -> T stream, the ceiling of a multi-token call
spec.py      verify calls (multi-token modes) by the bench method, and their ceilings
calls.py     timing one launch config's calls, and its report row against the ceiling
compare.py   running a config and comparing what it wrote: bit for bit, or against float64
step.py      timing decode steps of a Mamba2 layer stack, and the kernel's share of them
accuracy.py  fp32 / bf16 / fp16 states (round-to-nearest, stochastic) against float64, long decodes
kernels.py   which kernel is measured: ssmdecode's or an installed upstream one
compile.py   compiling the kernel of a call for a GPU target, without a GPU
report.py    the environment of a run, JSON, Markdown and PNG
"""
