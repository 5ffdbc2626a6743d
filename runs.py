"""The run's life: a new run, a resume and a regrade, and one rule for what can be resumed.

regression.py parses the command line and sends; this module turns the flags
and the files they name into a Run (what to ask, what is saved, what is left),
keeps each finished row in the record, and says what to do next:

    run = prepare(args, ask)          # UserError with a one-line reason
    with saved_record(run) as saved:  # the record on disk, saved once more on the way out
        take_row(run, plan, saved, index, row, started)
    resume_problem(saved_record)      # why a record cannot be resumed, or None

ask: what regression.py asks with (its run_config, agent_request and judge),
so that nothing here imports the runner.
"""

import argparse
import collections
import contextlib
import dataclasses
import functools
import json
import os
import shlex
import shutil
import stat
import sys
import threading
import time
import tomllib
from datetime import datetime, timezone
from decimal import Decimal, InvalidOperation

import checker
import plans
import record
import reports
import suites
from checker import CONFIDENCE, MODELS, Tally, run_order, same_model, verdict_line
from sending import redact, warn
from vocabulary import UserError

MAX_JOBS = 32  # requests in flight; more mostly buys rate limits
REFUSED_STATUSES = (400, 404, 422)  # the request itself is wrong: a resume cannot help
MAX_RETRIES = 10  # extra attempts after a 429 or 503 that --retries allows
MAX_BUDGET_DIGITS = 12  # --max-cost between 1e-12 and 1e12 USD: any real budget
DEFAULT_RETRIES = 2  # a 429 or 503 is usually over after a wait or two
MAX_INSTRUCTIONS_BYTES = 64 << 10  # an instructions file is a page of rules, not a book
# Statuses defined outside RFC 9110, by the RFC that defines them (a case may cite it).
DEFINING_RFC = {"429": "rfc6585", "428": "rfc6585", "431": "rfc6585", "511": "rfc6585",
                "451": "rfc7725", "103": "rfc8297", "425": "rfc8470", "207": "rfc4918",
                "423": "rfc4918", "424": "rfc4918", "507": "rfc4918", "208": "rfc5842",
                "508": "rfc5842", "226": "rfc3229", "510": "rfc2774"}
PROGRESS_SECONDS = 1.0  # a terminal's status line is redrawn this often
LOG_SECONDS = 10.0  # a log gets a progress line at most this often
REPORTS = ("junit", "summary_md", "html")  # report options, kept in the record's execution
FLAGS = {"junit": "--junit", "summary_md": "--summary-md", "html": "--html"}  # their flags
DEMO_MODELS = ["offline/careful", "offline/hasty"]  # fictional on purpose


# --------------------------------------------------------------------------
# The run: what it asks, what it has, what it says.
# --------------------------------------------------------------------------


def row_line(row):
    """One console line per row: repeat, model, case, verdict, cost, seconds."""
    verdict = "PASS" if row["passed"] else "FAIL " + ",".join(row["reasons"])
    if row.get("error"):
        status = f" HTTP {row['error_status']}" if row.get("error_status") else ""
        message = f": {row['error_message']}" if row.get("error_message") else ""
        verdict += f" ({row['error']}{status}{message})"
    named = row.get("answered_model")
    if named and not same_model(row["model"], named):
        verdict += f" (answered by {named})"
    cost = "cost unknown" if row["cost_usd"] is None else f"${row['cost_usd']}"
    took = "(batch)" if row["seconds"] is None else f"{row['seconds']}s"  # timed by the API
    return reports.visible(f"repeat {row['repeat']} {row['model']} {row['case_id']} "
                           f"{verdict} {cost} {took}")


def resume_problem(saved, config=None):
    """Why this code cannot resume a saved record, or None: the one rule of
    every script that prints a resume command. Only the runner that made a
    record (runner_sha256: every module that makes one), with the same SDK,
    finishes it, and never a synthetic one. config: what this code would send
    for it, which must be the record's own."""
    differing = sorted(k for k in set(config) | set(saved["config"])
                       if saved["config"].get(k) != config.get(k)) if config else []
    if differing:
        return (f"its config differs in {', '.join(differing)} from what this "
                "regression.py sends; start a new run with --out")
    if saved.get("evidence", "live") != "live":
        return "it holds synthetic demo data; run the demo again instead"
    if saved.get("runner_sha256") != record.runner_sha256():
        return ("it was made by another version of the runner (runner_sha256); start a "
                "new run, or re-check it with --regrade")
    if saved.get("sdk_version") != sdk_version():
        return (f"it was made with perplexityai {saved.get('sdk_version')!r}, this is "
                f"{sdk_version()}; start a new run")
    return None


def places(entries):
    """{(model, case id, repeat): index in the plan}."""
    return {(model, case["id"], repeat): index
            for index, (repeat, case, model) in enumerate(entries)}


def next_step(row, out):
    """What to do after an execution error: resume, unless the request itself is refused."""
    if row.get("error") == "SonarRetired":
        return ("--resume would meet the same 403. Run the Agent API instead into a new "
                "record (Perplexity's own Sonar is --models perplexity/sonar), and compare a "
                "chat: record saved before the retirement with it, giving compare_runs.py "
                f"--switch {row.get('model')}=perplexity/sonar (docs/troubleshooting.md: A migration from Sonar).")
    if row.get("error_status") in (400, 403) and "background" in (row.get("error_message")
                                                                  or "").lower():
        return ("The API refused background mode for this organization: start a new run "
                "with --foreground, which sends requests plainly.")
    if row.get("error_status") in REFUSED_STATUSES:
        return ("The API refused the request itself, so sending it again fails the same "
                "way: fix the model name (or the SDK version) and start a new run with --out.")
    return f"Fix the cause shown above, then: {command_hint('--resume', out)}"


def command_hint(*args):
    """A command line that runs as printed from the current folder."""
    runner = os.path.join(os.path.dirname(os.path.abspath(__file__)), "regression.py")
    python = os.path.relpath(sys.executable)
    script = os.path.relpath(runner)
    python = python if not python.startswith("..") else sys.executable
    script = script if not script.startswith("..") else runner
    if os.sep not in python:
        python = "." + os.sep + python
    return shlex.join([python, script, *args])


@functools.cache  # parsing the package's metadata costs milliseconds; it never changes
def sdk_version():
    import importlib.metadata  # 0.1 s of imports that only a record's head needs

    try:
        return importlib.metadata.version("perplexityai")
    except importlib.metadata.PackageNotFoundError:
        return None


def read_file(path, what, limit):
    """The bytes of a small regular file, or UserError with a one-line reason."""
    if os.path.isdir(path):  # a folder opens for reading, then fails to read
        raise UserError(f"{what} {path} is a folder; give a file")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO must not hang us
        with os.fdopen(fd, "rb") as handle:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode) or info.st_size > limit:
                raise UserError(f"{what} {path} must be a regular file of at most "
                                 f"{limit >> 10:,} KiB")
            return handle.read(limit + 1)
    except OSError as exc:
        raise UserError(f"cannot read {what} {path}: {exc.strerror or exc}") from None


def demo_clock(demo):
    """Now, or for the demo the instant SOURCE_DATE_EPOCH names (seconds since
    1970): `make screenshots` draws the same pages byte for byte each time."""
    fixed = os.environ.get("SOURCE_DATE_EPOCH", "") if demo is not None else ""
    if fixed.isdigit():
        return datetime.fromtimestamp(int(fixed), timezone.utc)
    return datetime.now(timezone.utc)


def load_cases(path):
    """Cases from a .json or .toml file; UserError with the reason."""
    data = read_file(path, "--cases", record.MAX_RECORD_BYTES)
    try:
        if path.endswith(".toml"):
            parsed = tomllib.loads(data.decode("utf-8"))
        elif path.endswith(".json"):
            parsed = json.loads(data)
        else:
            raise UserError(f"{path}: name it .json or .toml")
    except (UnicodeDecodeError, tomllib.TOMLDecodeError, json.JSONDecodeError,
            RecursionError) as exc:
        raise UserError(f"{path}: cannot parse it ({exc})") from None
    cases = record.validate_cases(parsed, path)
    problem = suites.repeated_question(cases)
    if problem:
        raise UserError(f"{path}: {problem}")
    for number, case in enumerate(cases, 1):
        problem = citation_rule_problem(case)
        if problem:
            raise UserError(f"{path}: case {number} ({case['id']}): {problem}")
    return cases


def citation_rule_problem(case):
    """Why a case of the built-in domain breaks its published rule (a 429 cites
    RFC 6585, any other status RFC 9110 or its own defining RFC), or None: a run
    of it would report a false failure, as the instructions ask for that RFC."""
    own = DEFINING_RFC.get(case["expected"])
    wanted = [own] if case["expected"] == "429" else ["rfc9110", *([own] if own else [])]
    if case["rfc"] in wanted:
        return None
    return (f"field rfc is {case['rfc']}, but status {case['expected']} is cited with "
            f"{' or '.join(wanted)} (the built-in instructions' rule); give rfc "
            f"{wanted[0]!r}")


def load_instructions(path):
    """The advisor's instructions from a UTF-8 text file, exactly as they will be sent."""
    data = read_file(path, "--instructions", MAX_INSTRUCTIONS_BYTES)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise UserError(f"--instructions {path} is not UTF-8 text") from None
    if not text.strip():
        raise UserError(f"--instructions {path} is empty")
    return text


def money(text):
    """argparse type for --max-cost: a positive, finite number of USD."""
    try:
        value = Decimal(text)
    except InvalidOperation:
        raise argparse.ArgumentTypeError(f"not a number of USD: {text!r}") from None
    if not value.is_finite():
        raise argparse.ArgumentTypeError(f"must be a finite number of USD, got {text}")
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be more than 0 USD, got {text}")
    if value.adjusted() > MAX_BUDGET_DIGITS:
        raise argparse.ArgumentTypeError(f"must be at most a trillion USD, got {text}")
    if value.adjusted() < -MAX_BUDGET_DIGITS:
        raise argparse.ArgumentTypeError(f"must be at least a trillionth of a USD, got {text}")
    return value


@dataclasses.dataclass(kw_only=True)
class Run:
    """What one invocation runs and records, and the rows it has so far, in four
    groups: what it asks, where it is saved, what it has, and how it is going.
    Made by new_run, resume_run or regrade_run, every field by its name."""

    # What it asks: the plan (entries, places, in __post_init__) is built from these.
    models: list
    cases: list
    repeats: int
    instructions: str
    suite: dict = None  # what the run asks and how it judges: checker.BUILTIN_SUITE or a file's
    # regression.py's config, request and judge (config, request, judge, forced_search):
    # what a run asks with, given by the runner so that nothing here imports it.
    ask: object = None
    cases_file: str = None  # the --cases or --suite file of a new run
    demo: str = None  # the demo's folder: a simulated API answers
    regrade: bool = False  # re-checks saved responses: sends nothing
    # Where it is saved: the record's path, its head and execution, the reports.
    out: str
    head: dict  # the record's fields before its runs
    execution: dict  # settings that cannot change an answer
    reports: dict  # "junit", "summary_md", "html" -> path or None
    replace: bool = False  # resume: the record at out is rewritten in place
    lock: tuple = None  # a resume's lock on the record, taken before reading it
    record: object = None  # the open RecordFile, while the run may save into it
    copied: object = None  # () -> (index, whole row) the new record starts with
    saved_execution: dict = None  # a regrade: the regraded record's own execution
    # What it has: the rows (plan index -> row), kept from a resumed record, then
    # each finished one.
    rows: dict
    secrets: list  # what every row and message is redacted of
    # plan index -> {"id", "model", "case_id", "repeat"}: a request sent, its row not
    # yet saved; "id" is the response's id once it came back, null before that.
    pending: dict = dataclasses.field(default_factory=dict)
    # --batch: {"parts": [{"start", "stop", "input_file_id", "batch_id", "status",
    # "collected", ...}]}, each step saved before the next (see batching.py).
    batch: dict = None
    notes: list = dataclasses.field(default_factory=list)  # how far verdicts rest on receipts
    # How it is going.
    started: bool = False  # the record exists on disk
    output_error: str = None  # why standard output failed mid-run
    progress: object = None  # the status line while answers are pending (Progress)
    warned_cost: bool = False  # a row without a reported cost was mentioned once
    sent: int = 0  # requests this invocation sent (each attempt of a row counts)
    sent_errors: int = 0  # rows of this invocation that ended in an execution error

    def __post_init__(self):
        self.saving = threading.Lock()  # one save at a time: rows and receipts
        self.entries = run_order(self.models, self.cases, self.repeats)
        self.places = places(self.entries)
        self.prove = self.head["config"].get("prove")
        self.tally = Tally(self.models, self.repeats, self.cases,
                           (self.prove or {}).get("confidence", self.execution["confidence"]),
                           self.prove)
        for row in self.rows.values():
            self.tally.add(row)
        self.dropped = {index for row in self.rows.values() for index in self.stopped_pair(row)}
        self.summary = self.tally.summary(brief=True)  # changes only when a row is kept

    def todo(self):
        return [(index, entry) for index, entry in enumerate(self.entries)
                if index not in self.rows and index not in self.dropped]

    def direct(self):
        """What is still to do and sent request by request: all but a batch's rows."""
        return [(index, entry) for index, entry in self.todo() if not self.in_batch(index)]

    def blocked(self, index):
        """A proving pair's repeat waits until the pair's previous repeat is in."""
        repeat, case, model = self.entries[index]
        return repeat > 0 and self.places[(model, case["id"], repeat - 1)] not in self.rows

    def stopped_pair(self, row):
        """Once a proving pair's plan has decided it (qualified, or not): the
        places of its repeats never sent."""
        pair = self.tally.pairs.get((row["model"], row["case_id"])) if self.prove else None
        if pair is None or self.tally.state(pair) == "running":
            return []
        return [self.places[(row["model"], row["case_id"], repeat)]
                for repeat in range(pair["last"] + 1, self.repeats)]

    def tail(self, final=False):
        """The record's members after its rows: O(jobs) until the last save,
        which adds the per-case rates and bounds (final)."""
        receipts = {"pending": {str(index): entry for index, entry in sorted(
            self.pending.items())}} if self.pending else {}
        batch = {"batch": self.batch} if self.batch is not None else {}
        summary = self.tally.summary() if final else self.summary
        return {**receipts, **batch, "execution": self.execution, "summary": summary}

    def in_batch(self, index):
        """Whether a batch answers this row: nothing of it is sent directly."""
        if self.batch is None:
            return False
        if not self.batch["parts"]:  # planned from what is still to do, on its first run
            return True
        return any(part["start"] <= index < part["stop"] and not part["collected"]
                   for part in self.batch["parts"])

    def checkpoint(self):
        """Save the record's tail now (a batch step, before the next one)."""
        with self.saving:
            self.record.save(self.tail())

    def saved_id(self, index):
        """The response id an earlier process saved for this row, or None."""
        return self.pending.get(index, {}).get("id")

    def sending(self, index, entry):
        """Save that this row's request is about to leave (no id yet)."""
        repeat, case, model = entry
        self.keep(index, {"id": None, "model": model, "case_id": case["id"], "repeat": repeat})

    def received(self, index, response_id):
        """Save the id of this row's response the moment it arrives: its receipt.
        UserError for an id that cannot be one, or that holds the key: nothing
        of it is saved, so the row is sent again."""
        if not record.saved_id(response_id):
            raise UserError("the API gave a response id that is not an id (a '/', a "
                             f"control character or over {record.MAX_ID_CHARS} characters)")
        if redact(response_id, self.secrets) != response_id:
            raise UserError("the API gave a response id that holds the API key; it is not "
                             "kept, and the row will be sent again (it may be paid twice)")
        self.keep(index, {**self.pending.get(index, {}), "id": response_id})

    def keep(self, index, entry):
        with self.saving:
            if self.record is None:
                return  # the run has ended: the record is closed
            self.pending[index] = entry
            self.record.save(self.tail(), durable=False)  # the page cache suffices

    def title(self):
        return f"Regression run {self.out}" + (" (synthetic demo)" if self.demo else "")

    def cases_source(self):
        """The file that holds this run's cases, which each JUnit testcase names:
        the --cases file, regression.py for the built-in cases, else the record
        itself (a resume or a regrade: the record keeps them in config.cases)."""
        if self.cases_file is not None:
            return self.cases_file
        return "regression.py" if self.cases == checker.CASES else self.out


def execution_of(args, out, previous=None):
    """Settings that cannot change an answer; a resume keeps the record's jobs,
    retries, budget and report paths unless new ones are given. Report paths are
    saved relative to the record's own folder (out's), so a record moved with
    its reports (a CI artifact) still finds them. UserError for a tampered budget."""
    previous = previous if isinstance(previous, dict) else {}
    here = os.path.dirname(os.path.abspath(out))
    # Report paths belong to the record file that saved them: a copy (or a record
    # renamed) resumed beside it would overwrite the original's page and JUnit.
    saved_as = previous.get("record_name")
    copied = isinstance(saved_as, str) and saved_as != os.path.basename(out)
    given = {"max_cost": None if args.max_cost is None else str(args.max_cost),
             **{name: getattr(args, name) and os.path.relpath(os.path.abspath(
                 getattr(args, name)), here) for name in REPORTS}}
    execution = {}
    for name, default, low, high in (("jobs", 1, 1, MAX_JOBS),
                                     ("retries", DEFAULT_RETRIES, 0, MAX_RETRIES)):
        kept = previous.get(name)
        execution[name] = (getattr(args, name) if getattr(args, name) is not None else
                           kept if type(kept) is int and low <= kept <= high else default)
    execution["foreground"] = args.foreground or previous.get("foreground") is True
    execution["batch"] = args.batch or previous.get("batch") is True
    kept = previous.get("confidence")
    execution["confidence"] = args.confidence or (
        kept if type(kept) is float and 0.5 <= kept <= 0.999 else CONFIDENCE)
    left = []
    for name, value in given.items():
        # A Markdown summary is appended to, so a path read from a file is never
        # reused (and $GITHUB_STEP_SUMMARY is another file in every step).
        kept = previous.get(name) if name != "summary_md" else None
        if copied and value is None and isinstance(kept, str):
            left.append(f"{FLAGS[name]} {kept}")
            kept = None
        execution[name] = value if value is not None else (
            kept if isinstance(kept, str) else None)
    if left:
        warn(f"{out} was saved as {saved_as}, and its reports are that record's: "
             f"{', '.join(left)} not written from this one; give the flag with a new "
             "file to write this record's")
    execution["record_name"] = os.path.basename(out)
    if execution["max_cost"] is not None:
        try:
            money(execution["max_cost"])
        except argparse.ArgumentTypeError:
            raise UserError("its execution.max_cost is not a budget; give --max-cost USD")
    return execution


def report_paths(execution, out):
    """{report: the path to write it at} from the record's saved paths, resolved
    from the record's folder as it is now; a report whose folder is gone is
    written beside the record instead, and that is said."""
    here = os.path.dirname(os.path.abspath(out))
    paths = {}
    for name in REPORTS:
        saved = execution.get(name)
        path = None if saved is None else os.path.normpath(os.path.join(here, saved))
        if path is not None and not os.path.isdir(os.path.dirname(path)):
            moved = os.path.join(os.path.dirname(out), os.path.basename(path))
            warn(f"the folder of the saved report {saved} is gone; it is written beside "
                 f"the record instead: {moved}")
            path = moved
        paths[name] = path
    return paths


def check_outputs(out, paths):
    """UserError unless every report path can be written without harm, before any request."""
    kinds = {"junit": "junit", "summary_md": "markdown", "html": "html"}
    seen = {os.path.realpath(out): "the record itself"}
    for name, path in paths.items():
        if path is None:
            continue
        if os.path.realpath(path) in seen:
            raise UserError(f"{FLAGS[name]} {path} is {seen[os.path.realpath(path)]}; "
                             "name another file")
        problem = reports.output_problem(path, kinds[name])
        if problem:
            raise UserError(f"{FLAGS[name]} {path}: {problem}")
        seen[os.path.realpath(path)] = f"also the file of {FLAGS[name]}"


def chosen_suite(args):
    """The suite a new run asks: --suite's, the built-in one with --cases, or
    the built-in one; UserError naming the file at fault."""
    if args.suite is not None:
        return suites.read_suite(args.suite)
    if args.cases is not None:
        return suites.with_cases(checker.BUILTIN_SUITE, load_cases(args.cases))
    return checker.BUILTIN_SUITE


def baseline_costs(path):
    """{model: mean reported USD per request} of a saved record, for --plan."""
    saved = record.load(path)
    costs = {}
    for (model, _, _), row in saved.rows.items():
        if row["cost_usd"] is not None:
            costs.setdefault(model, []).append(Decimal(row["cost_usd"]))
    if not costs:
        raise UserError(f"--baseline {path} has no reported cost to price the plan with")
    every = [cost for model_costs in costs.values() for cost in model_costs]
    mean = sum(every) / len(every)
    return collections.defaultdict(lambda: mean, {model: sum(found) / len(found)
                                                  for model, found in costs.items()})


def new_run(args, secrets, ask):
    """A fresh run (or the demo): suite, models, cases and instructions from the flags."""
    suite = chosen_suite(args)
    cases = suites.record_cases(suite)
    instructions = (suite.get("instructions") if args.instructions is None
                    else load_instructions(args.instructions))
    if instructions is None:
        raise UserError(f"{args.suite} has no instructions; add instructions = \"\"\"...\"\"\" "
                         "to it, or give --instructions FILE")
    models, out = args.models or suite.get("models") or MODELS, args.out or "results.json"
    if args.demo is not None:
        models, out = DEMO_MODELS, os.path.join(args.demo, "results.json")
    elif os.path.isdir(out):
        raise UserError(f"--out {out} is a folder; give the path of a new file in it, e.g. "
                         f"{os.path.join(out, 'results.json')}")
    elif os.path.lexists(out):
        raise UserError(f"{out} already exists; choose a new --out path "
                         "(nothing was sent, the file is untouched)")
    elif not os.path.isdir(os.path.dirname(os.path.abspath(out))):
        raise UserError(f"the folder of --out {out} does not exist; create it or "
                         "choose another path")
    repeats, prove = args.repeats or 1, None
    if args.prove is not None:
        level, allowed = args.confidence or CONFIDENCE, args.allow_failures or 0
        repeats = plans.plan_size(args.prove, level, allowed)
        prove = {"rate": args.prove, "confidence": level, "repeats": repeats,
                 "allow_failures": allowed}
    head = {"created_at": demo_clock(args.demo).isoformat(),
            "config": ask.config(models, cases, repeats, instructions, prove, suite,
                                 ask.forced_search if args.force_search else None),
            "sdk_version": sdk_version(), "code_sha256": record.code_sha256(),
            "checker_sha256": record.checker_sha256(), "runner_sha256": record.runner_sha256(),
            # Outside config: the suite as read, and the hash of what judges.
            "suite": suite, "suite_sha256": suites.suite_sha256(suite)}
    if args.demo is not None:
        head["evidence"] = "synthetic"
    return Run(models=models, cases=cases, repeats=repeats, instructions=instructions,
               suite=suite, ask=ask, cases_file=args.suite or args.cases, demo=args.demo,
               out=out, head=head, execution=execution_of(args, out),
               reports={name: getattr(args, name) for name in REPORTS},
               rows={}, secrets=secrets, batch={"parts": []} if args.batch else None)


def read_saved(path):
    """(record, its rows by key, its cases, its instructions, its suite) from a
    saved record, read a row at a time: the rows are judged again and kept light
    (record.light); record.full_rows reads them whole again when they are copied."""
    saved = record.load(path)
    rows = saved.check(complete=False, errors=True)
    suite = record.suite_of(saved)
    instructions = saved["config"].get("instructions")
    if not isinstance(instructions, str):
        raise UserError("config.instructions is not text")
    return saved, rows, saved["config"]["cases"], instructions, suite


def resume_run(args, path, secrets, ask):
    """The run of a saved record, to finish in place with its own config."""
    saved, rows, cases, instructions, suite = read_saved(path)
    models, repeats = saved["config"]["models"], saved["config"]["repeats"]
    problem = resume_problem(saved, ask.config(
        models, cases, repeats, instructions, saved["config"].get("prove"), suite,
        ask.forced_search if "tool_choice" in saved["config"] else None))
    if problem:
        raise UserError(problem)
    # Every kept verdict was derived again from its response when it was read;
    # rows with an execution error are sent again.
    where = places(run_order(models, cases, repeats))
    kept = {where[key]: row for key, row in rows.items() if not row["error"]}
    wanted = {key for key, row in rows.items() if not row["error"]}
    pending = record.validate_pending(saved, run_order(models, cases, repeats), kept)
    batch = record.validate_batch(saved, len(where))
    previous = saved.get("execution")
    execution = execution_of(args, path, previous)
    times = previous.get("resumed", 0) if isinstance(previous, dict) else 0
    execution["resumed"] = (times if type(times) is int else 0) + 1
    head = {k: v for k, v in saved.items()
            if k not in ("runs", "pending", "batch", "execution", "summary")}
    # Every kept row was judged again by this checker: the record says so from now on.
    head["checker_sha256"] = record.checker_sha256()
    head.update(suite=suite, suite_sha256=suites.suite_sha256(suite))
    run = Run(models=models, cases=cases, repeats=repeats, instructions=instructions,
              suite=suite, ask=ask, out=path, head=head, execution=execution,
              reports=report_paths(execution, path), replace=True, rows=kept,
              secrets=secrets, pending=pending, batch=batch)
    if batch is not None and args.max_cost is not None and any(
            part["batch_id"] is None for part in batch["parts"] or [{"batch_id": None}]):
        raise UserError("parts of its batch are not submitted yet, and a batch runs all its "
                         "rows once submitted, so no budget can stop it; drop --max-cost")
    run.copied = functools.partial(copied_rows, path, where, wanted, saved.whole)
    run.notes = record.evidence_notes(saved, rows, path)
    return run


def regrade_run(args, path, secrets, ask):
    """A new record of a saved one's responses, each checked again by this checker."""
    saved, rows, cases, instructions, suite = read_saved(path)
    models, repeats = saved["config"]["models"], saved["config"]["repeats"]
    where = places(run_order(models, cases, repeats))
    head = {"created_at": datetime.now(timezone.utc).isoformat(), "config": saved["config"],
            "suite": suite, "suite_sha256": suites.suite_sha256(suite),
            # The responses came through the saved run's SDK; the verdicts from this code.
            "sdk_version": saved.get("sdk_version"), "code_sha256": record.code_sha256(),
            "checker_sha256": record.checker_sha256(), "runner_sha256": record.runner_sha256(),
            "regraded_from": {"path": path, "code_sha256": saved.get("code_sha256"),
                              "runner_sha256": saved.get("runner_sha256"),
                              "checker_sha256": saved.get("checker_sha256"),
                              "created_at": saved.get("created_at")}}
    if "evidence" in saved:
        head["evidence"] = saved["evidence"]
    out = args.out or "regraded.json"
    run = Run(models=models, cases=cases, repeats=repeats, instructions=instructions,
              suite=suite, ask=ask, regrade=True, out=out, head=head,
              execution=execution_of(args, out),
              reports={name: getattr(args, name) for name in REPORTS},
              rows={where[key]: row for key, row in rows.items()}, secrets=secrets)
    run.copied = functools.partial(copied_rows, path, where, set(rows), saved.whole)
    run.notes = record.evidence_notes(saved, rows, path)
    run.saved_execution = saved.get("execution")
    return run


def copied_rows(path, where, wanted, whole):
    """(plan index, whole row) of the saved rows a new record copies, read again."""
    return ((where[key], row) for key, row in record.full_rows(path, wanted, whole))


def prepare(args, ask):
    """The Run of this invocation; UserError with a readable reason.

    Reads the --cases, --instructions, --resume and --regrade files and checks
    every output path: it sends nothing and creates nothing.
    """
    secrets = [os.environ.get("PERPLEXITY_API_KEY", "")] if args.demo is None else []
    if args.resume is None and args.regrade is None:
        run = new_run(args, secrets, ask)
    else:
        verb, source = ("resume", args.resume) if args.resume else ("regrade", args.regrade)
        lock = None
        try:
            if args.resume:  # before the read: no other writer may change it after
                lock = record.take_lock(source)
            run = (resume_run if args.resume else regrade_run)(args, source, secrets, ask)
        except (UserError, record.RecordBusy) as exc:
            if lock is not None:
                record.release_lock(lock)
            raise UserError(f"cannot {verb} {source}: {exc}") from None
        run.lock = lock
        if args.regrade is not None and os.path.lexists(run.out):
            raise UserError(f"{run.out} already exists; choose a new --out path "
                             "(nothing was written)")
    try:
        check_outputs(run.out, run.reports)
    except UserError:
        if run.lock is not None:
            record.release_lock(run.lock)
        raise
    return run


@contextlib.contextmanager
def saved_record(run):
    """The record on disk for the length of the run, saved once more on the way out."""
    if run.demo is not None:
        try:
            os.makedirs(run.demo)
        except OSError as exc:
            raise UserError(f"cannot make the --demo folder {run.demo}: "
                             f"{exc.strerror or exc}; nothing was sent, name a new folder "
                             "where you can write") from None
    try:
        saved = record.RecordFile.create(run.out, run.head, run.tail(),
                                         rows=run.copied() if run.copied else (),
                                         replace=run.replace, lock=run.lock,
                                         skipped=sorted(run.dropped))
    except BaseException:
        if run.demo is not None:
            shutil.rmtree(run.demo, ignore_errors=True)  # ours alone: a failed demo leaves nothing
        raise
    run.started, run.record = True, saved
    try:
        yield saved
    finally:
        with run.saving:
            run.record = None  # a receipt that arrives later cannot be saved any more
            try:
                saved.save(run.tail(final=True), final=True)
            finally:
                saved.close()


def write_reports(run, rows, result):
    """The JUnit, Markdown and HTML views of the record; the names of those written."""
    ordered = [rows[index] for index in sorted(rows)]
    views = []
    if run.reports["junit"] is not None:
        views.append(("junit", reports.write_replacing, run.reports["junit"],
                      reports.junit_xml(rows, run.entries, run.models, result, run.dropped,
                                        run.cases_source())))
    if run.reports["summary_md"] is not None:
        views.append(("summary_md", reports.append, run.reports["summary_md"], reports.run_markdown(
            run.title(), result, ordered, run.cases, verdict_line(result))))
    if run.reports["html"] is not None:
        import evidence_page  # only a run that asks for the page pays for it

        # Made from the record just saved, read a row at a time: rows the page
        # shows whole are read whole, the rest as brief lines.
        held = {(row["model"], row["case_id"], row["repeat"]): row for row in ordered}
        try:
            saved = record.load(run.out, evidence_page.Shown(held))
        except UserError as exc:  # another process changed the record under us
            warn(f"regression.py: error: cannot read {run.out} back for the page ({exc}); "
                 "the record is saved: --regrade it with --html to make the page")
        else:
            page = evidence_page.run_page({**saved, "summary": result}, run.title())
            views.append(("html", reports.write_replacing, run.reports["html"], page))
    written = set()
    for name, write, path, text in views:
        try:
            write(path, text)
            written.add(name)
        except OSError as exc:
            warn(f"regression.py: error: cannot write the report {path}: "
                 f"{exc.strerror or exc}; the record {run.out} is saved; fix it, then "
                 f"write the reports again with: {command_hint('--resume', run.out)}")
    return written


def take_row(run, plan, saved, index, row, started, save=True):
    """Keep one finished row: save it (save=False: with a later row), print its
    line, decide whether to go on."""
    if run.demo is not None and os.environ.get("SOURCE_DATE_EPOCH", "").isdigit():
        row["seconds"] = 0.0  # a fixed demo clock: the same pages every time
    if row["cost_usd"] is None and not row["error"] and not run.warned_cost:
        run.warned_cost = True
        warn("warning: a row has no reported cost; --max-cost and the running "
             "total count only reported costs")
    with run.saving:  # worker threads save receipts into the same record
        # The row itself is the evidence now; but a receipt of an answer that never
        # came (a deadline, a broken stream) stays, so a resume fetches it.
        if not row["error"] or run.pending.get(index, {}).get("id") is None:
            run.pending.pop(index, None)
        run.tally.add(row)
        saved.add(index, row)
        # Once saved, a row's response is read again only from the record (the
        # evidence page): a run holds its verdicts, not its answers.
        run.rows[index] = record.light(row)
        for place in run.stopped_pair(row):  # a proving pair failed: nothing more for it
            run.dropped.add(place)
            plan.drop(place)
            saved.skip(place)
        if save:
            run.summary = run.tally.summary(brief=True)
            saved.save(run.tail())
    total, known = run.tally.spent()
    say(run, plan, f"[{saved.saved}/{len(run.entries)}] {row_line(row)} | "
                   f"{time.monotonic() - started:.1f}s elapsed, "
                   f"{'' if known else 'at least '}${total} so far")
    if "batch" in row:  # it ran already, paid for: its size, error or cost stops nothing
        return
    run.sent += row.get("attempts") or 1
    run.sent_errors += bool(row["error"])
    if saved.size > record.FULL_RECORD_BYTES and plan.stop("size"):
        warn(f"Stopped: {run.out} passed {record.FULL_RECORD_BYTES >> 20} MiB, about the "
             "most a reader takes in one piece; no new request starts. Run the rest as a "
             "new run with fewer repeats or models.")
    if row["error"] and plan.stop("error"):
        warn(f"Stopped after an execution error; the record is in {run.out}. "
             f"{next_step(row, run.out)}")
    within_budget(run, plan)


def say(run, plan, line):
    """Print a row's line. If standard output is gone (a closed pipe, a full disk)
    start nothing new, but keep saving the answers in flight: they are paid for."""
    if run.progress is not None:
        run.progress.clear()  # a row's line never lands in the middle of the status line
    try:
        print(line, flush=True)
    except OSError as exc:
        silence(sys.stdout)
        run.output_error = exc.strerror or str(exc)
        plan.stop("output")


def silence(stream):
    """Point a standard stream at /dev/null, so no later write or flush fails."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, stream.fileno())
        os.close(null)


class Progress:
    """What a run is doing while its answers are pending (a live one takes about
    a minute): on a terminal, one status line on stderr redrawn in place; in a
    log (not a terminal, e.g. CI), a plain line at most every LOG_SECONDS.
    Never both, never in stdout, never in the record."""

    def __init__(self, run, plan, stream, clock=time.monotonic):
        self.run, self.plan, self.stream, self.clock = run, plan, stream, clock
        try:
            self.tty = stream.isatty()
        except (AttributeError, ValueError, OSError):  # closed, or not a real file
            self.tty = False
        self.started = self.last_line = clock()
        self.lock = threading.Lock()
        self.drawn = False
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.loop, daemon=True)

    def text(self):
        tally = self.run.tally
        spent, known = tally.spent()
        answered = len(tally.seen)
        failed = tally.failed
        total = len(self.run.entries) - len(self.run.dropped)
        return (f"{answered}/{total} answered, {answered - failed} passed, {failed} failed "
                f"or no verdict, {self.plan.in_flight} in flight, "
                f"{'' if known else 'at least '}${spent} so far, "
                f"{self.clock() - self.started:.0f}s elapsed")

    def tick(self):
        """Redraw the status line (a terminal), or write a line if the last was
        LOG_SECONDS ago (a log)."""
        with self.lock:
            try:
                if self.tty:
                    self.stream.write(f"\r{self.text()}\x1b[K")
                    self.drawn = True
                elif self.clock() - self.last_line >= LOG_SECONDS:
                    self.stream.write(f"waiting: {self.text()}\n")
                    self.last_line = self.clock()
                self.stream.flush()
            except (OSError, ValueError):  # a closed stderr must not end the run
                self.done.set()

    def clear(self):
        """Take the status line away before another line is printed."""
        with self.lock:
            if self.drawn:
                with contextlib.suppress(OSError, ValueError):
                    self.stream.write("\r\x1b[K")
                    self.stream.flush()
                self.drawn = False

    def loop(self):
        while not self.done.wait(PROGRESS_SECONDS):
            self.tick()

    def __enter__(self):
        self.run.progress = self
        self.thread.start()
        return self

    def __exit__(self, *exc_info):
        self.done.set()
        self.thread.join()
        self.clear()
        self.run.progress = None


def within_budget(run, plan):
    """False, and a stop said once, when the reported cost reached --max-cost."""
    total, _ = run.tally.spent()
    limit = run.execution["max_cost"]
    if limit is None or total < Decimal(limit):
        return True
    if plan.stop("budget"):
        run.execution["stopped_for_budget"] = True
        warn(f"Stopped: the reported cost ${total} reached --max-cost ${limit}; no new "
             "request starts" + ("" if not plan.in_flight else
                                 f"; {plans.plural(plan.in_flight, 'request')} in flight "
                                 + ("finishes and is" if plan.in_flight == 1 else
                                    "finish and are") + " saved") + ".")
    return False


def resume_command(out, execution, rows, planned):
    """The command that finishes a record; after a budget stop it raises the
    budget enough to finish it (record.raised_budget), so it sends again."""
    costs = [Decimal(row["cost_usd"]) for row in rows if row["cost_usd"] is not None]
    budget = record.raised_budget(execution, costs, planned - len(rows))
    return command_hint("--resume", out, *(["--max-cost", budget] if budget else []))
