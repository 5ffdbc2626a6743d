"""The action's gate step: run the cases, compare the run with the committed
baseline, and say what the gate decided, the way a GitHub Actions step does.

    INPUT_MODELS=openai/gpt-5.6-sol INPUT_BASELINE=baseline.json \
        GITHUB_OUTPUT=out.txt GITHUB_STEP_SUMMARY=summary.md \
        .venv/bin/python action/gate.py

Every setting comes from the environment, where the action's `env:` puts its
inputs (never into a script's text): INPUT_MODELS (space-separated),
INPUT_SUITE, INPUT_CASES, INPUT_INSTRUCTIONS, INPUT_BASELINE (empty: no comparison),
INPUT_REPEATS, INPUT_PROVE (used instead of the repeats when given), INPUT_ALLOW_FAILURES,
INPUT_JOBS, INPUT_MAX_COST; PERPLEXITY_API_KEY; and what Actions sets itself
(GITHUB_OUTPUT, GITHUB_STEP_SUMMARY, GITHUB_EVENT_NAME, GITHUB_EVENT_PATH,
RUNNER_TEMP). The record and the reports go into a new folder under
RUNNER_TEMP.

The gate's code: 2 if the run or the comparison gave no verdict, else 1 if
either found a failure, else 0. It is written as the output `exit-code` (with
`verdict`: pass, regression or no-verdict; `new-failures`: how many compared
(model, case) pairs lost pass rate, empty without a comparison; `record`,
`page`, `comparison` and `folder`: paths, empty when not written), in
gate.json in that folder (for the pull-request comment) and in the step
summary: a plain line below each script's own view, then the gate's line
(without a key, only the line that says why nothing ran). A SIGINT or SIGTERM (a cancelled job) is handed to the
script running, which saves what it has; the gate then has no verdict.

Exit codes: 0 once the outputs are written (the action's last step exits
with the gate's code), 2 when they cannot be.
"""

import json
import os
import signal
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)  # the runner's own files, beside this folder
sys.path.insert(0, ROOT)

import checker  # noqa: E402 - from ROOT
import compare_runs  # noqa: E402
import record  # noqa: E402
from vocabulary import BETTER, GATING, NEW_FAILURE, RECOVERED, WORSE  # noqa: E402

VERDICTS = {0: "pass", 1: "regression", 2: "no-verdict"}
CHANGED = (NEW_FAILURE, WORSE, RECOVERED, BETTER)  # the rows a comment lists
FORK_LINE = ("no verdict: no secrets on fork pull requests; run the change from a branch "
             "of this repository, or by hand (workflow_dispatch)")
NO_KEY_LINE = ("no verdict: PERPLEXITY_API_KEY is not set; give the step that uses this "
               "action env: PERPLEXITY_API_KEY: ${{ secrets.PERPLEXITY_API_KEY }}")
RUN_LINES = {
    0: "Regression run: PASS (exit 0), every check passed.",
    1: "Regression run: REGRESSION (exit 1), a model failed a check.",
    2: "Regression run: NO VERDICT (exit 2), could not run or stopped early (see the "
       "step's log: cost limit? API error? a bad input?).",
}
COMPARE_LINES = {
    0: "Baseline comparison: OK (exit 0), no new failure.",
    1: "Baseline comparison: REGRESSION (exit 1), a pass rate fell against the baseline "
       "(NEW_FAILURE or WORSE).",
    2: "Baseline comparison: NOT_COMPARABLE (exit 2), no verdict: commit a baseline made "
       "with the same models, cases, instructions and repeats (see the step's log).",
}
CANCELLED_LINE = ("Regression run: CANCELLED (exit {code}); the record in the artifact keeps "
                  "every saved answer and receipt: finish it with regression.py --resume.")

# --------------------------------------------------------------------------
# Pure: settings in, commands and decisions out.
# --------------------------------------------------------------------------


INPUTS = ("INPUT_MODELS", "INPUT_SUITE", "INPUT_CASES", "INPUT_INSTRUCTIONS", "INPUT_BASELINE",
          "INPUT_HISTORY",
          "INPUT_REPEATS", "INPUT_PROVE", "INPUT_ALLOW_FAILURES", "INPUT_JOBS",
          "INPUT_MAX_COST")  # each is data


def input_problem(env):
    """Why an input cannot be passed on as data, or None: a value starting with
    "-" would be read by the scripts as a flag (--instructions /etc/hostname)."""
    for name in INPUTS:
        for token in env.get(name, "").split():
            if token.startswith("-"):
                return (f"the input {name[len('INPUT_'):].lower().replace('_', '-')} holds "
                        f"{token[:40]!r}, which starts with '-'; inputs are values, never "
                        "flags: remove it")
    return None


def runner_args(env, folder, summary):
    """regression.py's arguments for the inputs in env, writing into folder."""
    args = []
    models = env.get("INPUT_MODELS", "").split()
    if models:
        args += ["--models", *models]
    for flag, name in (("--suite", "INPUT_SUITE"), ("--cases", "INPUT_CASES"),
                       ("--instructions", "INPUT_INSTRUCTIONS"),
                       ("--jobs", "INPUT_JOBS"), ("--max-cost", "INPUT_MAX_COST")):
        if env.get(name, "").strip():
            args += [flag, env[name].strip()]
    if env.get("INPUT_PROVE", "").strip():
        args += ["--prove", env["INPUT_PROVE"].strip()]
        if env.get("INPUT_ALLOW_FAILURES", "").strip():
            args += ["--allow-failures", env["INPUT_ALLOW_FAILURES"].strip()]
    elif env.get("INPUT_REPEATS", "").strip():
        args += ["--repeats", env["INPUT_REPEATS"].strip()]
    args += ["--check-models",  # a misspelt model stops the gate before anything is paid
             "--out", os.path.join(folder, "results.json"),
             "--junit", os.path.join(folder, "junit.xml"),
             "--html", os.path.join(folder, "regression-run.html")]
    return args + (["--summary-md", summary] if summary else [])


def fork_pull_request(event_name, event):
    """True for a pull request whose head lives in another repository (a fork,
    or one deleted since): GitHub gives its workflows no secrets."""
    if not event_name.startswith("pull_request"):
        return False
    pull = event.get("pull_request") or {}
    head = ((pull.get("head") or {}).get("repo") or {}).get("full_name")
    base = ((pull.get("base") or {}).get("repo") or {}).get("full_name")
    return head is None or head != base


def gate_code(run_code, compare_code=None):
    """2 if either gave no verdict (anything but 0 or 1), else 1 if either failed, else 0."""
    codes = [run_code] + ([] if compare_code is None else [compare_code])
    if any(code not in (0, 1) for code in codes):
        return 2
    return 1 if 1 in codes else 0


def changed_rows(items):
    """The compared (model, case) pairs whose pass rate changed, as a comment lists them."""
    def rate(rows):
        return f"{sum(1 for row in rows if row['passed'])}/{len(rows)}"

    return [{"label": item["label"], "model": compare_runs.model_name(item),
             "case": item["case_id"], "before": rate(item["before"]),
             "after": rate(item["after"])}
            for item in items if item["label"] in CHANGED]


def output_text(outputs):
    """outputs as $GITHUB_OUTPUT lines (a value with a line break in a delimited block)."""
    lines = []
    for name, value in outputs.items():
        value = "" if value is None else str(value)
        if "\n" in value or "\r" in value:
            lines += [f"{name}<<GATE_OUTPUT_END", value, "GATE_OUTPUT_END"]
        else:
            lines.append(f"{name}={value}")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------
# I/O: the two scripts, the outputs, the summary.
# --------------------------------------------------------------------------


class Child:
    """The script running now; SIGINT and SIGTERM are handed on to it.

    Actions cancels a step by signalling its process alone: the script must
    hear of it from here to save what it has paid for.
    """

    def __init__(self):
        self.process = None
        self.signalled = None

    def forward(self, signum, _frame):
        self.signalled = signum
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signum)

    def run(self, script, args):
        """The script's exit code (128 + N when signal N ended it), or that of
        the signal that came before it could start."""
        if self.signalled:
            return 128 + self.signalled
        self.process = subprocess.Popen([sys.executable, os.path.join(ROOT, script), *args])
        if self.signalled:  # it came between the check above and the start
            self.process.send_signal(self.signalled)
        code = self.process.wait()
        self.process = None
        return 128 - code if code < 0 else code


def append(path, line):
    """One paragraph at the end of the step summary (none outside Actions)."""
    if path:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(line + "\n\n")


def read_event(path):
    try:
        with open(path, encoding="utf-8") as handle:
            event = json.load(handle)
    except (OSError, ValueError):
        return {}
    return event if isinstance(event, dict) else {}


def comparison_result(baseline, results):
    """The comparison as compare_runs.py judged it, or None if it cannot be read."""
    try:
        return compare_runs.comparison(record.load(baseline), record.load(results),
                                       paths=(baseline, results))
    except ValueError:
        return None


def run_verdict(results):
    """The run's verdict line, derived from its saved responses, or None
    without a readable record."""
    try:
        return checker.verdict_line(record.derived_summary(record.load(results)))
    except (ValueError, KeyError, TypeError):
        return None


def history_of(child, history, record_path, folder):
    """(the pairs that are not STABLE, a note) of the history of the records in the
    history folder and this run's record; it never changes the gate's code."""
    out = os.path.join(folder, "history.json")
    code = child.run("compare_runs.py", ["--history", history,
                                         *([record_path] if os.path.exists(record_path) else []),
                                         "--json", out])
    why_not = (f"History: not shown: {history} holds no record of this suite that could be "
               f"read (exit {code}; the step's log names each file); the gate is unchanged.")
    try:
        with open(out, encoding="utf-8") as handle:
            shown = json.load(handle)
        pairs, records = shown["pairs"], shown["records"]
        earlier = [entry for entry in records
                   if os.path.realpath(entry["path"]) != os.path.realpath(record_path)]
    except (OSError, ValueError, KeyError, TypeError):
        return [], why_not
    if not earlier:  # this run alone is no history
        return [], why_not
    unstable = [pair for pair in pairs if isinstance(pair, dict) and pair.get("label") != "STABLE"]
    return unstable, None


def gate(env, child, folder):
    """(outputs, what a pull-request comment says) of one gate writing into folder."""
    summary = env.get("GITHUB_STEP_SUMMARY", "")
    paths = {name: os.path.join(folder, file) for name, file in (
        ("record", "results.json"), ("page", "regression-run.html"),
        ("comparison", "regression-comparison.html"))}
    baseline = env.get("INPUT_BASELINE", "").strip()
    said = {"baseline": baseline, "run_verdict": None, "compared": None, "changed": [],
            "new_failures": None, "lines": []}

    def say(line):  # each line right below the view its script appended
        said["lines"].append(line)
        append(summary, line)

    problem = input_problem(env)
    if problem:
        say(f"Regression run: NOT STARTED (exit 2): {problem}.")
        code = 2
    elif not env.get("PERPLEXITY_API_KEY"):
        fork = fork_pull_request(env.get("GITHUB_EVENT_NAME", ""),
                                 read_event(env.get("GITHUB_EVENT_PATH", "")))
        say(FORK_LINE if fork else NO_KEY_LINE)  # the summary's one line: nothing ran
        code = 2
    else:
        run_code = child.run("regression.py", runner_args(env, folder, summary))
        say(CANCELLED_LINE.format(code=run_code) if run_code in (130, 143)
            else RUN_LINES.get(run_code, f"Regression run: ERROR (exit {run_code})."))
        said["run_verdict"] = run_verdict(paths["record"])
        compare_code = None
        if run_code in (0, 1) and baseline:
            compare_code = child.run("compare_runs.py", [
                baseline, paths["record"], "--html", paths["comparison"],
                *(["--summary-md", summary] if summary else [])])
            say(COMPARE_LINES.get(compare_code,
                                  f"Baseline comparison: ERROR (exit {compare_code})."))
            result = comparison_result(baseline, paths["record"]) \
                if compare_code in (0, 1) else None
            if result is not None:
                said["compared"] = compare_runs.count_line(result["items"], result["repeats"])
                said["cautions"] = compare_runs.swapped(result["cautions"])
                said["changed"] = changed_rows(result["items"])
                said["new_failures"] = sum(1 for item in result["items"]
                                           if item["label"] in GATING)
        history = env.get("INPUT_HISTORY", "").strip()
        if history:  # read after the verdict, which it never changes
            said["history"], said["history_note"] = history_of(child, history, paths["record"],
                                                                folder)
        code = gate_code(run_code, compare_code)
        say(f"**Gate: {VERDICTS[code].upper()} (exit {code})**")
    outputs = {"exit-code": code, "verdict": VERDICTS[code],
               "new-failures": "" if said["new_failures"] is None else said["new_failures"],
               **{name: path if os.path.exists(path) else "" for name, path in paths.items()},
               "folder": folder}
    return outputs, {**said, "exit_code": code, "verdict": VERDICTS[code]}


def main():
    child = Child()
    signal.signal(signal.SIGINT, child.forward)
    signal.signal(signal.SIGTERM, child.forward)
    env = dict(os.environ)
    try:
        folder = tempfile.mkdtemp(prefix="agent-regression-", dir=env.get("RUNNER_TEMP") or None)
        outputs, said = gate(env, child, folder)
        with open(os.path.join(folder, "gate.json"), "w", encoding="utf-8") as handle:
            json.dump(said, handle, indent=1)
        text = output_text(outputs)
        if env.get("GITHUB_OUTPUT"):
            with open(env["GITHUB_OUTPUT"], "a", encoding="utf-8") as handle:
                handle.write(text)
        print(text, end="")
    except OSError as exc:
        print(f"gate.py: error: {exc.strerror or exc} ({exc.filename}); no verdict",
              file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
