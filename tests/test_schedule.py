"""§5.3 learning-rate schedule (Noam): the formula, its peak, step 0, and the LambdaLR the Trainer steps."""

import math

import pytest
import torch

from modeling.training.schedule import get_noam_schedule, noam_learning_rate


@pytest.mark.parametrize(
    "step, expected",
    [
        # d_model=512, warmup=4000 (the paper's base model): linear warm-up, then step^-0.5 decay.
        (1, 512**-0.5 * 4000**-1.5),
        (100, 512**-0.5 * 100 * 4000**-1.5),
        (4000, 512**-0.5 * 4000**-0.5),
        (16000, 512**-0.5 * 16000**-0.5),
        (100000, 512**-0.5 * 100000**-0.5),
    ],
)
def test_noam_values_match_the_paper_formula(step, expected):
    assert noam_learning_rate(step, d_model=512, warmup_steps=4000) == pytest.approx(expected, rel=1e-12)


def test_known_numbers_for_the_base_model():
    # Peak of the paper's base model: (512 * 4000)^-0.5 = 6.9877e-4.
    assert noam_learning_rate(4000, 512, 4000) == pytest.approx(6.98771242e-4, rel=1e-8)
    assert noam_learning_rate(1000, 512, 4000) == pytest.approx(1.74692811e-4, rel=1e-8)
    assert noam_learning_rate(8000, 512, 4000, factor=2.0) == pytest.approx(2 * 4.94105884e-4, rel=1e-8)


def test_peak_is_at_warmup():
    rates = [noam_learning_rate(step, 64, 400) for step in range(1, 2000)]
    assert max(range(len(rates)), key=rates.__getitem__) + 1 == 400
    assert all(a < b for a, b in zip(rates[:399], rates[1:400]))  # strictly rising during warm-up
    assert all(a > b for a, b in zip(rates[399:], rates[400:]))  # strictly decaying afterwards


def test_step_zero_does_not_divide_by_zero():
    assert noam_learning_rate(0, 512, 4000) == noam_learning_rate(1, 512, 4000)
    assert math.isfinite(noam_learning_rate(0, 512, 4000)) and noam_learning_rate(0, 512, 4000) > 0


def test_factor_scales_linearly():
    assert noam_learning_rate(123, 256, 100, factor=0.5) == pytest.approx(0.5 * noam_learning_rate(123, 256, 100))


@pytest.mark.parametrize("d_model, warmup", [(0, 10), (512, 0)])
def test_invalid_arguments_are_named(d_model, warmup):
    with pytest.raises(ValueError, match="warmup_steps"):
        noam_learning_rate(10, d_model, warmup)
    with pytest.raises(ValueError, match="d_model"):
        get_noam_schedule(torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0), d_model, warmup)


def test_lambda_lr_gives_update_k_the_rate_of_step_k():
    parameter = torch.nn.Parameter(torch.zeros(3))
    factor = 2.0  # the optimizer's learning rate is the Noam factor
    optimizer = torch.optim.Adam([parameter], lr=factor, betas=(0.9, 0.98), eps=1e-9)
    scheduler = get_noam_schedule(optimizer, d_model=64, warmup_steps=10)
    used = []
    for _ in range(30):
        used.append(optimizer.param_groups[0]["lr"])  # the rate this update is taken with
        parameter.grad = torch.ones(3)
        optimizer.step()
        scheduler.step()
    expected = [noam_learning_rate(k, 64, 10, factor=factor) for k in range(1, 31)]
    assert used == pytest.approx(expected, rel=1e-12)
    assert max(range(30), key=used.__getitem__) + 1 == 10


def test_schedule_state_round_trips_for_resume():
    parameter = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.Adam([parameter], lr=1.0)
    scheduler = get_noam_schedule(optimizer, 64, 10)
    for _ in range(7):
        optimizer.step()
        scheduler.step()
    state = scheduler.state_dict()
    resumed_optimizer = torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    resumed = get_noam_schedule(resumed_optimizer, 64, 10)
    resumed.load_state_dict(state)
    resumed_optimizer.step()
    resumed.step()
    optimizer.step()
    scheduler.step()
    assert resumed.get_last_lr() == scheduler.get_last_lr() == [pytest.approx(noam_learning_rate(9, 64, 10))]
