"""The engine adapters against the engines' own Triton kernels: bit for bit on the GPU.

What is compared: `ssmdecode.compat.sglang.selective_state_update` with sglang's
`selective_state_update` (python/sglang/srt/layers/attention/mamba/ops/mamba_ssm.py, commit
05f4e1676f82), and `ssmdecode.compat.vllm.selective_state_update` with vLLM's (vllm/
model_executor/layers/mamba/ops/mamba_ssm.py after vLLM PR #35431, null block 0). Every case is
run from the same inputs and the same initial state pool (and intermediate-state buffer, poisoned
with NaN), into an out poisoned with NaN, once stored as float32 and once as bfloat16, by:

    the engine's wrapper at its default launch config (sglang's hard-coded table; vLLM's fallback
        table, no tuned config file: (4, 4) for dstate 128 on a GPU other than Blackwell), and
    the adapter as users call it (config=None: this device's table, else ssmdecode's default),
    the adapter with config=ssmdecode.config.upstream_config(dstate) (the engines' config).

On the GPU (@pytest.mark.gpu) the adapters' out (live rows), the whole state pool and the whole
buffer must have the engine's bits. The engines' inputs are built as models pass them: x, B, C
views of one xBC tensor, dt, A, D, dt_bias stride-0 broadcasts over the head dim (as
tests/test_multi_token.py's make_verify builds them), at the headline shape H16 P64 N128 G1,
batches 1, 7, 64; single-token, and multi-token (speculative decoding's verify step) at T = 2,
4, 8: sglang's [B, T, H, P] with the intermediate-state buffer (with and without
intermediate_state_indices, with EAGLE trees) and with the final state written; vLLM's packed
tokens (cu_seqlens) with num_accepted_tokens and per-token destinations, and without.

On the CPU (Triton's interpreter) a few of the same cases are compared at bfloat16 tolerance, and
which slots and buffer rows are written must agree exactly.

Excluded, as docs/compat.md documents them (inputs avoided or bits not compared):
- the out of padded / null rows: the engines compute it from a zero state, ssmdecode writes
  zeros; engines discard those rows, so only live rows' out is compared;
- vLLM without num_accepted_tokens, a live row whose destination is the null block: vLLM's kernel
  writes into the null block (its store is masked by the read index only), ssmdecode writes
  nothing; the cases never name the null block as such a destination;
- sglang with an intermediate-state buffer but no state_batch_indices: sglang's kernel writes no
  buffer then, ssmdecode writes row b; the cases always pass state_batch_indices;
- sglang with an intermediate_state_indices entry equal to pad_slot_id for a live row: sglang's
  kernel stores that request's token states at buffer row -1 (out of bounds), ssmdecode skips
  them; the cases give every request a real buffer row.

The engines' code is not part of ssmdecode: the test imports local, untracked copies of the two
files (and stubs of what they import) found through PYTHONPATH (the GPU run sets
PYTHONPATH=$PWD/.upstream; .upstream/README.txt says where each file came from). Without them
every test here is skipped, saying why; with SSMDECODE_UPSTREAM_REQUIRED=1 it fails instead.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import inspect
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch

from conftest import DEVICE, bits
from ssmdecode.compat import sglang as sglang_adapter
from ssmdecode.compat import vllm as vllm_adapter
from ssmdecode.config import LaunchConfig, upstream_config
from ssmdecode.numerics import TOLERANCES

SGLANG_MODULE = "sglang.srt.layers.attention.mamba.ops.mamba_ssm"
VLLM_MODULE = "vllm.model_executor.layers.mamba.ops.mamba_ssm"
REQUIRED_ENV = "SSMDECODE_UPSTREAM_REQUIRED"
# Parameters that mark the versions read (a different engine version on the path is skipped).
SGLANG_MARKS = (
    "intermediate_states_buffer",
    "cache_steps",
    "retrieve_parent_token",
    "intermediate_state_indices",
)
VLLM_MARKS = ("null_block_id", "num_accepted_tokens", "cu_seqlens", "cache_philox_rounds")
PAD = -1  # sglang's PAD_SLOT_ID
NULL = 0  # vLLM's NULL_BLOCK_ID
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
OUT_DTYPES = (torch.float32, torch.bfloat16)
# CPU (interpreter) tolerance by the dtype a value is stored in: the engine's result against the
# adapter's, not against float64 as in TOLERANCES. Each is within TOLERANCES of the float64
# truth, so the two are within twice that of each other.
TOLERANCE = {d: {k: 2 * v for k, v in TOLERANCES[d].items()} for d in OUT_DTYPES}
INTERPRETED = os.environ.get("TRITON_INTERPRET", "0") == "1"  # conftest.py sets it without a GPU


# --- the engines' modules ---------------------------------------------------------------------


def _import_engine(name: str, marks: tuple[str, ...]):
    """The engine's module, or a skip (a failure with SSMDECODE_UPSTREAM_REQUIRED=1) saying why
    it is not usable."""
    required = os.environ.get(REQUIRED_ENV, "0") not in ("", "0")
    added_regex = "regex" not in sys.modules and importlib.util.find_spec("regex") is None
    if added_regex:  # vLLM's file imports regex for one re.sub on a device name; re does it
        sys.modules["regex"] = re
    try:
        module = importlib.import_module(name)
        params = inspect.signature(module.selective_state_update).parameters
        missing = [m for m in marks if m not in params]
        if missing:
            raise ImportError(
                f"{module.__file__} is another version: its selective_state_update lacks {', '.join(missing)}"
            )
    except Exception as e:  # ImportError, or a stub missing for what the file imports
        reason = (
            f"{name} is not importable ({type(e).__name__}: {e}); put the local copies of "
            "the engines' kernels on PYTHONPATH (PYTHONPATH=$PWD/.upstream, see "
            ".upstream/README.txt)"
        )
        if required:
            pytest.fail(f"{REQUIRED_ENV}=1: {reason}")
        pytest.skip(reason)
    finally:
        if added_regex:
            sys.modules.pop("regex", None)
    return module


@pytest.fixture(scope="module")
def sglang_engine():
    return _import_engine(SGLANG_MODULE, SGLANG_MARKS)


@pytest.fixture(scope="module")
def vllm_engine():
    module = _import_engine(VLLM_MODULE, VLLM_MARKS)
    # The comparison is with vLLM's default launch config: no tuned config file may be found.
    for dstate in (16, 128):
        got = module.try_get_optimal_ssm_config(64, dstate, 7, 16, "float32", False)
        want = module._get_default_ssm_launch_config(dstate, False)
        assert got == want == (upstream_config(dstate).block_m, upstream_config(dstate).num_warps), (
            f"vLLM's kernel would run at {got} for dstate {dstate}, not its fallback {want}: a "
            "tuned config file was found (VLLM_TUNED_CONFIG_FOLDER or the copy's configs/)"
        )
    return module


@pytest.fixture
def interpreter_harness(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the engines' wrappers need to run on CPU tensors under Triton's interpreter, patched
    here only (the copies are left as published):
    - sglang's wrapper enters torch.cuda.device(x.device.index), which fails for index None
      without CUDA: a null context for None;
    - both kernels loop `for _ in range(T)` over a runtime scalar, which the interpreter holds as
      a one-element array; NumPy 2 refuses int() of that (the interpreter's tensor __index__):
      __index__ reads its one element."""
    if torch.cuda.is_available():
        return
    cuda_device = torch.cuda.device
    monkeypatch.setattr(
        torch.cuda, "device", lambda index: contextlib.nullcontext() if index is None else cuda_device(index)
    )
    from triton.runtime import interpreter

    patch_tensor = interpreter._patch_lang_tensor

    def patched(tensor: type, scope: object) -> None:
        patch_tensor(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))

    monkeypatch.setattr(interpreter, "_patch_lang_tensor", patched)


# --- inputs -----------------------------------------------------------------------------------


def _layer(
    g: torch.Generator,
    lead: tuple[int, ...],
    h: int,
    p: int,
    n: int,
    grp: int,
    tie: bool,
    with_z: bool,
    device: str,
) -> dict:
    """x, dt, A, B, C, D, dt_bias, z of one layer for `lead` token rows ([B], [B, T] or [total]),
    bf16 activations, float32 weights. tie: as models pass them (x, B, C views of one xBC tensor,
    dt, A, D, dt_bias stride-0 broadcasts over the head dim); else all dense."""

    def rn(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.randn(*shape, generator=g, device=device).to(dtype)

    def ru(*shape: int) -> torch.Tensor:
        return torch.rand(*shape, generator=g, device=device)

    bf = torch.bfloat16
    if tie:
        xbc = rn(*lead, h * p + 2 * grp * n, dtype=bf)
        x = xbc[..., : h * p].unflatten(-1, (h, p))
        B = xbc[..., h * p : h * p + grp * n].unflatten(-1, (grp, n))
        C = xbc[..., h * p + grp * n :].unflatten(-1, (grp, n))
        dt = rn(*lead, h, dtype=bf)[..., None].expand(*lead, h, p)
        A = (-ru(h) - 0.5)[:, None, None].expand(h, p, n)
        D = rn(h)[:, None].expand(h, p)
        dt_bias = (ru(h) - 4.0)[:, None].expand(h, p)
    else:
        x, dt = rn(*lead, h, p, dtype=bf), rn(*lead, h, p, dtype=bf)
        B, C = rn(*lead, grp, n, dtype=bf), rn(*lead, grp, n, dtype=bf)
        A = -ru(h, p, n) - 0.5
        D, dt_bias = rn(h, p), ru(h, p) - 4.0
    z = rn(*lead, h, p, dtype=bf) if with_z else None
    return dict(x=x, dt=dt, A=A, B=B, C=C, D=D, dt_bias=dt_bias, z=z)


def _generator(seed: int, device: str) -> torch.Generator:
    return torch.Generator(device=device).manual_seed(seed)


@dataclass(frozen=True)
class Sglang:
    """One sglang call. tokens 0: the single-token layout [B, H, P]; T >= 1: [B, T, H, P].
    Ids read like B7-T4-H16-P64-N128-fp32-buffer-tree."""

    batch: int = 7
    tokens: int = 0
    nheads: int = 16
    headdim: int = 64
    dstate: int = 128
    ngroups: int = 1
    state: str = "fp32"
    tie: bool = True
    z: bool = False
    pad_rows: tuple[int, ...] = ()
    buffer: bool = False  # intermediate_states_buffer + cache_steps
    buffer_idx: bool = False  # intermediate_state_indices
    parents: bool = False  # retrieve_parent_token (an EAGLE tree)
    extra_steps: int = 0  # cache_steps = T + extra_steps
    buffer_dtype: str | None = None  # default: the state's
    disable: bool = False  # disable_state_update

    @property
    def id(self) -> str:
        parts = [
            f"B{self.batch}",
            f"T{self.tokens}" if self.tokens else "single",
            f"H{self.nheads}",
            f"P{self.headdim}",
            f"N{self.dstate}",
            self.state,
        ]
        flags = [
            ("untied", not self.tie),
            ("z", self.z),
            ("pad", bool(self.pad_rows)),
            ("buffer", self.buffer),
            ("bufidx", self.buffer_idx),
            ("tree", self.parents),
            (f"steps+{self.extra_steps}", self.extra_steps > 0),
            (f"buf{self.buffer_dtype}", self.buffer_dtype is not None),
            ("noupdate", self.disable),
        ]
        return "-".join(parts + [name for name, on in flags if on])

    def build(self, device: str, seed: int = 0) -> dict:
        """sglang's keyword arguments (all but out)."""
        g = _generator(seed, device)
        b, t, h, p, n = self.batch, self.tokens, self.nheads, self.headdim, self.dstate
        lead = (b, t) if t else (b,)
        slots = b + 3  # three slots nobody reads
        kw = _layer(g, lead, h, p, n, self.ngroups, self.tie, self.z, device)
        kw["state"] = torch.randn(slots, h, p, n, generator=g, device=device).to(DTYPES[self.state])
        src = torch.randperm(slots, generator=g, device=device)[:b].to(torch.int32)
        for r in self.pad_rows:
            src[r] = PAD
        kw.update(
            dt_softplus=True, state_batch_indices=src, pad_slot_id=PAD, disable_state_update=self.disable
        )
        if self.buffer:
            steps = max(t, 1) + self.extra_steps
            rows = b + 2 if self.buffer_idx else slots  # without indices: the slot read
            kw["intermediate_states_buffer"] = torch.full(
                (rows, steps, h, p, n),
                float("nan"),
                device=device,
                dtype=DTYPES[self.buffer_dtype or self.state],
            )
            kw["cache_steps"] = steps
            if self.buffer_idx:  # every request its own row, none the pad id
                kw["intermediate_state_indices"] = torch.randperm(rows, generator=g, device=device)[:b].to(
                    torch.int64
                )
        if self.parents:  # token k's parent: any token before it, or -1 (the one before)
            par = torch.full((b, max(t, 1)), -1, dtype=torch.int64, device=device)
            for k in range(1, max(t, 1)):
                par[:, k] = torch.randint(-1, k, (b,), generator=g, device=device)
            kw["retrieve_parent_token"] = par
        return kw

    def live(self, kw: dict) -> torch.Tensor:
        """[B] bool: requests that are not padding (their out rows are compared)."""
        return kw["state_batch_indices"] != PAD


@dataclass(frozen=True)
class Vllm:
    """One vLLM call. lengths: cu_seqlens' requests (packed [total, H, P]); else [B, H, P].
    columns: K of the [B', K] slot indices (B' = batch + extra_rows). Ids read like
    B7-L2_0_1-K2-H16-P64-N128-fp32-accepted-dst-dstnull-null."""

    batch: int = 7
    nheads: int = 16
    headdim: int = 64
    dstate: int = 128
    ngroups: int = 1
    state: str = "fp32"
    tie: bool = True
    z: bool = False
    null_rows: tuple[int, ...] = ()  # requests whose slot row is the null block
    columns: int = 1
    two_dim: bool = False  # indices as [B', K] even for K = 1
    extra_rows: int = 0
    dst: bool = False  # dst_state_batch_indices (else the slots read)
    lengths: tuple[int, ...] | None = None  # cu_seqlens
    accepted: bool = False  # num_accepted_tokens (spec decoding)
    dst_null: bool = False  # with accepted: a live request's token skips its write

    def __post_init__(self) -> None:
        if self.lengths is not None and len(self.lengths) != self.batch:
            raise ValueError(f"{len(self.lengths)} lengths for a batch of {self.batch}")

    @property
    def id(self) -> str:
        parts = [f"B{self.batch}"]
        if self.lengths is not None:
            parts.append("L" + "_".join(map(str, self.lengths)))
        parts += [f"K{self.columns}", f"H{self.nheads}", f"P{self.headdim}", f"N{self.dstate}", self.state]
        flags = [
            ("untied", not self.tie),
            ("z", self.z),
            ("rows+", self.extra_rows > 0),
            ("accepted", self.accepted),
            ("dst", self.dst),
            ("dstnull", self.dst_null),
            ("null", bool(self.null_rows)),
        ]
        return "-".join(parts + [name for name, on in flags if on])

    def build(self, device: str, seed: int = 0) -> dict:
        """vLLM's keyword arguments (all but out)."""
        g = _generator(seed, device)
        b, k, h, p, n = self.batch, self.columns, self.nheads, self.headdim, self.dstate
        rows = b + self.extra_rows
        lead = (sum(self.lengths),) if self.lengths is not None else (b,)
        need = rows * k * (2 if self.dst else 1)
        slots = 1 + need + 2  # the null block 0, every index its own slot, two nobody names
        kw = _layer(g, lead, h, p, n, self.ngroups, self.tie, self.z, device)
        kw["state"] = torch.randn(slots, h, p, n, generator=g, device=device).to(DTYPES[self.state])
        perm = (torch.randperm(slots - 1, generator=g, device=device) + 1).to(torch.int32)
        src = perm[: rows * k].view(rows, k).clone()
        dst = perm[rows * k : 2 * rows * k].view(rows, k).clone() if self.dst else None
        for r in self.null_rows:  # a padded request: its whole row is the null block
            src[r] = NULL
            if dst is not None:
                dst[r] = NULL
        kw.update(dt_softplus=True, null_block_id=NULL)
        if self.accepted:
            na = torch.randint(0, k + 1, (b,), generator=g, device=device).to(torch.int32)
            kw["num_accepted_tokens"] = na
            if self.dst_null:  # one live request with two tokens or more: token 1 writes nothing
                lengths = self.lengths or (1,) * b
                r = next(r for r in range(b) if r not in self.null_rows and lengths[r] >= 2)
                (src if dst is None else dst)[r, 1] = NULL
                if dst is None:  # src's entry must not be where this request reads
                    na[r] = 1
        if self.lengths is not None:
            cu = torch.tensor([0, *torch.tensor(self.lengths).cumsum(0).tolist()], dtype=torch.int32)
            kw["cu_seqlens"] = cu.to(device)
        one_dim = k == 1 and not self.two_dim and not self.accepted
        kw["state_batch_indices"] = src[:, 0].contiguous() if one_dim else src
        if dst is not None:
            kw["dst_state_batch_indices"] = dst[:, 0].contiguous() if one_dim else dst
        return kw

    def live(self, kw: dict) -> torch.Tensor:
        """[out rows] bool: the tokens of requests whose read slot is not the null block."""
        src = kw["state_batch_indices"]
        src = src[:, None] if src.dim() == 1 else src
        col = torch.zeros(self.batch, dtype=torch.long, device=src.device)
        if self.accepted:
            col = (kw["num_accepted_tokens"].long() - 1).clamp(min=0)
        live = src[: self.batch].gather(1, col[:, None])[:, 0] != NULL
        if self.lengths is None:
            return live
        return live.repeat_interleave(torch.tensor(self.lengths, device=src.device))


# --- running and comparing --------------------------------------------------------------------

Runner = Callable[..., None]


@dataclass
class Run:
    out: torch.Tensor  # the live rows' out
    state: torch.Tensor
    buffer: torch.Tensor | None


def _run(
    fn: Runner,
    kw: dict,
    state0: torch.Tensor,
    buffer0: torch.Tensor | None,
    out_dtype: torch.dtype,
    live: torch.Tensor,
    **extra: object,
) -> Run:
    """One call from the initial state (and buffer) into a NaN-poisoned out; copies of what it
    wrote."""
    kw["state"].copy_(state0)
    buffer = kw.get("intermediate_states_buffer")
    if buffer is not None:
        buffer.copy_(buffer0)
    out = torch.full(kw["x"].shape, float("nan"), dtype=out_dtype, device=kw["x"].device)
    assert fn(**kw, out=out, **extra) is None
    return Run(out[live].clone(), kw["state"].clone(), None if buffer is None else buffer.clone())


def _runs(
    engine: Runner,
    adapter: Runner,
    kw: dict,
    live: torch.Tensor,
    dstate: int,
    cpu_config: LaunchConfig | None = None,
):
    """For each out dtype: (label, engine's Run, adapter's Runs by config label)."""
    state0 = kw["state"].clone()
    buffer0 = kw.get("intermediate_states_buffer")
    buffer0 = None if buffer0 is None else buffer0.clone()
    configs = {"config=None": None, "upstream_config": upstream_config(dstate)}
    for out_dtype in OUT_DTYPES:
        label = f"out {str(out_dtype).removeprefix('torch.')}"
        want = _run(engine, kw, state0, buffer0, out_dtype, live)
        assert not want.out.isnan().any(), f"{label}: the engine left live out elements unwritten"
        got = {
            name: _run(adapter, kw, state0, buffer0, out_dtype, live, config=config)
            for name, config in configs.items()
        }
        yield label, want, got, state0, buffer0


def _mismatches(a: torch.Tensor, b: torch.Tensor) -> int:
    return int((bits(a) != bits(b)).sum())


def assert_same_bits(engine: Runner, adapter: Runner, kw: dict, live: torch.Tensor, dstate: int) -> None:
    """The adapter's out (live rows), state pool and buffer are the engine's, bit for bit, for
    both out dtypes and both configs; every difference is listed."""
    errors = []
    for label, want, got, _, _ in _runs(engine, adapter, kw, live, dstate):
        for name, run in got.items():
            for what, w, g in (
                ("out", want.out, run.out),
                ("state", want.state, run.state),
                ("buffer", want.buffer, run.buffer),
            ):
                if w is not None and (wrong := _mismatches(w, g)):
                    errors.append(
                        f"{label}, adapter {name}: {what} differs in {wrong} of {w.numel()} elements"
                    )
    assert not errors, "; ".join(errors)


def assert_close_and_same_writes(
    engine: Runner, adapter: Runner, kw: dict, live: torch.Tensor, dstate: int
) -> None:
    """CPU: out, state and buffer within tolerance; the same slots and buffer rows written."""
    for label, want, got, state0, _ in _runs(engine, adapter, kw, live, dstate):
        changed = (bits(want.state) != bits(state0)).flatten(1).any(1)
        for name, run in got.items():
            where = f"{label}, adapter {name}"
            assert not run.out.isnan().any(), f"{where}: live out elements unwritten"
            torch.testing.assert_close(run.out, want.out, **TOLERANCE[run.out.dtype], msg=where)
            assert torch.equal((bits(run.state) != bits(state0)).flatten(1).any(1), changed), (
                f"{where}: the slots written differ from the engine's"
            )
            torch.testing.assert_close(run.state, want.state, **TOLERANCE[run.state.dtype], msg=where)
            if want.buffer is not None:
                rows = ~want.buffer.isnan().flatten(2).all(2)
                assert torch.equal(~run.buffer.isnan().flatten(2).all(2), rows), (
                    f"{where}: the buffer rows (row, step) written differ from the engine's"
                )
                torch.testing.assert_close(
                    run.buffer, want.buffer, equal_nan=True, **TOLERANCE[run.buffer.dtype], msg=where
                )


# --- GPU: bit for bit -------------------------------------------------------------------------

SGLANG_SINGLE = [
    *(Sglang(batch=b) for b in (1, 7, 64)),
    Sglang(tie=False),
    Sglang(z=True),
    Sglang(state="bf16"),
    Sglang(batch=64, pad_rows=(0, 5, 63)),
    Sglang(batch=7, tokens=1),  # the token dim with T = 1
]
SGLANG_MULTI = [
    *(
        case
        for t in (2, 4, 8)
        for case in (
            Sglang(tokens=t, buffer=True, disable=True),  # verify: the buffer, no state written
            Sglang(tokens=t, buffer=True, buffer_idx=True, disable=True),
            Sglang(tokens=t, buffer=True, parents=True, disable=True),  # an EAGLE tree
            Sglang(tokens=t),  # plain multi-token: the final state written
        )
    ),
    *(
        Sglang(
            batch=b,
            tokens=4,
            buffer=True,
            buffer_idx=True,
            parents=True,
            disable=True,
            pad_rows=(0,) if b > 1 else (),
        )
        for b in (1, 64)
    ),
    Sglang(batch=64, tokens=4, pad_rows=(3, 60)),
    Sglang(tokens=4, buffer=True, extra_steps=2, disable=True),  # cache_steps > T
    Sglang(tokens=4, buffer=True, parents=True),  # the buffer and the final state
    Sglang(tokens=4, buffer=True, parents=True, disable=True, buffer_dtype="bf16"),
    # an EAGLE tree reading its parents' states from a bf16 buffer at the other token counts and
    # at the table's larger buckets (with config=None: the device's entries for a float32 pool,
    # admitted by the tuner on buffers of the pool's dtype; without a table, the default)
    *(Sglang(tokens=t, buffer=True, parents=True, disable=True, buffer_dtype="bf16") for t in (2, 8)),
    *(
        Sglang(batch=b, tokens=t, buffer=True, parents=True, disable=True, buffer_dtype="bf16")
        for b in (64, 512)
        for t in (2, 4, 8)
    ),
    Sglang(tokens=4, buffer=True, buffer_idx=True, disable=True, tie=False, z=True),
    Sglang(tokens=4, buffer=True, disable=True, state="bf16", pad_rows=(2,)),
]
VLLM_SINGLE = [
    *(Vllm(batch=b) for b in (1, 7, 64)),
    Vllm(batch=64, null_rows=(0, 9, 63)),
    Vllm(null_rows=(2,), columns=3, extra_rows=2, dst=True),  # [B', K] indices, dst
    Vllm(dst=True, two_dim=True, z=True),  # [B, 1] indices
    Vllm(tie=False, null_rows=(1,)),
    Vllm(batch=7, columns=2, accepted=True, dst=True, null_rows=(4,)),  # spec, one token
]
VLLM_MULTI = [
    # MTP / EAGLE verify: packed tokens, initial state at the last accepted token, token t's
    # state to dst[b, t]; requests of different lengths, one of none, one null, a null dst entry
    *(
        Vllm(batch=7, columns=t, lengths=lengths, accepted=True, dst=True, dst_null=True, null_rows=(5,))
        for t, lengths in ((2, (2, 1, 0, 2, 2, 1, 2)), (4, (4, 3, 0, 1, 4, 2, 4)), (8, (8, 5, 0, 1, 8, 3, 7)))
    ),
    Vllm(
        batch=64,
        columns=4,
        lengths=tuple((3 * r) % 5 for r in range(64)),
        accepted=True,
        dst=True,
        dst_null=True,
        null_rows=(7, 40),
    ),
    Vllm(batch=1, columns=4, lengths=(4,), accepted=True, dst=True),
    Vllm(batch=7, columns=4, lengths=(4, 3, 0, 1, 4, 2, 4), accepted=True, dst_null=True),
    Vllm(batch=7, columns=4, lengths=(4, 3, 0, 1, 4, 2, 4), accepted=True, dst=True, z=True, tie=False),
    # cu_seqlens without num_accepted_tokens: the final state to dst[b, 0]
    Vllm(batch=7, columns=4, lengths=(4, 3, 0, 1, 4, 2, 4), dst=True, null_rows=(3,)),
    Vllm(batch=7, lengths=(2, 8, 0, 1, 5, 3, 4)),
]


def _ids(cases: list) -> list[str]:
    return [c.id for c in cases]


@pytest.mark.gpu
@pytest.mark.parametrize("case", SGLANG_SINGLE + SGLANG_MULTI, ids=_ids(SGLANG_SINGLE + SGLANG_MULTI))
def test_gpu_sglang_bits(sglang_engine, case: Sglang) -> None:
    kw = case.build(DEVICE)
    assert_same_bits(
        sglang_engine.selective_state_update,
        sglang_adapter.selective_state_update,
        kw,
        case.live(kw),
        case.dstate,
    )


@pytest.mark.gpu
@pytest.mark.parametrize("case", VLLM_SINGLE + VLLM_MULTI, ids=_ids(VLLM_SINGLE + VLLM_MULTI))
def test_gpu_vllm_bits(vllm_engine, case: Vllm) -> None:
    kw = case.build(DEVICE)
    assert_same_bits(
        vllm_engine.selective_state_update,
        vllm_adapter.selective_state_update,
        kw,
        case.live(kw),
        case.dstate,
    )


# --- CPU: the interpreter, at tolerance -------------------------------------------------------

SMALL = dict(nheads=2, headdim=8, dstate=16)
SGLANG_CPU = [
    Sglang(batch=3, pad_rows=(1,), z=True, **SMALL),
    Sglang(
        batch=3, tokens=4, buffer=True, buffer_idx=True, parents=True, disable=True, pad_rows=(1,), **SMALL
    ),
    Sglang(batch=2, tokens=3, buffer=True, parents=True, tie=False, extra_steps=1, **SMALL),
    Sglang(batch=2, tokens=3, **SMALL),
]
VLLM_CPU = [
    Vllm(batch=3, null_rows=(1,), columns=2, extra_rows=1, dst=True, **SMALL),
    Vllm(
        batch=4,
        columns=3,
        lengths=(2, 0, 3, 1),
        accepted=True,
        dst=True,
        dst_null=True,
        null_rows=(3,),
        **SMALL,
    ),
    Vllm(batch=3, columns=2, lengths=(2, 0, 1), dst=True, tie=False, z=True, **SMALL),
]


@pytest.mark.skipif(not INTERPRETED, reason="CPU tensors need Triton's interpreter (no GPU)")
@pytest.mark.parametrize("case", SGLANG_CPU, ids=_ids(SGLANG_CPU))
def test_cpu_sglang_close(sglang_engine, interpreter_harness, case: Sglang) -> None:
    kw = case.build("cpu")
    assert_close_and_same_writes(
        sglang_engine.selective_state_update,
        sglang_adapter.selective_state_update,
        kw,
        case.live(kw),
        case.dstate,
    )


@pytest.mark.skipif(not INTERPRETED, reason="CPU tensors need Triton's interpreter (no GPU)")
@pytest.mark.parametrize("case", VLLM_CPU, ids=_ids(VLLM_CPU))
def test_cpu_vllm_close(vllm_engine, interpreter_harness, case: Vllm) -> None:
    kw = case.build("cpu")
    assert_close_and_same_writes(
        vllm_engine.selective_state_update,
        vllm_adapter.selective_state_update,
        kw,
        case.live(kw),
        case.dstate,
    )
