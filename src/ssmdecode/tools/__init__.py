"""The subcommands of `ssmdecode`, one module each: bench, sweep, verify, tune, e2e,
accuracy.

Every tool module exposes `add_parser(subparsers) -> None` and `run(args) -> int`: it parses
its arguments (the shared groups are in ssmdecode.cli_args), calls the library (ssmdecode.bench:
inputs, timing, comparisons, model steps, reports) and reports. No tool module imports another.
"""
