"""Serve a model folder's page in the browser: type a sentence, see its translation and where each word looked
(encoder-decoder, encoder and decoder self-attention, layer by layer, head by head or their average).

    python scripts/demo.py                                   # the repository's German->English model
    python scripts/demo.py outputs/copy-tiny --port 7860     # the copy task's, which `train.py` trains by default
    python scripts/demo.py MODEL --time "Ein Hund läuft über die Wiese." --num_beams 4   # seconds; no page

The page is at http://127.0.0.1:7860 (the next free port when 7860 is taken), on this computer only unless --host
0.0.0.0. Example sentences come from the model's card and the validation data it names. Needs the demo extra:
pip install -e ".[demo]". A Space that serves the same page: scripts/push_to_hub.py MODEL NAME --space.
"""

import argparse
import json
from pathlib import Path

import transformers

from modeling.common.command_line import OneLineErrorParser, check_utf8_arguments, positive_int
from modeling.inference.demo import DEFAULT_HOST, TranslationDemo, require_gradio, serve, time_translation
from modeling.inference.example_sentences import example_sentences
from modeling.inference.translation import SHIPPED_MODEL, check_model_folder

DEFAULT_MODEL = Path(__file__).resolve().parents[1] / SHIPPED_MODEL


def build_parser() -> OneLineErrorParser:
    parser = OneLineErrorParser(prog="demo.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", nargs="?", default=None,
                        help=f"a model folder written by train.py or average_checkpoints.py (default: {SHIPPED_MODEL}, "
                        "the German->English model in the repository)")
    parser.add_argument("--host", default=DEFAULT_HOST,
                        help=f"address to serve on (default {DEFAULT_HOST}: this computer only)")
    parser.add_argument("--port", type=positive_int, default=None,
                        help="port to serve on (default: 7860, or the next free one)")
    parser.add_argument("--device", help="cpu, cuda, cuda:1, ... (default: cuda if available, else cpu)")
    parser.add_argument("--num_beams", type=positive_int, default=None,
                        help="the page's beam size at first, and --time's (default: the model's, from training)")
    parser.add_argument("--examples", type=int, default=5, help="how many example sentences to offer (default 5)")
    parser.add_argument("--time", metavar="SENTENCE", default=None,
                        help="instead of serving: time one press of Translate for SENTENCE (the translation, its "
                        "attention and the heatmap) and print the seconds as JSON")
    parser.add_argument("--repeats", type=positive_int, default=20, help="timed runs with --time (default 20)")
    return parser


def model_folder(model: str | None) -> Path:
    """The folder to serve: `model`, or the repository's German->English model when it is None."""
    return Path(model) if model is not None else DEFAULT_MODEL


def main(argv=None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:  # everything that can be checked is checked before the model loads
        if args.examples < 0:
            raise ValueError(f"--examples must be >= 0, got {args.examples}")
        if args.time is not None:
            check_utf8_arguments([args.time], "--time")
        folder = model_folder(args.model)
        check_model_folder(folder)
        if args.time is None:
            require_gradio()
        transformers.utils.logging.disable_progress_bar()  # its weight-loading bar
        if args.time is not None:
            demo = TranslationDemo(folder, device=args.device, num_beams=args.num_beams)
            print(json.dumps({"model": str(folder), **time_translation(demo, args.time, repeats=args.repeats)},
                             ensure_ascii=False))
            return
        examples = example_sentences(folder, args.examples) if args.examples else []
        serve(folder, host=args.host, port=args.port, examples=examples, device=args.device, num_beams=args.num_beams)
    # ImportError: gradio is not installed; OSError: also weights that changed on disk (CorruptWeightsError)
    except (ImportError, OSError, ValueError) as error:
        parser.error(str(error).splitlines()[0] if str(error) else repr(error))


if __name__ == "__main__":
    main()
