"""The words both scripts and every view share, defined once.

    LABELS    the six verdicts of a comparison, in the order they are counted
              (BY_CONCERN: the order a view lists them, changes first);
              label() picks one, MEANINGS says what each means
    p_text    how a p-value is written on every view (never a misleading 0.000)
    Parser    argparse with one-line usage errors (CI logs read best that way)
    mend_standard_streams()  closed descriptors 0-2 opened on /dev/null
              that name the closest known flag for a mistyped one

It imports nothing of the project, so any module may import it.
"""

import argparse
import math
import os
import sys
import time
import difflib

# The labels of a compared (model, case), judged on its pass rate over the
# repeats, before and after. The words are an interface: CI logs and scripts
# grep for them, so they appear only on labelled lines.
LABELS = ("NEW_FAILURE", "WORSE", "RECOVERED", "BETTER", "PASS", "STILL_FAILING")
NEW_FAILURE, WORSE, RECOVERED, BETTER, PASS, STILL_FAILING = LABELS
MEANINGS = {  # what each label says, for every view that explains them
    NEW_FAILURE: "passed every time before, fails at least once now: the change broke "
                 "an approved decision",
    WORSE: "failed some of the time before and fails more often now",
    RECOVERED: "failed at least once before, passes every time now",
    BETTER: "fails less often than before, but still fails",
    PASS: "passed every time, before and now",
    STILL_FAILING: "fails as often as before",
}
GATING = (NEW_FAILURE, WORSE)  # a lower pass rate: the comparison exits 1
BY_CONCERN = (NEW_FAILURE, WORSE, RECOVERED, BETTER, STILL_FAILING, PASS)  # changes first
COUNT_WORDS = {NEW_FAILURE: "new failure", WORSE: "worse", RECOVERED: "recovered",
               BETTER: "better", PASS: "pass", STILL_FAILING: "still failing"}
SMALL_P = 0.001  # p-values below this are written in exponent form, never as 0.000


def p_text(p_value):
    """A p-value as every view writes it; "-" where there is none (one repeat)."""
    if p_value is None:
        return "-"
    return f"{p_value:.3f}" if p_value >= SMALL_P else f"{p_value:.1e}"


def mend_standard_streams():
    """Open /dev/null on standard descriptors 0-2 that were closed at start-up.

    With descriptor 2 closed, the next file opened (the record itself) would
    become descriptor 2, and a warning meant for stderr would land in it. A
    closed stderr is then a quiet one (Python left sys.stderr None, and a
    print to None goes to stdout); a closed stdout stays None, as each script
    reports that itself.
    """
    for number in (0, 1, 2):
        try:
            os.fstat(number)
        except OSError:
            # os.open takes the lowest free number: this one, as 0..number-1 are open.
            os.open(os.devnull, os.O_RDWR)
            if number == 2 and sys.stderr is None:
                sys.stderr = open(2, "w", encoding="utf-8", closefd=False)


class UserError(ValueError):
    """Bad input (a flag, a file, a record, an answer the API gave): raised where
    the input is read, one line on stderr and exit 2. A ValueError, as the
    published compare() and index() raise. Any other exception is a bug."""


CRASH_NAME = "{script}-crash-{stamp}.txt"  # beside the record; a bug report, 0600
CRASH_NAMES = 100  # names tried for crash reports of one second before giving up


def crash_report(script, folder, text):
    """Write a crash's traceback (key redacted by the caller) into a new 0600 file in
    folder (the current one when None); its path, or None when it cannot be written."""
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    for number in range(CRASH_NAMES):  # two crashes in one second: -2, -3...
        name = CRASH_NAME.format(script=script, stamp=stamp + (f"-{number + 1}" if number else ""))
        path = os.path.join(folder or ".", name)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            continue
        except OSError:
            return None
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(text)
        except OSError:
            return None
        return path
    return None


def fisher_drop(before_good, before_runs, after_good, after_runs):
    """One-sided Fisher exact p-value that the pass rate fell (H1: after's < before's).

    With the total of passes fixed, before's passes follow a hypergeometric
    law; p is the chance of at least as many of them as observed.
    """
    total, good = before_runs + after_runs, before_good + after_good
    ways = sum(math.comb(good, k) * math.comb(total - good, before_runs - k)
               for k in range(before_good, min(good, before_runs) + 1))
    return ways / math.comb(total, before_runs)


def label(before_passed, before_runs, after_passed, after_runs):
    """The label of one (model, case) from its passes and runs before and after.

    Monotone: whenever the pass rate after is lower than before, the label
    is one of GATING, so a falling rate can never pass the gate. Rates are
    compared exactly (cross-multiplied), whatever the numbers of runs.
    """
    before_all, after_all = before_passed == before_runs, after_passed == after_runs
    if before_all:
        return PASS if after_all else NEW_FAILURE
    if after_all:
        return RECOVERED
    lower, higher = (after_passed * before_runs < before_passed * after_runs,
                     after_passed * before_runs > before_passed * after_runs)
    return WORSE if lower else BETTER if higher else STILL_FAILING


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
