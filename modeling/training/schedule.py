"""§5.3 Optimizer: the learning-rate schedule of "Attention Is All You Need" (the "Noam" schedule).

    lrate = factor * d_model^-0.5 * min(step_num^-0.5, step_num * warmup_steps^-1.5)

It rises linearly for the first `warmup_steps` updates, peaks at step_num == warmup_steps with
factor * (d_model * warmup_steps)^-0.5, then decays with the inverse square root of the step number.
"""

import torch

NOAM = "noam"


def noam_learning_rate(step: int, d_model: int, warmup_steps: int, factor: float = 1.0) -> float:
    """The learning rate of §5.3 at update number `step` (1-based, as in the paper).

    Step 0 is treated as step 1 (as The Annotated Transformer's `rate` does) so it never divides by zero.
    """
    if d_model <= 0 or warmup_steps <= 0:
        raise ValueError(
            f"The Noam schedule needs d_model > 0 and warmup_steps > 0, got d_model={d_model}, "
            f"warmup_steps={warmup_steps}."
        )
    step = max(step, 1)
    return factor * d_model**-0.5 * min(step**-0.5, step * warmup_steps**-1.5)


def get_noam_schedule(
    optimizer: torch.optim.Optimizer, d_model: int, warmup_steps: int, last_epoch: int = -1
) -> torch.optim.lr_scheduler.LambdaLR:
    """A `LambdaLR` whose multiplier is the Noam rate with factor 1: the optimizer's (base) learning rate is the factor.

    The scheduler's counter is 0 during the first optimizer update, so update k (1-based) uses
    `noam_learning_rate(k)`, exactly the paper's step_num. This is the function the Trainer steps once per
    optimizer update, so it counts updates regardless of gradient accumulation or the number of processes.
    """
    noam_learning_rate(1, d_model, warmup_steps)  # validate the arguments now, not at the first step

    def multiplier(scheduler_step: int) -> float:
        return noam_learning_rate(scheduler_step + 1, d_model, warmup_steps)

    return torch.optim.lr_scheduler.LambdaLR(optimizer, multiplier, last_epoch=last_epoch)


def schedule_description(lr_scheduler_type, learning_rate: float, warmup_steps: int) -> str:
    """The learning-rate schedule (`NOAM`, or a transformers `SchedulerType` or its name) in one line, as a model card
    states it."""
    lr_scheduler = getattr(lr_scheduler_type, "value", lr_scheduler_type)
    if lr_scheduler == NOAM:
        return f"Noam (§5.3): {learning_rate} * d_model^-0.5 * min(step^-0.5, step * {warmup_steps}^-1.5)"
    if lr_scheduler in ("constant", "reduce_lr_on_plateau"):  # transformers' without a warm-up
        return f"{lr_scheduler}, {learning_rate}"
    return f"{lr_scheduler}, peak {learning_rate}, warm-up {warmup_steps} steps"


__all__ = ["NOAM", "get_noam_schedule", "noam_learning_rate", "schedule_description"]
