"""A picture of the demo page (scripts/demo.py): the model's page served here, opened in headless Chromium through
Playwright, a sentence typed and translated, and the page saved as a PNG once the translation and its heatmap show.

    python tools/demo_screenshot.py outputs/multi30k-de-en-cpu-avg5 "Ein Hund läuft über die Wiese." docs/demo.png \
        --num_beams 4

Needs the demo extra and Playwright for Python (both in the dev extra), and Debian's Chromium at /usr/bin/chromium
(`apt-get install chromium`): Playwright drives that browser and downloads none. tests/test_demo.py drives the page
with the same functions.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the checkout's tools
from tools.processes import free_port  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
# Headless, and quiet on the network: without the background-networking switches Chromium's own connections (updates,
# sync, QUIC probes) are refused on a closed network, and the page may not load.
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
NOTE_TEXT = '#note [data-testid="markdown"]'  # the note's text, beside gradio's progress display
WIDTH, HEIGHT = 1200, 900  # the browser window, in CSS pixels; the screenshot is the whole page


def chromium_problem() -> str | None:
    """Why the page cannot be opened in a browser here (one line), or None."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "Playwright for Python is not installed: pip install playwright (or the dev extra)"
    if not Path(CHROMIUM).is_file() and shutil.which("chromium") is None:
        return f"no Chromium at {CHROMIUM}: apt-get install chromium"
    return None


@contextmanager
def chromium_page(width: int = WIDTH, height: int = HEIGHT) -> Iterator[object]:
    """A Playwright page in the system's headless Chromium, closed after the block."""
    from playwright.sync_api import sync_playwright

    executable = CHROMIUM if Path(CHROMIUM).is_file() else shutil.which("chromium")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        try:
            yield browser.new_page(viewport={"width": width, "height": height})
        finally:
            browser.close()


def translate_on_page(page, url: str, sentence: str, *, timeout_ms: int = 30_000) -> dict:
    """Open the demo page at `url`, type `sentence`, press Translate and wait until the translation (or the page's
    one-line note) and the heatmap show. Returns {"translation", "note", "heatmap": (width, height) of its picture, or
    None when the page shows none}."""
    page.goto(url, timeout=timeout_ms)
    page.locator("#source textarea").fill(sentence)
    page.locator("#translate").click()
    note = page.locator(NOTE_TEXT)
    page.wait_for_function(  # the translation, or the page's note (not the progress timer shown over it meanwhile)
        f"() => document.querySelector('#translation textarea').value.length > 0"
        f" || document.querySelector('{NOTE_TEXT}').innerText.trim().length > 0",
        timeout=timeout_ms,
    )
    translation = page.locator("#translation textarea").input_value()
    heatmap = None
    if translation:
        picture = page.locator("#heatmap img")
        picture.wait_for(timeout=timeout_ms)
        page.wait_for_function("e => e.complete && e.naturalWidth > 0", arg=picture.element_handle(),
                               timeout=timeout_ms)
        heatmap = tuple(picture.evaluate("e => [e.naturalWidth, e.naturalHeight]"))
    return {"translation": translation, "note": note.inner_text().strip(), "heatmap": heatmap}


def screenshot(model_dir: str | Path, sentence: str, output: str | Path, num_beams: int | None = None) -> dict:
    """Serve `model_dir`'s page here (with its example sentences; `num_beams`, default the model's), translate
    `sentence` on it in Chromium and save the whole page as the PNG `output`; returns what `translate_on_page` saw.
    ValueError when the page shows a note instead of a translation."""
    from modeling.inference.demo import TranslationDemo, build_app
    from modeling.inference.example_sentences import example_sentences

    app = build_app(TranslationDemo(model_dir, examples=example_sentences(model_dir), num_beams=num_beams))
    port = free_port()
    app.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    try:
        with chromium_page() as page:
            seen = translate_on_page(page, f"http://127.0.0.1:{port}/", sentence)
            if not seen["translation"]:
                raise ValueError(f"the page gave no translation: {seen['note']}")
            page.screenshot(path=str(output), full_page=True)
    finally:
        app.close()
    return seen


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="a model folder written by train.py or average_checkpoints.py")
    parser.add_argument("sentence", help="the sentence to translate on the page")
    parser.add_argument("output", help="the PNG file to write")
    parser.add_argument("--num_beams", type=int, default=None, help="the page's beam size (default: the model's)")
    args = parser.parse_args(argv)
    problem = chromium_problem()
    if problem is not None:
        parser.error(problem)
    if not Path(args.output).parent.is_dir():
        parser.error(f"the folder of {args.output} does not exist")
    import transformers

    from modeling.inference.demo import require_gradio
    from modeling.inference.translation import check_model_folder

    transformers.utils.logging.disable_progress_bar()
    try:
        require_gradio()
        check_model_folder(args.model)
        seen = screenshot(args.model, args.sentence, args.output, num_beams=args.num_beams)
    except (ImportError, OSError, ValueError) as error:
        parser.error(str(error).splitlines()[0])
    print(f"{args.output}: {args.sentence!r} -> {seen['translation']!r}", file=sys.stdout)


if __name__ == "__main__":
    main()
