"""The recurrent base's noncausal forms (recurrent.py), for every registered recurrent mechanism: the bidirectional
form (a forward and a backward scan combined, the token itself read once) against slow float64 references, with
left, right and inner padding, outputs and gradients; the final-state form as it was (the cross form read on the
sequence itself); what a noncausal layer keeps (its state object, `lavo-zoo list attentions`); the option's checks
and the reading old configs keep."""
from __future__ import annotations

import importlib
from collections.abc import Callable

import pytest
import torch

from lavo_zoo.attention import AttentionSpec, attention_class, attention_info, build_attention, tensor_bytes
from lavo_zoo.attention.ops.gated_linear import GATED_LINEAR_KERNELS
from lavo_zoo.attention.recurrent import SourceMemory, Writes, naive_source_reading
from lavo_zoo.cli import main
from lavo_zoo.errors import OptionError
from lavo_zoo.testing import randomise_zero_parameters
from tests.attention.mechanism_testing import (
    ATOL,
    RTOL,
    D,
    assert_matches_reference,
    build,
    gen,
    randn,
    recurrent_names,
    small_options,
)
from tests.attention.test_naive_references import naive_of

NAMES = recurrent_names()
FORMS = ("bidirectional", "final_state")
# rows of T = 23 tokens padded on the left, on the right and inside (and one without padding)
T = 23
MASKS = torch.stack([torch.arange(T) >= 6, torch.arange(T) < 15,
                     torch.tensor([True] * 5 + [False] * 3 + [True] * 9 + [False, False] + [True] * 4),
                     torch.ones(T, dtype=torch.bool)])


def naive_op(name: str) -> Callable:
    """The token-by-token recurrence of the one op mechanism ``name`` runs (``ops/<op>/naive.py``)."""
    (op,) = attention_class(name).kernel_set.ops
    return getattr(importlib.import_module(f"lavo_zoo.attention.ops.{op}.naive"), f"naive_{op}")


def layer(name: str, form: str, small: bool = True) -> torch.nn.Module:
    """A float64 noncausal layer in eval mode, its zero-initialised parameters randomised."""
    options = small_options(name, "noncausal") if small else {}
    return randomise_zero_parameters(build(name, "noncausal", noncausal_form=form, **options))


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("small", [True, False], ids=["small", "default"])
@pytest.mark.parametrize("name", NAMES)
def test_each_form_matches_its_token_by_token_reference(name: str, small: bool, form: str, request) -> None:
    """Against each mechanism's ``naive`` (its streams by their definitions, then the forward recurrence and the
    backward one over the reversed sequence, token by token: :func:`naive_source_reading`), rows padded on the
    left, on the right and inside: the real rows' outputs, and their gradients w.r.t. the inputs (the padded ones'
    included: zero, nothing leaks from padding in either direction) and every parameter."""
    g = gen(request)
    attn = layer(name, form, small)
    x = (randn(g, len(MASKS), T, D) * torch.where(MASKS, 1.0, 30.0)[..., None]).requires_grad_(True)
    weights = randn(g, int(MASKS.sum()), D)
    assert_matches_reference(attn, naive_of(name), x, MASKS, rows=MASKS, weights=weights)


def _suffix_after_own_step(op: Callable, q: torch.Tensor, writes: Writes) -> torch.Tensor:
    """q_t^T (the state after the tokens T..t, the token's own step included), token by token: the backward
    scan of a form that counts the token in both scans."""
    out, state = [], None
    for t in reversed(range(q.shape[2])):
        gates = {n: gate[:, :, t:t + 1] for n, gate in writes.gates.items()}
        _, state = op(q[:, :, t:t + 1], writes.keys[:, :, t:t + 1], writes.values[:, :, t:t + 1], state=state,
                      **gates)
        out.append((q[:, :, t, :, None] * state).sum(-2))
    return torch.stack(out[::-1], 2)


@pytest.mark.parametrize("name", NAMES)
def test_the_token_itself_is_read_once(name: str, request) -> None:
    """What the queries read (before the output stage) is the forward recurrence's reading plus the backward one's
    read before the token's own step; reading the backward state after it (the token counted in both scans) is
    measurably another function on the same inputs, so the comparison would catch it."""
    g = gen(request)
    attn = layer(name, "bidirectional")
    x = randn(g, 2, 19, D)
    with torch.no_grad():
        q, _ = attn.reader(x)
        writes = attn.writes(x)
        got = attn.scan_both_ways(q, writes)
        op = naive_op(name)
        once = naive_source_reading(attn, op, q, writes.keys, writes.values, **writes.gates)
        forward, _ = op(q, writes.keys, writes.values, **writes.gates)
        twice = forward + _suffix_after_own_step(op, q, writes)
    torch.testing.assert_close(got, once, atol=ATOL, rtol=RTOL)
    assert (got - twice).abs().max() > 1e-2 * got.abs().max()


def _dense_gated_linear(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor | None
                        ) -> torch.Tensor:
    """The bidirectional form as one T x T mixing matrix, written out: key s reaches query t with the decay of the
    tokens s+1..t (s <= t) or t+1..s-1 (s > t), per key channel (or per head), o_t = sum_s (q_t . decay . k_s) v_s."""
    T = q.shape[2]
    if g is None:
        g = torch.zeros_like(k[..., 0])
    if g.dim() == 3:
        g = g[..., None].expand_as(k)
    G = g.cumsum(2)  # [B, H, T, K] inclusive
    t, s = torch.arange(T)[:, None], torch.arange(T)[None, :]
    below = G[:, :, :, None] - G[:, :, None, :]                         # sum over s+1..t   [B, H, t, s, K]
    above = G[:, :, None, :] - g[:, :, None, :] - G[:, :, :, None]      # sum over t+1..s-1
    log_decay = torch.where((s <= t)[..., None], below, above)
    weights = torch.einsum("bhtk,bhtsk,bhsk->bhts", q, log_decay.exp(), k)
    return weights @ v


@pytest.mark.parametrize("name", [n for n in NAMES if attention_class(n).kernel_set is GATED_LINEAR_KERNELS])
def test_a_gated_linear_form_is_one_mixing_matrix(name: str, request) -> None:
    """Based, GLA, Mamba-2 (every mechanism of the gated linear op): the form equals one dense quasiseparable
    matrix, each key counted once with the decay of the tokens between it and the query (the docstring's rule)."""
    g = gen(request)
    attn = layer(name, "bidirectional")
    x = randn(g, 2, 21, D)
    with torch.no_grad():
        q, _ = attn.reader(x)
        writes = attn.writes(x)
        dense = _dense_gated_linear(q, writes.keys, writes.values, writes.gates.get("g"))
        torch.testing.assert_close(attn.scan_both_ways(q, writes), dense, atol=ATOL, rtol=RTOL)


@pytest.mark.parametrize("conv_size", [0, 3])
@pytest.mark.parametrize("name", [n for n in NAMES if not attention_class(n).source_op])
def test_a_plain_sum_reads_its_two_scans_as_one(name: str, conv_size: int, request) -> None:
    """Where the state is a plain sum (Based: no decay), the two scans, each key counted once, add up to the sums
    after the sequence, which is what the layer reads in both forms (noncausal linear attention, LION-LIT), with or
    without a short convolution on the keys and values; a form that counted the token twice would not."""
    g = gen(request)
    attn = randomise_zero_parameters(build(name, "noncausal", **{**small_options(name, "noncausal"),
                                                                 "conv_size": conv_size}))
    x = randn(g, 2, T, D)
    q, finish = attn.reader(x)
    torch.testing.assert_close(finish(attn.scan_both_ways(q, attn.writes(x))), attn(x), atol=ATOL, rtol=RTOL)


@pytest.mark.parametrize("name", NAMES)
def test_the_final_state_form_is_the_cross_form_on_the_sequence(name: str, request) -> None:
    """``noncausal_form="final_state"`` is the reading before the bidirectional form: every query reads the state
    after the whole (real) sequence, which is cross attention with the sequence as its own source (same weights),
    padded or not; the bidirectional form is another function of the same weights, except where nothing decays or is
    overwritten (Based: ``source_op`` False, the two forms are one function)."""
    g = gen(request)
    options = small_options(name, "noncausal")
    final, both = (build(name, "noncausal", noncausal_form=form, **options) for form in ("final_state",
                                                                                        "bidirectional"))
    cross = build(name, "cross", **small_options(name, "cross"))
    assert set(final.state_dict()) == set(cross.state_dict()) == set(both.state_dict())  # the weights fit each
    cross.load_state_dict(final.state_dict())
    both.load_state_dict(final.state_dict())
    x = randn(g, len(MASKS), T, D)
    y = final(x, MASKS)
    torch.testing.assert_close(y[MASKS], cross(x, context=x, context_mask=MASKS)[MASKS], atol=ATOL, rtol=RTOL)
    assert torch.allclose(y[MASKS], both(x, MASKS)[MASKS], atol=ATOL, rtol=RTOL) != attention_class(name).source_op


@pytest.mark.parametrize("name", [n for n in NAMES if attention_class(n).source_op])
def test_what_a_bidirectional_layer_keeps_grows(name: str, request) -> None:
    """The state object of a noncausal layer: with the bidirectional form (a mechanism that decays or overwrites)
    every token's writes, so its bytes grow with T (twice the tokens, twice the bytes), and the layer computed from
    exactly them; with the final state the constant-size state after the sequence (a cross cache of the same
    weights)."""
    g = gen(request)
    both, final = layer(name, "bidirectional"), layer(name, "final_state")
    final.load_state_dict(both.state_dict())
    x = randn(g, 1, 20, D)
    short, long = both.sequence_state(x[:, :10]), both.sequence_state(x)
    assert isinstance(long, Writes) and long.keys.shape[2] == 20
    assert tensor_bytes(long) == 2 * tensor_bytes(short) > 0
    q, finish = both.reader(x)
    torch.testing.assert_close(finish(both.scan_both_ways(q, long)), both(x), atol=ATOL, rtol=RTOL)
    padded = both.sequence_state(x, MASKS[:1, :20])  # packed: the padding's writes zeroed
    assert padded.keys.shape == long.keys.shape and not padded.keys[:, :, int(MASKS[0, :20].sum()):].any()
    _assert_keeps_the_final_state(name, final, x)


@pytest.mark.parametrize("name", [n for n in NAMES if not attention_class(n).source_op])
def test_a_plain_sum_keeps_a_constant_state_in_both_forms(name: str, request) -> None:
    """Where the state is a plain sum (Based), the two scans add up to the sums after the sequence, so a noncausal
    layer of either form keeps just those (constant size); `list attentions` says so."""
    g = gen(request)
    x = randn(g, 1, 20, D)
    for form in FORMS:
        _assert_keeps_the_final_state(name, layer(name, form), x)
    assert "grows with T" not in attention_info(name).noncausal and "no streaming" in attention_info(name).noncausal


def _assert_keeps_the_final_state(name: str, attn: torch.nn.Module, x: torch.Tensor) -> None:
    """``attn``, a noncausal layer of mechanism ``name``, keeps of x [1, T, D] the state after the sequence: constant
    size (at T / 2 and T), a cross cache of the same weights; other patterns refuse the question, and a noncausal
    layer does not decode step by step."""
    constant = [attn.sequence_state(x[:, :n]) for n in (x.shape[1] // 2, x.shape[1])]
    assert all(isinstance(s, SourceMemory) for s in constant) and tensor_bytes(constant[0]) == tensor_bytes(constant[1])
    cross = build(name, "cross", **small_options(name, "cross"))
    cross.load_state_dict(attn.state_dict())
    torch.testing.assert_close(constant[1].memory, cross.cross_cache(x).memory, atol=ATOL, rtol=RTOL)
    with pytest.raises(ValueError, match="sequence_state is what a noncausal layer keeps; this attention is 'cross'"):
        cross.sequence_state(x)
    with pytest.raises(ValueError, match="this attention is 'noncausal'"):
        attn.step(x)


def test_list_attentions_says_what_a_noncausal_layer_keeps(capsys) -> None:
    """`lavo-zoo list attentions` (and its JSON) says, for every recurrent mechanism that decays or overwrites, that a
    noncausal layer keeps what grows with T and does not stream; mechanisms that declare nothing show no such
    entry."""
    for name in NAMES:
        assert ("grows with T, no streaming" in attention_info(name).noncausal) == attention_class(name).source_op
    assert attention_info("lara").noncausal == ""
    assert main(["list", "attentions", "gla"]) == 0
    out = capsys.readouterr().out
    assert "noncausal=grows with T, no streaming" in out
    assert main(["list", "attentions", "lara"]) == 0
    assert "noncausal=" not in capsys.readouterr().out


@pytest.mark.parametrize("name", NAMES)
def test_the_option_is_checked(name: str) -> None:
    """Every recurrent mechanism takes ``noncausal_form`` (bidirectional by default, weight-free: an evaluation may
    switch it), and refuses another value naming the option and its choices."""
    assert attention_info(name).options["noncausal_form"] == "bidirectional"
    assert "noncausal_form" in attention_class(name).eval_options
    with pytest.raises(OptionError, match="noncausal_form must be one of bidirectional, final_state .* got 'both'"):
        build_attention(name, 16, 2, "noncausal", noncausal_form="both")
    with pytest.raises(OptionError, match="option 'noncausal_form' must be a string"):
        build_attention(name, 16, 2, "noncausal", noncausal_form=1)
    for pattern in ("causal", "cross"):  # read by the noncausal pattern only; old configs record it at every site
        assert build_attention(name, 16, 2, pattern, noncausal_form="final_state").noncausal_form == "final_state"


def test_old_configs_keep_the_final_state() -> None:
    """A config saved before the option existed does not record it and is read with the final state, the form it was
    trained with; every config saved since records the form."""
    old = AttentionSpec("gla", {"conv_size": 4})
    old.with_former_defaults()
    assert old.options == {"conv_size": 4, "noncausal_form": "final_state"}
    assert old.build(16, 2, "noncausal").noncausal_form == "final_state"
    assert AttentionSpec("gla").to_config() == {"name": "gla", "noncausal_form": "bidirectional"}
    assert AttentionSpec("gla").build(16, 2, "noncausal").noncausal_form == "bidirectional"
