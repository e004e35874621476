"""The README's two commands, as CI runs them: the first fenced bash block of its "Install and run" section, each
command line without its comment lines (a command continued with a trailing backslash is one command).

    python tools/readme_commands.py             # one command a line: the main run's, then the tests'
    python tools/readme_commands.py --check     # exit 1 unless there are exactly two: training, then the tests

.ci/run reads them from here, so what a newcomer types and what CI runs cannot differ. Standard library only: it
runs before anything is installed.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"
SECTION = "## Install and run"


def readme_commands(text: str) -> list[str]:
    """The commands of the first ```bash block after the README's "Install and run" heading."""
    if SECTION not in text:
        raise ValueError(f"README.md has no '{SECTION}' section")
    block = re.search(r"^```bash\n(.*?)^```", text.split(SECTION, 1)[1], flags=re.S | re.M)
    if block is None:
        raise ValueError(f"README.md's '{SECTION}' section has no ```bash block")
    commands, pending = [], ""
    for line in block[1].splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        pending += line.rstrip("\\").strip() + " " if line.endswith("\\") else line.strip()
        if not line.endswith("\\"):
            commands.append(pending.strip())
            pending = ""
    return commands


def problems(commands: list[str]) -> list[str]:
    """What keeps `commands` from being the README's two: one that trains (the main run), then one that tests."""
    found = []
    if len(commands) != 2:
        found.append(f"expected 2 commands, found {len(commands)}: {commands}")
    else:
        if "scripts/train.py" not in commands[0]:
            found.append(f"the first command does not train (scripts/train.py): {commands[0]}")
        if "pytest" not in commands[1]:
            found.append(f"the second command does not run the tests (pytest): {commands[1]}")
    return found


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    commands = readme_commands(README.read_text(encoding="utf-8"))
    if "--check" in argv:
        for problem in problems(commands):
            print(f"readme_commands.py: {problem}", file=sys.stderr)
        return 1 if problems(commands) else 0
    print("\n".join(commands))
    return 0


if __name__ == "__main__":
    sys.exit(main())
