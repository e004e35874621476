"""scripts/demo.py, its page (`modeling.inference.demo`) and its Space (`modeling.inference.space`), through the real
interfaces: `python scripts/demo.py` serving, without arguments, the German->English model the repository ships,
driven by gradio_client and by headless Chromium (Playwright, with the system's browser); the Space that
push_to_hub.py --space writes of that model, copied out of the repository and started with `python app.py`; the
main job's copy-task folder for the rest."""

import base64
import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
import urllib.request
from pathlib import Path

import pytest
import torch
from launch_helpers import OFFLINE_ENV, REPO_ROOT, SCRIPT_ENV, assert_one_line_error, free_port, load_script

pytest.importorskip("gradio")
pytest.importorskip("matplotlib")

from gradio_client import Client  # noqa: E402
from gradio_client.exceptions import AppError  # noqa: E402
from huggingface_hub import SpaceCard  # noqa: E402
from packaging.requirements import Requirement  # noqa: E402
from PIL import Image  # noqa: E402

import modeling.inference.demo as demo_module  # noqa: E402
import modeling.inference.hub as hub_module  # noqa: E402
from modeling.data.corpus import synthetic_task_dataset  # noqa: E402
from modeling.inference.attention_plots import load_attention_model, sentence_attention  # noqa: E402
from modeling.inference.demo import AVERAGE, TranslationDemo  # noqa: E402
from modeling.inference.example_sentences import example_sentences  # noqa: E402
from modeling.inference.hub import HubUploadError  # noqa: E402
from modeling.inference.space import push_space_to_hub, space_files  # noqa: E402
from modeling.inference.translation import SHIPPED_MODEL  # noqa: E402
from modeling.training.argument_parsing import parse_arguments  # noqa: E402
from modeling.training.run import train  # noqa: E402
from tools.demo_screenshot import chromium_page, chromium_problem, translate_on_page  # noqa: E402

LINE = "5 3 9 7 0 1 5"  # a copy-task line: its translation is itself
SENTENCE = "Ein Hund läuft über die Wiese."  # for the shipped German->English model
SHIPPED = REPO_ROOT / SHIPPED_MODEL
COPY_CONFIG = REPO_ROOT / "configs" / "copy_tiny.yaml"
STARTUP_SECONDS = 120
demo_script = load_script("demo")
push_script = load_script("push_to_hub")

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tiny models: one thread is fastest (conftest)


def quick_run(output_dir: Path, *extra: str) -> Path:
    """train.py's run in this process, 2 steps: a folder as train.py writes it (card, tokenizer, code, checksums)."""
    args = parse_arguments(
        ["--output_dir", str(output_dir), "--max_steps", "2", "--eval_strategy", "no", "--save_strategy", "no",
         "--max_train_samples", "64", "--max_eval_samples", "4", "--max_test_samples", "4", "--report_to", "none",
         "--disable_tqdm", "true", *extra], copy_task_config=COPY_CONFIG,
    )
    train(*args[:3], config_path=args[3])
    return output_dir


def random_line(generator: torch.Generator) -> str:
    length = int(torch.randint(1, 11, (1,), generator=generator))
    return " ".join(map(str, torch.randint(10, (length,), generator=generator).tolist()))


@pytest.fixture(scope="module")
def main_job_folder(tmp_path_factory) -> Path:
    """outputs/copy-tiny as the main job writes it (train.py with configs/copy_tiny.yaml), made quick: 2 steps at
    d_model 48, then 500 Adam steps by hand (about 10 s), after which it copies lines of up to 10 digits."""
    folder = quick_run(tmp_path_factory.mktemp("main-job") / "outputs" / "copy-tiny", "--d_model", "48",
                       "--ffn_dim", "96", "--dropout", "0")
    model, tokenizer, _ = load_attention_model(folder)
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3, betas=(0.9, 0.98))
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=3e-3, total_steps=500, pct_start=0.2)
    generator = torch.Generator().manual_seed(0)
    for _ in range(500):
        lines = [random_line(generator) for _ in range(32)]
        batch = tokenizer(lines, text_target=lines, padding=True, return_tensors="pt")
        batch["labels"][batch["labels"] == tokenizer.pad_token_id] = -100
        batch.pop("token_type_ids", None)
        model(**batch).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        schedule.step()
    model.eval().save_pretrained(folder)
    return folder


class Server:
    """A page server started as a subprocess on a free port; `url` once it answers (`wait`), stopped by `stop`."""

    def __init__(self, command: list[str], cwd: Path, env: dict, log: Path, port_flag: bool):
        self.port, self.log = free_port(), log
        self.url = f"http://127.0.0.1:{self.port}/"
        command = [*command, "--port", str(self.port)] if port_flag else command
        env = env if port_flag else {**env, "GRADIO_SERVER_PORT": str(self.port)}
        with open(log, "w") as output:
            self.process = subprocess.Popen(command, cwd=cwd, env=env, stdout=output, stderr=subprocess.STDOUT)

    def wait(self) -> str:
        deadline = time.monotonic() + STARTUP_SECONDS
        while True:
            if self.process.poll() is not None:
                pytest.fail(f"the server exited with {self.process.returncode}:\n{self.log.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(self.url, timeout=2):
                    return self.url
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(f"{self.url} did not answer in {STARTUP_SECONDS} s:\n{self.log.read_text()[-3000:]}")
                time.sleep(0.3)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


# Runs app.py as `python app.py` does, where the repository's package cannot be imported (neither its editable
# install nor a path into the checkout): only the Space's own copy of the page's code, beside app.py.
SPACE_RUN = textwrap.dedent(
    """
    import importlib.util, os, runpy, sys
    repository, space = sys.argv[1], sys.argv[2]
    # the checkout's own import paths and editable finders go; the interpreter's (a venv inside the checkout) stay
    own = os.path.realpath(repository)
    sys.meta_path[:] = [finder for finder in sys.meta_path if "editable" not in getattr(finder, "__module__", "")]
    sys.path[:] = [space] + [path for path in sys.path
                             if "__editable__" not in path and os.path.realpath(path or os.getcwd()) != own]
    origin = importlib.util.find_spec("modeling").origin
    assert origin.startswith(space + "/"), f"modeling imported from {origin}, not from the Space"
    sys.argv = ["app.py"]
    runpy.run_path("app.py", run_name="__main__")
    """
)


@pytest.fixture(scope="module")
def space(tmp_path_factory) -> dict:
    """`push_to_hub.py models/multi30k-de-en-cpu you/transformer-de-en --space --dry_run --space_dir DIR`: what it
    listed, the folder it wrote, and a copy of that folder outside the repository."""
    space_dir = tmp_path_factory.mktemp("space") / "written"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        push_script.main([str(SHIPPED), "you/transformer-de-en", "--space", "--dry_run", "--space_dir", str(space_dir)])
    listed = [line.strip() for line in printed.getvalue().splitlines() if line.startswith("  ")]
    copy = Path(shutil.copytree(space_dir, tmp_path_factory.mktemp("elsewhere") / "transformer-de-en"))
    return {"listed": listed, "dir": space_dir, "copy": copy}


@pytest.fixture(scope="module")
def shipped():
    """The shipped model as the page loads it, and its greedy translation of SENTENCE in at most 16 tokens."""
    model, tokenizer, target_tokenizer = load_attention_model(SHIPPED)
    generated = model.generate(**tokenizer([SENTENCE], return_tensors="pt"), num_beams=1, max_new_tokens=16)
    return model, tokenizer, target_tokenizer, target_tokenizer.decode(generated[0], skip_special_tokens=True).strip()


@pytest.fixture(scope="module")
def pages(space, tmp_path_factory) -> dict:
    """Two servers, started together since each spends seconds importing gradio and torch: "demo", `python
    scripts/demo.py --port P` without a model, run from another folder; and "space", `python app.py` in the Space's
    copy outside the repository."""
    logs = tmp_path_factory.mktemp("logs")
    demo_env = {**os.environ, **SCRIPT_ENV, "OMP_NUM_THREADS": "1"}
    space_env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    space_env.update(OFFLINE_ENV, OMP_NUM_THREADS="1")
    servers = {
        "demo": Server([sys.executable, str(REPO_ROOT / "scripts" / "demo.py")], logs, demo_env, logs / "demo.log",
                       port_flag=True),
        "space": Server([sys.executable, "-c", SPACE_RUN, str(REPO_ROOT), str(space["copy"])], space["copy"],
                        space_env, logs / "space.log", port_flag=False),
    }
    try:
        yield {name: server.wait() for name, server in servers.items()}
    finally:
        for server in servers.values():
            server.stop()


@pytest.fixture(scope="module")
def served(pages) -> str:
    return pages["demo"]


def png_size(plot: dict) -> tuple[int, int]:
    """The size of a gr.Plot's picture as gradio_client returns it (a PNG data URL)."""
    assert plot["type"] == "matplotlib" and plot["plot"].startswith("data:image/png;base64,")
    image = Image.open(io.BytesIO(base64.b64decode(plot["plot"].split(",", 1)[1])))
    assert image.format == "PNG"
    return image.size


# ---- the page through gradio_client ---------------------------------------------------------------------------------


def test_without_arguments_it_serves_the_shipped_model_and_shows_the_pairs_attention(served, shipped):
    """German in, the shipped model's English out (its greedy translation); the heatmap is the pair's
    encoder-decoder attention of the last layer averaged over heads, target tokens (after <s>) down, source tokens
    (and </s>) across, as the model gives it; the selectors show each kind, layer and head of the same pair."""
    model, tokenizer, target_tokenizer, english = shipped
    assert english and english != SENTENCE
    client = Client(served, verbose=False)
    last = model.config.decoder_layers - 1
    translation, note, heatmap, weights = client.predict(SENTENCE, 1, 16, "cross", last, AVERAGE,
                                                         api_name="/translate")
    assert (translation, note) == (english, "")
    expected = sentence_attention(model, tokenizer, SENTENCE, english, target_tokenizer)
    assert weights["keys"] == expected.source_tokens and weights["keys"][-1] == "</s>"
    assert weights["queries"] == expected.target_tokens and weights["queries"][0] == "<s>"
    shown = torch.tensor(weights["weights"])
    assert shown.shape == (len(expected.target_tokens), len(expected.source_tokens))
    torch.testing.assert_close(shown, expected.weights["cross"][last].mean(0), atol=1e-4, rtol=0)
    width, height = png_size(heatmap)
    assert width > 200 and height > 200

    for kind, layer, head, stack in (("encoder", 0, "2", "encoder"), ("decoder", last, "0", "decoder")):
        heatmap, weights, note = client.predict(kind, layer, head, api_name="/attention")
        assert note == "" and (weights["kind"], weights["layer"], weights["head"]) == (kind, layer, int(head))
        torch.testing.assert_close(torch.tensor(weights["weights"]), expected.weights[kind][layer][int(head)],
                                   atol=1e-4, rtol=0)
        assert weights["queries"] == weights["keys"] == expected.labels(kind)[0]
        png_size(heatmap)
    assert torch.all(torch.tensor(weights["weights"]).triu(1) == 0)  # the decoder's: masked


def test_bad_input_is_answered_on_the_page_in_one_line(served, shipped):
    client = Client(served, verbose=False)
    for empty in ("", "   "):
        translation, note, heatmap, weights = client.predict(empty, 1, 16, "cross", 1, AVERAGE, api_name="/translate")
        assert (translation, heatmap, weights) == ("", None, None)
        assert note == f"the source sentence {empty.strip()!r} is empty: give a sentence to translate"

    positions = json.loads((SHIPPED / "config.json").read_text())["max_position_embeddings"]
    long_line = " ".join(str(i % 10) for i in range(positions + 20))
    tokens = len(shipped[1](long_line)["input_ids"])  # </s> included
    assert tokens > positions
    translation, note, heatmap, weights = client.predict(long_line, 1, 16, "cross", 1, AVERAGE, api_name="/translate")
    assert note == (f"The sentence has {tokens} tokens (`</s>` included), more than the model's "
                    f"{positions} positions: its first {positions - 1} tokens were translated.")
    assert 0 < len(translation.split()) <= 16  # the maximum length
    assert len(weights["keys"]) == positions and weights["keys"][-1] == "</s>"

    with pytest.raises(AppError, match=r"^Value 0 is less than minimum value 1\.$"):  # the slider's own range
        client.predict(LINE, 0, 16, "cross", 1, AVERAGE, api_name="/translate")


def test_eager_attention_is_switched_on_for_the_attention_pass_only(main_job_folder, monkeypatch):
    demo = TranslationDemo(main_job_folder, device="cpu")
    assert demo.model.config._attn_implementation == "sdpa"
    seen = []

    def spy(model, *args, **kwargs):
        seen.append(model.config._attn_implementation)
        return sentence_attention(model, *args, **kwargs)

    monkeypatch.setattr(demo_module, "sentence_attention", spy)
    assert demo.translate(LINE).translation == LINE
    assert seen == ["eager"] and demo.model.config._attn_implementation == "sdpa"


# ---- in a browser ---------------------------------------------------------------------------------------------------


def test_a_browser_types_translates_and_sees_the_heatmap(served, tmp_path):
    problem = chromium_problem()
    if problem is not None:
        pytest.skip(problem)
    with chromium_page() as page:
        seen = translate_on_page(page, served, SENTENCE)
        assert seen["translation"] and seen["translation"] != SENTENCE and seen["note"] == ""
        assert seen["heatmap"][0] > 200 and seen["heatmap"][1] > 200
        page.screenshot(path=str(tmp_path / "demo.png"), full_page=True)
        picture = page.locator("#heatmap img")
        before = picture.get_attribute("src")
        page.get_by_label("Decoder self-attention (masked)").check()  # another kind: the heatmap is drawn again
        page.wait_for_function("([e, before]) => e.getAttribute('src') !== before",
                               arg=[picture.element_handle(), before])
    assert Image.open(tmp_path / "demo.png").size[0] >= 1000


# ---- the command line -----------------------------------------------------------------------------------------------


def refusal(capsys, *argv) -> str:
    with pytest.raises(SystemExit) as exit_info:
        demo_script.main(list(argv))
    assert exit_info.value.code == 2
    return capsys.readouterr().err


def test_a_missing_or_broken_folder_is_refused_at_start_in_one_line(main_job_folder, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert_one_line_error(refusal(capsys, str(tmp_path / "missing")), "demo.py", r"missing does not exist")
    broken = tmp_path / "broken"
    shutil.copytree(main_job_folder, broken)
    (broken / "config.json").write_text("{")
    assert_one_line_error(refusal(capsys, str(broken)), "demo.py", r"config.json is not a JSON object .*corrupt")
    (broken / "config.json").unlink()
    assert_one_line_error(refusal(capsys, str(broken)), "demo.py", r"holds no config.json")
    monkeypatch.setitem(sys.modules, "gradio", None)
    assert_one_line_error(refusal(capsys, str(main_job_folder)), "demo.py", r"gradio is not installed: pip install")
    assert_one_line_error(refusal(capsys, str(main_job_folder), "--examples", "-1"), "demo.py", r"--examples must be")


def test_time_prints_the_seconds_of_one_press_of_translate(main_job_folder, capsys):
    demo_script.main([str(main_job_folder), "--time", LINE, "--repeats", "2", "--num_beams", "2"])
    measured = json.loads(capsys.readouterr().out)
    assert measured["translation"] == LINE and (measured["repeats"], measured["num_beams"]) == (2, 2)
    assert 0 < measured["fastest_seconds"] <= measured["median_seconds"] < 60


def test_examples_are_the_cards_sentence_then_the_validation_splits_first(main_job_folder, tmp_path, monkeypatch):
    validation = synthetic_task_dataset("copy")["validation"]["source"]
    assert example_sentences(main_job_folder, 3) == ["5 3 9 7 0 1 5", *validation[:2]]  # copy_tiny's card example

    monkeypatch.chdir(tmp_path)
    corpus = Path("corpus")  # as train.py was given it: a path from the current folder
    corpus.mkdir()
    for split, sentences in (("train", [f"Satz {i}" for i in range(30)]), ("valid", ["Ein Hund.", "Zwei Katzen."]),
                             ("test", ["Ein Test.", "Noch einer."])):
        (corpus / f"{split}.de").write_text("".join(f"{s}\n" for s in sentences))
        (corpus / f"{split}.en").write_text("".join(f"{s} (en)\n" for s in sentences))
    folder = quick_run(tmp_path / "model", "--data_dir", str(corpus), "--source_lang", "de", "--target_lang", "en",
                       "--vocab_size", "300", "--preset", "tiny", "--max_length", "16")
    assert example_sentences(folder) == ["Ein Test.", "Ein Hund.", "Zwei Katzen."]
    monkeypatch.chdir(folder)  # where the corpus is not: the card's sentence alone
    assert example_sentences(folder) == ["Ein Test."]


# ---- the Space ------------------------------------------------------------------------------------------------------

def test_the_space_runs_with_python_app_py_from_a_copy_outside_the_repository(space, pages, shipped):
    listed, space_dir = space["listed"], space["dir"]
    written = sorted(path.relative_to(space_dir).as_posix() for path in space_dir.rglob("*") if path.is_file())
    assert listed == written
    assert {"app.py", "requirements.txt", "README.md", "model/model.safetensors", "model/tokenizer.json",
            "model/config.json", "modeling/inference/demo.py", "modeling/inference/translation.py"} <= set(listed)
    assert not any(name.startswith(("model/runs/", "modeling/training/", "modeling/inference/space"))
                   for name in listed)

    card = SpaceCard.load(space_dir / "README.md")
    assert card.data.sdk == "gradio" and card.data.title == "transformer-de-en" and card.data.app_file == "app.py"
    import gradio

    assert card.data.sdk_version == gradio.__version__ and f"`{SHIPPED.name}`" in card.text
    requirements = [Requirement(line) for line in (space_dir / "requirements.txt").read_text().splitlines()]
    assert {requirement.name for requirement in requirements} >= {"torch", "transformers", "matplotlib"}

    assert not space["copy"].is_relative_to(REPO_ROOT)
    english = shipped[3]
    translation, note, _, weights = Client(pages["space"], verbose=False).predict(
        SENTENCE, 1, 16, "cross", 1, AVERAGE, api_name="/translate")
    assert (translation, note) == (english, "") and weights["keys"][-1] == "</s>"


def test_push_to_hub_space_refuses_what_it_cannot_do_in_one_line(main_job_folder, tmp_path, capsys):
    def refused(*argv) -> str:
        with pytest.raises(SystemExit) as exit_info:
            push_script.main([str(main_job_folder), "you/copy-demo", *argv])
        assert exit_info.value.code == 2
        return capsys.readouterr().err

    assert_one_line_error(refused("--space_dir", str(tmp_path / "s")), "push_to_hub.py", r"--space_dir .*add --space")
    assert_one_line_error(refused("--space", "--revision", "dev"), "push_to_hub.py", r"--revision is for a model")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "app.py").write_text("")
    assert_one_line_error(refused("--space", "--dry_run", "--space_dir", str(tmp_path / "full")), "push_to_hub.py",
                          r"--space_dir .*full is not empty: give a new or empty folder")


def test_push_space_to_hub_creates_a_gradio_space_and_sends_the_space_in_one_commit(main_job_folder, monkeypatch):
    calls = []

    class RecordingApi:  # huggingface_hub's HfApi, as far as push_space_to_hub uses it (through commit_to_hub)
        def __init__(self, **kwargs):
            calls.append(("init", kwargs))

        def create_repo(self, repo_id, **kwargs):
            calls.append(("create_repo", repo_id, kwargs))
            return type("RepoUrl", (), {"repo_id": repo_id})()

        def create_commit(self, **kwargs):
            calls.append(("create_commit", kwargs))
            return "committed"

    monkeypatch.setattr(hub_module, "HfApi", RecordingApi)
    assert push_space_to_hub(main_job_folder, "you/copy-demo", token="t") == "committed"
    (_, created, options), (_, commit) = calls[1], calls[2]
    assert created == "you/copy-demo" and options["repo_type"] == "space" and options["space_sdk"] == "gradio"
    assert commit["repo_type"] == "space" and commit["repo_id"] == "you/copy-demo"
    assert [operation.path_in_repo for operation in commit["operations"]] == list(space_files(main_job_folder,
                                                                                             "you/copy-demo"))
    monkeypatch.undo()
    with pytest.raises(HubUploadError, match=r"^Could not push the Space of .* as 'you/copy-demo'"):
        push_space_to_hub(main_job_folder, "you/copy-demo", token="t", endpoint=f"http://127.0.0.1:{free_port()}")
