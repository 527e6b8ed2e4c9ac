import pytest
import torch
import torch.nn.functional as F

from lavo_zoo.nn.losses import chunked_cross_entropy


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_chunked_cross_entropy_equals_full(reduction):
    torch.manual_seed(0)
    hidden = torch.randn(3, 11, 16, requires_grad=True)
    weight = torch.randn(50, 16, requires_grad=True)
    targets = torch.randint(0, 50, (3, 11))
    targets[0, :3] = -100
    ours = chunked_cross_entropy(hidden, weight, targets, chunk_size=4, reduction=reduction)
    ref = F.cross_entropy((hidden @ weight.t()).reshape(-1, 50), targets.reshape(-1), reduction=reduction)
    torch.testing.assert_close(ours, ref.view_as(ours), rtol=1e-5, atol=1e-6)
    g_ours = torch.autograd.grad(ours.sum(), (hidden, weight))
    g_ref = torch.autograd.grad(ref.sum(), (hidden, weight))
    for a, b in zip(g_ours, g_ref):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_chunked_cross_entropy_rejects_mismatched_shapes():
    with pytest.raises(ValueError, match="disagree"):
        chunked_cross_entropy(torch.randn(2, 5, 4), torch.randn(7, 4), torch.zeros(2, 4, dtype=torch.long))
