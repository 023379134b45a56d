"""Launch configurations of selective_state_update: the knobs, the search space, and the
per-device tables that say which knobs to use.

A launch config changes how the work is cut into programs, never what each row computes. Yet
it can change the bits of `out`: the row sum over the state dim is a reduction whose order
follows the register layout Triton derives from the tile (elements per thread along N, lanes
along N, warps along N). On an H200 with Triton 3.6, (2,4), (2,8) and (4,8) gave different
bits from the upstream (4,4) at dstate 128 (docs/measuring.md). So no config is trusted
to be identical: a table entry is written only by `ssmdecode tune`, after the config was
compared bit for bit with `upstream_config` on the GPU.

Lookup order for a call: `config=` argument, then the device's table (for a call that rounds
its 16-bit state stochastically, the entries of its rounding first), then `default_config`.
Tables live in `configs/selective_state_update/<device_key>.json` inside the package, or in
the folder named by the environment variable SSMDECODE_CONFIG_DIR.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import re
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import torch

KERNEL = "selective_state_update"
CONFIG_DIR_ENV = "SSMDECODE_CONFIG_DIR"
PACKAGE_CONFIG_DIR = Path(__file__).resolve().parent / "configs"

_STATE_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
_MAX_WARPS = 32


@dataclass(frozen=True)
class LaunchConfig:
    """How one call of selective_state_update is launched.

    block_m: rows of the head dim P per program (a power of two).
    num_warps: warps per program.
    slot_major: grid order. False is the upstream order (row block fastest, then batch, then
        head): consecutive programs walk one head of many slots. True walks row blocks, then
        heads, then batch rows, so consecutive programs read each slot's [H, P, N] state in
        memory order.
    evict_first: cache hints. The state streams evict-first in L2 (each state is touched once
        per step, so caching it only evicts the small inputs every program reads), and the slot
        indices evict-last (every layer of a step reads them, and the state load waits on them).
    ordered_sum: the row sum over N spelled out in the upstream order (4 columns in a thread,
        then a butterfly over lanes, then warps), so that its bits no longer depend on the
        register layout of the tile. Lets tiles with 8 elements a thread, or one warp at
        dstate 256, keep the upstream bits. For 16 <= dstate <= 256.
    max_registers: a cap on the registers a thread (ptxas's maxnreg; label flag "regs<N>"), or
        None for the compiler's choice. With one warp a program, registers bound how many
        programs share a multiprocessor: (16,1,slot,evict,ordered) with a bf16 state takes 100
        registers, 19 warps an SM, and under "regs88" 88 without spilling, 23 warps. A cap
        the compiler cannot meet spills to local memory (`benchmarks/compile_info.py` shows
        registers and spills offline). Register allocation does not change the arithmetic;
        the tuner measures the bits all the same.
    """

    block_m: int
    num_warps: int
    slot_major: bool = False
    evict_first: bool = False
    ordered_sum: bool = False
    max_registers: int | None = None

    def __post_init__(self) -> None:
        for name in ("block_m", "num_warps"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"LaunchConfig.{name} must be a positive int, got {value!r}")
            if value & (value - 1):
                raise ValueError(f"LaunchConfig.{name} must be a power of two, got {value}")
        if self.num_warps > _MAX_WARPS:
            raise ValueError(f"LaunchConfig.num_warps must be <= {_MAX_WARPS}, got {self.num_warps}")
        for name, _ in _FLAGS:
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"LaunchConfig.{name} must be a bool, got {getattr(self, name)!r}")
        regs = self.max_registers
        if regs is not None and (
            not isinstance(regs, int)
            or isinstance(regs, bool)
            or not _MIN_REGISTERS <= regs <= _MAX_REGISTERS
            or regs % 8
        ):
            raise ValueError(
                f"LaunchConfig.max_registers must be None or a multiple of 8 from "
                f"{_MIN_REGISTERS} to {_MAX_REGISTERS} (registers a thread), "
                f"got {regs!r}"
            )

    @property
    def upstream_grid(self) -> bool:
        """Whether the upstream kernel can launch this config: its grid, no other knob."""
        return not (self.slot_major or self.evict_first or self.ordered_sum or self.max_registers is not None)

    @property
    def label(self) -> str:
        """Short readable name: "(8,1)", "(8,1,slot)", "(16,4,slot,evict,ordered,regs88)"."""
        flags = [flag for name, flag in _FLAGS if getattr(self, name)]
        if self.max_registers is not None:
            flags.append(f"{_REGS_FLAG}{self.max_registers}")
        return "(" + ",".join([str(self.block_m), str(self.num_warps), *flags]) + ")"

    def to_dict(self) -> dict[str, Any]:
        """The fields, max_registers only when set (tables written before it read the same)."""
        data = asdict(self)
        if self.max_registers is None:
            del data["max_registers"]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LaunchConfig:
        names = {f.name for f in fields(cls)}
        if data.get("stages") == 0:  # results of c2c42dc and before: 0 was the only grid kept
            data = {k: v for k, v in data.items() if k != "stages"}
        unknown = set(data) - names
        if unknown:
            raise ValueError(f"unknown LaunchConfig field(s) {sorted(unknown)}; known: {sorted(names)}")
        return cls(**data)

    @classmethod
    def parse(cls, text: str) -> LaunchConfig:
        """Parse a label: "8,1", "(8,1)", "8,1,slot", "16,4,slot,evict,ordered,regs88"."""
        parts = [p.strip() for p in text.strip().strip("()").split(",") if p.strip()]
        known = [flag for _, flag in _FLAGS] + [f"{_REGS_FLAG}<N>"]
        if len(parts) < 2 or not parts[0].isdigit() or not parts[1].isdigit():
            raise ValueError(
                f"config {text!r}: expected 'BLOCK_M,WARPS' then any of the flags {','.join(known)}"
            )
        flags = set(parts[2:])
        caps = sorted(f for f in flags if re.fullmatch(_REGS_FLAG + r"\d+", f))
        unknown = flags - {flag for _, flag in _FLAGS} - set(caps)
        if unknown or len(caps) > 1:
            why = f"unknown flag(s) {sorted(unknown)}" if unknown else f"two register caps {caps}"
            raise ValueError(f"config {text!r}: {why}; known: {', '.join(known)}")
        return cls(
            int(parts[0]),
            int(parts[1]),
            **{name: flag in flags for name, flag in _FLAGS},
            max_registers=int(caps[0].removeprefix(_REGS_FLAG)) if caps else None,
        )


# LaunchConfig's boolean fields and their flags in labels, in label order.
_FLAGS = (("slot_major", "slot"), ("evict_first", "evict"), ("ordered_sum", "ordered"))
# max_registers in labels: "regs88". Caps are multiples of 8 (the hardware allocates registers
# a thread in 8s) within what ptxas's maxnreg accepts.
_REGS_FLAG = "regs"
_MIN_REGISTERS = 24
_MAX_REGISTERS = 248
# What LaunchConfig.parse reads, for help strings: "BLOCK_M,WARPS[,slot][,evict][,ordered][,regsN]".
LABEL_SYNTAX = "BLOCK_M,WARPS" + "".join(f"[,{flag}]" for _, flag in _FLAGS) + f"[,{_REGS_FLAG}N]"


def upstream_config(dstate: int) -> LaunchConfig:
    """The launch config of the established upstream Triton kernel (mamba_ssm, and the copies
    serving engines ship) for this state dim. Every other config must reproduce its bits."""
    if dstate <= 16:
        return LaunchConfig(32, 4)
    if dstate <= 32:
        return LaunchConfig(16, 4)
    if dstate <= 64:
        return LaunchConfig(8, 4)
    if dstate <= 128:
        return LaunchConfig(4, 4)
    return LaunchConfig(4, 8)


def default_config(dstate: int, state_dtype: torch.dtype = torch.float32) -> LaunchConfig:
    """The config for a device with no table: upstream's, except (8,1) for 64 < dstate <= 128
    with a float32 state (the seed's change: 1.29x at batch 512 on an H200, 0 mismatches with
    (4,4) on 920 points). A 2-byte state keeps (4,4): with 8 elements to a 16-byte vector its
    (8,1) tile has a different register layout along N, hence a different row-sum order."""
    if 64 < dstate <= 128 and state_dtype == torch.float32:
        return LaunchConfig(8, 1)
    return upstream_config(dstate)


def replay_fast_config(
    headdim: int, dstate: int, batch: int | None = None, tokens: int | None = None
) -> LaunchConfig:
    """The fast replay route's config for a device with no table entry (mode "replay-fast"),
    until the tuner's entries replace it: the slot-major grid with cache hints, the fastest of
    the H200's sweeps (headline shape, window 16, steady cursors; benchmarks/results/
    NVIDIA_H200/fast-decode-sweep/ and fast-verify-sweep/). T = 1: 16 rows and one warp above
    batch 8 (with the precomputed Grams), 16 rows and 4 warps at batch 8 and below. T >= 2 (the
    verify step's out as tiles or draft by draft: replay_fast._tiles): at batch 8 and below,
    from T = 3 on (tiles), 32 rows and 2 warps from batch 3 and 4 warps below, 16 rows and 2
    warps at T = 2 (draft by draft; fast-verify-small/); from T = 8 on 64 rows and 4 warps
    (tiles); else 16 rows and one warp (draft by draft). Rows capped at the head dim's next
    power of 2, 16 at least. (The tiles' 2 warps: `ssmdecode tune --mode replay-fast` chose
    (32,2) over (32,4) at batch 8 and kept (32,4) at batch 1 for T = 3, 4 and 8 on both cards,
    8.0-8.8% ahead on the H200, NVIDIA_H200/tune-replay-fast-small/; 7.3-8.1% on the H100 in
    its last tune, whose table holds them. From batch 3: the batches a table's bucket 8 serves.)"""
    del dstate  # the same choice for every state dim until measured
    top = max(16, 1 << max(headdim - 1, 0).bit_length())
    small = batch is not None and batch <= 8
    if tokens == 1 or tokens is None:
        return LaunchConfig(16, 4 if small else 1, True, True)
    if small and tokens == 2:
        return LaunchConfig(16, 2, True, True)
    if small:
        return LaunchConfig(min(32, top), 2 if batch >= 3 else 4, True, True)
    if tokens >= 8:
        return LaunchConfig(min(64, top), 4, True, True)
    return LaunchConfig(16, 1, True, True)


def candidate_configs(
    headdim: int, dstate: int, state_dtype: torch.dtype, space: str = "tune"
) -> list[LaunchConfig]:
    """Launch configs to search.

    space="basic": every (block_m, num_warps) of the upstream grid, block_m 1 .. next power of
        two of the head dim, 1 to 16 warps: the space the seed swept.
    space="full": basic, each also with the slot-major grid and the cache hints.
    space="tune": the slot-major grid with cache hints (on the H200 these led at every batch),
        with the layout's own row sum and with the ordered row sum; 4 to
        64 state elements a thread (under 4 there is no 16-byte vector; over 64 registers bound
        occupancy: (16,1) used 130 registers a thread, 12 warps/SM).
    Whether a candidate keeps the upstream bits is decided by measurement on the GPU, not here.
    """
    if space not in ("basic", "full", "tune"):
        raise ValueError(f"space must be 'basic', 'full' or 'tune', got {space!r}")
    top = max(1, 1 << (headdim - 1).bit_length())
    block_n = 1 << max(dstate - 1, 0).bit_length()
    ordered = 16 <= block_n <= 256
    out = []
    for block_m in (1 << i for i in range(top.bit_length())):
        for num_warps in (1, 2, 4, 8, 16):
            if space == "tune":
                if not 4 <= block_m * block_n // (32 * num_warps) <= 64:
                    continue
                out.append(LaunchConfig(block_m, num_warps, True, True))
                if ordered:
                    out.append(LaunchConfig(block_m, num_warps, True, True, True))
                continue
            for slot_major in (False, True) if space == "full" else (False,):
                for evict_first in (False, True) if space == "full" else (False,):
                    out.append(LaunchConfig(block_m, num_warps, slot_major, evict_first))
    del state_dtype  # the same space for every dtype; identity is measured per dtype
    return out


# ---------------------------------------------------------------------------------------------
# tables


class TableError(ValueError):
    """A config table file is malformed; the message names the file and the field."""


def device_key(device: torch.device | int | str | None = None) -> str:
    """The table name of a device: its CUDA name with non-alphanumerics as "_"
    ("NVIDIA H200" -> "NVIDIA_H200"); "cpu" for a CPU device or when CUDA is not available."""
    if isinstance(device, int):
        device = torch.device("cuda", device)
    elif device is not None:
        device = torch.device(device)
    if (device is not None and device.type != "cuda") or not torch.cuda.is_available():
        return "cpu"
    index = device.index if device is not None and device.index is not None else None
    return _cuda_device_key(torch.cuda.current_device() if index is None else index)


@functools.cache
def _cuda_device_key(index: int) -> str:
    return re.sub(r"[^0-9A-Za-z]", "_", torch.cuda.get_device_name(index))


# What a call writes besides out (see Call.mode in ops/selective_state_update/checks.py):
# single-token decode, or T tokens a request writing the final state, every token's state to an
# intermediate buffer (sglang's verify), or every token's state to its own slot (vLLM's); or a
# verify step by replay (selective_state_replay), exact or by its fast route (exact=False).
MODES = ("single", "final", "buffer", "dst", "replay", "replay-fast")


# How a multi-token call's dt, A and dt_bias come: tied over the head dim (stride 0 over P, and
# N for A: one dt' and one dA a head, as Mamba2 layers pass them), or dense (Mamba1-style
# layouts, or an engine that materializes A): then every token computes dA element by element,
# and the verify kernel's best config differs (docs/performance.md, "A dense in the verify
# kernel"): a table may hold entries of their own for them (key suffix " params=dense").
PARAMS = ("tied", "dense")


# How a call rounds its 16-bit state stores: to nearest, or stochastically (rand_seed). Calls that
# round stochastically run more instructions an element, so their best config can differ: a
# table may hold entries of their own for them (key suffix " rounding=stochastic").
ROUNDINGS = ("nearest", "stochastic")


def table_key(
    headdim: int,
    dstate: int,
    state_dtype: torch.dtype | str,
    mode: str = "single",
    tokens: int = 0,
    rounding: str = "nearest",
    params: str = "tied",
) -> str:
    """The readable entry key of a shape: "headdim=64 dstate=128 state=float32" for
    single-token decode; multi-token calls add their mode and token count,
    "headdim=64 dstate=128 state=float32 mode=buffer tokens=4", and " params=dense" where dt, A
    or dt_bias is not tied over the head dim; the entries of calls that round a 16-bit state
    stochastically add " rounding=stochastic"."""
    name = state_dtype if isinstance(state_dtype, str) else str(state_dtype).removeprefix("torch.")
    if name not in _STATE_DTYPES:
        raise ValueError(f"state dtype {name!r} is not one of {sorted(_STATE_DTYPES)}")
    if rounding not in ROUNDINGS:
        raise ValueError(f"rounding {rounding!r} is not one of {ROUNDINGS}")
    if rounding == "stochastic" and name == "float32":
        raise ValueError("rounding 'stochastic' needs a 16-bit state (bfloat16 or float16), got float32")
    key = f"headdim={headdim} dstate={dstate} state={name}"
    if mode != "single":
        if mode not in MODES or not isinstance(tokens, int) or tokens < 1:
            raise ValueError(
                f"mode {mode!r} with tokens {tokens!r}: expected one of {MODES} and "
                "tokens >= 1 (or mode 'single')"
            )
        key = f"{key} mode={mode} tokens={tokens}"
    if params not in PARAMS:
        raise ValueError(f"params {params!r} is not one of {PARAMS}")
    if params == "dense":
        if mode not in ("final", "buffer", "dst"):
            raise ValueError(
                "params 'dense' keys the verify kernel's entries (modes final, buffer, dst), "
                f"got mode {mode!r}"
            )
        key = f"{key} params=dense"
    return key if rounding == "nearest" else f"{key} rounding={rounding}"


_KEY_RE = re.compile(
    r"^headdim=(\d+) dstate=(\d+) state=(?P<state>float32|bfloat16|float16)"
    r"(?: mode=(?P<mode>final|buffer|dst|replay-fast|replay) tokens=(?P<tokens>[1-9]\d*)"
    r"(?: params=(?P<params>dense))?)?(?: rounding=(?P<rounding>stochastic))?$"
)


def config_dir() -> Path:
    """Where tables are looked up: $SSMDECODE_CONFIG_DIR, else the package's folder."""
    env = os.environ.get(CONFIG_DIR_ENV)
    return Path(env) if env else PACKAGE_CONFIG_DIR


def table_path(device: str, directory: Path | None = None) -> Path:
    """The table file of a device key, e.g. <dir>/selective_state_update/NVIDIA_H200.json."""
    return (directory or config_dir()) / KERNEL / f"{device}.json"


@dataclass(frozen=True)
class TableEntry:
    """One bucket of a table: the config and how it got there. tuned_by: the command, UTC
    date and git commit of the tune run that chose it ({"command", "date", "git_commit"}),
    None in tables written before entries carried it (their file's made_by names the last
    tune run only). accuracy: for the fast replay route's entries (mode replay-fast), which
    are admitted by accuracy instead of bit identity, what the tuner measured against float64
    ({"out_ulps", "mean_ratio", "state_rel"}: numerics.FastAccuracy), else None."""

    config: LaunchConfig
    tuned_by: dict[str, str | None] | None = None
    accuracy: dict[str, float] | None = None

    def to_dict(self, run_id: str | None = None) -> dict[str, Any]:
        """The entry as the table file holds it: the config's fields, its tune run's id (the
        record itself lives once in the file's "runs") and its accuracy where it has them."""
        data = self.config.to_dict()
        if run_id is not None:
            data[_TUNED_BY] = run_id
        if self.accuracy is not None:
            data[_ACCURACY] = dict(self.accuracy)
        return data


_TUNED_BY = "tuned_by"
_TUNED_BY_FIELDS = ("command", "date", "git_commit")
# The table's tune runs, once each: {id: {"command", "date", "git_commit"}}; an entry's
# tuned_by names one by its id (tables before this kept the record in every entry, which
# made half the file repeated commands; an inline record still loads).
_RUNS = "runs"


def run_id(record: dict[str, str | None]) -> str:
    """A tune run's id: its UTC date to the minute and the first 8 hex digits of its record's
    SHA-1, e.g. "2026-12-01T21:45-3fa2c1d0" (readable, sorted by date, unique per run)."""
    digest = hashlib.sha1(json.dumps(record, sort_keys=True).encode()).hexdigest()[:8]
    date = (record.get("date") or "undated")[:16]
    return f"{date}-{digest}"


_ACCURACY = "accuracy"
_ACCURACY_FIELDS = ("out_ulps", "mean_ratio", "state_rel")

Table = dict[str, dict[int, TableEntry]]


def _validate_table(path: Path, data: Any) -> Table:
    def fail(field: str, why: str) -> TableError:
        return TableError(f"{path}: field {field!r}: {why}")

    if not isinstance(data, dict):
        raise fail("<root>", f"expected a JSON object, got {type(data).__name__}")
    if data.get("kernel") != KERNEL:
        raise fail("kernel", f"expected {KERNEL!r}, got {data.get('kernel')!r}")
    entries = data.get("entries")
    if not isinstance(entries, dict) or not entries:
        raise fail("entries", "expected a non-empty object of shape keys")
    runs = data.get(_RUNS, {})
    if not isinstance(runs, dict) or not all(
        isinstance(r, dict)
        and set(r) == set(_TUNED_BY_FIELDS)
        and all(v is None or isinstance(v, str) for v in r.values())
        for r in runs.values()
    ):
        raise fail(_RUNS, f"expected an object of run ids, each {list(_TUNED_BY_FIELDS)} (strings or null)")
    table: Table = {}
    for key, buckets in entries.items():
        if (
            not (match := _KEY_RE.match(key))
            or (match["rounding"] and match["state"] == "float32")
            or (match["params"] and match["mode"] == "replay")
        ):
            raise fail(
                f"entries.{key}",
                "key must read 'headdim=P dstate=N state=DTYPE', then optionally "
                "' mode=final|buffer|dst|replay|replay-fast tokens=T' (then optionally "
                "' params=dense', modes final, buffer and dst), then optionally "
                "' rounding=stochastic' (a 16-bit DTYPE)",
            )
        if not isinstance(buckets, dict) or not buckets:
            raise fail(f"entries.{key}", "expected a non-empty object of batch buckets")
        table[key] = {}
        for bucket, cfg in buckets.items():
            where = f"entries.{key}.{bucket}"
            if not bucket.isdigit() or int(bucket) < 1:
                raise fail(where, "batch bucket must be a positive integer string")
            if not isinstance(cfg, dict):
                raise fail(where, f"expected a config object, got {cfg!r}")
            cfg = dict(cfg)
            tuned_by = cfg.pop(_TUNED_BY, None)
            if isinstance(tuned_by, str):  # a run of the file's "runs"
                if tuned_by not in runs:
                    raise fail(f"{where}.{_TUNED_BY}", f"names no run of the table's {_RUNS!r}: {tuned_by!r}")
                tuned_by = runs[tuned_by]
            if tuned_by is not None and (
                not isinstance(tuned_by, dict)
                or set(tuned_by) != set(_TUNED_BY_FIELDS)
                or not all(v is None or isinstance(v, str) for v in tuned_by.values())
            ):
                raise fail(
                    f"{where}.{_TUNED_BY}",
                    f"expected an object of {list(_TUNED_BY_FIELDS)} (strings or null), got {tuned_by!r}",
                )
            accuracy = cfg.pop(_ACCURACY, None)
            if accuracy is not None and (
                not isinstance(accuracy, dict)
                or set(accuracy) != set(_ACCURACY_FIELDS)
                or not all(isinstance(v, (int, float)) for v in accuracy.values())
            ):
                raise fail(
                    f"{where}.{_ACCURACY}",
                    f"expected an object of {list(_ACCURACY_FIELDS)} (numbers), got {accuracy!r}",
                )
            try:
                table[key][int(bucket)] = TableEntry(LaunchConfig.from_dict(cfg), tuned_by, accuracy)
            except (TypeError, ValueError) as e:
                raise fail(where, str(e)) from None
    return table


@functools.lru_cache(maxsize=32)
def _load_table_cached(path: str, mtime_ns: int) -> Table:
    del mtime_ns  # part of the cache key: an edited file is read again
    p = Path(path)
    try:
        data = json.loads(p.read_text())
    except json.JSONDecodeError as e:
        raise TableError(f"{p}: not valid JSON: {e}") from None
    return _validate_table(p, data)


def load_table_entries(device: str, directory: Path | None = None) -> Table | None:
    """The validated table of a device key with each entry's provenance ({shape key: {batch
    bucket: TableEntry}}), or None when the device has no table. Raises TableError on a
    malformed file."""
    path = table_path(device, directory)
    if not path.is_file():
        return None
    return _load_table_cached(str(path), path.stat().st_mtime_ns)


def load_table(device: str, directory: Path | None = None) -> dict[str, dict[int, LaunchConfig]] | None:
    """The validated table of a device key ({shape key: {batch bucket: config}}), or None when
    the device has no table. Raises TableError on a malformed file."""
    entries = load_table_entries(device, directory)
    if entries is None:
        return None
    return {key: {b: e.config for b, e in buckets.items()} for key, buckets in entries.items()}


def nearest_bucket(buckets: list[int], batch: int) -> int:
    """The bucket nearest to batch in log2 distance; ties go to the smaller bucket."""
    return min(sorted(buckets), key=lambda b: abs(math.log2(b) - math.log2(max(batch, 1))))


def lookup_config(
    headdim: int,
    dstate: int,
    state_dtype: torch.dtype,
    batch: int,
    device: torch.device | int | str | None = None,
    mode: str = "single",
    tokens: int = 0,
    stochastic: bool = False,
    dense: bool = False,
    tile_dtype: torch.dtype | None = None,
) -> LaunchConfig:
    """The table's config for this shape and batch on this device, else default_config.
    Multi-token calls (mode final, buffer or dst, tokens T) take the entry of their mode with
    the token count nearest to T (log2 distance; ties to the smaller), then the nearest batch
    bucket; a mode the table does not hold falls back to default_config. The fast replay
    route (mode replay-fast) takes the entries of its own token count only, else
    replay_fast_config: its kernels change with T (decode's vectors at T = 1, out draft by
    draft or as tiles above, by T and the batch), so a table tuned at T = 3, 4 and 8 would
    otherwise serve the decode step and T = 2 configs measured on other kernels. stochastic: a call
    that rounds a 16-bit state stochastically takes the entries of its rounding where the
    table has them for its shape (and mode), else those of round-to-nearest. dense: a
    multi-token call whose dt, A or dt_bias is not tied over the head dim takes the entries
    keyed " params=dense" where the table has them, else the tied ones. tile_dtype: the dtype
    of a state tile the kernel reads other than the pool's (a 16-bit intermediate-state buffer
    an EAGLE tree's tokens read their parents' states from), which default_config then
    follows: its (8,1) for a float32 state lays a 2-byte tile out otherwise than upstream's
    config, another row-sum order (an H100 without a table, run 167: out differed from
    sglang's kernel on such a tree)."""
    return _lookup(
        headdim,
        dstate,
        state_dtype,
        batch,
        device_key(device),
        str(config_dir()),
        mode,
        tokens,
        stochastic,
        dense,
        tile_dtype,
    )


def _buckets(
    table: Table,
    headdim: int,
    dstate: int,
    state_dtype: torch.dtype,
    mode: str,
    tokens: int,
    rounding: str,
    params: str,
) -> dict[int, TableEntry] | None:
    """The entries of one rounding's and one params layout's key for this shape and mode (the
    token count nearest to tokens for multi-token modes), or None."""
    if mode == "single":
        if params != "tied":  # the single-token kernel's best config does not move with it
            return None
        return table.get(table_key(headdim, dstate, state_dtype, rounding=rounding))
    base = table_key(headdim, dstate, state_dtype)
    counts = [
        int(m["tokens"])
        for k in table
        if (m := _KEY_RE.match(k))
        and m["mode"] == mode
        and (m["rounding"] or "nearest") == rounding
        and (m["params"] or "tied") == params
        and k.startswith(base + " ")
    ]
    if mode == "replay-fast":  # its kernels change with T (replay_fast._tiles): its own count only
        counts = [c for c in counts if c == tokens]
    if not counts:
        return None
    key = table_key(headdim, dstate, state_dtype, mode, nearest_bucket(counts, tokens), rounding, params)
    return table[key]


@functools.lru_cache(maxsize=4096)
def _lookup(
    headdim: int,
    dstate: int,
    state_dtype: torch.dtype,
    batch: int,
    device: str,
    directory: str,
    mode: str,
    tokens: int,
    stochastic: bool,
    dense: bool,
    tile_dtype: torch.dtype | None = None,
) -> LaunchConfig:
    # Cached: a decode step calls this once per layer, so no file system work on the hot path.
    # write_table clears it; so does clear_config_cache() for a table edited by hand.
    table = load_table_entries(device, Path(directory))
    if table is not None:
        roundings = ("stochastic", "nearest") if stochastic and state_dtype != torch.float32 else ("nearest",)
        layouts = ("dense", "tied") if dense and mode in ("final", "buffer", "dst") else ("tied",)
        for params in layouts:  # the layout first: it moves the time more than the rounding
            for rounding in roundings:
                buckets = _buckets(table, headdim, dstate, state_dtype, mode, tokens, rounding, params)
                if buckets:
                    return buckets[nearest_bucket(list(buckets), batch)].config
    if mode == "replay-fast":
        return replay_fast_config(headdim, dstate, batch, tokens)
    if tile_dtype is not None and tile_dtype.itemsize < state_dtype.itemsize:
        return default_config(dstate, tile_dtype)
    return default_config(dstate, state_dtype)


def clear_config_cache() -> None:
    """Forget cached lookups and tables (after a table file changed)."""
    _lookup.cache_clear()
    _load_table_cached.cache_clear()


def write_table(
    device: str,
    entries: dict[str, dict[int, LaunchConfig | TableEntry]],
    meta: dict[str, Any],
    directory: Path | None = None,
) -> Path:
    """Write a device's table (the tuner's job): meta fields, then entries with sorted shape
    keys and batch buckets in numeric order, each with its provenance where it has one, indent
    2, newline at end. Validates what it writes by loading it back."""

    runs: dict[str, dict[str, str | None]] = {}

    def entry(e: LaunchConfig | TableEntry) -> dict[str, Any]:
        e = e if isinstance(e, TableEntry) else TableEntry(e)
        if e.tuned_by is None:
            return e.to_dict()
        record = {f: e.tuned_by.get(f) for f in _TUNED_BY_FIELDS}
        runs[run_id(record)] = record
        return e.to_dict(run_id(record))

    data: dict[str, Any] = {"kernel": KERNEL, "device_key": device, **meta}
    data["entries"] = {
        shape: {str(b): entry(cfgs[b]) for b in sorted(cfgs)} for shape, cfgs in sorted(entries.items())
    }
    if runs:
        data[_RUNS] = dict(sorted(runs.items()))
    path = table_path(device, directory)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")
    load_table(device, directory)
    clear_config_cache()
    return path
