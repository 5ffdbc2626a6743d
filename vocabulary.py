"""The words both scripts and every view share, defined once.

    LABELS    the four verdicts of a comparison, in the order they are counted
              (BY_CONCERN: the order a view lists them, changes first)
    p_text    how a p-value is written on every view (never a misleading 0.000)
    Parser    argparse with one-line usage errors (CI logs read best that way)
              that name the closest known flag for a mistyped one

It imports nothing of the project, so any module may import it.
"""

import argparse
import difflib

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

    def parse_args(self, args=None, namespace=None):
        # argparse's own, with a hint added: argparse joins the unknown arguments
        # into its message, so they are looked at here, before that.
        namespace, unknown = self.parse_known_args(args, namespace)
        if unknown:
            self.error(f"unrecognized arguments: {' '.join(unknown)}{self.hint(unknown)}")
        return namespace

    def hint(self, unknown):
        """' (did you mean --out?)' for the unknown flags close to a known one, or ''."""
        known = [flag for action in self._actions for flag in action.option_strings]
        close = []
        for arg in unknown:
            if len(arg) > 1 and arg[0] in self.prefix_chars:
                flag = arg.split("=", 1)[0]  # --ouput=x: the value says nothing of the name
                close += [(flag, match) for match in difflib.get_close_matches(flag, known, 1)]
        if len(close) == 1:
            return f" (did you mean {close[0][1]}?)"
        if close:
            return f" (did you mean {', '.join(f'{m} for {f}' for f, m in close)}?)"
        return ""

    def error(self, message):
        one_line = "".join(c if c.isprintable() else ascii(c)[1:-1] for c in str(message))
        self.exit(2, f"{self.prog}: error: {one_line}\n")
