"""§5.4 label smoothing: the label-smoothed cross-entropy of the generating head, fused into one autograd function.

Travels with the model (relative import of modeling_annotated_transformer.py).
"""

import math

import torch


def _loss_chunk_rows(logits: torch.Tensor) -> int:
    """Rows of logits the loss reads at a time, in float32: 4 MiB on a CPU (its passes over a chunk stay in cache),
    256 MiB elsewhere (few kernel launches; the float32 copies of bf16 logits stay bounded)."""
    elements = 2**20 if logits.device.type == "cpu" else 2**26
    return max(1, elements // logits.size(-1))


def _loss_chunks(logits: torch.Tensor) -> list[slice]:
    """The row ranges the loss goes through, one after the other. Under torch.compile a single one: the graph then
    holds no loop whose length depends on the number of rows (each new length would be a new graph), and the
    compiler fuses the passes itself."""
    if torch.compiler.is_compiling():
        return [slice(None)]
    step = _loss_chunk_rows(logits)
    return [slice(start, start + step) for start in range(0, logits.size(0), step)]


def _smoothing_weight(epsilon: float, vocab_size: int, pad_token_id: int | None) -> float:
    """q's weight on each token other than the gold one and padding: epsilon / (V - 2) (V - 1 without padding)."""
    return 0.0 if epsilon == 0 else epsilon / (vocab_size - 1 - (pad_token_id is not None))


def _smoothed_targets(like: torch.Tensor, gold_ids, epsilon: float, smooth: float, pad_token_id):
    """q as a tensor shaped `like` (for the differentiable gradient only): 1 - epsilon on the gold token, `smooth` on
    the others, 0 on padding."""
    targets = torch.full_like(like, smooth)
    if smooth and pad_token_id is not None:
        targets[:, pad_token_id] = 0
    return targets.scatter(-1, gold_ids.unsqueeze(-1), 1 - epsilon)


class LabelSmoothedCrossEntropy(torch.autograd.Function):
    """The summed loss of `label_smoothed_loss` over rows of logits, and its gradient, fused.

    With log p = logits - lse (lse: each row's log-sum-exp), q's weights 1 - epsilon (gold) and s = epsilon / (V - 2)
    (every other token but padding), and sum_v q_v = 1, a kept row's loss is
        sum_v q_v log q_v + lse - (1 - epsilon) logit_gold - s * (sum_v logit_v - logit_gold - logit_pad)
    and its gradient softmax(logits) - q. Forward reads the logits once per chunk of rows (see `_loss_chunks`) for
    lse and the row sums, in float32 for bf16/fp16 logits; backward writes the gradient chunk by chunk. Nothing of
    the logits' size is kept or built beside the gradient itself: no log-softmax copy for backward, no float32 copy
    of bf16 logits, no one-hot or zero-filled gradient buffer. A backward that builds a graph (`create_graph=True`,
    for second derivatives) computes the same gradient with differentiable operations instead.
    Returns (summed loss, lse); lse is not differentiable.
    """

    @staticmethod
    def forward(logits, labels, epsilon: float, pad_token_id: int | None):
        rows, vocab_size = logits.shape
        keep = labels != -100
        gold_ids = labels.clamp(min=0)
        smooth = _smoothing_weight(epsilon, vocab_size, pad_token_id)
        dtype = torch.promote_types(logits.dtype, torch.float32)  # float32 for bf16/fp16 logits
        lse = torch.empty(rows, dtype=dtype, device=logits.device)
        sums = torch.empty_like(lse) if smooth else None
        for rows_in_chunk in _loss_chunks(logits):
            chunk = logits[rows_in_chunk].to(dtype)  # a view unless the logits are bf16/fp16
            torch.logsumexp(chunk, dim=-1, out=lse[rows_in_chunk])
            if smooth:
                torch.sum(chunk, dim=-1, out=sums[rows_in_chunk])
        gold = logits.gather(-1, gold_ids.unsqueeze(-1)).squeeze(-1).to(dtype)
        loss = lse - gold
        if smooth:
            others = sums - gold
            if pad_token_id is not None:
                others = others - logits[:, pad_token_id].to(dtype)
            # Constant entropy term sum_v q_v log q_v, so the loss is 0 when p == q (as nn.KLDivLoss reports it).
            entropy = (1 - epsilon) * math.log(1 - epsilon) + epsilon * math.log(smooth)
            loss = entropy + lse - (1 - epsilon) * gold - smooth * others
        return torch.where(keep, loss, 0).sum(), lse  # where, not a product: an ignored row's inf or NaN stays out

    @staticmethod
    def setup_context(ctx, inputs, output):
        logits, labels, epsilon, pad_token_id = inputs
        _, lse = output
        ctx.mark_non_differentiable(lse)
        ctx.save_for_backward(logits, labels, lse)
        ctx.epsilon, ctx.pad_token_id = epsilon, pad_token_id

    @staticmethod
    def backward(ctx, grad_loss, grad_lse):
        logits, labels, lse = ctx.saved_tensors
        epsilon, pad_token_id = ctx.epsilon, ctx.pad_token_id
        smooth = _smoothing_weight(epsilon, logits.size(-1), pad_token_id)
        keep, gold_ids = labels != -100, labels.clamp(min=0)
        scale = torch.where(keep, grad_loss.to(lse.dtype), 0)  # 0 on ignored rows
        if torch.is_grad_enabled():  # create_graph=True: a gradient that is itself differentiable
            probabilities = torch.softmax(logits.to(lse.dtype), dim=-1)
            targets = _smoothed_targets(probabilities, gold_ids, epsilon, smooth, pad_token_id)
            return ((probabilities - targets) * scale.unsqueeze(-1)).to(logits.dtype), None, None, None
        grad = torch.empty_like(logits)
        in_place = grad.dtype == lse.dtype  # else each chunk is computed in float32, then copied
        for rows_in_chunk in _loss_chunks(logits):
            chunk = grad[rows_in_chunk] if in_place else None
            chunk = torch.sub(logits[rows_in_chunk].to(lse.dtype), lse[rows_in_chunk, None], out=chunk).exp_()
            if smooth:
                chunk.sub_(smooth)  # - q off the gold and padding columns
            chunk_scale = scale[rows_in_chunk]
            chunk.mul_(chunk_scale[:, None])
            rows = torch.arange(chunk.size(0), device=chunk.device)
            chunk[rows, gold_ids[rows_in_chunk]] -= (1 - epsilon - smooth) * chunk_scale
            if smooth and pad_token_id is not None:
                chunk[:, pad_token_id] += smooth * chunk_scale  # q is 0 there
            if not in_place:
                grad[rows_in_chunk].copy_(chunk)
        return grad, None, None, None


def label_smoothed_loss(
    logits: torch.Tensor, labels: torch.Tensor, epsilon: float, pad_token_id: int | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed loss over target tokens and the number of tokens it covers (labels -100 or padding are ignored).

    With `epsilon == 0` this is the cross-entropy. Otherwise it is §5.4's label smoothing as The Annotated
    Transformer computes it: the KL divergence KL(q || p) to a target distribution q with 1 - epsilon on the gold
    token and epsilon spread evenly over the other tokens except padding (epsilon / (V - 2); the padding column of
    q is 0), in closed form so that q is never materialised (`LabelSmoothedCrossEntropy`):
        KL = sum_v q_v log q_v - sum_v q_v log p_v.
    Computed in float32 (or float64) whatever the logits' dtype.
    """
    logits = logits.reshape(-1, logits.size(-1))
    labels = labels.reshape(-1)
    if pad_token_id is not None:
        labels = labels.masked_fill(labels == pad_token_id, -100)
    num_tokens = (labels != -100).sum()  # no boolean gather of the logits: no copy, no device sync
    return LabelSmoothedCrossEntropy.apply(logits, labels, epsilon, pad_token_id)[0], num_tokens
