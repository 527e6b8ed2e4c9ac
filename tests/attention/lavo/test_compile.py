"""LAVO under torch.compile and CUDA graphs, what the CPU can check: the layer and a recipe's model compile whole
(fullgraph=True: no graph break) on the PyTorch kernel sets and give the eager results (the Triton kernel set's
custom operators: tests/attention/lavo/test_triton.py, in Triton's interpreter); and the decoding step on a
LavoStaticState is what a CUDA graph can capture: fixed shapes written in place, no value read to the host, no
branch on a value (one compiled graph serves every position), the outputs of the full call."""
from __future__ import annotations

import pytest
import torch
import torch._dynamo
from torch.utils._python_dispatch import TorchDispatchMode

from lavo_zoo.attention import build_attention
from lavo_zoo.attention.lavo.layer import LavoStaticState

F64 = torch.float64


def _layer(pattern: str, kernels: str = "recompute", dtype=torch.float32, **opts) -> torch.nn.Module:
    opts = {"num_bases": 4, "window_size": 4, **opts}
    attn = build_attention("lavo", 16, 2, pattern, kernels=kernels, **opts).to(dtype)
    with torch.no_grad():
        for p in attn.parameters():
            if not p.any():
                p.normal_()  # the EPE, the learned gain's ones
    return attn


@pytest.mark.parametrize("pattern, kernels", [("causal", "recompute"), ("noncausal", "recompute"),
                                              ("cross", "recompute"), ("causal", "autograd")])
def test_the_layer_compiles_whole(pattern, kernels):
    """fullgraph=True (an error at any graph break), forward and backward, padded, equal to eager."""
    torch._dynamo.reset()
    attn = _layer(pattern, kernels)
    x = torch.randn(2, 11, 16, requires_grad=True)
    mask = torch.rand(2, 11) > 0.3
    mask[:, 0] = True
    kw = {"context": torch.randn(2, 9, 16), "context_mask": mask[:, :9]} if pattern == "cross" else {}
    y = torch.compile(attn, fullgraph=True, backend="aot_eager")(x, mask, **kw)
    assert attn.kernels_used == kernels
    got = torch.autograd.grad(y.square().sum(), [x, *attn.parameters()])
    want_y = attn(x, mask, **kw)
    want = torch.autograd.grad(want_y.square().sum(), [x, *attn.parameters()])
    for a, b in zip([y, *got], [want_y, *want]):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)


def check_model_compiles(kernels: str) -> None:
    """lm/tiny-lavo's model (2 layers, narrowed) compiled with fullgraph=True gives the eager loss and gradients."""
    from lavo_zoo.engine.configs import resolve_config

    torch._dynamo.reset()
    recipe, cfg = resolve_config("lm/tiny-lavo", [f"model.attention.kernels={kernels}", "model.num_layers=2",
                                                  "model.embed_dim=32", "model.num_heads=2", "model.ffn_dim=64",
                                                  "model.attention.num_bases=8"])
    model = recipe.build_model(recipe.resolve(cfg))
    batch = torch.randint(0, model.cfg.vocab_size, (2, 21))
    loss = torch.compile(model, fullgraph=True, backend="aot_eager")(batch[:, :-1], batch[:, 1:]).mean()
    got = torch.autograd.grad(loss, list(model.parameters()))
    want_loss = model(batch[:, :-1], batch[:, 1:]).mean()
    want = torch.autograd.grad(want_loss, list(model.parameters()))
    torch.testing.assert_close(loss, want_loss, rtol=1e-6, atol=1e-7)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)


def test_a_recipe_model_compiles_whole():
    check_model_compiles("recompute")


# --------------------------------------------------------------------------------------------- the static step
STATIC_OPTIONS = [{}, {"combine": "gain"}, {"global_read": False},
                  {"combine": "half", "empty_memory": "half", "read_temperature": 0.0, "memory_norm": "mean",
                   "position_encoding": False, "memory_source": "value"}]


def _static_after(attn, x: torch.Tensor, prefill: int) -> LavoStaticState:
    with torch.no_grad():
        _, state = attn(x[:, :prefill], return_state=True)
    return state.static(attn.window_size)


@pytest.mark.parametrize("opts", STATIC_OPTIONS, ids=lambda o: "-".join(f"{k}={v}" for k, v in o.items()) or "default")
@pytest.mark.parametrize("prefill", [1, 6])
def test_static_steps_give_the_full_call_in_place(opts, prefill):
    """Token by token from a static state (after a prefill shorter than the window, or longer): the full call's
    outputs through empty memory and window completions (float64); every step returns the same state object and
    writes into the same tensors."""
    attn = _layer("causal", dtype=F64, **opts)
    x = torch.randn(2, 15, 16, dtype=F64)
    with torch.no_grad():
        full = attn(x)
        state = _static_after(attn, x, prefill)
        tensors = [state.keys, state.values, state.sum_complete, state.sum_partial, state.position]
        pointers = [t.data_ptr() for t in tensors]
        ys = []
        for t in range(prefill, 15):
            y, after = attn.step(x[:, t:t + 1], state)
            assert after is state
            ys.append(y)
    torch.testing.assert_close(torch.cat(ys, 1), full[:, prefill:], rtol=1e-10, atol=1e-12)
    assert [t.data_ptr() for t in tensors] == pointers and state.position.tolist() == [15, 15]
    assert state.keys.shape == (2, 2, 3, 8)


class _NoHostReads(TorchDispatchMode):
    """Fails at any operation that reads a tensor's value to the host (a device synchronisation on a GPU, not
    capturable by a CUDA graph) or gives a shape that depends on values."""

    READS = frozenset({"_local_scalar_dense", "is_nonzero", "item", "equal", "nonzero", "masked_select", "unique"})

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.overloadpacket.__name__ in self.READS:
            raise AssertionError(f"{func} reads a value to the host")
        return func(*args, **(kwargs or {}))


def test_a_static_step_reads_no_value_and_compiles_once_for_every_position():
    """No operation of the step reads a value to the host, and torch.compile(fullgraph=True) of it traces one graph
    that serves 3 windows of positions without a recompilation (no Python branch on the position): what a CUDA graph
    capture needs. The compiled steps give the eager ones."""
    torch._dynamo.reset()
    attn = _layer("causal", combine="gain").eval()
    x = torch.randn(2, 14, 16)
    with torch.no_grad():
        eager, compiled = _static_after(attn, x, 1), _static_after(attn, x, 1)
        with _NoHostReads():
            want = [attn.step(x[:, t:t + 1], eager)[0] for t in range(1, 14)]
        step = torch.compile(lambda token: attn.step(token, compiled)[0], fullgraph=True, backend="aot_eager")
        with torch._dynamo.config.patch(error_on_recompile=True):                 # a recompilation is an error
            got = [step(x[:, t:t + 1]) for t in range(1, 14)]
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(compiled.sum_complete, eager.sum_complete)


def test_a_static_state_for_another_window_or_several_tokens_is_refused():
    attn = _layer("causal")
    state = _static_after(attn, torch.randn(1, 5, 16), 5)
    with pytest.raises(ValueError, match=r"one token per call .* window \(4\).*LavoState\.static\(4\)"):
        attn.step(torch.randn(1, 2, 16), state)
    other = _layer("causal", window_size=6)
    with pytest.raises(ValueError, match=r"keys for a window of 4: make it with LavoState\.static\(6\)"):
        other.step(torch.randn(1, 1, 16), state)


def test_a_static_state_is_refused_without_context_dissection_and_for_a_window_too_small():
    """Found by the sweep: without context dissection (the memory of every past token) the static step read only
    complete windows, and gave outputs up to 0.5 away from the full call's, silently; the dynamic state decodes it
    right. static(0) raised a raw RuntimeError and static(2) after 2 tokens cropped a key."""
    attn = _layer("causal", dtype=F64, context_dissection=False)
    x = torch.randn(2, 12, 16, dtype=F64)
    with torch.no_grad():
        full = attn(x)
        _, state = attn(x[:, :5], return_state=True)
        with pytest.raises(ValueError, match="context_dissection=False: continue with the LavoState"):
            attn.step(x[:, 5:6], state.static(attn.window_size))
        ys = []
        for t in range(5, 12):  # the dynamic state it names gives the full call
            y, state = attn.step(x[:, t:t + 1], state)
            ys.append(y)
    torch.testing.assert_close(torch.cat(ys, 1), full[:, 5:], rtol=1e-10, atol=1e-12)
    with torch.no_grad():
        _, state = _layer("causal")(torch.randn(1, 2, 16), return_state=True)  # 2 keys of a window of 4
    for window in (0, 2, 4.0):
        with pytest.raises(ValueError, match=r"window must be the layer's window_size \(an int >= 3"):
            state.static(window)
