"""Configuration of the encoder-decoder Transformer of "Attention Is All You Need" (Vaswani et al., 2017).

This file travels to the Hub as custom code: it imports only transformers, huggingface_hub and the
standard library.
"""

from huggingface_hub.dataclasses import strict
from huggingface_hub.errors import StrictDataclassError
from transformers import PretrainedConfig
from transformers.activations import ACT2FN

# Table 3 of the paper: the base and big models. "tiny" is for tests and the copy-task demo.
PRESETS = {
    "tiny": dict(
        d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
        encoder_ffn_dim=256, decoder_ffn_dim=256, dropout=0.1, max_position_embeddings=256,
    ),
    "base": dict(
        d_model=512, encoder_layers=6, decoder_layers=6, encoder_attention_heads=8, decoder_attention_heads=8,
        encoder_ffn_dim=2048, decoder_ffn_dim=2048, dropout=0.1,
    ),
    "big": dict(
        d_model=1024, encoder_layers=6, decoder_layers=6, encoder_attention_heads=16, decoder_attention_heads=16,
        encoder_ffn_dim=4096, decoder_ffn_dim=4096, dropout=0.3,
    ),
}

INIT_SCHEMES = ("xavier_uniform", "fairseq", "deepnet", "normal")
POSITION_EMBEDDING_TYPES = ("sinusoidal", "learned")


@strict
class AnnotatedTransformerConfig(PretrainedConfig):
    r"""
    Configuration of [`AnnotatedTransformerModel`] and [`AnnotatedTransformerForConditionalGeneration`].
    The defaults are the paper's base model (§3, Table 3) with the 37k shared vocabulary of WMT EN-DE.

    Args:
        vocab_size: target vocabulary (and the shared one when `tie_word_embeddings`).
        src_vocab_size: source vocabulary when embeddings are untied (different scripts); `None` = `vocab_size`.
        d_model, encoder_layers, decoder_layers, encoder_attention_heads, decoder_attention_heads,
        encoder_ffn_dim, decoder_ffn_dim: the sizes of §3.1-§3.3 (d_model, N, h, d_ff).
        dropout: P_drop of §5.4, on each sub-layer output and on the embedding + positional encoding sums.
        attention_dropout: dropout on attention probabilities (0 in the paper; The Annotated Transformer uses P_drop).
        activation_dropout: dropout inside the feed-forward network (0 in the paper).
        activation_function: the FFN non-linearity (ReLU in §3.3).
        d_k, d_v: the size of each head's queries and keys (d_k) and of its values (d_v), §3.2.2; `None` (the
            default) = d_model / heads, the paper's choice everywhere but Table 3's row (B), which shrinks d_k alone.
        max_position_embeddings: the longest sequence the positions cover (§3.5); longer inputs are refused.
        position_embedding_type: "sinusoidal" (§3.5, the default: a fixed table, no weights) or "learned" (Table 3's
            row (E): one trained embedding of `max_position_embeddings` rows per stack, as in the paper's
            tensor2tensor code and fairseq, initialised like the token embeddings).
        scale_embedding: multiply embeddings by sqrt(d_model) (§3.4).
        norm_first: False = post-norm `LayerNorm(x + Sublayer(x))` (the paper); True = pre-norm
            `x + Sublayer(LayerNorm(x))` plus a final LayerNorm after each stack (The Annotated Transformer).
        tie_word_embeddings: True = source embedding, target embedding and pre-softmax projection share one
            matrix (§3.4); False = three separate matrices (separate source/target vocabularies).
        label_smoothing: epsilon_ls of §5.4, applied by the model's own loss (KL divergence to the smoothed
            target, padding excluded, normalised per non-pad token). 0 by default (the loss is then the
            cross-entropy, as in transformers' other models); `scripts/train.py` sets the paper's 0.1.
        layer_norm_eps: LayerNorm epsilon.
        init_scheme: "deepnet" (the default: "fairseq" with DeepNet's smaller Xavier gain for the value,
            attention-output and feed-forward matrices, so each post-norm sublayer starts near the identity; the
            architecture is unchanged; what it does for a post-norm 6+6 model at d_model 128, measured against
            "fairseq": docs/results.md, "Ablations"); "fairseq" (Xavier-uniform matrices, embeddings
            N(0, d_model^-0.5) as in fairseq and the paper's tensor2tensor code, so the sqrt(d_model)-scaled
            embeddings have unit variance; with Xavier-uniform embeddings a post-norm 6+6 model stops learning);
            "xavier_uniform" (The Annotated Transformer's: every matrix, embeddings included); or "normal" (std
            `init_std`).
    """

    model_type = "annotated-transformer"
    keys_to_ignore_at_inference = ["cache", "past_key_values"]  # the name since / before transformers 5.24
    attribute_map = {
        "hidden_size": "d_model",
        "num_attention_heads": "encoder_attention_heads",
        "num_hidden_layers": "encoder_layers",
    }

    vocab_size: int = 37000
    src_vocab_size: int | None = None
    d_model: int = 512
    encoder_layers: int = 6
    decoder_layers: int = 6
    encoder_attention_heads: int = 8
    decoder_attention_heads: int = 8
    encoder_ffn_dim: int = 2048
    decoder_ffn_dim: int = 2048
    dropout: float | int = 0.1
    attention_dropout: float | int = 0.0
    activation_dropout: float | int = 0.0
    activation_function: str = "relu"
    d_k: int | None = None
    d_v: int | None = None
    max_position_embeddings: int = 1024
    position_embedding_type: str = "sinusoidal"
    scale_embedding: bool = True
    norm_first: bool = False
    tie_word_embeddings: bool = True
    label_smoothing: float | int = 0.0
    layer_norm_eps: float | int = 1e-6
    init_scheme: str = "deepnet"
    init_std: float | int = 0.02
    use_cache: bool = True
    is_encoder_decoder: bool = True
    pad_token_id: int | None = 0
    bos_token_id: int | None = 1
    eos_token_id: int | list[int] | None = 2
    decoder_start_token_id: int | None = 1

    def __post_init__(self, **kwargs):
        if self.src_vocab_size is None:
            self.src_vocab_size = self.vocab_size
        super().__post_init__(**kwargs)

    def __setattr__(self, name, value):
        # Tied, the source vocabulary is the vocabulary: a new `vocab_size` (`config.vocab_size = n`, as transformers'
        # own tests and tools set it) carries `src_vocab_size` with it.
        following = (name == "vocab_size" and self.__dict__.get("tie_word_embeddings")
                     and self.__dict__.get("src_vocab_size") == self.__dict__.get("vocab_size"))
        super().__setattr__(name, value)
        if following:
            super().__setattr__("src_vocab_size", value)

    @property
    def head_dim(self) -> int:
        """Each encoder head's key (and query) size: transformers' name for it, which its caches and tests read. A
        model whose d_k and d_v differ (Table 3's row B) has no single head size; this is then d_k."""
        return self.head_sizes(self.encoder_attention_heads)[0]

    @head_dim.setter
    def head_dim(self, value: int | None) -> None:
        """Setting it (`head_dim` in a config.json, as transformers' tools and other models' configs write it) sets
        d_k, the size it names."""
        self.d_k = value

    def validated(self) -> "AnnotatedTransformerConfig":
        """This configuration once its checks have run again (on values set after it was built, as
        `from_pretrained(..., label_smoothing=1.0)` sets them), a bad value refused as a ValueError that names it."""
        try:
            self.validate()
        except StrictDataclassError as error:
            raise ValueError(str(error.__cause__ or error)) from None
        return self

    def head_sizes(self, num_heads: int) -> tuple[int, int]:
        """(d_k, d_v) of each of `num_heads` heads: the configured sizes, or d_model / heads (§3.2.2)."""
        return self.d_k or self.d_model // num_heads, self.d_v or self.d_model // num_heads

    @classmethod
    def from_preset(cls, name: str, **kwargs) -> "AnnotatedTransformerConfig":
        """Build a config from a named size ("tiny", "base", "big"); keyword arguments override the preset."""
        if name not in PRESETS:
            raise ValueError(f"Unknown model preset {name!r}; choose one of {sorted(PRESETS)}.")
        return cls(**{**PRESETS[name], **kwargs})

    def validate_architecture(self):
        """Part of `@strict` validation: sizes, probabilities and choices, with errors that name the bad value."""
        for name in ("vocab_size", "src_vocab_size", "d_model", "encoder_layers", "decoder_layers",
                     "encoder_attention_heads", "decoder_attention_heads", "encoder_ffn_dim", "decoder_ffn_dim",
                     "max_position_embeddings"):
            value = getattr(self, name)
            if value <= 0:
                raise ValueError(f"`{name}` must be a positive integer, got {value}.")
        for name in ("d_k", "d_v"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or value <= 0):
                raise ValueError(f"`{name}` must be a positive integer (or None for d_model / heads), got {value}.")
        for name in ("encoder_attention_heads", "decoder_attention_heads"):
            heads = getattr(self, name)
            if self.d_model % heads != 0 and (self.d_k is None or self.d_v is None):
                raise ValueError(
                    f"`d_model` ({self.d_model}) must be divisible by `{name}` ({heads}): each head gets "
                    f"d_model / heads dimensions (§3.2.2) unless both `d_k` and `d_v` are set."
                )
        if self.position_embedding_type not in POSITION_EMBEDDING_TYPES:
            raise ValueError(f"Unknown `position_embedding_type` {self.position_embedding_type!r}; choose one of "
                             f"{list(POSITION_EMBEDDING_TYPES)}.")
        for name in ("dropout", "attention_dropout", "activation_dropout", "label_smoothing"):
            value = getattr(self, name)
            if not 0.0 <= value < 1.0:
                raise ValueError(f"`{name}` must be in [0, 1), got {value}.")
        if not 0.0 <= self.layer_norm_eps < float("inf"):  # a negative or NaN epsilon makes every LayerNorm NaN
            raise ValueError(f"`layer_norm_eps` must be a finite number >= 0, got {self.layer_norm_eps}.")
        if not 0.0 < self.init_std < float("inf"):  # the normal initialisation's standard deviation
            raise ValueError(f"`init_std` must be a finite positive number, got {self.init_std}.")
        if self.activation_function not in ACT2FN:
            raise ValueError(
                f"Unknown `activation_function` {self.activation_function!r}; choose one of {sorted(ACT2FN)}."
            )
        if self.init_scheme not in INIT_SCHEMES:
            raise ValueError(f"Unknown `init_scheme` {self.init_scheme!r}; choose one of {list(INIT_SCHEMES)}.")
        if self.tie_word_embeddings and self.src_vocab_size != self.vocab_size:
            raise ValueError(
                f"Tied embeddings need one shared vocabulary, but `src_vocab_size` ({self.src_vocab_size}) != "
                f"`vocab_size` ({self.vocab_size}); set both to the shared size (left unset, `src_vocab_size` takes "
                "`vocab_size`'s value when the config is built), or `tie_word_embeddings=False` for separate "
                "vocabularies."
            )
        if self.label_smoothing > 0 and self.vocab_size < 3:
            raise ValueError(f"Label smoothing needs `vocab_size` >= 3, got {self.vocab_size}.")

    def validate_token_ids(self):
        """Special token ids must lie inside the vocabulary (the base class only warns)."""
        for name in ("pad_token_id", "bos_token_id", "decoder_start_token_id", "eos_token_id"):
            value = getattr(self, name)
            for token_id in value if isinstance(value, list) else [value]:
                if token_id is not None and not 0 <= token_id < min(self.vocab_size, self.src_vocab_size):
                    raise ValueError(
                        f"`{name}` ({token_id}) is outside the vocabulary: it must be in "
                        f"[0, {min(self.vocab_size, self.src_vocab_size) - 1}] or None."
                    )


__all__ = ["AnnotatedTransformerConfig", "POSITION_EMBEDDING_TYPES", "PRESETS"]
