"""The accuracy evaluator (evaluators/classification.py) against a direct count: accuracy, per-class accuracy, the
confusion matrix."""
import pytest
import torch

from lavo_zoo.evaluators import build_evaluator


def test_accuracy_evaluator_against_a_direct_count() -> None:
    torch.manual_seed(1)
    ev = build_evaluator("accuracy", num_classes=3)
    logits, labels = torch.randn(50, 3), torch.randint(0, 3, (50,))
    ev.update(logits[:20], labels[:20])
    ev.update(logits[20:], labels[20:])
    pred = logits.argmax(1).tolist()
    assert ev.compute()["accuracy"] == pytest.approx(sum(p == t for p, t in zip(pred, labels.tolist())) / 50)
    d = ev.details()
    for c in range(3):
        rows = [i for i in range(50) if labels[i] == c]
        assert d["per_class_accuracy"][str(c)] == pytest.approx(sum(pred[i] == c for i in rows) / len(rows))
        assert d["confusion_matrix"][c] == [sum(pred[i] == k for i in rows) for k in range(3)]
    with pytest.raises(ValueError, match="outside the evaluator's 3 classes"):
        ev.update(torch.tensor([3]), torch.tensor([0]))
