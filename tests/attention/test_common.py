"""The shared attention pieces: one KV cache type whose reorder serves beam search, head split/merge, landmarks
(segment means) counted over the real tokens."""
import pytest
import torch

from lavo_zoo.attention import ATTENTIONS, attention_class, build_attention
from lavo_zoo.attention.common import KVCache, merge_heads, segment_means, split_heads
from lavo_zoo.attention.registry import option_defaults
from tests.attention.mechanism_testing import small_options


def _kv_cache_users() -> list[tuple[str, dict]]:
    """Every registered mechanism whose causal decoding state is the shared KVCache, on its defaults and its test
    options."""
    users = []
    for name in ATTENTIONS.names():
        cls = attention_class(name)
        if "causal" in cls.patterns and cls.streaming:
            _, state = build_attention(name, 16, 2, "causal")(torch.zeros(1, 1, 16), return_state=True)
            if isinstance(state, KVCache):
                users += [(name, {})] + ([(name, small_options(name, "causal"))] if cls.test_options else [])
    return users


@pytest.mark.parametrize("name,options", _kv_cache_users())
def test_reordered_cache_continues_the_selected_rows(name, options):
    """Beam search: after reorder(index), the next chunk continues rows index[i] exactly as if those sequences had
    been run from the start."""
    torch.manual_seed(0)
    attn = build_attention(name, 16, 2, "causal", **options).eval()
    x = torch.randn(3, 9, 16)
    index = torch.tensor([2, 0, 0, 1])
    _, cache = attn(x[:, :6], return_state=True)
    assert isinstance(cache, KVCache) and cache.position == 6
    y, cache = attn(x[index, 6:], state=cache.reorder(index), return_state=True)
    torch.testing.assert_close(y, attn(x[index])[:, 6:], rtol=1e-5, atol=1e-5)
    assert cache.position == 9 and cache.keys.shape[0] == 4


def test_split_and_merge_heads_are_inverse_and_order_channels_by_head():
    t = torch.arange(2 * 3 * 8.0).view(2, 3, 8)
    h = split_heads(t, 4)  # [2, 4, 3, 2]
    assert h.shape == (2, 4, 3, 2) and torch.equal(h[1, 2, 0], t[1, 0, 4:6])
    assert torch.equal(merge_heads(h), t)


def test_a_cache_of_another_batch_is_refused():
    attn = build_attention("sdpa", 16, 2, "causal")
    _, cache = attn(torch.randn(2, 4, 16), return_state=True)
    with pytest.raises(ValueError, match="batch"):
        attn(torch.randn(3, 1, 16), state=cache, return_state=True)


def test_segment_means_count_the_real_tokens_only():
    """Landmarks of a row padded in front, inside and behind are the row alone's: its i-th real token of n lies in
    segment floor(i C / n), checked against a loop over the real tokens."""
    torch.manual_seed(0)
    x = torch.randn(2, 3, 23, 4, dtype=torch.float64)           # [B, H, T, d]
    mask = torch.ones(2, 23, dtype=torch.bool)
    mask[1, :3] = mask[1, 9:11] = mask[1, 20:] = False          # row 1: 15 real tokens
    means, valid = segment_means(x, mask, 6)
    real = x[1][:, mask[1]]                                      # [H, 15, d]
    alone, alone_valid = segment_means(real[None], None, 6)
    torch.testing.assert_close(means[1], alone[0])
    loop = torch.stack([real[:, [i for i in range(15) if i * 6 // 15 == c]].mean(1) for c in range(6)], 1)
    torch.testing.assert_close(means[1], loop)
    assert valid.all() and alone_valid.all()
    few, few_valid = segment_means(x, mask, 20)                 # 20 segments, 15 real tokens: 15 of them used
    assert few_valid[1].tolist() == [True] * 15 + [False] * 5
    torch.testing.assert_close(few[1, :, :15], real)


# every registered mechanism with landmarks (a num_landmarks option), in each of its patterns beyond causal
LANDMARKS = [(n, p) for n in ATTENTIONS.names() if "num_landmarks" in option_defaults(attention_class(n))
             for p in attention_class(n).patterns if p != "causal"]


@pytest.mark.parametrize("name, pattern", LANDMARKS)
def test_landmark_mechanisms_give_a_padded_row_the_row_alone(name, pattern):
    """With fewer landmarks than tokens (6 < 29), a row padded behind or in front gives the row alone's outputs
    (the mechanism's other test options as it declares them)."""
    torch.manual_seed(0)
    opts = {**small_options(name, pattern), "num_landmarks": 6}
    attn = build_attention(name, 16, 2, pattern, **opts).double().eval()
    n, pad = 29, 5
    for real in (slice(0, n), slice(pad, pad + n)):
        mask = torch.zeros(1, n + pad, dtype=torch.bool)
        mask[0, real] = True
        seq = torch.randn(1, n + pad, 16, dtype=torch.float64)
        if pattern == "cross":
            x = torch.randn(1, 7, 16, dtype=torch.float64)
            got, alone = attn(x, context=seq, context_mask=mask), attn(x, context=seq[:, real])
        else:
            got, alone = attn(seq, mask)[:, real], attn(seq[:, real])
        torch.testing.assert_close(got, alone, rtol=1e-9, atol=1e-10)
