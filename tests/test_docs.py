"""The front door and the manual: a README of at most 250 lines that links every page of docs/, user pages that
tell no story of how the project was made (no commit hashes, no "issue", no "this session"), and nothing users get
(code, help texts, configs, docs, benchmarks' JSON) that speaks of the workshop it was built in."""

import json
import re
import subprocess
from pathlib import Path

import pytest
from docs_helpers import prose

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
# Words of how the project is built, which mean nothing to a user: where the tests find their shared data, the
# machines lent for GPU runs, the work items. Only tests/ and the experiments' log may use them.
BUILD_WORDS = re.compile(r"\bleases?\b|\.\./shared|\bthe issue\b|\bthis session\b|device_carry", flags=re.I)
BUILD_WORDS_ALLOWED = ("tests/", "docs/experiments.md")
MANUAL = ["training", "data", "results", "performance", "guarantees", "architecture", "experiments", "annotated"]
USER_PAGES = [README, ROOT / "model_card.md", *(ROOT / "docs" / f"{page}.md" for page in MANUAL)]


def test_the_readme_is_a_front_door_of_at_most_250_lines_that_renders_on_pypi():
    assert len(README.read_text().splitlines()) <= 250
    markdown = pytest.importorskip("readme_renderer.markdown")
    html = markdown.render(README.read_text(), variant="GFM")  # as PyPI renders a text/markdown description
    assert html is not None and html.count("<table>") >= 1 and re.search(r"<h2[^>]*>Results<", html)


@pytest.mark.parametrize("page", MANUAL)
def test_the_readme_links_every_page_of_the_manual_and_each_exists(page):
    assert f"(docs/{page}.md)" in README.read_text()
    assert (ROOT / "docs" / f"{page}.md").is_file()


@pytest.mark.parametrize("page", USER_PAGES, ids=lambda path: path.relative_to(ROOT).as_posix())
def test_user_pages_name_no_commit_issue_session_or_machine(page):
    text = page.read_text()
    assert not re.findall(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b", text), "a commit hash"
    assert not re.findall(r"\b(?:the )?issues?\b|this session|this machine|next lease", text, flags=re.I)


@pytest.mark.parametrize("page", USER_PAGES, ids=lambda path: path.relative_to(ROOT).as_posix())
def test_every_relative_link_of_a_user_page_points_at_a_file(page):
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", prose(page.read_text())):
        if not re.match(r"[a-z]+://|mailto:", target):
            assert (page.parent / target).exists(), f"{page.name} links {target}, which does not exist"


def repository_files(root: Path) -> list[Path]:
    """Every file of the repository a clone holds, and every new one not ignored (all files outside a git checkout)."""
    try:
        listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=root,
                                capture_output=True, text=True, check=True).stdout.splitlines()
    except (OSError, subprocess.CalledProcessError):
        return sorted(path for path in root.rglob("*") if path.is_file() and ".git" not in path.parts)
    return sorted(root / name for name in listed if (root / name).is_file())


EMBEDDED_PICTURE = re.compile(r'^\s*"image/(?:png|jpeg)": "')


def found_in_files(root: Path, pattern: re.Pattern, allowed: tuple[str, ...]) -> list[str]:
    """"path:line: match" for each match of `pattern` in a text file under `root`, outside the paths `allowed`."""
    found = []
    for path in repository_files(root):
        relative = path.relative_to(root).as_posix()
        if relative.startswith(allowed):
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):  # pictures, archives
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if EMBEDDED_PICTURE.match(line):  # a notebook's base64 picture: letters, not words
                continue
            found += [f"{relative}:{number}: {match.group()}" for match in pattern.finditer(line)]
    return found


def build_words(root: Path) -> list[str]:
    """"path:line: word" for each build word in a text file under `root`, outside tests/ and docs/experiments.md."""
    return found_in_files(root, BUILD_WORDS, BUILD_WORDS_ALLOWED)


def test_nothing_users_get_speaks_of_how_the_project_is_built():
    assert build_words(ROOT) == []


def test_the_build_words_check_finds_an_inserted_word(tmp_path):
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "recipe.yaml").write_text("max_steps: 10\nstop_time_hours: 0.25  # the lease's budget\n")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_x.py").write_text("# data from ../shared/data\n")  # tests may name it
    (tmp_path / "scripts.py").write_text("HELP = 'a release, please'\n")  # no word, only letters of one
    assert build_words(tmp_path) == ["configs/recipe.yaml:2: lease"]


# What a results file may not hold: the machinery around a measurement (time-limit variables of a runner, scripts
# that are not the project's, absolute paths of the machine it ran on), as against the command that produced it.
MACHINERY = re.compile(r"\b[A-Z_]+_S=\d+|session\.sh|stage\.sh|benchmarks/device/|(?<![\w.$])/(?:tmp|work|root|home)/|"
                       r"\$TMPDIR/")
NAMED_FILE = re.compile(r"(?<![\w./$-])((?:scripts|benchmarks|tools)/[\w./-]+\.(?:py|sh))\b")


def machinery(root: Path) -> list[str]:
    """"file: what" for each piece of machinery in a results JSON of `root/benchmarks`, and each script it names that
    the repository does not hold."""
    found = []
    for path in sorted((root / "benchmarks").glob("*.json")):
        text = path.read_text(encoding="utf-8")
        found += [f"{path.name}: {match.group()}" for match in MACHINERY.finditer(text)]
        found += [f"{path.name}: names {name}, which does not exist" for name in dict.fromkeys(NAMED_FILE.findall(text))
                  if not (root / name).is_file()]
    return found


def test_results_files_record_commands_not_the_machinery_around_them():
    assert machinery(ROOT) == []


def test_each_benchmark_file_records_the_command_that_writes_it():
    """A results file of scripts/benchmark.py names itself as the command's --output (or its default), so that the
    recorded command, run again, writes that file."""
    checked = 0
    for path in sorted((ROOT / "benchmarks").glob("results-*.json")):
        results = json.loads(path.read_text(encoding="utf-8"))
        command = results.get("environment", {}).get("command", "") if isinstance(results.get("environment"), dict) \
            else ""
        if not re.match(r"(?:python )?scripts/benchmark\.py\b", command):
            continue
        checked += 1
        own = f"benchmarks/{path.name}"
        assert results["settings"]["output"] == own, path.name
        given = re.search(r"--output (\S+)", command)
        assert given is None or given[1] == own, (path.name, command)
    assert checked >= 15


def test_the_machinery_check_finds_a_runner_variable_a_path_and_a_missing_script(tmp_path):
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "train.py").write_text("")
    (tmp_path / "benchmarks" / "results-x.json").write_text(
        '{"how": "LEASE_S=700 python scripts/train.py --output_dir /tmp/run", "then": "scripts/gone.py",'
        ' "data": "$TMPDIR/corpus", "ok": "python scripts/train.py --output_dir outputs/run"}')
    assert machinery(tmp_path) == ["results-x.json: LEASE_S=700", "results-x.json: /tmp/", "results-x.json: $TMPDIR/",
                                   "results-x.json: names scripts/gone.py, which does not exist"]


def test_the_readme_and_the_data_page_show_the_download_command_that_train_py_prints():
    """One command gets Multi30k: the one a missing --data_dir prints, as the README and docs/data.md show it."""
    from modeling.data.corpus import MULTI30K_DOWNLOAD

    for page in (README, ROOT / "docs" / "data.md"):
        shown = re.search(r"^(mkdir -p data/multi30k .*\\\n.*)$", page.read_text(), flags=re.M)
        assert shown and " ".join(shown[1].replace("\\\n", " ").split()) == MULTI30K_DOWNLOAD, page.name


# What stands in for something not known yet, which a user would meet as a dead link or a bare note
# YOUR-ACCOUNT in capitals is ours to fill in; "your-name/model" in a help text is the user's to choose
PLACEHOLDERS = re.compile(r"YOUR[-_](?:ACCOUNT|NAME|ORG|USER)|(?i:lorem ipsum|REPLACE[-_ ]ME)|\b(?:TODO|FIXME|XXX)\b")


def placeholders(root: Path) -> list[str]:
    """"path:line: word" for each placeholder in a text file under `root` outside tests/ (docs, notebooks, code,
    configs, JSON)."""
    return found_in_files(root, PLACEHOLDERS, ("tests/",))


def test_nothing_users_get_holds_a_placeholder():
    assert placeholders(ROOT) == []


def test_the_placeholder_check_finds_an_address_not_known_yet(tmp_path):
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "notebooks" / "walk.ipynb").write_text('{"source": ["https://github.com/YOUR-ACCOUNT/x"],\n'
                                                        ' "image/png": "iVBXXXw0"}\n')  # a picture's letters pass
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_x.py").write_text("# TODO here is allowed\n")
    (tmp_path / "demo.py").write_text('gr.Textbox(placeholder="a sentence to translate")  # todo-list: a word\n')
    assert placeholders(tmp_path) == ["notebooks/walk.ipynb:1: YOUR-ACCOUNT"]
