"""What would give an exercise's answer away, and where the walk must not show it.

The answers live in modeling/learning/solutions.py (the reference solutions, which the learner's notebook imports
where an answer fails its check, and which the solutions notebook shows). `GIVEAWAYS` holds, for each exercise, what
its answer looks like in code; each pattern must find the reference solution (tests/test_annotated.py), so that it
can find the answer anywhere else. `checks.given_away(text)` names each place that shows an answer too early:

- the page's code (cells and excerpts) between an exercise and its `<!-- solution: NAME -->` break;
- the page's printouts up to that break that show a number the exercise's check compares with
  (`exercises.checked_values`), to the digits printed: the learner could copy it instead of computing it;
- the learner's notebook, anywhere: none of its code cells holds an answer (its solution regions are left out and
  each is replaced by `yours_or_reference`), and its prose shows one only folded in a `<details>` block (the
  package's own code, which holds some answers, is folded there: `notebook.build_notebook`).
"""

from __future__ import annotations

import re

GIVEAWAYS = {  # exercise -> a regular expression that finds its answer in code
    "relative_position_rotation": r"rotation\[[^\]]*\]\s*=",
    "causal_mask": r"\b(?:triu|tril)\b",
    "attention": r"key\.transpose\(\s*(?:-2\s*,\s*-1|2\s*,\s*3)\s*\)",
    "split_heads": r"\.view\([^)]*\)\.transpose\(\s*1\s*,\s*2\s*\)",
    "merge_heads": r"\.transpose\(\s*1\s*,\s*2\s*\)\.(?:reshape|contiguous)\(",
    "SublayerConnection": r"\+\s*self\.dropout\(\s*sublayer\(",
    "DecoderLayer": r"self\.(?:src_attn|encoder_attn)\(\s*x\s*,",
    "noam_rate": r"step\s*\*\s*warmup_steps\s*\*\*\s*-\s*1\.5",
    "smoothed_target": r"\[\s*:\s*,\s*pad_token_id\s*\]\s*=\s*0",
    "greedy_step": r"\[\s*:\s*,\s*-1\s*\]\)?\.argmax\(",
}
_NUMBER = re.compile(r"(?<![\w.])(?P<mantissa>\d+(?:\.\d+)?)(?:e(?P<exponent>[-+]?\d+))?(?![\w.])")


def shows(printed: str, value: float) -> str | None:
    """The number in `printed` that is `value` to the digits it shows, if one shows at least 3 significant digits
    (fewer would match too much by chance); else None."""
    for match in _NUMBER.finditer(printed):
        mantissa, exponent = match["mantissa"], int(match["exponent"] or 0)
        digits = mantissa.replace(".", "").lstrip("0")
        if len(digits) < 3:
            continue
        decimals = len(mantissa.partition(".")[2])
        if abs(float(match.group(0)) - value) <= 0.5 * 10.0 ** (exponent - decimals) * (1 + 1e-9):
            return match.group(0)
    return None


__all__ = ["GIVEAWAYS", "shows"]
