"""What the tests of the user pages share."""

import re


def prose(text: str) -> str:
    """A Markdown text without its fenced code blocks (where `x[i](y)` is code, not a link, and `# x` no heading)."""
    return re.sub(r"^```.*?^```", "", text, flags=re.MULTILINE | re.DOTALL)
