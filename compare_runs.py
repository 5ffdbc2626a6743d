"""Compare two saved runs of regression.py and name every new failure.

    python compare_runs.py before.json after.json
    python compare_runs.py --demo NEW_DIR      # a synthetic pair, offline

Prints one line per (model, case, repeat), sorted:
    NEW_FAILURE  passed before, fails now: the change broke an approved decision
    RECOVERED    failed before, passes now
    PASS         passed both times
    STILL_FAILING  failed both times

Exit codes:
    0  no new failure
    1  at least one NEW_FAILURE
    2  NOT_COMPARABLE: a file is missing, unreadable, not JSON, malformed, or
       the two runs differ in more than their instructions
"""

import argparse
import copy
import json
import os
import stat

import regression
import reports

MAX_RECORD_BYTES = 1 << 30  # a 2,400-row run is ~25 MB; anything far larger is not a record
LABELS = ("NEW_FAILURE", "RECOVERED", "PASS", "STILL_FAILING")

# --------------------------------------------------------------------------
# Pure functions: validate, index, label.
# --------------------------------------------------------------------------


def names(value, what):
    """A non-empty list of distinct, printable, non-empty strings, or ValueError."""
    if not isinstance(value, list) or not value:
        raise ValueError(f"{what} must be a non-empty list")
    for item in value:
        if not isinstance(item, str) or not item or not item.isprintable():
            raise ValueError(f"{what} must hold non-empty printable strings")
    if len(set(value)) != len(value):
        raise ValueError(f"{what} has duplicates")
    return value


def check_shape(record, which="record"):
    if not isinstance(record, dict):
        raise ValueError(f"{which} is not a JSON object")
    if not isinstance(record.get("config"), dict):
        raise ValueError(f"{which} has no config object")
    if not isinstance(record.get("runs"), list):
        raise ValueError(f"{which} has no runs list")


def index(record):
    """Rows keyed by (model, case id, repeat); ValueError for anything malformed."""
    check_shape(record)
    config = record["config"]
    models = names(config.get("models"), "config.models")
    cases = config.get("cases")
    if not isinstance(cases, list) or not all(isinstance(c, dict) for c in cases):
        raise ValueError("config.cases must be a list of objects")
    case_ids = names([case.get("id") for case in cases], "config.cases ids")
    repeats = config.get("repeats")
    # Bounds before building anything: a forged repeats must not allocate a
    # billion keys. bool is an int in Python, and True is not a repeat count.
    if (
        isinstance(repeats, bool)
        or not isinstance(repeats, int)
        or not 1 <= repeats <= regression.MAX_REPEATS
    ):
        raise ValueError(f"config.repeats must be an integer 1..{regression.MAX_REPEATS}")
    rows = {}
    for number, row in enumerate(record["runs"], 1):
        if not isinstance(row, dict):
            raise ValueError(f"run {number} is not an object")
        key = (row.get("model"), row.get("case_id"), row.get("repeat"))
        if (
            not all(isinstance(part, str) for part in key[:2])
            or isinstance(key[2], bool)
            or not isinstance(key[2], int)
        ):
            raise ValueError(f"run {number} has no valid model, case_id and repeat")
        if key in rows:
            raise ValueError(f"run {number} repeats {format_key(key)}")
        if row.get("error"):
            raise ValueError(f"run {number} ({format_key(key)}) has an execution error; "
                             "resume or rerun it before comparing")
        reasons = row.get("reasons")
        if not isinstance(reasons, list) or not all(isinstance(r, str) for r in reasons):
            raise ValueError(f"run {number} reasons must be a list of strings")
        if not isinstance(row.get("passed"), bool) or row["passed"] != (not reasons):
            raise ValueError(f"run {number} passed does not agree with its reasons")
        rows[key] = row
    expected = {
        (model, case_id, repeat)
        for model in models
        for case_id in case_ids
        for repeat in range(1, repeats + 1)
    }
    if set(rows) != expected:
        missing, extra = len(expected - set(rows)), len(set(rows) - expected)
        raise ValueError(f"runs do not cover the config: {missing} missing, {extra} unexpected")
    return rows


def format_key(key):
    model, case_id, repeat = key
    return f"{model} {case_id} {repeat}"


def label(before_row, after_row):
    if before_row["passed"]:
        return "PASS" if after_row["passed"] else "NEW_FAILURE"
    return "RECOVERED" if after_row["passed"] else "STILL_FAILING"


def differences(before, after):
    """(labelled lines, cautions, before rows, after rows), or ValueError."""
    for which, record in (("before", before), ("after", after)):
        check_shape(record, which)
    differing = sorted(
        key
        for key in set(before["config"]) | set(after["config"])
        if key != "instructions" and before["config"].get(key) != after["config"].get(key)
    )
    if differing:
        raise ValueError(f"configs differ in {', '.join(differing)}; only instructions may "
                         "change between compared runs")
    evidence = (before.get("evidence", "live"), after.get("evidence", "live"))
    if evidence[0] != evidence[1]:
        raise ValueError(f"evidence differs ({evidence[0]!r} vs {evidence[1]!r}); "
                         "compare live runs with live runs")
    before_rows, after_rows = index(before), index(after)
    cautions = [
        f"CAUTION: changed {field}: {before.get(field)} -> {after.get(field)}; "
        "a difference may come from the tooling, not the model"
        for field in ("sdk_version", "code_sha256")
        if before.get(field) != after.get(field)
    ]
    lines = []
    for key in sorted(before_rows, key=lambda k: (k[0], k[1], k[2])):
        old, new = before_rows[key], after_rows[key]
        lines.append((label(old, new), key, old["reasons"], new["reasons"]))
    return lines, cautions, before_rows, after_rows


def compare(before, after, summary_md=None):
    """Print the CAUTION and labelled lines; 1 if any NEW_FAILURE, else 0.

    summary_md: a file to append a Markdown view to (labels and changed rows).
    """
    lines, cautions, before_rows, after_rows = differences(before, after)
    if summary_md is not None:
        title = "Comparison" + (" (synthetic demo)" if before.get("evidence") == "synthetic"
                                else "")
        reports.append(summary_md, reports.compare_markdown(title, lines, cautions,
                                                            before_rows, after_rows))
    for caution in cautions:
        print(caution)
    for name, (model, case_id, repeat), old, new in lines:
        print(name, model, case_id, repeat, "before=", old, "after=", new)
    return 1 if any(line[0] == "NEW_FAILURE" for line in lines) else 0


# --------------------------------------------------------------------------
# I/O: the synthetic demo pair and reading records.
# --------------------------------------------------------------------------


def demo_record(unsafe_models):
    """A record shaped like a live one, its rows checked by the real check()."""
    import simulated_api

    model = "offline/model"
    rows = []
    for number, case in enumerate(regression.CASES, 1):
        raw = simulated_api.agent_response(number, case, model, unsafe_models)
        text = raw["output"][1]["content"][0]["text"]
        reasons = regression.check(case, raw, text)
        rows.append({
            "repeat": 1, "case_id": case["id"], "model": model, "error": None,
            "error_status": None, "cost_usd": regression.reported_cost(raw),
            "response": raw, "answer_text": text, "reasons": reasons,
            "seconds": 0.0, "passed": not reasons,
        })
    return {
        "created_at": "1970-01-01T00:00:00+00:00",
        # A deep copy, so that nothing done to a demo record reaches regression's own.
        "config": copy.deepcopy(regression.run_config([model], regression.CASES, 1)),
        "sdk_version": regression.sdk_version(),
        "code_sha256": regression.code_sha256(),
        "evidence": "synthetic",
        "runs": rows,
        "summary": regression.summary(rows, [model], 1),
    }


def demo(folder, summary_md=None):
    """Write a synthetic before/after pair into a new folder and compare them."""
    os.makedirs(folder)  # FileExistsError when it exists: never overwrite
    before = demo_record(unsafe_models=())
    after = demo_record(unsafe_models={"offline/model"})
    for name, record in (("before.json", before), ("after.json", after)):
        with open(os.path.join(folder, name), "x", encoding="utf-8") as handle:
            json.dump(record, handle, indent=2)
    print(f"SYNTHETIC: synthetic demo records, made offline; no model was called "
          f"({folder}/before.json, {folder}/after.json).")
    return compare(before, after, summary_md)


def load(path):
    """A record from disk; OSError or ValueError with a readable reason."""
    info = os.stat(path)
    if not stat.S_ISREG(info.st_mode):
        raise ValueError(f"{path} is not a regular file")
    if info.st_size > MAX_RECORD_BYTES:
        raise ValueError(f"{path} is larger than {MAX_RECORD_BYTES} bytes")
    with open(path, "rb") as handle:
        data = handle.read()
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as exc:
        reason = "nested too deeply" if isinstance(exc, RecursionError) else exc
        raise ValueError(f"{path} is not valid JSON ({reason})") from None


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="compare_runs.py",
        description="Compare two saved runs and name every new failure.",
        epilog="Exit codes: 0 no new failure, 1 new failure, 2 not comparable.",
    )
    parser.add_argument("before", nargs="?", help="the earlier record (results.json)")
    parser.add_argument("after", nargs="?", help="the later record")
    parser.add_argument("--demo", metavar="NEW_DIR",
                        help="write a synthetic before/after pair into NEW_DIR and compare it")
    parser.add_argument("--summary-md", metavar="FILE",
                        help="append a Markdown view, e.g. to $GITHUB_STEP_SUMMARY")
    # A usage error is one line, as CI logs read best; --help shows the usage.
    parser.print_usage = lambda file=None: None
    args = parser.parse_args(argv)
    problem = args.summary_md is not None and reports.append_problem(args.summary_md)
    if problem:
        parser.error(f"--summary-md {args.summary_md}: {problem}")
    if args.demo is not None and (args.before or args.after):
        parser.error("give BEFORE AFTER or --demo NEW_DIR, not both")
    if args.demo is None and not (args.before and args.after):
        parser.error("give two records to compare: BEFORE AFTER (or --demo NEW_DIR)")
    try:
        if args.demo is not None:
            return demo(args.demo, args.summary_md)
        return compare(load(args.before), load(args.after), args.summary_md)
    except FileExistsError:
        problem = f"{args.demo} already exists; name a new folder for --demo"
    except OSError as exc:
        problem = f"cannot open {exc.filename}: {exc.strerror}"
    except (ValueError, RecursionError) as exc:
        problem = str(exc) if isinstance(exc, ValueError) else "a record is nested too deeply"
    print(f"NOT_COMPARABLE: {problem}")
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
