"""torch.compile over decode steps that call ssmdecode: the custom ops of
ssmdecode/ops/selective_state_update/torch_op.py keep the call one node of the graph
(fullgraph=True compiles; the table lookup breaks nothing), and compiled steps write the bits of
eager ones. CPU: Dynamo and AOT autograd with the eager backend (the kernels under Triton's
interpreter); GPU: Inductor, and its CUDA graphs (mode="reduce-overhead")."""

from __future__ import annotations

import pytest
import torch

from conftest import DEVICE, Case, bits, make_inputs
from ssmdecode import selective_state_update, slot_order
from ssmdecode.compat import sglang, vllm
from ssmdecode.config import LaunchConfig
from ssmdecode.ops.selective_state_update.arguments import OP_FIELDS, UpdateArgs

CASE = Case(batch=3, nheads=2, headdim=8, dstate=16, ngroups=1, tie=True, pad_rows=(1,))


def _step(kw: dict):
    """A decode step around the kernel, as a model holds it: the state pool and the other
    inputs fixed, x passed in, out used after the call."""
    rest = {k: v for k, v in kw.items() if k not in ("state", "x")}

    def step(state: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return selective_state_update(state, x, **rest) * 2 + 1

    return step


def _compare(step, kw: dict, backend: str, **compile_kw: object) -> None:
    state0 = kw["state"].clone()
    eager_state = state0.clone()
    eager = step(eager_state, kw["x"])
    compiled = torch.compile(step, fullgraph=True, backend=backend, **compile_kw)
    for _ in range(2):  # the second call runs what the first compiled (and, on CUDA, graphed)
        state = state0.clone()
        got = compiled(state, kw["x"])
        assert torch.equal(bits(got), bits(eager)), "out"
        assert torch.equal(bits(state), bits(eager_state)), "state"


def test_fullgraph_compiles_a_decode_step_to_the_eager_bits() -> None:
    torch._dynamo.reset()
    _compare(_step(make_inputs(CASE)), make_inputs(CASE), "aot_eager")


def test_fullgraph_compiles_the_adapters_and_a_verify_step() -> None:
    """compat.sglang with T = 2 tokens and a buffer, compat.vllm with packed tokens and
    accepted counts, slot_order: all through the custom ops, same bits as eager."""
    torch._dynamo.reset()
    kw = make_inputs(Case(batch=4, nheads=2, headdim=8, dstate=16, ngroups=1, tie=False))
    x2 = kw["x"].view(2, 2, 2, 8)
    buffer = torch.zeros(kw["state"].shape[0] * 2 * 2 * 8 * 16, device=DEVICE)

    def sglang_step(state: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        sglang.selective_state_update(
            state,
            x,
            kw["dt"].view(2, 2, 2, 8),
            kw["A"],
            kw["B"].view(2, 2, 1, 16),
            kw["C"].view(2, 2, 1, 16),
            kw["D"],
            None,
            kw["dt_bias"],
            True,
            kw["state_batch_indices"][:2],
            out=out,
            disable_state_update=True,
            intermediate_states_buffer=buffer,
            cache_steps=2,
        )
        return out + buffer.view(-1, 2, 2, 8, 16)[kw["state_batch_indices"][:2].long()].sum()

    _compare(sglang_step, {"state": kw["state"], "x": x2}, "aot_eager")

    cu = torch.tensor([0, 1, 4], dtype=torch.int32, device=DEVICE)
    slots = kw["state_batch_indices"]
    src = torch.stack([slots[:3], slots[1:]], 0)  # 2 requests, 3 slots each (K >= 3 tokens)
    accepted = torch.tensor([1, 2], dtype=torch.int32, device=DEVICE)

    def vllm_step(state: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        vllm.selective_state_update(
            state,
            x,
            kw["dt"],
            kw["A"],
            kw["B"],
            kw["C"],
            kw["D"],
            kw["dt_bias"],
            dt_softplus=True,
            state_batch_indices=src,
            out=out,
            num_accepted_tokens=accepted,
            cu_seqlens=cu,
            null_block_id=-1,
        )
        return out.float() + slot_order(src[:, 0]).float().sum()

    _compare(vllm_step, {"state": kw["state"], "x": kw["x"]}, "aot_eager")


def test_op_schema_is_the_call_description_flattened() -> None:
    """The op's parameters are UpdateArgs's fields in their order (flat() and from_flat() rely
    on it), and a call survives the round trip, its config as a label."""
    schema = torch.ops.ssmdecode.selective_state_update.default._schema
    assert tuple(a.name for a in schema.arguments) == OP_FIELDS
    kw = make_inputs(CASE)
    args = UpdateArgs(**kw, config=LaunchConfig.parse("16,1,slot,evict,ordered"), philox_rounds=7)
    back = UpdateArgs.from_flat(*args.flat())
    assert back.config == args.config and back.philox_rounds == 7
    assert all(getattr(back, n) is getattr(args, n) for n in OP_FIELDS if n != "config")


def test_custom_op_passes_opcheck() -> None:
    """torch.library.opcheck: the schema (the tensors written declared), the fake kernel
    against the real one, and autograd registration."""
    kw = make_inputs(CASE)
    out = torch.empty_like(kw["x"])
    args = UpdateArgs(**kw, out=out).flat()
    torch.library.opcheck(
        torch.ops.ssmdecode.selective_state_update.default,
        args,
        test_utils=("test_schema", "test_faketensor"),
    )


@pytest.mark.gpu
@pytest.mark.parametrize("mode", [None, "reduce-overhead"], ids=["inductor", "cudagraphs"])
def test_gpu_compiled_step_gives_the_eager_bits(mode: str | None) -> None:
    """Inductor over a decode step at a real shape; with mode="reduce-overhead" the step runs
    as a CUDA graph (the state pool a module buffer, so its address is static and its
    in-place update allowed in the graph)."""
    torch._dynamo.reset()
    case = Case(batch=16, nheads=16, headdim=64, dstate=128, ngroups=1, tie=True, extra_slots=40)
    kw = make_inputs(case)

    class Layer(torch.nn.Module):
        def __init__(self, state: torch.Tensor) -> None:
            super().__init__()
            self.register_buffer("state", state)
            self.rest = {k: v for k, v in kw.items() if k not in ("state", "x")}

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return selective_state_update(self.state, x, **self.rest) * 2

    state0 = kw["state"].clone()
    eager_layer = Layer(state0.clone())
    eager = eager_layer(kw["x"])
    layer = Layer(state0.clone())
    compiled = torch.compile(layer, fullgraph=True, mode=mode)
    for _ in range(3):
        layer.state.copy_(state0)
        got = compiled(kw["x"]).clone()
        torch.cuda.synchronize()
        assert torch.equal(bits(got), bits(eager))
        assert torch.equal(bits(layer.state), bits(eager_layer.state))
