"""Learning-rate schedules against their closed forms, and the optimiser's decay groups."""
import math

import pytest
import torch

from lavo_zoo.engine.optim import build_optimizer, build_scheduler
from lavo_zoo.engine.run_config import TrainConfig


def lrs(cfg: TrainConfig, steps: int, steps_per_epoch: int = 10) -> list[float]:
    model = torch.nn.Linear(2, 2)
    opt = build_optimizer(model, cfg)
    sched = build_scheduler(opt, cfg, steps_per_epoch)
    out = []
    for _ in range(steps):
        out.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return out


def test_inverse_sqrt_matches_fairseq():
    cfg = TrainConfig(lr=1e-3, schedule="inverse_sqrt", warmup_steps=4, warmup_init_lr=1e-7)
    got = lrs(cfg, 12)
    for step, lr in enumerate(got):  # the lr used by update number step+1
        want = (1e-7 + (1e-3 - 1e-7) * (step + 1) / 4) if step < 4 else 1e-3 * math.sqrt(4) / math.sqrt(step + 1)
        assert lr == pytest.approx(want, rel=1e-9)


def test_exponential_halves_each_epoch_and_step_decay():
    got = lrs(TrainConfig(lr=1.0, schedule="exponential", decay_gamma=0.5), 25, steps_per_epoch=10)
    assert got[:10] == [1.0] * 10 and got[10:20] == [0.5] * 10 and got[20] == 0.25
    got = lrs(TrainConfig(lr=1.0, schedule="step", decay_gamma=0.1, decay_steps=3), 7)
    assert got == pytest.approx([1, 1, 1, 0.1, 0.1, 0.1, 0.01])


def test_cosine_reaches_min_lr():
    got = lrs(TrainConfig(lr=1.0, schedule="cosine", warmup_steps=2, min_lr=0.1, max_steps=12), 13)
    assert got[0] == pytest.approx(0.5) and got[1] == pytest.approx(1.0)
    assert got[7] == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 0.5)))
    assert got[12] == pytest.approx(0.1)


def test_weight_decay_skips_biases_and_adam_choice():
    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.LayerNorm(3))
    opt = build_optimizer(model, TrainConfig(weight_decay=0.1, betas=[0.8, 0.9], eps=1e-6))
    assert isinstance(opt, torch.optim.AdamW)
    decayed, plain = opt.param_groups
    assert decayed["weight_decay"] == 0.1 and [p.dim() for p in decayed["params"]] == [2]
    assert plain["weight_decay"] == 0.0 and all(p.dim() == 1 for p in plain["params"])
    assert decayed["betas"] == (0.8, 0.9) and decayed["eps"] == 1e-6
    assert type(build_optimizer(model, TrainConfig(optimizer="adam"))) is torch.optim.Adam


def test_a_parameter_marked_no_weight_decay_is_not_decayed():
    """The generic opt-out (e.g. LAVO's bases with bases_decay=False): a 2-D parameter with ``no_weight_decay``."""
    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Linear(3, 3))
    model[1].weight.no_weight_decay = True
    decayed, plain = build_optimizer(model, TrainConfig(weight_decay=0.1)).param_groups
    assert [p is model[0].weight for p in decayed["params"]] == [True]
    assert any(p is model[1].weight for p in plain["params"]) and plain["weight_decay"] == 0.0
