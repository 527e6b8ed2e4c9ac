"""The shared attention pieces: one KV cache type whose reorder serves beam search, head split/merge."""
import pytest
import torch

from lavo_zoo.attention import build_attention
from lavo_zoo.attention.common import KVCache, merge_heads, split_heads


@pytest.mark.parametrize("name,options", [("sdpa", {}), ("sdpa", {"rope": True}), ("vanilla", {}),
                                          ("local", {"window_size": 3})])
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
