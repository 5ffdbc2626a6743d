"""The record on disk: one writer, one reader, one validator.

Every script that touches a saved run goes through this module: runs.py
writes a record with RecordFile and reads one back for --resume and --regrade;
compare_runs.py, history.py and the pages read it with load(). It imports the
pure modules only (checker, suites, plans), never the SDK, so reading a record
starts fast.

    saved = load("results.json")                  # UserError with the reason
    rows = saved.check()                          # {(model, case id, repeat): row}
    summary = derived_summary(saved)              # counted from the rows judged again

load() reads a record a row at a time and judges every row again from its
saved response with the one checker (its suite's rules): no reader trusts a
saved answer_text, reasons or passed. A record made by this checker whose
saved verdict does not follow from its response was edited, and is refused;
so is a receipt (a response id) held by two rows.

    with RecordFile.create("new.json", head, tail) as saved:
        saved.add(0, row)                         # rows in any order, by plan index
        saved.save(tail)                          # atomic, costs one row's bytes

A save writes a slot file beside the record and renames it over the record's
path, so a reader never sees a half-written record; a reader that finds the
file changed while it read it reads again.
"""

import contextlib
import datetime
import errno
import fcntl
import functools
import hashlib
import json
import math
import os
import re
import stat
from decimal import Decimal, InvalidOperation

import checker
import plans
import suites
from checker import ACTIONS
from suites import CASE_ID
from vocabulary import UserError

MAX_REPEATS = 10  # a run is an observation; more repeats cost money, not truth
MAX_PROVE_REPEATS = 500  # --prove: 500 passes in a row prove 99.4 % at 95 %
MAX_RECORD_BYTES = 1 << 30  # a 2,400-row run is ~27 MB; far larger is not a record
FULL_RECORD_BYTES = 256 << 20  # a run starts no request past this size, so its record
                               # (plus the rows in flight) stays readable
CREATE_ROWS = 500  # rows a resume writes into a new record before writing more
CREATE_BYTES = 8 << 20  # or bytes of them: rows of 1 MB answers must not pile up in memory
PENDING_BYTES = 4 << 20  # rows held in memory while an earlier one is missing
COPY_BYTES = 1 << 20  # the second slot is copied from the first this much at a time
CASE_FIELDS = ("id", "expected", "rfc", "action", "question")
STATUS = re.compile(r"[1-5][0-9][0-9]|unknown")
RFC_NAME = re.compile(r"rfc[1-9][0-9]{0,4}")
MAX_COST_EXPONENT = 400  # |adjusted exponent| of a cost: past any float the API can send
MAX_SECONDS = 1e9  # seconds in a row: 30 years; larger is tampering
MAX_NAME = 200  # characters of a model name: longer is not a name but a payload
MAX_ID_CHARS = 256  # characters of an id the API gives (response, batch, file): far above any
HIDDEN_NAME = 32  # characters of the record's name kept in its hidden files' names
# In every saved row; error_status came later than the published runner's records,
# which compare as they always did (an absent error_status reads as null).
ROW_FIELDS = ("case_id", "model", "error", "cost_usd", "response", "answer_text", "reasons",
              "seconds", "passed", "repeat")
JUDGED = ("reasons", "passed", "cost_usd", "answer_text", "answered_model")  # re-derived
HERE = os.path.dirname(os.path.abspath(__file__))
RUNNER_MODULES = ("regression.py", "runs.py", "wire.py", "batching.py", "sending.py",
                  "suites.py", "checker.py", "plans.py", "record.py", "reports.py",
                  "vocabulary.py")  # the code a record's runner_sha256 names

# --------------------------------------------------------------------------
# Pure: JSON text and validation.
# --------------------------------------------------------------------------


def dumps(value, **options):
    """Standard JSON only: NaN or Infinity raise ValueError instead of being written."""
    return json.dumps(value, allow_nan=False, **options)


def standard_json(text):
    """JSON data as the runner holds it: NaN and Infinity, which standard JSON
    lacks (a record of another writer may hold them), read as the strings this
    runner saves them as, so nothing read can stop a record from being written."""
    return json.loads(text, parse_constant=str)


def validate_cases(data, source):
    """Cases from a --cases file or a record's config, or ValueError naming the field."""
    if isinstance(data, dict) and set(data) == {"cases"}:
        data = data["cases"]
    if not isinstance(data, list) or not data:
        raise UserError(f"{source}: expected a non-empty list of cases "
                         "(a JSON list, or `cases` tables in TOML)")
    rules = [
        ("id", lambda v: CASE_ID.fullmatch(v), "letters, digits, . _ - (at most 64)"),
        ("expected", lambda v: STATUS.fullmatch(v), "a three-digit status or unknown"),
        ("rfc", lambda v: RFC_NAME.fullmatch(v), "like rfc9110"),
        ("action", lambda v: v in ACTIONS, "one of " + ", ".join(ACTIONS)),
        ("question", lambda v: v.strip() and encodable(v),
         "the non-empty log the model sees, in UTF-8 (no lone surrogate)"),
    ]
    seen = set()
    for number, case in enumerate(data, 1):
        where = f"{source}: case {number}"
        if not isinstance(case, dict):
            raise UserError(f"{where}: must be an object with {', '.join(CASE_FIELDS)}")
        if isinstance(case.get("id"), str) and CASE_ID.fullmatch(case["id"]):
            where += f" ({case['id']})"
        unknown = sorted(set(case) - set(CASE_FIELDS), key=str)
        missing = [field for field in CASE_FIELDS if field not in case]
        if unknown or missing:
            problem = (f"unknown field {str(unknown[0])[:40]}" if unknown
                       else f"missing field {missing[0]}")
            raise UserError(f"{where}: {problem}; a case has exactly {', '.join(CASE_FIELDS)}")
        for field, rule, wanted in rules:
            if isinstance(case[field], (int, float)) and not isinstance(case[field], bool):
                raise UserError(f"{where}: field {field} must be text in quotes, like "
                                f'"{case[field]}", not the number {case[field]}')
            if not isinstance(case[field], str) or not rule(case[field]):
                raise UserError(f"{where}: field {field} must be {wanted}, got "
                                f"{str(case[field])[:40]!r}")
        if case["id"] in seen:
            raise UserError(f"{where}: field id repeats an earlier case")
        seen.add(case["id"])
    return [{field: case[field] for field in CASE_FIELDS} for case in data]


def encodable(text):
    """Whether text can be sent and saved as UTF-8: a lone surrogate (JSON lets
    one through as \\ud800) can be neither, and would make a record that never finishes."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def names(value, what):
    """A non-empty list of distinct, printable, non-empty strings, or ValueError."""
    if not isinstance(value, list) or not value:
        raise UserError(f"{what} must be a non-empty list")
    for item in value:
        if not isinstance(item, str) or not item or not item.isprintable() or len(item) > MAX_NAME:
            raise UserError(f"{what} must hold short, printable, non-empty strings")
    if len(set(value)) != len(value):
        raise UserError(f"{what} has duplicates")
    return value


def plan_keys(config):
    """Every (model, case id, repeat) a complete run of config holds, or ValueError."""
    if not isinstance(config, dict):
        raise UserError("the record has no config object")
    models = names(config.get("models"), "config.models")
    cases = config.get("cases")
    if not isinstance(cases, list) or not all(isinstance(c, dict) for c in cases):
        raise UserError("config.cases must be a list of objects")
    case_ids = names([case.get("id") for case in cases], "config.cases ids")
    repeats = config.get("repeats")
    most = MAX_REPEATS if "prove" not in config else MAX_PROVE_REPEATS
    # Bounds before building anything: a forged repeats must not allocate a
    # billion keys. bool is an int in Python, and True is not a repeat count.
    if isinstance(repeats, bool) or not isinstance(repeats, int) or not 1 <= repeats <= most:
        raise UserError(f"config.repeats must be an integer 1..{most}")
    if "prove" in config:
        prove_problem(config["prove"], repeats)
    return {(model, case_id, repeat) for model in models for case_id in case_ids
            for repeat in range(repeats)}


def prove_problem(prove, repeats):
    """ValueError unless config.prove is a plan this code made: rate, confidence,
    allow_failures K and the runs n its plan needs, which is config.repeats.
    A proof made before plans holds max_repeats instead of K, and reads as K = 0."""
    old = ("rate", "confidence", "repeats", "max_repeats")
    new = ("rate", "confidence", "repeats", "allow_failures")
    if not isinstance(prove, dict) or set(prove) not in (set(old), set(new)) or not all(
            isinstance(value, (int, float)) and not isinstance(value, bool)
            for value in prove.values()):
        raise UserError("config.prove must hold rate, confidence, repeats and "
                         "allow_failures")
    allowed = prove.get("allow_failures", 0)
    if (not 0 < prove["rate"] < 1 or not 0.5 <= prove["confidence"] <= 0.999
            or type(allowed) is not int or allowed < 0 or prove["repeats"] != repeats
            or plans.plan_size(prove["rate"], prove["confidence"], allowed) != repeats
            or ("max_repeats" in prove
                and not repeats <= prove["max_repeats"] <= MAX_PROVE_REPEATS)):
        raise UserError("config.prove does not hold together: its rate, confidence and "
                         "allowed failures need another number of repeats")


def proving_missing(rows, config):
    """Rows a finished --prove record lacks: each pair stops at its first failure or
    holds every repeat its rate needs, with none missing before."""
    tally = checker.Tally(config["models"], config["repeats"], config["cases"],
                          prove=config["prove"])
    for row in rows.values():
        tally.add(row)
    return sum(1 for pair in tally.pairs.values() if not tally.decided(pair))


def cost_problem(cost):
    """Why a saved cost_usd cannot be summed exactly, or None."""
    if cost is None:
        return None
    try:
        value = Decimal(cost) if isinstance(cost, str) else None
    except InvalidOperation:
        value = None
    if value is None or not value.is_finite() or value < 0:
        return "cost_usd must be null or a non-negative decimal string"
    if abs(value.adjusted()) > MAX_COST_EXPONENT:
        return "cost_usd is out of range"
    return None


def number(value):
    """An int or a finite float, at most MAX_SECONDS (a huge int must not overflow later)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return abs(value) <= MAX_SECONDS if isinstance(value, int) else (
        math.isfinite(value) and abs(value) <= MAX_SECONDS)


ROW_TYPES = [  # field, test, what it must be; absent optional fields read as None
    ("error", lambda v: v is None or isinstance(v, str), "null or a string"),
    ("error_status", lambda v: v is None or (type(v) is int), "null or an integer"),
    ("answer_text", lambda v: v is None or isinstance(v, str), "null or a string"),
    ("response", lambda v: v is None or isinstance(v, dict), "null or an object"),
    ("seconds", lambda v: v is None or (number(v) and v >= 0), "null or a number of seconds"),
    ("attempts", lambda v: v is None or (type(v) is int and 0 <= v <= 1000), "null or a count"),
    ("waited_seconds", lambda v: v is None or (number(v) and v >= 0), "null or seconds"),
    ("error_message", lambda v: v is None or isinstance(v, str), "null or a string"),
    ("answered_model", lambda v: v is None or isinstance(v, str), "null or a string"),
    ("recovered", lambda v: v is None or isinstance(v, str), "null or a string"),
]


def row_problem(row):
    """Why a saved row cannot be trusted as evidence, or None."""
    if not isinstance(row, dict):
        return "is not an object"
    missing = [name for name in ROW_FIELDS if name not in row]
    if missing:
        return f"has no field {missing[0]} (every saved row has {', '.join(ROW_FIELDS)})"
    key = (row.get("model"), row.get("case_id"), row.get("repeat"))
    if not (isinstance(key[0], str) and isinstance(key[1], str) and type(key[2]) is int
            and key[0].isprintable() and key[1].isprintable()):
        return "has no valid model, case_id and repeat"
    reasons = row.get("reasons")
    if not isinstance(reasons, list) or not all(isinstance(r, str) for r in reasons):
        return "has reasons that are not a list of strings"
    if not isinstance(row.get("passed"), bool) or row["passed"] != (not reasons):
        return "has passed and reasons that disagree"
    if row.get("error") and reasons != ["execution_error"]:
        return "has an error but not the reason execution_error"
    if "execution_error" in reasons and not row.get("error"):
        return "has the reason execution_error but no error"
    for field, test, wanted in ROW_TYPES:
        if not test(row.get(field)):
            return f"has {field} that is not {wanted}"
    problem = cost_problem(row.get("cost_usd"))
    return problem and f"has {problem}"


def judged_rows(record, runs, errors=False):
    """(run number, key, row judged again) for each saved row of runs, in order,
    or ValueError naming the first row that cannot be evidence.

    Each row comes back judged again from its saved response by the checker
    (checker.derived). errors: rows with an execution error are allowed (a
    resume redoes them); else the first one is refused.
    """
    expected = plan_keys(record.get("config"))
    suite = suite_of(record)
    cases = {case["id"]: case for case in record["config"]["cases"]}
    # Only a verdict made by this very checker must match; an older checker's
    # verdicts are simply replaced (evidence_notes says so).
    own = record.get("checker_sha256") == checker_sha256()
    seen, receipts = set(), {}  # response id -> the row that holds it
    for number_, row in enumerate(runs, 1):
        problem = row_problem(row)
        if problem:
            raise UserError(f"run {number_} {problem}")
        key = (row["model"], row["case_id"], row["repeat"])
        where = f"run {number_} ({key[0]} {key[1]} {key[2]})"
        if key in seen:
            raise UserError(f"{where} repeats an earlier run")
        if key not in expected:
            raise UserError(f"{where} is not one of the record's planned requests")
        if row.get("error") and not errors:
            raise UserError(f"{where} has an execution error; resume or rerun it "
                             "before comparing")
        seen.add(key)
        receipt = checker.response_id(row)
        if receipt is not None:
            if receipt in receipts:
                raise UserError(f"{receipts[receipt]} and {where} hold the same response id "
                                 f"{receipt[:80]!r}: a receipt belongs to one row; the record "
                                 "was edited after it was saved, use the original file")
            receipts[receipt] = where
        judged = checker.derived(cases[key[1]], row, suite)
        if (not row.get("error") and judged.get("error") != checker.NO_ANSWER
                and isinstance(row.get("answer_text"), str)
                and row["answer_text"] != judged["answer_text"]):
            raise UserError(f"{where}: its saved answer_text is not the answer its saved "
                             "response holds; the record was edited after it was saved: "
                             "use the original file, or start a new run")
        edited = own and next((name for name in JUDGED if name in row
                               and row[name] != judged[name]), None)
        if edited:
            what = ("has a verdict but no saved response to derive it from"
                    if row["response"] is None else
                    f"its saved {edited} does not match its saved response "
                    f"({shown_difference(edited, row, judged)})")
            raise UserError(f"{where}: {what}; the record was edited after it was saved: "
                             "use the original file, or start a new run")
        if judged["error"] and not errors:
            raise UserError(f"{where} has no verdict: its saved response holds no answer; "
                             "resume or rerun it before comparing")
        yield number_, key, judged


def suite_of(record):
    """The suite a record's rows are judged by, or ValueError: its saved suite,
    whose hash and cases must be the record's own; a record made before suites
    is of the built-in suite, with its config.cases."""
    config = record.get("config")
    if "suite" not in record:
        cases = config.get("cases")
        if "suite_sha256" in record or isinstance(cases, list) and any(
                isinstance(case, dict) and "expect" in case for case in cases):
            raise UserError("its suite is missing, but its cases or suite_sha256 are a "
                             "suite's: the record was edited after it was saved; use the "
                             "original file")
        return suites.with_cases(checker.BUILTIN_SUITE, validate_cases(cases, "config.cases"))
    suite = suites.validate_suite(record["suite"], "its saved suite")
    edited = "the record was edited after it was saved; use the original file"
    if record.get("suite_sha256") != suites.suite_sha256(suite):
        raise UserError(f"its suite_sha256 is not the hash of its saved suite: {edited}")
    if suites.record_cases(suite) != config.get("cases"):
        raise UserError(f"its config.cases are not its saved suite's cases: {edited}")
    return suite


def coverage_problem(rows, config):
    """Why rows {key: row} are not a whole run of config, or None."""
    if "prove" in config:
        unfinished = proving_missing(rows, config)
        return unfinished and (f"runs do not cover the config: {unfinished} proving pairs "
                               "are missing rows")
    missing = len(plan_keys(config) - set(rows))
    return missing and f"runs do not cover the config: {missing} missing"


def validate_record(record, complete=True, errors=False):
    """The rows of a saved record keyed by (model, case id, repeat), or ValueError.

    Each row is judged again from its saved response (judged_rows). complete:
    the rows must cover the config exactly (a comparison); else they may be a
    part of it (a resume). errors: rows with an execution error are allowed.
    """
    if not isinstance(record, dict):
        raise UserError("the record is not a JSON object")
    if not isinstance(record.get("runs"), list):
        raise UserError("the record has no runs list")
    rows = {key: row for _, key, row in judged_rows(record, record["runs"], errors)}
    problem = complete and coverage_problem(rows, record["config"])
    if problem:
        raise UserError(problem)
    return rows


def light(row, suite=checker.BUILTIN_SUITE):
    """A judged row as the views read it once its verdict is made: all but the
    response, with what a brief line shows of it (the documents its own search
    returned). Never saved: a record holds whole rows."""
    if row.get("light"):
        return row
    seen = checker.answer_seen(row["model"], row.get("response"))
    return {**row, "response": None, "light": True,
            "returned": sorted(checker.returned_documents(seen, suite["sources"]))}


class Judged(dict):
    """A record read from disk a row at a time and judged as it was read: its
    fields, with `runs` holding rows as keep() left them (light by default).

    Only load() makes one, from a file: no JSON can become a Judged, so a
    reader may take its rows as judged already (rows: {key: row}).
    """

    def __init__(self, fields, rows, sha256, first_error):
        super().__init__(fields)
        self.rows, self.sha256, self.first_error = rows, sha256, first_error
        self.whole = False  # read whole (not in this runner's layout): full_rows does too
        self.response_ids = frozenset()  # the responses its rows hold, by id

    def check(self, complete=True, errors=False):
        """The rows, or the ValueError validate_record would raise for this file."""
        if not errors and self.first_error is not None:
            number_, key = self.first_error
            raise UserError(f"run {number_} ({key[0]} {key[1]} {key[2]}) has an execution "
                             f"error ({str(self.rows[key]['error'])[:40]}), so no verdict; "
                             "resume or rerun it before comparing")
        problem = complete and coverage_problem(self.rows, self["config"])
        if problem:
            raise UserError(problem)
        return self.rows


def load(path, keep=light):
    """The record at path as a Judged, read and judged a row at a time, so that
    memory holds what keep(row) leaves of each row, not the record; ValueError
    with a one-line reason. Rows with an execution error, and an unfinished
    run, are allowed here: Judged.check says what a reader needs."""
    try:
        return load_from(path, keep, whole=False)
    except NotOurLayout:
        return load_from(path, keep, whole=True)


def load_from(path, keep, whole):
    """load, reading the file a row at a time, or whole."""
    with open_rows(path, whole) as (fields, runs, digest):
        if not isinstance(fields, dict):
            raise UserError("the record is not a JSON object")
        if not isinstance(runs, (list, Rows)):
            raise UserError("the record has no runs list")
        rows, kept, first_error, receipts = {}, [], None, {}
        suite = suite_of(fields) if isinstance(fields.get("config"), dict) else None
        for number_, key, row in judged_rows(fields, runs, errors=True):
            if row.get("error") and first_error is None:
                first_error = (number_, key)
            if checker.response_id(row) is not None:
                receipts[checker.response_id(row)] = (number_, key)
            row = keep(row, suite)
            rows[key] = row
            kept.append(row)
        problem = shared_receipt(fields.get("pending"), receipts)
        if problem:
            raise UserError(problem)
        judged = Judged({**fields, "runs": kept}, rows, digest.hexdigest(), first_error)
        judged.whole = whole or not isinstance(runs, Rows)
        judged.response_ids = frozenset(receipts)  # what shows one run saved twice
        return judged


def shared_receipt(pending, receipts):
    """Why a pending receipt holds the response id of another saved row or of
    another pending receipt, or None. receipts: {response id: (run number, key)}.
    A receipt that names its own row's saved response (a stop between the two
    saves) is simply finished."""
    seen = {}
    for place, entry in (pending.items() if isinstance(pending, dict) else ()):
        found = entry.get("id") if isinstance(entry, dict) else None
        if not isinstance(found, str) or not found:
            continue
        if found in seen:
            return (f"pending receipts {seen[found]} and {str(place)[:12]} hold the same "
                    f"response id {found[:80]!r}: a receipt belongs to one row; the record was "
                    "edited after it was saved, use the original file")
        seen[found] = str(place)[:12]
        owner = receipts.get(found)
        key = (entry.get("model"), entry.get("case_id"), entry.get("repeat"))
        if owner is not None and owner[1] != key:
            number_, (model, case_id, repeat) = owner
            return (f"pending receipt {str(place)[:12]} ({shown_key(key)}) holds the response "
                    f"id {found[:80]!r} of run {number_} ({model} {case_id} {repeat}): a "
                    "receipt belongs to one row; the record was edited after it was saved, "
                    "use the original file")
    return None


def shown_key(key):
    return " ".join(str(part)[:80] for part in key)


def confidence_of(record):
    """The confidence a record's bounds are stated at: its proof's, else its
    execution's (--confidence), else the default."""
    config, execution = record["config"], record.get("execution")
    confidence = (config.get("prove") or {}).get("confidence") or (
        execution.get("confidence") if isinstance(execution, dict) else None)
    if type(confidence) is not float or not 0.5 <= confidence <= 0.999:
        confidence = checker.CONFIDENCE
    return confidence


def created_moment(value):
    """A record's created_at as an aware datetime, or None when it cannot be read.
    The runner writes UTC; a time without a zone is read as UTC too."""
    try:
        moment = datetime.datetime.fromisoformat(value)
    except (TypeError, ValueError):
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=datetime.timezone.utc)


def derived_summary(judged):
    """The summary of a record read by load, counted from its rows as judged
    again, never its saved summary."""
    config, confidence = judged["config"], confidence_of(judged)
    tally = checker.Tally(config["models"], config["repeats"], config["cases"], confidence,
                          config.get("prove"))
    for row in judged.rows.values():
        tally.add(row)
    return tally.summary()


def full_rows(path, wanted, whole=False):
    """(key, row) judged again and whole, for each key in wanted, in saved
    order: the rows a resume keeps or a regrade copies, read once more, as
    load read them (whole: the Judged's whole)."""
    with open_rows(path, whole) as (fields, runs, _):
        for _, key, row in judged_rows(fields, runs, errors=True):
            if key in wanted:
                yield key, row


def validate_pending(record, plan, finished):
    """The receipts of a record: {plan index: {"id", "model", "case_id", "repeat"}}
    for requests sent whose rows were not saved, or ValueError.

    plan: [(repeat, case, model)]; finished: the plan indexes with a saved row
    (their receipts are spent). "id" is null for a request that may have been
    sent before its id came back.
    """
    pending = record.get("pending", {})
    if not isinstance(pending, dict):
        raise UserError("its pending receipts are not an object")
    receipts = {}
    for key, entry in pending.items():
        index = int(key) if isinstance(key, str) and key.isdigit() and len(key) < 10 else -1
        if not 0 <= index < len(plan) or not isinstance(entry, dict):
            raise UserError(f"pending receipt {str(key)[:20]!r} is not a place in its plan")
        repeat, case, model = plan[index]
        if (entry.get("model"), entry.get("case_id"), entry.get("repeat")) != (
                model, case["id"], repeat) or not (entry.get("id") is None
                                                   or saved_id(entry["id"])):
            raise UserError(f"pending receipt {index} does not match its planned request")
        if index not in finished:
            receipts[index] = {"id": entry["id"], "model": model, "case_id": case["id"],
                               "repeat": repeat}
    return receipts


def saved_id(value):
    """Whether value can be an id the API gave (a file, a batch, a response)."""
    return (isinstance(value, str) and 0 < len(value) <= MAX_ID_CHARS and value.isprintable()
            and "/" not in value)


def validate_batch(record, planned):
    """A --batch record's steps: {"parts": [...]} (see batching.py), None for a
    record sent request by request, or ValueError. planned: rows in the plan."""
    if "batch" not in record:
        return None
    batch = record["batch"]
    parts = batch.get("parts") if isinstance(batch, dict) else None
    if not isinstance(parts, list):
        raise UserError("its batch has no parts list")
    kept, stop = [], 0
    for number_, part in enumerate(parts, 1):
        where = f"batch part {number_}"
        if not isinstance(part, dict):
            raise UserError(f"{where} is not an object")
        start, end = part.get("start"), part.get("stop")
        if not (type(start) is int and type(end) is int and stop <= start < end <= planned):
            raise UserError(f"{where} is not a range of its plan after the part before it")
        for name in ("input_file_id", "batch_id"):
            if part.get(name) is not None and not saved_id(part[name]):
                raise UserError(f"{where} has {name} that is not an id")
        if part.get("batch_id") is not None and part.get("input_file_id") is None:
            raise UserError(f"{where} has a batch_id but no input_file_id")
        if not isinstance(part.get("collected"), bool) or (
                part["collected"] and part.get("batch_id") is None):
            raise UserError(f"{where} has collected that is not true or false, or is "
                             "collected with no batch_id")
        status = part.get("status")
        counts = part.get("counts", {})
        kept.append({"start": start, "stop": end, "input_file_id": part.get("input_file_id"),
                     "batch_id": part.get("batch_id"),
                     "status": status if isinstance(status, str) and status.isprintable()
                     and len(status) <= MAX_NAME else None,
                     "collected": part["collected"],
                     "counts": {name: value for name, value in counts.items()
                                if name in ("total", "completed", "failed")
                                and type(value) is int} if isinstance(counts, dict) else {}})
        stop = end
    return {"parts": kept}


def shown_difference(name, saved, judged):
    """A row's saved and derived value of one judged field, short enough for
    one line: a verdict as its reasons (or pass), any other value as JSON."""
    def short(value):
        if name in ("reasons", "passed"):
            reasons = value["reasons"] if isinstance(value["reasons"], list) else []
            return ",".join(str(r)[:40] for r in reasons[:4]) or "pass"
        text = json.dumps(value.get(name), ensure_ascii=False)
        return text if len(text) <= 60 else text[:59] + "…"
    return f"saved: {short(saved)}; its response proves: {short(judged)}"


def evidence_notes(record, rows, name):
    """Lines that say how far a record's verdicts rest on receipts (none: fully)."""
    notes = []
    made_by = record.get("checker_sha256")
    if made_by != checker_sha256():
        which = ("a version of the checker that left no checker_sha256" if made_by is None
                 else "another version of checker.py")
        notes.append(f"{name} was judged by {which}; its verdicts were derived again "
                     "from its saved responses by this checker")
    bare = sum(1 for row in rows.values() if row.get("error") == checker.NO_ANSWER)
    if bare:
        notes.append(f"{bare} row{'s' if bare != 1 else ''} of {name} keep the answer only in "
                     "answer_text (no message item in the saved response): no verdict")
    return notes


def raised_budget(execution, costs, missing):
    """After a budget stop, the --max-cost that lets a resume finish the record:
    what was spent, plus the missing rows at twice the dearest row so far (at
    least one more budget), as text; None when the record has no budget.

    costs: the Decimal costs of the saved rows; missing: rows still to send.
    """
    budget = execution.get("max_cost") if isinstance(execution, dict) else None
    try:
        budget = Decimal(budget) if isinstance(budget, str) else None
    except InvalidOperation:
        return None
    if budget is None or not budget.is_finite() or budget <= 0:
        return None
    rest = 2 * max(costs, default=Decimal(0)) * missing
    return str(sum(costs, Decimal(0)) + max(budget, rest))


@functools.cache
def file_sha256(path):
    """The SHA-256 of a project file: which code made or judged a record."""
    with open(path, "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()


def checker_sha256():
    """The hash of checker.py, which new records carry: which checker judged them."""
    return file_sha256(checker.__file__)


def code_sha256():
    """The hash of regression.py (a record's code_sha256, as published), read
    without importing it."""
    return file_sha256(os.path.join(HERE, "regression.py"))


def runner_sha256():
    """The hash of every module that makes a record (a record's runner_sha256):
    a record is resumed only by the code that made it."""
    digests = "".join(file_sha256(os.path.join(HERE, name)) for name in RUNNER_MODULES)
    return hashlib.sha256(digests.encode()).hexdigest()


# --------------------------------------------------------------------------
# I/O: reading a record.
# --------------------------------------------------------------------------


class NotOurLayout(UserError):
    """A row line that is not one JSON row: load reads the file whole instead.
    Met anywhere else, the file changed since load read it."""


class Rows:
    """The saved rows of a record in this runner's own layout, parsed one line
    at a time from an open file: iterating twice reads the file twice."""

    def __init__(self, handle, start, path):
        self.handle, self.start, self.path = handle, start, path

    def __iter__(self):
        self.handle.seek(self.start)
        for line in self.handle:
            if line in (b"],\n", b"]\n"):
                return
            try:
                yield standard_json(line.rstrip(b"\n").removesuffix(b","))
            except (ValueError, RecursionError):
                # Valid JSON laid out otherwise, or no JSON at all: the whole-file
                # reader decides, and names the position in the file.
                raise NotOurLayout(f"{self.path} changed while it was read, or is not "
                                   "valid JSON; try again") from None


def member(line):
    """The one top-level member on a line of this runner's layout, or None."""
    try:
        value = standard_json(b"{" + line.rstrip(b"\n").removesuffix(b",") + b"}")
    except (ValueError, RecursionError):
        return None
    return value if len(value) == 1 and "runs" not in value else None


def layout(handle, digest):
    """(fields, offset of the first row) of a record written by RecordFile:
    "{", one member a line, "runs" with one row a line, one member a line,
    "}", each comma where RecordFile puts it; None for any other layout (the
    whole-file reader then decides). Every byte is hashed into digest."""
    fields, start, offset, part, comma = {}, None, 0, "head", None
    for line in handle:
        digest.update(line)
        offset += len(line)
        ends_in_comma = line.endswith(b",\n")
        if part == "head" and offset == len(line):
            if line != b"{\n":
                return None
        elif part == "head" and line == b'"runs": [\n':
            part, start, comma = "rows", offset, None
        elif part == "rows" and line in (b"],\n", b"]\n"):
            if comma:  # a comma after the last row
                return None
            part, comma = ("tail" if line == b"],\n" else "end"), None
        elif part == "rows" and line.startswith(b"{"):
            if comma is False:  # no comma between two rows
                return None
            comma = ends_in_comma
        elif part in ("head", "tail") and line.startswith(b'"'):
            found = member(line)
            # Every head member is followed by another; in the tail, all but the last.
            if found is None or (part == "head" and not ends_in_comma) or comma is False:
                return None
            fields.update(found)
            comma = ends_in_comma
        elif part in ("tail", "end") and line in (b"}\n", b"}") and not comma:
            if part == "tail" and comma is None:  # "]," with no member after it
                return None
            part = "closed"
        else:
            return None
    return (fields, start) if part == "closed" else None


@contextlib.contextmanager
def open_rows(path, whole=False):
    """(fields, runs, sha256) of the record at path: its members but runs, its
    rows as an iterable, and the hash of its bytes; ValueError with the reason.

    A record in this runner's layout is read a row at a time (Rows); any other
    JSON (a hand-made or published-design record) is read whole, within
    MAX_RECORD_BYTES. A record that a running save changed while it was read
    is refused when the reading ends: read it again.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        raise UserError(f"cannot open {path}: {exc.strerror or exc}") from None
    before = os.fstat(fd)
    if not stat.S_ISREG(before.st_mode) or before.st_size > MAX_RECORD_BYTES:
        os.close(fd)
        raise UserError(f"{path} is not a regular file" if not stat.S_ISREG(before.st_mode)
                         else f"{path} is larger than {MAX_RECORD_BYTES >> 20} MiB, too "
                         "large to be a record")
    with os.fdopen(fd, "rb") as handle:
        try:
            digest = hashlib.sha256()
            found = None if whole else layout(handle, digest)
            if found is not None:
                fields, runs = found[0], Rows(handle, found[1], path)
            else:
                handle.seek(0)
                data = handle.read(MAX_RECORD_BYTES + 1)
                digest = hashlib.sha256(data)
                try:
                    whole = standard_json(data)
                except (ValueError, RecursionError) as exc:
                    reason = "nested too deeply" if isinstance(exc, RecursionError) else exc
                    raise UserError(f"{path} is not valid JSON ({reason})") from None
                del data
                fields = {k: v for k, v in whole.items() if k != "runs"} if isinstance(
                    whole, dict) else whole
                runs = whole.get("runs") if isinstance(whole, dict) else None
        except OSError as exc:
            raise UserError(f"cannot read {path}: {exc.strerror or exc}") from None
        yield fields, runs, digest
        after = os.fstat(fd)
    if (before.st_mtime_ns, before.st_size) != (after.st_mtime_ns, after.st_size):
        raise UserError(f"{path} changed while it was read (a run is saving it); "
                         "try again once it has finished")


# --------------------------------------------------------------------------
# I/O: writing a record.
#
# A checkpoint after every row must be atomic (a kill at any instant leaves
# the previous or the new complete record) and must not cost more as the run
# grows. Rewriting the whole file each time is atomic but quadratic. So the
# record lives in two "slot" files beside it, linked in turn at the record's
# path: a save updates the slot that is *not* linked there, in place, writing
# only the rows that slot lacks plus the short tail (pending rows, execution,
# summary), fsyncs it, then links it over the path with one rename. Each row
# is serialised once. The hidden files are named from the record's name cut
# to HIDDEN_NAME characters plus a hash of its full path, so their length does
# not grow with the record's name; a lock file beside them lets one writer at
# a time hold the record, and that writer removes any slots a killed run left.
# --------------------------------------------------------------------------


class RecordBusy(Exception):
    """Another process is writing this record."""


def write_all(fd, data, offset):
    while data:
        written = os.pwrite(fd, data, offset)
        data, offset = data[written:], offset + written


def sync_folder(path):
    fd = os.open(os.path.dirname(path), os.O_RDONLY)
    try:
        os.fsync(fd)  # the rename itself must survive a power cut
    finally:
        os.close(fd)


def hidden_stem(path):
    """The start of the names of a record's hidden files: short whatever the name."""
    folder, name = os.path.split(path)
    digest = hashlib.sha256(path.encode("utf-8", "surrogateescape")).hexdigest()[:12]
    return os.path.join(folder, f".{name[:HIDDEN_NAME]}.{digest}")


def take_lock(path):
    """(lock file, fd): an exclusive lock on the record at path, or RecordBusy at once.

    Whoever reads a record to rewrite it takes this first, so no other writer
    can change it between the read and the write. release_lock() gives it back.
    """
    path = os.path.realpath(path)
    lock_path = hidden_stem(path) + ".lock"
    while True:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise RecordBusy(f"{path} is being written by another run; wait for it "
                             "to finish") from None
        # The holder before us may have removed the file after we opened it:
        # then our lock is on a name nobody else sees, so take it again.
        with contextlib.suppress(FileNotFoundError):
            if os.stat(lock_path).st_ino == os.fstat(fd).st_ino:
                return lock_path, fd
        os.close(fd)


def release_lock(lock):
    lock_path, fd = lock
    with contextlib.suppress(FileNotFoundError):
        os.unlink(lock_path)  # while still held: a waiter then retakes a fresh one
    os.close(fd)


class RecordFile:
    """One record on disk, saved atomically after every row at a cost linear in its size."""

    def __init__(self, path, head):
        self.path = os.path.realpath(path)  # a link is followed, never replaced
        self.stem = hidden_stem(self.path)  # of its slot files, hashed once
        self.size = 0  # bytes of the record at its last save
        self.head = ("{\n" + ",\n".join(f"{dumps(k)}: {dumps(v)}" for k, v in head.items())
                     + ',\n"runs": [').encode()
        # Serialised rows 0..n-1, each with its separator (b"": skipped); a row is
        # dropped (None) once the slots hold it: memory stays one save's worth.
        self.prefix = []
        self.freed = 0  # rows of prefix dropped
        self.pending = {}  # plan index -> serialised row (None: skipped), out of order
        # Rows waiting for an earlier one are held only up to PENDING_BYTES (a resume
        # of a record with an early gap would hold all its rows): past that the
        # record is written in finishing order and put in plan order once, at the
        # end (reorder). order: the plan index of each place in prefix.
        self.order, self.spans, self.unordered = [], [], False
        self.rows = 0  # rows in prefix: the next one needs a separator
        self.held = 0  # bytes of rows in prefix not yet written to every slot
        self.slots = []  # [{"path", "fd", "rows", "offset"}]
        self.live = 0  # the slot linked at the path: never written in place
        self.lock = None

    @classmethod
    def create(cls, path, head, tail, rows=(), replace=False, lock=None, skipped=()):
        """Start the record at path holding rows [(index, row)]; exclusive unless replace.

        rows may be an iterator (a resume streams the rows it keeps): they are
        written in pieces, and the record appears at path only once all are in.
        skipped: plan indexes that will never hold a row (see skip).

        lock: the record's lock, taken already (a resume takes it before it
        reads the record); else it is taken here. FileExistsError when path
        exists and replace is False; RecordBusy when another run holds it.
        Nothing at path is changed by a refusal.
        """
        self = cls(path, head)
        self.lock = lock or take_lock(self.path)
        try:
            folder, stem = os.path.split(self.stem)
            for name in os.listdir(folder):  # not glob: its pattern is compiled anew per path
                if name.startswith(stem + ".slot"):
                    os.unlink(os.path.join(folder, name))  # left by a killed run: we hold the lock
            if not replace and os.path.lexists(path):
                raise FileExistsError(errno.EEXIST, "File exists", path)
            slot = self.new_slot(0)
            for index in skipped:
                self.skip(index)
            for count, (index, row) in enumerate(rows, 1):
                self.add(index, row)
                if ((count % CREATE_ROWS == 0 or self.held >= CREATE_BYTES)
                        and not self.pending):  # rows after a gap wait
                    self.fill(slot, tail)
                    self.free()
            self.fill(slot, tail)
            self.free()
            if replace:
                self.link_over(slot["path"])
            else:
                os.link(slot["path"], self.path)  # FileExistsError: never overwrite
            sync_folder(self.path)
        except BaseException:
            self.close()
            raise
        return self

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()

    @property
    def saved(self):
        """Rows saved so far."""
        return self.rows + sum(1 for data in self.pending.values() if data is not None)

    def add(self, index, row):
        """Serialise a finished row once; index is its place in the saved order."""
        data = dumps(row).encode()
        if self.unordered:
            self.append(index, data)
            return
        self.pending[index] = data
        self.advance()
        if sum(len(data or b"") for data in self.pending.values()) > PENDING_BYTES:
            self.unordered = True  # write what waits now; reorder at the end
            for index in sorted(self.pending):
                if self.pending[index] is not None:
                    self.append(index, self.pending[index])
            self.pending.clear()

    def skip(self, index):
        """A place in the plan that will hold no row (a proving pair stopped before it)."""
        if not self.unordered:
            self.pending[index] = None
            self.advance()

    def advance(self):
        while self.next_index() in self.pending:
            index = self.next_index()
            data = self.pending.pop(index)
            if data is None:
                self.prefix.append(b"")
                self.order.append(index)
                continue
            self.append(index, data)

    def next_index(self):
        return self.order[-1] + 1 if self.order else 0

    def append(self, index, data):
        self.prefix.append((b",\n" if self.rows else b"\n") + data)
        self.order.append(index)
        self.rows += 1
        self.held += len(data)

    def save(self, tail, final=False, durable=True):
        """Checkpoint every row added so far, atomically (a slot written, then
        renamed over the path); final: the last save, which puts a record written
        in finishing order in plan order and makes the rename durable too.

        durable=False (a receipt): the page cache suffices, as a kill -9 loses
        nothing written there; else the slot is fsynced before its rename (one
        fsync per row), so a power cut may lose the last saves, never tear one.
        """
        target = 1 - self.live
        slot = self.slots[target] if len(self.slots) > target else self.copy_slot(target)
        if final and self.unordered:
            self.reorder(slot, tail)
        else:
            self.fill(slot, tail, durable or final)
        self.link_over(slot["path"])
        self.live = target  # from here on, never write this slot in place
        if final:
            sync_folder(self.path)
        self.free()

    def free(self):
        """Drop the serialised rows that every slot holds: they are on disk twice."""
        written = min(slot["rows"] for slot in self.slots)
        if written > self.freed:
            self.prefix[self.freed:written] = [None] * (written - self.freed)
            self.freed = written
            self.held = sum(len(data) for data in self.prefix[written:] if data)

    def close(self):
        """Drop the slot files and the lock; the path keeps the last save."""
        for slot in self.slots:
            os.close(slot["fd"])
            with contextlib.suppress(FileNotFoundError):
                os.unlink(slot["path"])
        self.slots = []
        if self.lock is not None:
            release_lock(self.lock)
            self.lock = None

    def new_slot(self, number):
        """A new 0600 file beside the record holding only the record's head."""
        path = f"{self.stem}.slot{number}"
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        os.fchmod(fd, 0o600)  # whatever the umask: the record holds paid answers
        slot = {"path": path, "fd": fd, "rows": 0, "offset": len(self.head)}
        self.slots.append(slot)
        write_all(fd, self.head, 0)
        return slot

    def copy_slot(self, number):
        """The second slot, begun as a copy of the first one's rows: the rows
        themselves may no longer be in memory."""
        source = self.slots[self.live]
        path = f"{self.stem}.slot{number}"
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        os.fchmod(fd, 0o600)
        slot = {"path": path, "fd": fd, "rows": source["rows"], "offset": source["offset"]}
        self.slots.append(slot)
        offset = 0
        while offset < source["offset"]:
            data = os.pread(source["fd"], min(COPY_BYTES, source["offset"] - offset), offset)
            write_all(fd, data, offset)
            offset += len(data)
        return slot

    def place_rows(self):
        """Note where each new row lies in a slot (the same place in both)."""
        for place in range(len(self.spans), len(self.prefix)):
            start = self.spans[-1][0] + self.spans[-1][1] if self.spans else len(self.head)
            self.spans.append((start, len(self.prefix[place])))

    def reorder(self, slot, tail):
        """Rewrite slot as the live slot's rows in plan order, then the tail: one
        pass, a row at a time."""
        self.place_rows()
        source, offset = self.slots[self.live], len(self.head)
        for place in sorted(range(len(self.prefix)), key=self.order.__getitem__):
            start, length = self.spans[place]
            data = self.prefix[place]  # still in memory, or on disk in both slots
            data = (os.pread(source["fd"], length, start) if data is None else data
                    ).lstrip(b",\n")
            if data:  # a skipped place holds nothing
                data = (b",\n" if offset > len(self.head) else b"\n") + data
                write_all(slot["fd"], data, offset)
                offset += len(data)
        lines = [f"{dumps(key)}: {dumps(value)}" for key, value in tail.items()]
        data = ("\n],\n" + ",\n".join(lines) + "\n}\n").encode()
        write_all(slot["fd"], data, offset)
        os.ftruncate(slot["fd"], offset + len(data))
        os.fsync(slot["fd"])
        self.size = offset + len(data)

    def fill(self, slot, tail, durable=True):
        """Bring a slot up to date: the rows it lacks, pending rows, then the tail."""
        self.place_rows()
        fresh = b"".join(self.prefix[slot["rows"]:])
        parts, position = [fresh], self.rows
        for index in sorted(self.pending):  # finished early, out of order: at most --jobs
            if self.pending[index] is not None:
                parts.append((b",\n" if position else b"\n") + self.pending[index])
                position += 1
        lines = [f"{dumps(key)}: {dumps(value)}" for key, value in tail.items()]
        parts.append(("\n],\n" + ",\n".join(lines) + "\n}\n").encode())
        data = b"".join(parts)
        write_all(slot["fd"], data, slot["offset"])
        os.ftruncate(slot["fd"], slot["offset"] + len(data))
        if durable:
            os.fsync(slot["fd"])
        self.size = slot["offset"] + len(data)
        slot["rows"], slot["offset"] = len(self.prefix), slot["offset"] + len(fresh)

    def link_over(self, source):
        """Make the record's path name source's file in one atomic rename."""
        temp = self.stem + ".slot-link"
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)  # left by a save that failed between link and rename
        os.link(source, temp)
        os.replace(temp, self.path)
