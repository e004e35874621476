"""How the weights start: the configuration's `init_scheme`.

- "xavier_uniform" (The Annotated Transformer's): Xavier-uniform for every matrix (`p.dim() > 1`).
- "fairseq": the same, but the embeddings get N(0, d_model^-0.5) (the tied output projection shares them).
- "deepnet" (the default): as "fairseq", and the value-path matrices of each layer's sublayers (`residual_branch_matrices`) get
  DeepNet's smaller Xavier gain (`deepnet_gains`), so that a deep post-norm stack starts close to the identity.
- "normal": N(0, init_std) for every matrix.
Biases start at zero, LayerNorms at one. Travels with the model (relative import of modeling_annotated_transformer.py).
"""

from torch import nn
from transformers import initialization as init
from transformers.modeling_layers import GradientCheckpointingLayer


def init_weights(module: nn.Module, config, xavier_gain: float = 1.0) -> None:
    """Initialise one embedding, linear or LayerNorm module under `config.init_scheme` (others are left alone)."""
    scheme = config.init_scheme
    if isinstance(module, nn.Embedding) and scheme in ("fairseq", "deepnet"):
        init.normal_(module.weight, mean=0.0, std=config.d_model**-0.5)
    elif isinstance(module, (nn.Linear, nn.Embedding)):
        if scheme == "normal":
            init.normal_(module.weight, mean=0.0, std=config.init_std)
        else:
            init.xavier_uniform_(module.weight, gain=xavier_gain)
        if getattr(module, "bias", None) is not None:
            init.zeros_(module.bias)
    elif isinstance(module, nn.LayerNorm):
        init.ones_(module.weight)
        init.zeros_(module.bias)


def xavier_gain(model: nn.Module, linear: nn.Module) -> float:
    """1, except under "deepnet" for the value, attention-output and feed-forward matrices of a layer: DeepNet's
    beta, the encoder's or the decoder's (transformers initialises a Linear on its own, so its layer is looked up
    here, among `model`'s layers; a decoder layer is the one with encoder-decoder attention)."""
    if model.config.init_scheme != "deepnet":
        return 1.0
    encoder_gain, decoder_gain = deepnet_gains(model.config.encoder_layers, model.config.decoder_layers)
    for layer in model.modules():
        if isinstance(layer, GradientCheckpointingLayer) and any(
            linear is matrix for matrix in residual_branch_matrices(layer)
        ):
            return decoder_gain if hasattr(layer, "encoder_attn") else encoder_gain
    return 1.0


def residual_branch_matrices(layer: nn.Module) -> list[nn.Linear]:
    """The matrices on the value path of each sublayer of an encoder or decoder layer: every attention's value and
    output projections, and both feed-forward matrices (queries and keys only shape the attention weights)."""
    attentions = [child for child in layer.children() if hasattr(child, "v_proj") and hasattr(child, "out_proj")]
    return [linear for attention in attentions for linear in (attention.v_proj, attention.out_proj)] + [
        layer.feed_forward.fc1,
        layer.feed_forward.fc2,
    ]


def deepnet_gains(encoder_layers: int, decoder_layers: int) -> tuple[float, float]:
    """DeepNet's beta for an N-layer encoder and an M-layer decoder (Wang et al. 2022, "DeepNet: Scaling Transformers
    to 1,000 Layers", §3): 0.87 (N^4 M)^(-1/16) for the encoder, (12 M)^(-1/4) for the decoder (0.50 and 0.34 at
    6+6), the Xavier gain of `residual_branch_matrices`, so that each post-norm sublayer starts close to the
    identity. DeepNorm's other half, the residual weight alpha in LayerNorm(alpha x + Sublayer(x)), is left out: it
    would change the paper's architecture."""
    return 0.87 * (encoder_layers**4 * decoder_layers) ** (-1 / 16), (12 * decoder_layers) ** (-1 / 4)
