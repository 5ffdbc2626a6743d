"""The words both scripts and every view share, defined once.

    LABELS    the four verdicts of a comparison, in the order they are counted
              (BY_CONCERN: the order a view lists them, changes first)
    p_text    how a p-value is written on every view (never a misleading 0.000)
    Parser    argparse with one-line usage errors (CI logs read best that way)

It imports nothing of the project, so any module may import it.
"""

import argparse

# NEW_FAILURE: passed before, fails now; RECOVERED: the reverse; PASS: passed
# both times; STILL_FAILING: failed both times. The words are an interface:
# CI logs and scripts grep for them, so they appear only on labelled lines.
LABELS = ("NEW_FAILURE", "RECOVERED", "PASS", "STILL_FAILING")
NEW_FAILURE, RECOVERED, PASS, STILL_FAILING = LABELS
BY_CONCERN = (NEW_FAILURE, RECOVERED, STILL_FAILING, PASS)  # how views list them: changes first
SMALL_P = 0.001  # p-values below this are written in exponent form, never as 0.000


def p_text(p_value):
    """A p-value as every view writes it; "-" where there is none (one repeat)."""
    if p_value is None:
        return "-"
    return f"{p_value:.3f}" if p_value >= SMALL_P else f"{p_value:.1e}"


class Parser(argparse.ArgumentParser):
    """argparse with a one-line usage error; --help still shows the whole usage."""

    def error(self, message):
        one_line = "".join(c if c.isprintable() else ascii(c)[1:-1] for c in str(message))
        self.exit(2, f"{self.prog}: error: {one_line}\n")
