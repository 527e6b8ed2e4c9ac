"""``lavo-zoo bench lm``: config overrides reach the model, and LAVO's kernels are recorded for training and eval."""
from __future__ import annotations

from lavo_zoo.bench.lm import measure


def test_overrides_apply_and_lavo_kernels_are_recorded():
    plain = measure("lm/tiny-lavo", 64, 1, "cpu")
    assert plain["attention"] == "lavo" and plain["train_tokens_per_s"] > 0 and plain["eval_tokens_per_s"] > 0
    assert (plain["train_kernels"], plain["eval_kernels"]) == ("recompute", "recompute")  # CPU, no attention dropout
    dropped = measure("lm/tiny-lavo", 64, 1, "cpu", ("model.attention.dropout=0.1",))
    assert (dropped["train_kernels"], dropped["eval_kernels"]) == ("recompute", "recompute")  # dropout inside them
    assert "train_kernels" not in measure("lm/tiny-sdpa", 64, 1, "cpu")


def _autocast_seen(config: str, overrides: tuple[str, ...]) -> tuple[dict, set]:
    """measure()'s record and whether CPU autocast was on (and to which dtype) in every module forward it ran."""
    import torch

    seen = set()
    hook = torch.nn.modules.module.register_module_forward_pre_hook(
        lambda module, args: seen.add((torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu"))))
    try:
        record = measure(config, 32, 1, "cpu", overrides)
    finally:
        hook.remove()
    return record, seen


def test_steps_run_in_the_configs_training_precision():
    """train.precision=bf16 times every forward under bf16 autocast (fp32 weights), as the trainer trains; the
    default on CPU ('auto') is fp32 without autocast. The config's dropout is kept (not zeroed)."""
    import torch

    record, seen = _autocast_seen("lm/tiny-sdpa", ("train.precision=bf16", "model.dropout=0.2"))
    assert record["precision"] == "bf16-autocast" and seen == {(True, torch.bfloat16)}
    assert record["dropout"] == 0.2 and record["attention_dropout"] == 0.0
    record, seen = _autocast_seen("lm/tiny-sdpa", ())
    assert record["precision"] == "fp32" and {enabled for enabled, _ in seen} == {False}
