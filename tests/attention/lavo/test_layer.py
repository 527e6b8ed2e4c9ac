"""The LAVO layer (lavo/layer.py): fast path == its naive reference (lavo/naive.py; outputs and gradients) for every
pattern and flag, streaming == full, causality, padding invariance, orthonormal bases, clear errors, bf16 on 64K
tokens; the memory-lean training path: the recompute kernels equal the autograd ones and the reference across chunk
boundaries, gradients flow through a streaming state, nothing O(T w) or O(T r) is saved for backward, the kernel
choice, torch.compile (parametrised over the available devices). Shapes: D=16, H=2 (d=8), r=4, w=4."""
from __future__ import annotations

import copy
import importlib.util

import pytest
import torch

from lavo_zoo.attention import build_attention
from lavo_zoo.attention.lavo import LavoState
from lavo_zoo.attention.lavo.naive import naive
from tests.attention.mechanism_testing import assert_matches_reference

F64 = torch.float64
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
BASE = {"num_bases": 4, "window_size": 4}
CONFIGS = [  # every flag value appears at least once per pattern it applies to
    ("causal", {}),
    ("causal", {"combine": "half", "read_temperature": 0.0, "memory_norm": "mean"}),  # the paper's reading
    ("causal", {"position_encoding": False, "combine": "half", "empty_memory": "half"}),
    ("causal", {"memory_source": "value", "bases_trainable": False}),
    ("causal", {"memory_source": "input"}),
    ("causal", {"context_dissection": False}),
    ("causal", {"context_dissection": False, "memory_source": "local_out"}),
    ("causal", {"combine": "gain", "read_temperature": 2.0, "memory_norm": "rms", "bases_decay": False}),
    ("causal", {"combine": "sum", "read_gain": 3.0, "memory_source": "value"}),
    ("causal", {"context_dissection": False, "combine": "gain", "memory_norm": "rms"}),
    ("causal", {"global_read": False}),
    ("causal", {"global_read": False, "combine": "half"}),
    ("noncausal", {}),
    ("noncausal", {"position_encoding": False, "memory_source": "input"}),
    ("noncausal", {"context_dissection": False, "bases_trainable": False}),
    ("noncausal", {"combine": "gain", "read_temperature": 2.0, "memory_norm": "rms"}),
    ("noncausal", {"combine": "sum", "global_read": False}),
    ("cross", {}),
    ("cross", {"memory_source": "input", "bases_trainable": False}),
    ("cross", {"read_temperature": 2.0, "memory_norm": "rms"}),
]
CAUSAL = [opts for pattern, opts in CONFIGS if pattern == "causal"]


def _id(c: tuple) -> str:
    return c[0] + "-" + ("-".join(f"{k}={v}" for k, v in c[1].items()) or "default")


@pytest.mark.parametrize("T", [3, 8, 11])  # T < w, a multiple of w, not a multiple
@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("config", CONFIGS, ids=_id)
def test_fast_path_equals_reference(helpers, config, padded, T):
    pattern, opts = config
    attn = helpers.make("lavo", pattern, **BASE, **opts)
    if attn.learned_gain is not None:  # away from its init of ones, so that a missing or misplaced gain shows
        with torch.no_grad():
            attn.learned_gain.normal_()
    helpers.compare(attn, naive, T, padded)


@pytest.mark.parametrize("pattern", ["causal", "noncausal"])
def test_without_global_read_lavo_is_local_attention_with_a_relative_bias(helpers, pattern):
    """global_read=False: ``local`` with relative_bias, given the same projections and EPE = bias (to float64
    rounding: LAVO multiplies by the q, k, v projections in one product, ``local`` in three)."""
    lavo = helpers.make("lavo", pattern, **BASE, global_read=False)
    local = build_attention("local", 16, 2, pattern, window_size=4, relative_bias=True).to(F64)
    state = {k: v for k, v in lavo.state_dict().items() if k.split(".")[0] in ("q_proj", "k_proj", "v_proj",
                                                                              "out_proj")}
    local.load_state_dict({**state, "rel_bias": lavo.epe.detach()})
    x, mask = torch.randn(2, 11, 16, dtype=F64), torch.rand(2, 11) > 0.3
    mask[:, 0] = True
    torch.testing.assert_close(lavo(x), local(x), rtol=1e-13, atol=1e-15)
    torch.testing.assert_close(lavo(x, mask), local(x, mask), rtol=1e-13, atol=1e-15)
    with_read = helpers.make("lavo", pattern, **BASE)
    with_read.load_state_dict(lavo.state_dict())
    assert not torch.allclose(with_read(x), lavo(x))  # the flag does switch something off


def test_reading_options_act_where_documented(helpers):
    """With out_proj the identity: 'half' = 0.5 (local + global) after window 0 and local in it, 'sum' = local +
    global, 'gain' = local + g_h global per head; memory_norm='rms' reads m / rms(m) (a scaled memory reads the
    same); the temperature multiplies q by exp(t_h) before the read."""
    x = torch.randn(1, 12, 16, dtype=F64)
    base = helpers.make("lavo", "causal", **BASE, combine="half")
    with torch.no_grad():
        base.out_proj.weight.copy_(torch.eye(16))
        base.out_proj.bias.zero_()

    def variant(**opts) -> torch.Tensor:
        attn = helpers.make("lavo", "causal", **BASE, **opts)
        attn.load_state_dict(base.state_dict(), strict=False)
        return attn(x)

    local, summ = variant(global_read=False), variant(combine="sum")
    glob = summ - local
    assert glob[:, 4:].abs().min() > 0 and not glob[:, :4].any()                      # window 0 reads nothing
    torch.testing.assert_close(base(x), torch.cat([local[:, :4], 0.5 * summ[:, 4:]], 1))
    torch.testing.assert_close(variant(combine="sum", read_gain=3.0), local + 3 * glob)
    gain = helpers.make("lavo", "causal", **BASE, combine="gain")
    gain.load_state_dict(base.state_dict(), strict=False)
    torch.testing.assert_close(gain(x), summ)
    with torch.no_grad():
        gain.learned_gain.copy_(torch.tensor([2.0, -0.5]))
    torch.testing.assert_close(gain(x), local + glob * torch.tensor([2.0] * 8 + [-0.5] * 8, dtype=F64))
    attn = helpers.make("lavo", "noncausal", **BASE, memory_norm="rms", read_temperature=0.5)
    q, mem = torch.randn(1, 2, 5, 8, dtype=F64), torch.randn(1, 2, 1, 8, dtype=F64)
    out = attn._read(q, mem, "autograd")
    torch.testing.assert_close(attn._read(q, 10 * mem, "autograd"), out, rtol=1e-5, atol=1e-5)  # up to eps
    scaled_q = q * attn.log_read_temperature.exp()[:, None, None]
    attn.log_read_temperature, attn.memory_norm = None, "mean"
    assert not torch.allclose(attn._read(q, 10 * mem, "autograd"), attn._read(q, mem, "autograd"))
    unit = mem * (mem.square().mean(-1, keepdim=True) + 1e-6).rsqrt()
    torch.testing.assert_close(attn._read(scaled_q, unit, "autograd"), out)


@pytest.mark.parametrize("opts", CAUSAL, ids=str)
def test_streaming_in_uneven_chunks_and_token_by_token_equals_full(helpers, opts):
    attn = helpers.make("lavo", "causal", **BASE, **opts)
    x = torch.randn(2, 23, 16, dtype=F64)
    y = attn(x)
    torch.testing.assert_close(helpers.stream(attn, x, [1, 3, 2, 7, 1, 5, 4]), y)
    torch.testing.assert_close(helpers.stream(attn, x, [1] * 23), y)


def test_state_is_constant_size(helpers):
    attn = helpers.make("lavo", "causal", **BASE)
    state, sizes = None, []
    for n in (1, 5, 40, 2):
        _, state = attn(torch.randn(1, n, 16, dtype=F64), state=state, return_state=True)
        tensors = (state.keys, state.values, state.sum_complete, state.sum_partial)
        sizes.append(sum(t.untyped_storage().nbytes() for t in tensors))  # views of a whole chunk would count
    assert isinstance(state, LavoState) and state.position == 48
    assert state.keys.shape == (1, 2, 3, 8) and max(sizes) == sizes[-1] == 2 * (2 * 3 * 8 + 2 * 8) * 8  # no growth


def test_decoding_from_a_prefill_state_equals_full(helpers):
    attn = helpers.make("lavo", "causal", **BASE)
    x = torch.randn(1, 30, 16, dtype=F64)
    y = attn(x)
    y_pre, state = attn(x[:, :17], return_state=True)
    steps = []
    for t in range(17, 30):
        y_t, state = attn(x[:, t:t + 1], state=state, return_state=True)
        steps.append(y_t)
    torch.testing.assert_close(torch.cat([y_pre, *steps], 1), y)


@pytest.mark.parametrize("opts", [{}, {"context_dissection": False}], ids=str)
def test_causality(helpers, opts):
    attn = helpers.make("lavo", "causal", **BASE, **opts)
    x = torch.randn(2, 13, 16, dtype=F64)
    for t0 in (1, 4, 9):
        x2 = x.clone()
        x2[:, t0:] = torch.randn_like(x2[:, t0:])
        y, y2 = attn(x), attn(x2)
        torch.testing.assert_close(y[:, :t0], y2[:, :t0], rtol=0, atol=0)
        assert not torch.allclose(y[:, t0:], y2[:, t0:])


def test_noncausal_padding_invariance(helpers):
    attn = helpers.make("lavo", "noncausal", **BASE)
    x = torch.randn(1, 10, 16, dtype=F64)
    padded = torch.cat([x, 100 * torch.randn(1, 5, 16, dtype=F64)], 1)
    mask = torch.arange(15)[None] < 10
    torch.testing.assert_close(attn(padded, mask)[:, :10], attn(x))


@pytest.mark.parametrize("kernels", ["recompute", "autograd"])
@pytest.mark.parametrize("pattern", ["causal", "noncausal"])
@pytest.mark.parametrize("w", [8, 16])
def test_a_left_padded_row_equals_the_row_alone(helpers, w, pattern, kernels):
    """3 padded positions in front (not a multiple of w) change no real output: the causal windows and the memory
    start at each row's first real token, whatever the kernel, and the padded row equals its naive reference (outputs
    and gradients). float64, random inputs, one unpadded row beside it; queries in chunks of 8."""
    attn = helpers.make("lavo", pattern, num_bases=4, window_size=w, kernels=kernels)
    attn.chunk_size = 8
    T, pad = 45, 3
    x = torch.randn(2, pad + T, 16, dtype=F64)
    mask = torch.ones(2, pad + T, dtype=torch.bool)
    mask[1, :pad] = False
    torch.testing.assert_close(attn(x, mask)[1, pad:], attn(x[1:, pad:])[0], rtol=1e-9, atol=1e-10)
    torch.testing.assert_close(attn(x, mask)[0], attn(x[:1])[0], rtol=1e-9, atol=1e-10)
    if kernels == "recompute":
        assert_matches_reference(attn, naive, x.requires_grad_(True), mask, rows=mask, rtol=1e-9, atol=1e-10)


def test_cross_padding_invariance(helpers):
    attn = helpers.make("lavo", "cross", **BASE)
    x, src = torch.randn(1, 6, 16, dtype=F64), torch.randn(1, 9, 16, dtype=F64)
    keep = torch.tensor([0, 1, 3, 4, 6, 7, 8, 10, 11])
    padded = 100 * torch.randn(1, 12, 16, dtype=F64)
    padded[:, keep] = src
    mask = torch.zeros(1, 12, dtype=torch.bool)
    mask[:, keep] = True
    torch.testing.assert_close(attn(x, context=padded, context_mask=mask), attn(x, context=src))


@pytest.mark.parametrize("r", [3, 8])
def test_bases_orthonormal_per_head_at_init(r):
    attn = build_attention("lavo", 32, 4, "causal", num_bases=r)
    assert attn.bases.shape == (4, r, 8)
    for b in attn.bases.detach():
        torch.testing.assert_close(b @ b.T, torch.eye(r), atol=1e-5, rtol=0)


def test_defaults_and_flags():
    attn = build_attention("lavo", 48, 4, "causal")
    assert attn.num_bases == 12 and attn.window_size == 16 and attn.memory_source == "local_out"
    assert attn.combine == "sum" and attn.memory_norm == "rms" and attn.global_read and attn.learned_gain is None
    assert attn.log_read_temperature.exp().tolist() == pytest.approx([16.0] * 4)
    for pattern in ("noncausal", "cross"):  # the paper's reading
        other = build_attention("lavo", 48, 4, pattern)
        assert (other.combine, other.memory_norm, other.log_read_temperature) == ("half", "mean", None)
    assert build_attention("lavo", 48, 4, "causal", read_temperature=0).log_read_temperature is None
    assert attn.encodes_position and attn.epe.shape == (4, 31) and not attn.epe.any()
    assert not build_attention("lavo", 48, 4, "causal", position_encoding=False).encodes_position
    assert not build_attention("lavo", 48, 4, "cross").encodes_position
    assert build_attention("lavo", 48, 4, "causal", context_dissection=False).memory_source == "value"
    fixed = build_attention("lavo", 48, 4, "causal", bases_trainable=False)
    assert "bases" in dict(fixed.named_buffers()) and "bases" not in dict(fixed.named_parameters())
    gain = build_attention("lavo", 48, 4, "causal", combine="gain", read_temperature=0.5, bases_decay=False)
    assert gain.learned_gain.tolist() == [1.0] * 4
    assert gain.log_read_temperature.exp().tolist() == pytest.approx([0.5] * 4)
    assert gain.bases.no_weight_decay and not getattr(attn.bases, "no_weight_decay", False)
    assert build_attention("lavo", 48, 4, "cross", combine="gain").learned_gain is None  # no local branch to add to


@pytest.mark.parametrize("options, match", [
    ({"num_bases": 9}, "num_bases .*head dim 8"),
    ({"memory_source": "keys"}, "memory_source must be one of"),
    ({"empty_memory": "zero"}, "empty_memory must be one of"),
    ({"window_size": 0}, "window_size"),
    ({"combine": "mean"}, "combine must be one of"),
    ({"combine": "sum", "empty_memory": "half"}, "only applies to combine='half'"),
    ({"memory_norm": "l2"}, "memory_norm must be one of"),
    ({"combine": "half", "read_gain": 2.0}, "read_gain .* applies to combine='sum' or 'gain'"),
    ({"read_temperature": -1.0}, "read_temperature must be positive"),
])
def test_bad_options_refused(options, match):
    with pytest.raises(ValueError, match=match):
        build_attention("lavo", 32, 4, "causal", **options)


def test_the_options_dataclass_holds_every_option_with_the_pattern_defaults():
    """LavoOptions has one field per constructor option (the signature and the dataclass cannot drift) and fills the
    pattern's defaults: the measured reading in causal attention, the paper's otherwise."""
    from dataclasses import fields

    from lavo_zoo.attention.lavo.layer import LavoAttention, LavoOptions
    from lavo_zoo.attention.registry import option_defaults

    defaults = option_defaults(LavoAttention)
    assert [f.name for f in fields(LavoOptions)] == list(defaults)
    causal, noncausal, cross = (LavoOptions.resolve(p, 32, 4, **defaults) for p in ("causal", "noncausal", "cross"))
    assert (causal.combine, causal.read_temperature, causal.memory_norm, causal.memory_source) == \
        ("sum", 16.0, "rms", "local_out")
    assert (noncausal.combine, noncausal.read_temperature, noncausal.memory_norm) == ("half", 0.0, "mean")
    assert cross.memory_source == "value" and causal.num_bases == 8  # min(64, head dim 8)
    assert LavoOptions.resolve("causal", 32, 4, **{**defaults, "context_dissection": False}).memory_source == "value"


def test_bad_inputs_refused():
    with pytest.raises(ValueError, match="cross attention has no local branch"):
        build_attention("lavo", 32, 4, "cross", memory_source="local_out")
    with pytest.raises(ValueError, match="global_read=False would leave nothing"):
        build_attention("lavo", 32, 4, "cross", global_read=False)
    attn = build_attention("lavo", 32, 4, "causal", num_bases=4)
    with pytest.raises(ValueError, match=r"shape \[B, T, 32\]"):
        attn(torch.randn(1, 5, 24))
    with pytest.raises(TypeError, match="LavoState"):
        attn(torch.randn(1, 5, 32), state=("not", "a", "state"), return_state=True)


def test_dropout_only_in_training(helpers):
    attn = helpers.make("lavo", "causal", **BASE, dropout=0.5)
    x = torch.randn(1, 12, 16, dtype=F64)
    attn.eval()
    torch.testing.assert_close(attn(x), naive(attn, x))
    attn.train()
    assert not torch.allclose(attn(x), attn(x))


def test_bf16_close_to_fp32_and_finite_on_64k_tokens():
    torch.manual_seed(0)
    attn = build_attention("lavo", 32, 2, "causal", num_bases=8, window_size=16).eval()
    with torch.no_grad():
        attn.epe.normal_()
        x = torch.randn(1, 65536, 32)
        y32 = attn(x)
        y16 = copy.deepcopy(attn).to(torch.bfloat16)(x.to(torch.bfloat16))
        _, state = copy.deepcopy(attn).to(torch.bfloat16)(x[:, :40].to(torch.bfloat16), return_state=True)
    assert y16.dtype == torch.bfloat16 and torch.isfinite(y16).all()
    assert state.sum_complete.dtype == state.sum_partial.dtype == torch.float32  # fp32 sums whatever the dtype
    err = (y16.float() - y32).abs()
    scale = y32.abs().max()
    # stated tolerance: max error <= 2% and mean error <= 0.2% of max|y| (bf16 has 8 mantissa bits; measured ~0.5%
    # and ~0.04%: the fp32 sums keep the error from growing with the length)
    assert err.max() <= 0.02 * scale and err.mean() <= 0.002 * scale


@pytest.mark.filterwarnings("ignore:Warning. Profiler clears events")
@pytest.mark.parametrize("pattern", ["causal", "noncausal"])
def test_no_t_by_t_and_no_t_by_w_by_d_tensor(pattern):
    """Every op allocates less than half of a [H, T, w, d] gather (and far less than a [H, T, T] score matrix)."""
    T, H, w, d = 4096, 2, 16, 16
    attn = build_attention("lavo", H * d, H, pattern, num_bases=4, window_size=w)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as prof:
        attn(torch.randn(1, T, H * d))
    largest = max(e.cpu_memory_usage for e in prof.events())
    assert 0 < largest < H * T * w * d * 4 / 2


# ------------------------------------------------------------------------ the memory-lean training path
def _grads(attn, x, mask, g, **kw):
    y = attn(x, mask, **kw)
    inputs = [x] + ([kw["context"]] if "context" in kw else []) + list(attn.parameters())
    return y, torch.autograd.grad((y * g).sum(), inputs, materialize_grads=True)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("config", CONFIGS, ids=_id)
def test_recompute_equals_autograd_kernels_and_reference_across_chunks(helpers, device, config):
    """T = 45 in chunks of 8 queries, padded: the recompute path == the autograd kernels (the previous
    implementation) == the dense float64 reference, outputs and every gradient."""
    pattern, opts = config
    attn = helpers.make("lavo", pattern, **BASE, **opts).to(device)
    B, T = 2, 45
    x = torch.randn(B, T, 16, dtype=F64, device=device, requires_grad=True)
    mask = torch.rand(B, T, device=device) > 0.3
    mask[:, 0] = True
    kw = {}
    if pattern == "cross":
        kw = {"context": torch.randn(B, 30, 16, dtype=F64, device=device, requires_grad=True),
              "context_mask": torch.arange(30, device=device)[None].expand(B, 30) < 25}
    g = torch.randn(B, T, 16, dtype=F64, device=device)
    results = []
    for kernels in ("recompute", "autograd"):
        attn.kernels, attn.chunk_size = kernels, 8
        results.append(_grads(attn, x, mask, g, **kw))
    y_ref = naive(attn.cpu(), x.cpu(), mask.cpu(), **{k: v.cpu() for k, v in kw.items()})
    attn.to(device)
    torch.testing.assert_close(results[0][0].cpu(), y_ref, rtol=1e-9, atol=1e-10)
    for (y, grads), (y2, grads2) in [(results[0], results[1])]:
        torch.testing.assert_close(y, y2, rtol=1e-9, atol=1e-10)
        for a, b in zip(grads, grads2):
            torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("opts", [o for p, o in CONFIGS if p == "causal"], ids=str)
def test_gradients_flow_through_the_streaming_state(helpers, opts):
    """Chunks carrying an undetached state (prefix keys/values, sums) give the full-sequence gradients."""
    attn = helpers.make("lavo", "causal", **BASE, **opts)
    attn.chunk_size = 3
    x = torch.randn(2, 23, 16, dtype=F64, requires_grad=True)
    g = torch.randn(2, 23, 16, dtype=F64)
    full = torch.autograd.grad((attn(x) * g).sum(), [x, *attn.parameters()], materialize_grads=True)
    streamed = helpers.stream(attn, x, [5, 2, 7, 1, 8])
    for a, b in zip(torch.autograd.grad((streamed * g).sum(), [x, *attn.parameters()], materialize_grads=True),
                    full):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-10)


def _saved_storages(attn, x, mask=None, **kw) -> list[int]:
    """Bytes of every distinct storage autograd saves for backward during one forward pass."""
    saved: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        saved[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        attn(x, mask, **kw)
    return list(saved.values())


@pytest.mark.parametrize("pattern, opts", [("causal", {}), ("causal", {"memory_source": "value"}),
                                           ("causal", {"combine": "half", "read_temperature": 0.0}),
                                           ("causal", {"combine": "gain"}),
                                           ("noncausal", {}), ("cross", {})])
def test_nothing_of_size_t_by_w_or_t_by_r_is_saved_for_backward(pattern, opts):
    """Saved: x, q, k, v and the merged output ([T, D] each, at most 5, q, k and v in one [T, 3D] storage; one more
    for the read temperature's scaled q, one more for a learned gain's global branch), per-window tensors
    (<= T D / w: the window means) and the q, k, v projections' joined weight. A
    [T, 2w] score or [T, r] probability tensor per head (2 T D / w bytes here) fails it, as the autograd kernels
    do."""
    B, T, H, d, w, r = 1, 256, 2, 16, 4, 8
    D = H * d
    big = B * T * D * 4
    x = torch.randn(B, T, D, requires_grad=True)
    mask = torch.arange(T)[None] < T - 5 if pattern == "noncausal" else None
    kw = {"context": torch.randn(B, T, D, requires_grad=True)} if pattern == "cross" else {}
    for kernels in ("recompute", "autograd"):
        attn = build_attention("lavo", D, H, pattern, num_bases=r, window_size=w, kernels=kernels, **opts)
        attn.chunk_size = 64
        sizes = _saved_storages(attn, x, mask, **kw)
        limit = 5 + (attn.log_read_temperature is not None) + (attn.learned_gain is not None)
        whole = [s // big for s in sizes if s >= big and s % big == 0]               # [T, D] tensors per storage
        small = [s for s in sizes if s <= big / w or s == 3 * D * D * 4]           # per window; the [3D, D] weight
        lean = sum(whole) <= limit and len(whole) + len(small) == len(sizes)
        assert lean == (kernels == "recompute"), (kernels, sorted(sizes))


def _pair(choice) -> tuple[str, str]:
    """The (window, read) kernels of a choice."""
    return choice.window.name, choice.read.name


def test_kernel_choice_is_made_in_the_layer(monkeypatch):
    """The layer's kernels for its request, dropout and mode, stated here: on CPU the recompute kernels (dropout
    included); on CUDA the flex window beside the recompute read (the path that has run on a GPU), the Triton kernels
    with LAVO_ZOO_TRITON=1 where Triton is installed. Choosing records nothing: a call does (``kernels_used``)."""
    from lavo_zoo.attention.ops.window import flex

    monkeypatch.delenv("LAVO_ZOO_TRITON", raising=False)
    attn = build_attention("lavo", 32, 2, "causal", dropout=0.1).eval()
    q = torch.randn(1, 2, 512, 16)
    assert _pair(attn.choose_kernels(q)) == ("recompute", "recompute")  # CPU: saves inputs, recomputes
    attn.train()
    assert _pair(attn.choose_kernels(q)) == ("recompute", "recompute")  # dropout in training: regenerated in bwd
    autograd = build_attention("lavo", 32, 2, "causal", dropout=0.1, kernels="autograd")
    assert autograd.kernels_used == "autograd"          # before any call: what one would get
    attn.eval()
    attn(torch.randn(1, 3, 32))
    assert attn.kernels_used == "recompute"               # the call's kernels, recorded by the call
    if torch.cuda.is_available():
        monkeypatch.delenv("LAVO_ZOO_FLEX", raising=False)
        monkeypatch.setattr(flex, "_failure", None)
        assert _pair(attn.choose_kernels(q.cuda())) == ("flex", "recompute")
        attn.train()
        assert _pair(attn.choose_kernels(q.cuda())) == ("recompute", "recompute")
        attn.eval()
        monkeypatch.setenv("LAVO_ZOO_TRITON", "1")
        if importlib.util.find_spec("triton") is not None:
            assert _pair(attn.choose_kernels(q.cuda())) == ("triton", "triton")
            assert _pair(attn.choose_kernels(q.cuda().double())) == ("flex", "recompute")  # fp64: no Triton kernel
    with pytest.raises(ValueError, match="kernels must be one of"):
        build_attention("lavo", 32, 2, "causal", kernels="fast")


@pytest.mark.parametrize("combine", ["sum", "gain"])
def test_checkpoints_from_before_the_parameter_renames_load(combine):
    """A state dict that names the read temperature 'read_temp' and the learned gain 'read_gain' (checkpoints written
    before they were renamed) loads strictly into a fresh layer, nested in a model too, and gives its outputs."""
    torch.manual_seed(0)
    old = build_attention("lavo", 32, 2, "causal", num_bases=4, window_size=4, combine=combine, read_temperature=2.0)
    with torch.no_grad():
        for p in old.parameters():
            p.normal_()
    renamed = {"log_read_temperature": "read_temp", "learned_gain": "read_gain"}
    state = {f"attn.{renamed.get(k, k)}": v for k, v in old.state_dict().items()}
    assert "attn.read_temp" in state and ("attn.read_gain" in state) == (combine == "gain")
    new = torch.nn.ModuleDict({"attn": build_attention("lavo", 32, 2, "causal", num_bases=4, window_size=4,
                                                       combine=combine, read_temperature=2.0)})
    new.load_state_dict(state)                                 # strict: no missing or unexpected key
    x = torch.randn(2, 9, 32)
    torch.testing.assert_close(new["attn"](x), old(x), rtol=0, atol=0)


@pytest.mark.slow
@pytest.mark.parametrize("pattern, padded", [("causal", False), ("noncausal", True)])
def test_torch_compile_matches_eager(pattern, padded):
    """One graph (fullgraph: no break, also with a padding mask, whose all-real chunks eager mode skips) and the
    eager outputs and input gradients."""
    torch.manual_seed(0)
    attn = build_attention("lavo", 16, 2, pattern, num_bases=4, window_size=4)
    attn.chunk_size = 8
    x = torch.randn(2, 40, 16, requires_grad=True)
    mask = torch.ones(2, 40, dtype=torch.bool)
    mask[1, 30:] = False
    mask = mask if padded else None
    rows = mask[..., None] if padded else 1.0
    compiled = torch.compile(attn, backend="aot_eager", fullgraph=True)
    y = compiled(x, mask) * rows
    (gx,) = torch.autograd.grad(y.sum(), x)
    y_ref = attn(x, mask) * rows
    (gx_ref,) = torch.autograd.grad(y_ref.sum(), x)
    torch.testing.assert_close(y, y_ref)
    torch.testing.assert_close(gx, gx_ref)
