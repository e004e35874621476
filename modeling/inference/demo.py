"""The browser demo: a Gradio page over a model folder that translates a sentence and shows where each word looked.

`TranslationDemo` loads a folder as `translate.py` does (the Auto classes, its own code) and translates one sentence
with `translation.translate`, at the page's beam size and maximum length; a sentence longer than the model's
positions is cut as `translate.py` cuts it, and the page says so. The attention weights of the translated pair come
from `attention_plots.sentence_attention`: a second forward pass, teacher-forced on the translation, with eager
attention switched on for that pass only, since SDPA, which translates, returns no weights (`eager_attention`).
`attention_heatmap` draws one layer's head, or the average of its heads, with `attention_plots.attention_figure`.
`build_app` lays the page out and `serve` starts it; `time_translation` measures what one press of the button costs.

gradio is an optional extra (`pip install -e ".[demo]"`), imported only by `build_app` and `serve`.
"""

from __future__ import annotations

import io
import logging
import os
import statistics
import threading
import time
from collections.abc import Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch

from .attention_plots import (
    ATTENTION_KINDS,
    SentenceAttention,
    attention_figure,
    check_selection,
    check_sentences,
    require_matplotlib,
    sentence_attention,
)
from .translation import encode_sources, load_translation_model, single_line, translate

logger = logging.getLogger(__name__)

INSTALL_HINT = "gradio is not installed: pip install -e '.[demo]' (or pip install gradio matplotlib)"
DEFAULT_HOST = "127.0.0.1"  # this computer only; 0.0.0.0 shows the page to the network
MAX_BEAMS = 8
AVERAGE = "average"  # the head selector's choice for the mean over a layer's heads
# the heatmap's figure, in inches: room for its title and a legible short sentence; at most a screen's width
MIN_WIDTH, MIN_HEIGHT, MAX_SIZE = 6.0, 4.5, 12.0
KIND_ORDER = ("cross", "encoder", "decoder")  # the page's order: encoder-decoder attention first
ATTENTION_NOTE = (
    "Rows are the queries, columns the keys; each row sums to 1. The decoder reads `<s>` and then the translation; "
    "the source ends in `</s>`. The weights come from a second pass over the translated pair with eager attention, "
    "switched on for that pass only: SDPA, which translates, returns no weights."
)


def require_gradio():
    """The `gradio` module, or ImportError with the one line that says how to install it (matplotlib too)."""
    try:
        import gradio
    except ImportError:
        raise ImportError(INSTALL_HINT) from None
    require_matplotlib()
    return gradio


@contextmanager
def eager_attention(model):
    """`model` with eager attention inside the block, the only implementation that returns attention weights, and
    its own implementation (SDPA, usually) again after it."""
    previous = model.config._attn_implementation
    if previous != "eager":
        model.set_attn_implementation("eager")
    try:
        yield model
    finally:
        if previous != "eager":
            model.set_attn_implementation(previous)


def one_line(error: BaseException) -> str:
    """The first line of an error's message (its class name when it has none)."""
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__


def _whole_number(name: str, value, highest: int) -> int:
    """`value` (a page's slider gives floats, the API anything) as an int from 1 to `highest`, else ValueError."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= highest:
        raise ValueError(f"{name} must be a whole number from 1 to {highest}, got {value!r}")
    return value


def _index(name: str, value) -> int:
    """A layer or head index as the page or the API sends it (an int, a float or a digit string)."""
    try:
        index = int(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be an index from 0, got {value!r}") from None
    if index != value and str(index) != str(value).strip():
        raise ValueError(f"{name} must be an index from 0, got {value!r}")
    return index


@dataclass
class DemoTranslation:
    """What one press of the button gives: the translation, a one-line note for the page ("" when there is none:
    a cut sentence, or why no attention is shown) and the attention weights of the pair (None without them)."""

    translation: str
    note: str
    attention: SentenceAttention | None


class TranslationDemo:
    """A model folder loaded for the page: one sentence at a time, translated and its attention read."""

    def __init__(self, model_dir: str | os.PathLike, *, device: str | None = None, examples: Sequence[str] = (),
                 num_beams: int | None = None):
        self.model, self.tokenizer, self.target_tokenizer = load_translation_model(model_dir, device=device)
        self.name = Path(model_dir).resolve().name if Path(model_dir).exists() else str(model_dir)
        self.examples = list(examples)
        config, generation = self.model.config, self.model.generation_config
        self.max_positions = config.max_position_embeddings
        # the page's beam size at first: `num_beams`, else the model's own (its generation config)
        self.num_beams = (_whole_number("the beam size", num_beams, MAX_BEAMS) if num_beams is not None
                          else min(generation.num_beams or 1, MAX_BEAMS))
        length = generation.max_new_tokens or (generation.max_length or self.max_positions) - 1
        self.max_new_tokens = min(length, self.max_positions - 1)
        # the attention pass switches the model's attention implementation: no other sentence may run meanwhile
        self._lock = threading.Lock()

    def fitting_source(self, source: str) -> tuple[str, str]:
        """(`source`, "") when it fits the model's positions; else its first positions - 1 tokens as text, cut where
        `translate` cuts it, and the note that says so."""
        length = len(self.tokenizer(source, verbose=False)["input_ids"])
        if length <= self.max_positions:
            return source, ""
        ids = encode_sources([source], self.tokenizer, self.max_positions)[0][:-1]  # translate.py's cut; </s> off
        kept = self.tokenizer.decode(ids, skip_special_tokens=True)
        # decoded and encoded again, a cut word may split into more tokens: drop tokens until the text fits
        while len(self.tokenizer(kept, verbose=False)["input_ids"]) > self.max_positions:
            ids = ids[:-1]
            kept = self.tokenizer.decode(ids, skip_special_tokens=True)
        note = (f"The sentence has {length} tokens (`</s>` included), more than the model's {self.max_positions} "
                f"positions: its first {len(ids)} tokens were translated.")
        return kept, note

    def translate(self, text: str, num_beams=None, max_new_tokens=None) -> DemoTranslation:
        """Translate `text` (one line) with `num_beams` beams and at most `max_new_tokens` tokens (default: the
        model's generation config) and read the pair's attention. ValueError, in one line, for an empty text or a
        beam size or length outside the page's ranges."""
        source = single_line(text or "")
        check_sentences(source)
        num_beams = _whole_number("the beam size", self.num_beams if num_beams is None else num_beams, MAX_BEAMS)
        max_new_tokens = _whole_number(
            "the maximum length", self.max_new_tokens if max_new_tokens is None else max_new_tokens,
            self.max_positions - 1,
        )
        source, note = self.fitting_source(source)
        with self._lock:
            translation = translate([source], self.model, self.tokenizer, self.target_tokenizer, num_beams=num_beams,
                                    max_new_tokens=max_new_tokens)[0]
            if not translation.strip():
                empty = "The translation is empty: no attention to show."
                return DemoTranslation("", f"{note} {empty}".strip(), None)
            with eager_attention(self.model):
                attention = sentence_attention(self.model, self.tokenizer, source, translation, self.target_tokenizer)
        return DemoTranslation(translation, note, attention)

    def layer_choices(self, kind: str) -> list[tuple[str, int]]:
        """The layer selector's (label, index) choices for `kind`'s stack."""
        return [(f"layer {layer}", layer) for layer in range(self._sizes(kind)[0])]

    def head_choices(self, kind: str) -> list[tuple[str, str]]:
        """The head selector's (label, value) choices: the average first, then each head."""
        heads = self._sizes(kind)[1]
        return [(f"average of the {heads} heads", AVERAGE), *((f"head {head}", str(head)) for head in range(heads))]

    def _sizes(self, kind: str) -> tuple[int, int]:
        if kind not in ATTENTION_KINDS:
            raise ValueError(f"unknown attention kind {kind!r}: choose from {', '.join(KIND_ORDER)}")
        stack = ATTENTION_KINDS[kind][1]
        return getattr(self.model.config, f"{stack}_layers"), getattr(self.model.config, f"{stack}_attention_heads")


def attention_heatmap(attention: SentenceAttention, config, kind: str, layer, head) -> tuple[object, dict]:
    """(a matplotlib Figure, the weights it shows) for one kind of attention (`ATTENTION_KINDS`), one layer and one
    head, or the average of the layer's heads (`head` = AVERAGE): rows are the queries, columns the keys, labelled
    with the tokens. The weights: {"kind", "layer", "head", "queries", "keys", "weights"} (a queries x keys list).
    ValueError naming a kind, layer or head the model does not have."""
    layer = _index("layer", layer)
    head = AVERAGE if head == AVERAGE else _index("head", head)
    check_selection(config, [kind], [layer], None if head == AVERAGE else [head])
    title, _, (query_side, key_side) = ATTENTION_KINDS[kind]
    layer_weights = attention.weights[kind][layer]  # (heads, queries, keys)
    if head == AVERAGE:
        shown, label = layer_weights.mean(0), f"average of {layer_weights.shape[0]} heads"
    else:
        shown, label = layer_weights[head], f"head {head}"
    rows, columns = attention.labels(kind)
    figure = attention_figure(shown[None], [0], rows, columns, f"{title}, layer {layer}")
    axes = figure.axes[0]
    axes.set_title(label, fontsize=9)  # attention_figure names the panel by its index in `shown`
    axes.set_xlabel(f"keys: the {key_side}", fontsize=8)
    axes.set_ylabel(f"queries: the {query_side}", fontsize=8)
    # one panel is narrower than attention_figure's one-line title: its explanation goes to a second line
    figure.suptitle(figure.get_suptitle().replace(" (", "\n(", 1), fontsize=10)
    # and a picture of a long sentence stays one a page can show (labels crowd beyond about 50 tokens)
    width, height = figure.get_size_inches()
    figure.set_size_inches(min(max(width, MIN_WIDTH), MAX_SIZE), min(max(height, MIN_HEIGHT), MAX_SIZE))
    # one panel lays out as well with the tight layout, which halves the drawing time of the constrained one
    figure.set_layout_engine("tight")
    weights = {"kind": kind, "layer": layer, "head": head, "queries": rows, "keys": columns,
               "weights": [[round(value, 4) for value in row] for row in shown.tolist()]}
    return figure, weights


def time_translation(demo: TranslationDemo, sentence: str, *, repeats: int = 20) -> dict:
    """Seconds that one press of the page's button takes for `sentence`: the translation, the attention pass and the
    default heatmap drawn as PNG, after one untimed run. {"median_seconds", "fastest_seconds", "repeats",
    "threads", "num_beams", "source", "translation"}."""
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    seconds = []
    for run in range(repeats + 1):
        start = time.perf_counter()
        result = demo.translate(sentence)
        if result.attention is not None:
            figure, _ = attention_heatmap(result.attention, demo.model.config, "cross",
                                          demo.model.config.decoder_layers - 1, AVERAGE)
            figure.savefig(io.BytesIO(), format="png")
        if run:
            seconds.append(time.perf_counter() - start)
    return {"median_seconds": statistics.median(seconds), "fastest_seconds": min(seconds), "repeats": repeats,
            "threads": torch.get_num_threads(), "num_beams": demo.num_beams, "source": sentence,
            "translation": result.translation}


# ----------------------------------------------------------------------------------------------------------------------
# The page
# ----------------------------------------------------------------------------------------------------------------------


def build_app(demo: TranslationDemo):
    """The Gradio Blocks of the page. Its API (gradio_client): `/translate` (text, beam size, maximum length, kind,
    layer, head) -> (translation, note, heatmap, weights), and `/attention` (kind, layer, head) -> (heatmap, weights)
    for the last translation of the same session."""
    gr = require_gradio()
    config = demo.model.config
    default_kind, default_layer = "cross", config.decoder_layers - 1

    def draw(attention, kind, layer, head) -> tuple:
        """(heatmap, weights), both None before a translation."""
        return (None, None) if attention is None else attention_heatmap(attention, config, kind, layer, head)

    def on_translate(text, num_beams, max_new_tokens, kind, layer, head):
        try:
            result = demo.translate(text, num_beams, max_new_tokens)
            return result.translation, result.note, result.attention, *draw(result.attention, kind, layer, head)
        except Exception as error:  # the page answers in one line; the log keeps the traceback of the unexpected
            if not isinstance(error, ValueError):
                logger.exception("translating %r failed", text)
            return "", one_line(error), None, None, None

    def on_select(attention, kind, layer, head):
        try:
            return *draw(attention, kind, layer, head), ""
        except ValueError as error:
            return None, None, one_line(error)

    def on_kind(attention, kind, layer, head):
        try:
            layers, heads = demo.layer_choices(kind), demo.head_choices(kind)
        except ValueError as error:
            return gr.update(), gr.update(), None, None, one_line(error)
        if layer not in [value for _, value in layers]:  # the encoder and the decoder may differ in depth
            layer = layers[-1][1]
        if head not in [value for _, value in heads]:
            head = AVERAGE
        return (gr.update(choices=layers, value=layer), gr.update(choices=heads, value=head),
                *on_select(attention, kind, layer, head))

    with gr.Blocks(title=f"{demo.name}: translation and attention", analytics_enabled=False) as app:
        gr.Markdown(
            f"# {demo.name}: translation and attention\n"
            "An encoder-decoder Transformer (*Attention Is All You Need*, Vaswani et al., 2017) trained with "
            "annotated-transformer-hf. Type a sentence and press **Translate**; below, see which words each word "
            "attended to, layer by layer and head by head."
        )
        with gr.Row():
            source = gr.Textbox(label="Sentence", lines=2, placeholder="a sentence to translate", elem_id="source")
            translation = gr.Textbox(label="Translation", lines=2, interactive=False, elem_id="translation")
        with gr.Row():
            num_beams = gr.Slider(1, MAX_BEAMS, value=demo.num_beams, step=1, label="Beam size")
            max_new_tokens = gr.Slider(1, demo.max_positions - 1, value=demo.max_new_tokens, step=1,
                                       label="Maximum length (tokens)")
        button = gr.Button("Translate", variant="primary", elem_id="translate")
        note = gr.Markdown(elem_id="note")
        if demo.examples:
            gr.Examples(demo.examples, inputs=source, label="Examples")
        gr.Markdown("## Where each word looked\n" + ATTENTION_NOTE)
        with gr.Row():
            kind = gr.Radio([(ATTENTION_KINDS[name][0], name) for name in KIND_ORDER], value=default_kind,
                            label="Attention")
            layer = gr.Dropdown(demo.layer_choices(default_kind), value=default_layer, label="Layer")
            head = gr.Dropdown(demo.head_choices(default_kind), value=AVERAGE, label="Head")
        heatmap = gr.Plot(label="Attention weights", format="png", elem_id="heatmap")
        with gr.Accordion("The weights as numbers", open=False):
            weights = gr.JSON(label="Weights shown")
        attention = gr.State(None)

        translate_inputs = [source, num_beams, max_new_tokens, kind, layer, head]
        translate_outputs = [translation, note, attention, heatmap, weights]
        button.click(on_translate, translate_inputs, translate_outputs, api_name="translate")
        source.submit(on_translate, translate_inputs, translate_outputs, api_visibility="private")
        # `input` events: the user's choices only, not on_kind's updates of the layer and head selectors
        selection, drawn = [attention, kind, layer, head], [heatmap, weights, note]
        kind.input(on_kind, selection, [layer, head, *drawn], api_visibility="private")
        layer.input(on_select, selection, drawn, api_name="attention")
        head.input(on_select, selection, drawn, api_visibility="private")
    return app


def serve(model_dir: str | os.PathLike, *, host: str | None = DEFAULT_HOST, port: int | None = None,
          examples: Sequence[str] = (), device: str | None = None, num_beams: int | None = None, **launch_kwargs):
    """Load `model_dir` and serve its page at http://host:port until interrupted (gradio's defaults, or the
    GRADIO_SERVER_NAME and GRADIO_SERVER_PORT variables, where `host` or `port` is None)."""
    require_gradio()
    app = build_app(TranslationDemo(model_dir, device=device, examples=examples, num_beams=num_beams))
    return app.launch(server_name=host, server_port=port, show_error=False, **launch_kwargs)


__all__ = [
    "AVERAGE", "DEFAULT_HOST", "MAX_BEAMS", "DemoTranslation", "TranslationDemo", "attention_heatmap", "build_app",
    "eager_attention", "one_line", "require_gradio", "serve", "time_translation",
]
