"""§5.4 label smoothing as the model's loss computes it, checked against a direct computation of the formula.

The Annotated Transformer's `LabelSmoothing`: the target distribution q puts 1 - eps on the gold token and spreads
eps evenly over the other tokens except padding (eps / (V - 2)); the loss is KL(q || p) summed over the target
positions that are not padding, divided by their number (or by the Trainer's `num_items_in_batch`).
"""

import math

import pytest
import torch
import torch.nn.functional as F

from modeling import AnnotatedTransformerConfig, AnnotatedTransformerForConditionalGeneration
from modeling import loss as loss_module
from modeling.loss import label_smoothed_loss

VOCAB, PAD = 12, 0


def smoothed_targets(labels: torch.Tensor, vocab_size: int, epsilon: float, pad_token_id: int) -> torch.Tensor:
    """q as an explicit tensor, row by row, the way The Annotated Transformer builds `true_dist`."""
    q = torch.full((labels.numel(), vocab_size), epsilon / (vocab_size - 2), dtype=torch.float64)
    q[torch.arange(labels.numel()), labels.reshape(-1).clamp(min=0)] = 1 - epsilon
    q[:, pad_token_id] = 0
    return q


def reference_loss(logits, labels, epsilon, pad_token_id=PAD, denominator=None) -> torch.Tensor:
    """sum over non-pad positions of KL(q || softmax(logits)), per non-pad position (or per `denominator`)."""
    logits = logits.reshape(-1, logits.size(-1)).double()
    labels = labels.reshape(-1)
    keep = (labels != -100) & (labels != pad_token_id)
    q = smoothed_targets(labels[keep], logits.size(-1), epsilon, pad_token_id)
    log_p = F.log_softmax(logits[keep], dim=-1)
    total = F.kl_div(log_p, q, reduction="sum")  # sum q * (log q - log p), with 0 log 0 = 0
    return total / (denominator if denominator is not None else keep.sum())


def tiny_model(label_smoothing: float, seed: int = 0) -> AnnotatedTransformerForConditionalGeneration:
    torch.manual_seed(seed)
    config = AnnotatedTransformerConfig.from_preset(
        "tiny", vocab_size=VOCAB, d_model=32, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=32,
        dropout=0.0, label_smoothing=label_smoothing,
    )
    return AnnotatedTransformerForConditionalGeneration(config).eval()


def batch():
    generator = torch.Generator().manual_seed(1)
    input_ids = torch.randint(4, VOCAB, (3, 6), generator=generator)
    labels = torch.randint(4, VOCAB, (3, 5), generator=generator)
    labels[:, -1] = 2  # </s>
    labels[1, 3:] = -100  # padded as DataCollatorForSeq2Seq pads labels
    labels[2, 4:] = PAD  # padded with the pad id (tokenizer padding): also excluded
    return input_ids, labels


@pytest.mark.parametrize("epsilon", [0.1, 0.3])
def test_model_loss_equals_the_kl_formula(epsilon):
    model = tiny_model(epsilon)
    input_ids, labels = batch()
    with torch.no_grad():
        output = model(input_ids=input_ids, labels=labels)
    expected = reference_loss(output.logits, labels, epsilon)
    assert output.loss.item() == pytest.approx(expected.item(), rel=1e-5)


def test_num_items_in_batch_divides_the_summed_loss():
    """What the Trainer passes under gradient accumulation / DDP: the token count of the whole accumulated batch."""
    model = tiny_model(0.1)
    input_ids, labels = batch()
    with torch.no_grad():
        mean = model(input_ids=input_ids, labels=labels)
        per_40 = model(input_ids=input_ids, labels=labels, num_items_in_batch=torch.tensor(40))
    tokens = ((labels != -100) & (labels != PAD)).sum().item()
    expected = reference_loss(mean.logits, labels, 0.1, denominator=40).item()
    assert per_40.loss.item() == pytest.approx(expected, rel=1e-5)
    assert per_40.loss.item() == pytest.approx(mean.loss.item() * tokens / 40, rel=1e-5)


def test_padding_positions_do_not_contribute():
    model = tiny_model(0.1)
    input_ids, labels = batch()
    with torch.no_grad():
        logits = model(input_ids=input_ids, labels=labels).logits
    # Changing the logits at excluded positions (-100 and padding labels) leaves the model's loss unchanged...
    changed = logits.clone()
    excluded = (labels == -100) | (labels == PAD)
    assert excluded.sum() == 3
    changed[excluded] = torch.randn_like(changed[excluded]) * 10
    loss_sum, tokens = label_smoothed_loss(logits, labels, 0.1, PAD)
    changed_sum, changed_tokens = label_smoothed_loss(changed, labels, 0.1, PAD)
    assert changed_sum.item() == pytest.approx(loss_sum.item(), rel=1e-6) and changed_tokens == tokens == 15 - 3
    # ...while changing one kept position does change it.
    changed[0, 0] += torch.randn(VOCAB) * 10
    assert label_smoothed_loss(changed, labels, 0.1, PAD)[0].item() != pytest.approx(loss_sum.item(), rel=1e-3)


def test_zero_smoothing_is_cross_entropy_over_non_pad_tokens():
    model = tiny_model(0.0)
    input_ids, labels = batch()
    with torch.no_grad():
        output = model(input_ids=input_ids, labels=labels)
    ignored = labels.masked_fill(labels == PAD, -100)
    expected = F.cross_entropy(output.logits.reshape(-1, VOCAB), ignored.reshape(-1), ignore_index=-100)
    assert output.loss.item() == pytest.approx(expected.item(), rel=1e-5)


# ---- edge cases on the loss function itself, with logits chosen by hand --------------------------------------------


def loss_for(logits: torch.Tensor, labels: torch.Tensor, epsilon: float) -> float:
    """The per-token loss that `forward` computes, on hand-chosen logits."""
    total, count = label_smoothed_loss(logits, labels, epsilon, PAD)
    return (total / count).item()


def test_uniform_prediction_costs_log_v_minus_the_target_entropy():
    epsilon, labels = 0.1, torch.tensor([[5, 7, 2]])
    uniform = torch.zeros(1, 3, VOCAB)
    target_neg_entropy = (1 - epsilon) * math.log(1 - epsilon) + epsilon * math.log(epsilon / (VOCAB - 2))
    expected = target_neg_entropy + math.log(VOCAB)  # KL(q || uniform) = sum q log q + log V
    assert loss_for(uniform, labels, epsilon) == pytest.approx(expected, rel=1e-6)
    assert loss_for(uniform, labels, epsilon) == pytest.approx(reference_loss(uniform, labels, epsilon).item())


def test_one_hot_target_with_uniform_prediction_is_log_v():
    """epsilon = 0: q is one-hot, the loss is the cross-entropy, log V for a uniform prediction."""
    assert loss_for(torch.zeros(1, 4, VOCAB), torch.tensor([[4, 5, 6, 2]]), 0.0) == pytest.approx(math.log(VOCAB))


def test_prediction_equal_to_the_smoothed_target_costs_zero():
    epsilon, labels = 0.1, torch.tensor([[5, 9, 2]])
    q = smoothed_targets(labels, VOCAB, epsilon, PAD).float()
    logits = torch.log(q.clamp(min=1e-30)).reshape(1, 3, VOCAB)  # p = q, the pad column ~0
    assert loss_for(logits, labels, epsilon) == pytest.approx(0.0, abs=1e-5)
    # and any other prediction costs more (KL >= 0 with equality only at p = q)
    assert loss_for(logits + torch.randn_like(logits), labels, epsilon) > 1e-3


def test_confident_one_hot_prediction_is_penalised_by_smoothing():
    """The point of §5.4: a one-hot prediction has ~0 loss without smoothing, a large one with it."""
    labels = torch.tensor([[5, 9, 2]])
    confident = torch.full((1, 3, VOCAB), -20.0)
    confident[0, torch.arange(3), labels[0]] = 20.0
    assert loss_for(confident, labels, 0.0) == pytest.approx(0.0, abs=1e-6)
    smoothed = loss_for(confident, labels, 0.1)
    assert smoothed > 1.0
    assert smoothed == pytest.approx(reference_loss(confident, labels, 0.1).item(), rel=1e-5)


@pytest.mark.parametrize("epsilon", [1.0, -0.5, float("nan")])
def test_a_smoothing_outside_its_range_given_when_loading_is_refused(epsilon, tmp_path):
    """`from_pretrained(folder, label_smoothing=...)` sets the value after the config's own checks; the model runs
    them again (log(1 - 1) in the loss would be a bare "math domain error")."""
    AnnotatedTransformerForConditionalGeneration(AnnotatedTransformerConfig(vocab_size=20, d_model=8,
                                                 encoder_attention_heads=2, decoder_attention_heads=2)
                                                 ).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match=r"`label_smoothing` must be in \[0, 1\)"):
        AnnotatedTransformerForConditionalGeneration.from_pretrained(tmp_path, label_smoothing=epsilon)


# ---- the fused loss's gradient ---------------------------------------------------------------------------------------


def labels_with_ignored_rows(rows: int, seed: int = 2) -> torch.Tensor:
    labels = torch.randint(1, VOCAB, (rows,), generator=torch.Generator().manual_seed(seed))
    labels[1], labels[4] = -100, PAD  # an ignored row and a padding row: no loss, no gradient
    return labels


@pytest.mark.parametrize("epsilon", [0.0, 0.1])
@pytest.mark.parametrize("chunk_rows", [3, 100])
def test_gradient_equals_the_formula_gradient(epsilon, chunk_rows, monkeypatch):
    """The fused backward (softmax - q, chunk by chunk) against autograd through the explicit KL formula; chunks of
    3 rows split the 7 rows unevenly."""
    monkeypatch.setattr(loss_module, "_loss_chunk_rows", lambda logits: chunk_rows)
    labels = labels_with_ignored_rows(7)
    logits = torch.randn(7, VOCAB, dtype=torch.float64, generator=torch.Generator().manual_seed(3)) * 3
    fused_logits, reference_logits = logits.clone().requires_grad_(), logits.clone().requires_grad_()
    total, count = label_smoothed_loss(fused_logits, labels, epsilon, PAD)
    (total / count).backward()
    reference_loss(reference_logits, labels, epsilon).backward()
    assert (total / count).item() == pytest.approx(reference_loss(logits, labels, epsilon).item(), rel=1e-12)
    torch.testing.assert_close(fused_logits.grad, reference_logits.grad, rtol=1e-10, atol=1e-12)
    assert fused_logits.grad[[1, 4]].abs().max() == 0
    assert torch.autograd.gradcheck(lambda x: label_smoothed_loss(x, labels, epsilon, PAD)[0], (fused_logits,))


def test_bf16_logits_are_scored_in_float32():
    """bf16 logits (autocast on a GPU): the loss is the float32 loss of the same values, the gradient bf16."""
    labels = labels_with_ignored_rows(9)
    logits = (torch.randn(9, VOCAB, generator=torch.Generator().manual_seed(4)) * 4).bfloat16().requires_grad_()
    total, _ = label_smoothed_loss(logits, labels, 0.1, PAD)
    as_float = logits.detach().float().requires_grad_()
    expected, _ = label_smoothed_loss(as_float, labels, 0.1, PAD)
    assert total.dtype == torch.float32 and total.item() == pytest.approx(expected.item(), rel=1e-6)
    total.backward()
    expected.backward()
    assert logits.grad.dtype == torch.bfloat16
    torch.testing.assert_close(logits.grad.float(), as_float.grad, rtol=1e-2, atol=1e-3)


def test_the_training_forward_compiles_as_one_graph_for_every_target_length():
    """`--torch_compile` (or torch.compile(model)) traces the loss without a graph break, and batches of other
    target lengths reuse the graph made dynamic after the second length (no graph per number of rows)."""
    from torch._dynamo.testing import CompileCounter

    model = tiny_model(0.1).train()
    input_ids, labels = batch()
    torch._dynamo.reset()
    explanation = torch._dynamo.explain(model)(input_ids=input_ids, labels=labels)
    assert explanation.graph_break_count == 0, explanation.break_reasons
    assert explanation.graph_count == 1
    torch._dynamo.reset()
    counter = CompileCounter()
    compiled = torch.compile(model, backend=counter)
    for length in range(3, 9):
        labels = torch.randint(4, VOCAB, (3, length), generator=torch.Generator().manual_seed(length))
        compiled(input_ids=input_ids, labels=labels).loss.backward()
    assert counter.frame_count <= 2
    torch._dynamo.reset()


@pytest.mark.parametrize("epsilon", [0.0, 0.1])
def test_second_derivatives(epsilon):
    """create_graph=True (a gradient penalty, Hessian-vector products) differentiates the gradient itself."""
    labels = labels_with_ignored_rows(5)
    logits = torch.randn(5, VOCAB, dtype=torch.float64, generator=torch.Generator().manual_seed(5)).requires_grad_()
    assert torch.autograd.gradgradcheck(lambda x: label_smoothed_loss(x, labels, epsilon, PAD)[0], (logits,))


def test_torch_func_grad_equals_autograd():
    labels = labels_with_ignored_rows(6)
    logits = torch.randn(6, VOCAB, dtype=torch.float64, generator=torch.Generator().manual_seed(6))
    functional = torch.func.grad(lambda x: label_smoothed_loss(x, labels, 0.1, PAD)[0])(logits)
    leaf = logits.clone().requires_grad_()
    label_smoothed_loss(leaf, labels, 0.1, PAD)[0].backward()
    torch.testing.assert_close(functional, leaf.grad)


def test_non_finite_logits_of_ignored_rows_stay_out_of_the_loss():
    """As `F.cross_entropy` ignores them: an ignored row's inf does not turn the loss into NaN."""
    labels = labels_with_ignored_rows(6)
    logits = torch.randn(6, VOCAB, generator=torch.Generator().manual_seed(7))
    logits[1, 3], logits[4, 5] = float("inf"), float("nan")  # row 1 is -100, row 4 padding
    for epsilon in (0.0, 0.1):
        total, _ = label_smoothed_loss(logits, labels, epsilon, PAD)
        assert torch.isfinite(total)
    expected = F.cross_entropy(logits, labels.masked_fill(labels == PAD, -100), reduction="sum")
    assert label_smoothed_loss(logits, labels, 0.0, PAD)[0].item() == pytest.approx(expected.item(), rel=1e-6)


@pytest.mark.parametrize("label_padding", [PAD, -100])
def test_the_trainer_warns_when_its_token_count_includes_padded_labels(label_padding, tmp_path, caplog):
    """The Trainer divides the summed loss by its `num_items_in_batch`, every label but -100: labels padded with the
    pad id, which the loss leaves out, are counted there, so training with them says so, once."""
    from transformers import Seq2SeqTrainer, Seq2SeqTrainingArguments

    input_ids, labels = batch()
    labels = labels.masked_fill((labels == -100) | (labels == PAD), label_padding)
    rows = [dict(input_ids=source, labels=target) for source, target in zip(input_ids, labels)]
    args = Seq2SeqTrainingArguments(
        tmp_path, max_steps=2, per_device_train_batch_size=3, report_to="none", use_cpu=True, save_strategy="no",
    )
    with caplog.at_level("WARNING"):
        Seq2SeqTrainer(model=tiny_model(0.1).train(), args=args, train_dataset=rows).train()
    warnings = [record for record in caplog.records if "num_items_in_batch" in record.getMessage()]
    assert len(warnings) == (1 if label_padding == PAD else 0)


def test_labels_that_do_not_fit_the_decoder_inputs_are_named():
    input_ids, labels = batch()
    with pytest.raises(ValueError, match=r"`labels` has shape \(3, 5\), but the decoder inputs are .* \(3, 4\)"):
        tiny_model(0.1)(input_ids=input_ids, labels=labels, decoder_input_ids=labels[:, :4].clamp(min=0))
