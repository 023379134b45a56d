"""The cold-L2 CUDA-graph timer (docs/measuring.md, "The method"), and interleaved rounds of it.

Decode touches each layer's state once per step, so a kernel that streams the state must be
timed with its state coming from HBM. The timer rotates over K disjoint working sets (slot
sets of the state pool, or flat buffers) that together hold at least 3x the L2, captures
max(20, K) calls in one CUDA graph (call i uses set i mod K), replays the graph 20 times
between two CUDA events, and reports elapsed / (20 x calls) per call, the median of 5 such
repeats. Without the rotation, batches whose state fits in L2 looked up to 2.6x faster than
they are (the seed's H200 and B200 runs).

On CPU tensors (Triton's interpreter) nothing CUDA is touched: each call runs once under
time.perf_counter and the result says timing_meaningful=False.

Candidates compared with each other are timed in interleaved rounds (interleaved): each one
once a round, so that drift over the run (clocks, temperature) hits them alike.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import torch

__all__ = [
    "COLD_L2_FACTOR",
    "MIN_CALLS",
    "REPEATS",
    "REPLAYS",
    "Timing",
    "cold_rotation",
    "interleaved",
    "l2_bytes",
    "method",
    "round_spread",
    "time_cold",
]

COLD_L2_FACTOR = 3  # the K working sets together hold at least this many L2s
MIN_CALLS = 20  # calls captured in one graph, at least
REPLAYS = 20  # graph replays between the two events of one repeat
REPEATS = 5  # repeats; the reported time is their median


@dataclass(frozen=True)
class Timing:
    """Per-call time of one measured callable.

    us: median of the repeats, microseconds per call.
    repeats_us: every repeat's per-call time, in order.
    rotation: K, the number of disjoint working sets the calls cycle through.
    calls_per_graph: calls captured in the graph (max(MIN_CALLS, K)); 1 on CPU.
    replays: graph replays per repeat; 1 on CPU.
    timing_meaningful: False on CPU (the interpreter's timings say nothing about the GPU).
    """

    us: float
    repeats_us: tuple[float, ...]
    rotation: int
    calls_per_graph: int
    replays: int
    timing_meaningful: bool

    @property
    def spread(self) -> float:
        """(max - min) / median of the repeats: the noise of this measurement."""
        return (max(self.repeats_us) - min(self.repeats_us)) / self.us if self.us else 0.0

    def to_dict(self) -> dict[str, object]:
        return {
            "us": self.us,
            "repeats_us": list(self.repeats_us),
            "spread": self.spread,
            "rotation": self.rotation,
            "calls_per_graph": self.calls_per_graph,
            "replays": self.replays,
            "timing_meaningful": self.timing_meaningful,
        }


def method() -> dict[str, object]:
    """The timer's parameters, for every report."""
    return {
        "timer": "CUDA graph, cold L2 by rotation over disjoint working sets",
        "cold_l2_factor": COLD_L2_FACTOR,
        "min_calls_per_graph": MIN_CALLS,
        "replays_per_repeat": REPLAYS,
        "repeats": REPEATS,
        "statistic": "median of repeats",
    }


def l2_bytes(device: torch.device) -> int:
    """The L2 size of a CUDA device, read off the device; 0 for a CPU device."""
    if device.type != "cuda":
        return 0
    return torch.cuda.get_device_properties(device).L2_cache_size


def cold_rotation(bytes_per_call: int, device: torch.device, pdl: bool = False) -> int:
    """K: how many disjoint working sets of bytes_per_call hold at least COLD_L2_FACTOR x the
    device's L2 together; 1 on CPU. pdl: at least 2, because a call launched with programmatic
    dependent launch reads its set before the call before it has finished writing its own."""
    if bytes_per_call < 1:
        raise ValueError(f"bytes_per_call must be >= 1, got {bytes_per_call}")
    return max(2 if pdl else 1, math.ceil(COLD_L2_FACTOR * l2_bytes(device) / bytes_per_call))


def time_cold(
    calls: Sequence[Callable[[], object]] | Callable[[int], object],
    device: torch.device,
    rotation: int | None = None,
) -> Timing:
    """Time one call of a kernel with cold L2.

    Args:
        calls: either K callables, call i touching working set i, or one callable taking the
            working-set index i in [0, K). Each call must launch work on the current stream
            only, without synchronizing or allocating (it is captured in a CUDA graph).
        device: where the calls run; a CPU device times under the interpreter, meaninglessly.
        rotation: K when calls is one callable; must be omitted for a list.
    """
    if callable(calls):
        if rotation is None or rotation < 1:
            raise ValueError("a single callable needs rotation >= 1, the number of working sets")
        call = calls
    else:
        if rotation is not None:
            raise ValueError("rotation is the length of the list of calls; do not pass it")
        if not calls:
            raise ValueError("no calls to time")
        rotation = len(calls)

        def call(i: int) -> object:
            return calls[i]()

    if device.type != "cuda":
        return _time_on_cpu(call, rotation)
    return _time_cuda_graph(call, rotation, device)


def _time_on_cpu(call: Callable[[int], object], rotation: int) -> Timing:
    """Each working set's call once, under perf_counter: exercises the code, measures nothing."""
    per_call = []
    for i in range(rotation):
        start = time.perf_counter()
        call(i)
        per_call.append((time.perf_counter() - start) * 1e6)
    return Timing(
        us=statistics.median(per_call),
        repeats_us=tuple(per_call),
        rotation=rotation,
        calls_per_graph=1,
        replays=1,
        timing_meaningful=False,
    )


def _time_cuda_graph(call: Callable[[int], object], rotation: int, device: torch.device) -> Timing:
    n_calls = max(MIN_CALLS, rotation)
    with torch.cuda.device(device):
        # Warm up outside the graph, every working set once: Triton compiles a kernel per
        # specialization of its arguments (16-byte alignment of each pointer, ints equal to 1),
        # and no compile may happen inside the capture. On a side stream, as torch's
        # CUDA-graph recipe does before a capture.
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            for i in range(rotation):
                call(i)
        torch.cuda.current_stream(device).wait_stream(side)
        torch.cuda.synchronize(device)

        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for i in range(n_calls):
                call(i % rotation)
        graph.replay()  # uploads the graph; not timed
        torch.cuda.synchronize(device)

        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        per_call = []
        for _ in range(REPEATS):
            start.record()
            for _ in range(REPLAYS):
                graph.replay()
            end.record()
            end.synchronize()
            per_call.append(start.elapsed_time(end) * 1e3 / (REPLAYS * n_calls))
        graph.reset()
    return Timing(
        us=statistics.median(per_call),
        repeats_us=tuple(per_call),
        rotation=rotation,
        calls_per_graph=n_calls,
        replays=REPLAYS,
        timing_meaningful=True,
    )


Item = TypeVar("Item", bound=Hashable)
Result = TypeVar("Result")


def interleaved(
    items: Sequence[Item], measure: Callable[[Item], Result], rounds: int
) -> dict[Item, list[Result]]:
    """Each item measured once a round for `rounds` rounds, so drift over the run hits every
    item alike: round 2k starts at item k mod n and goes round, round 2k + 1 goes the same
    round backwards, so that no item always runs first and no item always runs after the same
    one (a GPU at its power cap runs a kernel faster right after one that drew less power:
    ssmdecode tune, run 90). Returns each item's measurements in round order."""
    order = list(items)
    results: dict[Item, list[Result]] = {item: [] for item in order}
    for r in range(rounds):
        start = (r // 2) % len(order) if order else 0
        sequence = order[start:] + order[:start]
        for item in sequence[::-1] if r % 2 else sequence:
            results[item].append(measure(item))
    return results


def median_timing(timings: Sequence[Timing]) -> Timing:
    """Of one config's interleaved rounds, the round whose time is the median (the lower of
    the two middle ones for an even count), so that its repeats and rotation go with it."""
    if not timings:
        raise ValueError("no timings")
    ranked = sorted(timings, key=lambda t: t.us)
    return ranked[(len(ranked) - 1) // 2]


def round_spread(rounds_us: Iterable[Sequence[float]]) -> str:
    """How far each candidate's interleaved rounds lie apart (max / min - 1), as one line: the
    median and the largest over the candidates."""
    spreads = [max(us) / min(us) - 1 for us in rounds_us]
    return f"round-to-round spread: median {statistics.median(spreads):.1%}, max {max(spreads):.1%}"
