import pytest
import torch
import torch.nn.functional as F

from lavo_zoo.nn.losses import chunked_cross_entropy, label_smoothed_cross_entropy


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


def _smoothed_reference(logits: torch.Tensor, targets: torch.Tensor, epsilon: float, ignore: int) -> torch.Tensor:
    """-sum_v q_v log p_v per token with q = 1 - eps on the target and eps / (V - 1) on each other class."""
    V = logits.shape[-1]
    q = torch.full_like(logits, epsilon / (V - 1))
    q.scatter_(-1, targets.clamp(min=0)[..., None], 1.0 - epsilon)
    loss = -(q * logits.log_softmax(-1)).sum(-1)
    return loss.masked_fill(targets == ignore, 0.0)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("head", [False, True])
def test_label_smoothed_cross_entropy_equals_the_smoothed_distribution(reduction: str, head: bool) -> None:
    torch.manual_seed(0)
    hidden = torch.randn(3, 7, 8, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(13, 8, dtype=torch.float64, requires_grad=True)
    targets = torch.randint(1, 13, (3, 7))
    targets[1, 4:] = 0  # padding
    logits = hidden @ weight.t()
    x, kw = (hidden, {"weight": weight}) if head else (logits, {})
    loss, nll = label_smoothed_cross_entropy(x, targets, 0.1, ignore_index=0, reduction=reduction, chunk_size=4, **kw)
    per_token = _smoothed_reference(logits, targets, 0.1, 0)
    per_nll = F.cross_entropy(logits.transpose(1, 2), targets, ignore_index=0, reduction="none")
    n_real = (targets != 0).sum()
    ref = {"none": per_token, "sum": per_token.sum(), "mean": per_token.sum() / n_real}[reduction]
    ref_nll = {"none": per_nll, "sum": per_nll.sum(), "mean": per_nll.sum() / n_real}[reduction]
    torch.testing.assert_close(loss, ref, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(nll, ref_nll, rtol=1e-10, atol=1e-12)
    grads = torch.autograd.grad(loss.sum(), (hidden, weight), retain_graph=True)
    for a, b in zip(grads, torch.autograd.grad(ref.sum(), (hidden, weight))):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_label_smoothing_zero_is_cross_entropy_and_padding_is_ignored() -> None:
    torch.manual_seed(1)
    logits = torch.randn(4, 9, 6)
    targets = torch.randint(0, 6, (4, 9))
    targets[2] = -100
    loss, nll = label_smoothed_cross_entropy(logits, targets, 0.0)
    torch.testing.assert_close(loss, F.cross_entropy(logits.reshape(-1, 6), targets.reshape(-1)))
    torch.testing.assert_close(nll, loss)
    changed = logits.clone()
    changed[2] = 100 * torch.randn(9, 6)  # what is at padded positions never matters
    torch.testing.assert_close(label_smoothed_cross_entropy(changed, targets, 0.2)[0],
                               label_smoothed_cross_entropy(logits, targets, 0.2)[0])
    with pytest.raises(ValueError, match="epsilon"):
        label_smoothed_cross_entropy(logits, targets, 1.0)
