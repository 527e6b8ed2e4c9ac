"""KDA (kda.py) and the layers on it (Gated DeltaNet-2) beyond the registry-wide contract, naive and recurrent tests:
streaming with a carried state and step decoding against the token-by-token recurrence (outputs, the final state,
gradients), finite outputs for every option and input scale, the reference layer's defaults, and KDA with one decay
per head reading what Gated DeltaNet reads. float64 unless a test says otherwise."""
from __future__ import annotations

import pytest
import torch

from lavo_zoo.attention import attention_class, build_attention
from lavo_zoo.attention.kda import KDAAttention, reference_inputs
from lavo_zoo.attention.ops.delta_rule.naive import naive_delta_rule
from lavo_zoo.attention.recurrent import merge_heads, split_heads
from lavo_zoo.testing import randomise_zero_parameters
from tests.attention.mechanism_testing import ATOL, RTOL, D, H, build, gen, randn, recurrent_names, small_options
from tests.attention.test_naive_references import naive_of

# KDA and every registered layer built on it
FAMILY = [n for n in recurrent_names() if issubclass(attention_class(n), KDAAttention)]


def _gates(m: KDAAttention, x: torch.Tensor) -> dict:
    """The recurrence's strengths of tokens x by their definitions (the log decay is in reference_inputs)."""
    factor = 2 if m.allow_neg_eigval else 1
    if hasattr(m, "w_proj"):  # Gated DeltaNet-2: an erase gate per key channel, a write gate per value channel
        return {"beta": split_heads(torch.sigmoid(m.b_proj(x)) * factor, m.num_heads),
                "write": split_heads(torch.sigmoid(m.w_proj(x)), m.num_heads)}
    return {"beta": (torch.sigmoid(m.b_proj(x)) * factor).transpose(1, 2)}


def _reference(m: KDAAttention, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Causal outputs [B, T, D] (the mechanism's naive) and the state after x [B, H, d_k, d_v], token by token."""
    q, k, v, g = reference_inputs(m, x, x)
    _, S = naive_delta_rule(q, k, v, g=g, **_gates(m, x))
    name = next(n for n in FAMILY if type(m) is attention_class(n))
    return naive_of(name)(m, x), S


@pytest.mark.parametrize("options", ["default", "small"])
@pytest.mark.parametrize("name", FAMILY)
def test_streaming_with_a_state_follows_the_recurrence(name: str, options: str, request) -> None:
    """Chunks of 5, 1, 13 and 18 tokens, each continuing the state the previous one returned (the memory and the
    convolutions' last inputs, not detached): the outputs, the final memory and their gradients (w.r.t. the input
    and every parameter) are the token-by-token recurrence's over the whole sequence."""
    g = gen(request)
    attn = randomise_zero_parameters(build(name, "causal", **(small_options(name, "causal") if options == "small"
                                                              else {})))
    x = randn(g, 2, 37, D).requires_grad_()
    state, ys = None, []
    for start, n in ((0, 5), (5, 1), (6, 13), (19, 18)):
        y, state = attn(x[:, start:start + n], state=state, return_state=True)
        ys.append(y)
    got = (torch.cat(ys, 1), state.memory)
    want = _reference(attn, x)
    torch.testing.assert_close(got, want, atol=ATOL, rtol=RTOL)
    w = [randn(g, *t.shape) for t in want]
    leaves = [x, *attn.parameters()]
    grads = torch.autograd.grad(sum((a * b).sum() for a, b in zip(got, w)), leaves, materialize_grads=True)
    ref = torch.autograd.grad(sum((a * b).sum() for a, b in zip(want, w)), leaves, materialize_grads=True)
    for name_, a, b in zip(["x"] + [n for n, _ in attn.named_parameters()], grads, ref):
        torch.testing.assert_close(a, b, atol=ATOL, rtol=RTOL, msg=lambda m, name_=name_: f"grad of {name_}: {m}")
    # the convolutions' caches are the last conv_size - 1 projected inputs
    torch.testing.assert_close(state.conv[0], attn.q_proj(x[:, -3:]), atol=ATOL, rtol=RTOL)


@pytest.mark.parametrize("name", FAMILY)
def test_step_decoding_follows_the_recurrence(name: str, request) -> None:
    """A prefill of 9 tokens, then one token per step: each step's output is the recurrence's at that position."""
    g = gen(request)
    attn = randomise_zero_parameters(build(name, "causal", **small_options(name, "causal")))
    x = randn(g, 2, 16, D)
    y, state = attn.step(x[:, :9])
    ys = [y]
    for t in range(9, 16):
        y, state = attn.step(x[:, t:t + 1], state)
        ys.append(y)
    want, S = _reference(attn, x)
    torch.testing.assert_close(torch.cat(ys, 1), want, atol=ATOL, rtol=RTOL)
    torch.testing.assert_close(state.memory, S, atol=ATOL, rtol=RTOL)


@pytest.mark.parametrize("name", FAMILY)
def test_finite_for_every_option_and_input_scale(name: str, request) -> None:
    """In fp32 on the PyTorch kernels, for each option that changes the computation (chunk sizes 1 to the whole
    sequence, no convolution, values twice as wide, doubled strengths) and inputs scaled by 1e-6 to 1e6 with strong
    decays (A_log up to 10: a head's decay rate 2.2e4), the output is finite and the float64 recurrence's."""
    g = gen(request)
    x = randn(g, 2, 50, D)
    for options in ({"chunk_size": 1}, {"chunk_size": 32}, {"chunk_size": 100, "conv_size": 0},
                    {"expand_v": 2.0, "allow_neg_eigval": True, "chunk_size": 20}):
        attn = build(name, "causal", **options)
        with torch.no_grad():
            attn.A_log.copy_(torch.linspace(-3, 10, H))
        for scale in (1e-6, 1.0, 1e3, 1e6):
            want = naive_of(name)(attn, x * scale)  # float64, token by token
            assert torch.isfinite(want).all()
            got = attn.float()(x.float() * scale)
            attn.double()
            assert torch.isfinite(got).all(), (options, scale)
            err = ((got.double() - want).norm() / want.norm()).item()
            assert err < 1e-4, f"{options}, inputs x {scale}: fp32 off the float64 output by {err:.1e} (relative)"


def test_kda_defaults_are_the_reference_layers() -> None:
    """flash-linear-attention's KimiDeltaAttention: values as wide as keys, 4-tap SiLU convolutions, a decay per key
    channel through a projection of rank d_v, A_log per head in log [1, 16], dt_bias per key channel, one strength per
    head, a sigmoid output gate through a rank-d_v projection with bias; Gated DeltaNet-2 adds an erase gate per key
    channel and a write gate per value channel."""
    kda, gdn2 = build_attention("kda", 64, 2), build_attention("gated_deltanet2", 64, 2)
    for m in (kda, gdn2):
        assert m.value_dim == 64 and m.k_conv.kernel_size == m.q_conv.kernel_size == 4 and m.chunk_size == 64
        assert [lin.weight.shape for lin in m.f_proj] == [(32, 64), (64, 32)] and m.dt_bias.shape == (64,)
        assert m.A_log.shape == (2,) and (m.A_log >= 0).all() and (m.A_log <= torch.log(torch.tensor(16.0))).all()
        assert [lin.weight.shape for lin in m.g_proj] == [(32, 64), (64, 32)] and m.g_proj[1].bias is not None
        assert m.norm_eps == 1e-5 and not m.allow_neg_eigval
    assert kda.b_proj.out_features == 2 and not hasattr(kda, "w_proj")
    assert gdn2.b_proj.out_features == 64 and gdn2.w_proj.out_features == 64


def test_kda_with_one_decay_per_head_reads_what_gated_deltanet_reads(request) -> None:
    """KDA's decay made equal over each head's key channels (its projection's rows and dt_bias tied within a head)
    is Gated DeltaNet's decay per head (a_proj = the tied row of W_f2 times W_f1): given the same projections,
    convolutions and strengths, the two layers read the same values o_t = S_t^T q_t at every token and hold the same
    state, with the same gradients (KDA's dt_bias gradient summed over a head's channels). Their output stages
    differ by reference (a sigmoid-gated norm through a low-rank projection against a swish-gated one), so the values
    are compared before them."""
    g = gen(request)
    kda = build("kda", "causal", chunk_size=8)
    gdn = build("gated_deltanet", "causal", chunk_size=8, expand_v=1.0)
    d = D // H
    with torch.no_grad():
        w2 = kda.f_proj[1].weight.view(H, d, -1)
        w2.copy_(w2[:, :1].expand_as(w2))                          # the decay's rows tied within a head
        kda.dt_bias.view(H, d).copy_(kda.dt_bias.view(H, d)[:, :1].expand(H, d))
        shared = {n: p for n, p in kda.state_dict().items() if n in gdn.state_dict()
                  and gdn.state_dict()[n].shape == p.shape}
        gdn.load_state_dict({**gdn.state_dict(), **shared})
        gdn.a_proj.weight.copy_(w2[:, 0] @ kda.f_proj[0].weight)
        gdn.dt_bias.copy_(kda.dt_bias.view(H, d)[:, 0])
    for layer in (kda, gdn):  # the values read, before each layer's own output stage
        layer.output = lambda o, x: merge_heads(o)
    assert set(shared) >= {"q_proj.weight", "k_proj.weight", "v_proj.weight", "b_proj.weight", "A_log",
                           "q_conv.weight", "k_conv.weight", "v_conv.weight"}
    x = randn(g, 2, 37, D).requires_grad_()
    (y_kda, s_kda), (y_gdn, s_gdn) = kda(x, return_state=True), gdn(x, return_state=True)
    torch.testing.assert_close((y_kda, s_kda.memory), (y_gdn, s_gdn.memory), atol=ATOL, rtol=RTOL)
    w = randn(g, *y_kda.shape)
    names = ["q_proj.weight", "k_proj.weight", "v_proj.weight", "b_proj.weight", "A_log", "k_conv.weight"]
    grads_kda = torch.autograd.grad((y_kda * w).sum(), [x, kda.dt_bias] + [kda.get_parameter(n) for n in names])
    grads_gdn = torch.autograd.grad((y_gdn * w).sum(), [x, gdn.dt_bias] + [gdn.get_parameter(n) for n in names])
    torch.testing.assert_close(grads_kda[0], grads_gdn[0], atol=ATOL, rtol=RTOL)
    torch.testing.assert_close(grads_kda[1].view(H, d).sum(-1), grads_gdn[1], atol=ATOL, rtol=RTOL)
    for n, a, b in zip(names, grads_kda[2:], grads_gdn[2:]):
        torch.testing.assert_close(a, b, atol=ATOL, rtol=RTOL, msg=lambda m, n=n: f"grad of {n}: {m}")
    src, mask = randn(g, 2, 23, D), torch.arange(23)[None] < torch.tensor([[23], [15]])
    torch.testing.assert_close(kda.source_memory(src, mask).memory, gdn.source_memory(src, mask).memory,
                               atol=ATOL, rtol=RTOL)  # the state a source leaves (noncausal, cross) too
