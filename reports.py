"""Views of a finished run or comparison for CI: JUnit XML and Markdown.

Pure functions build the text from rows and summaries; two small writers put
it on disk. The record (results.json) stays the evidence: these are views.

    regression.py --junit junit.xml --summary-md "$GITHUB_STEP_SUMMARY"
    compare_runs.py before.json after.json --summary-md "$GITHUB_STEP_SUMMARY"
"""

import contextlib
import os
import re
import stat
import statistics
import tempfile
import xml.etree.ElementTree as ET

from checker import bound_text, floor_percent, given_percent, lower_bound
from vocabulary import BY_CONCERN, p_text

SUITES_NAME = "agent regression runner"
XML_DECLARATION = '<?xml version="1.0" encoding="UTF-8"?>\n'
HTML_MARK = '<meta name="generator" content="agent regression runner">'
# The first bytes of each view this module or evidence_page writes, and what
# output_problem demands of a file before it replaces it or appends to it: a
# file that merely mentions a mark further down (a note, this source) is not ours.
JUNIT_START = f'{XML_DECLARATION}<testsuites name="{SUITES_NAME}"'
HTML_START = f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">\n{HTML_MARK}'
SUMMARY_MARK = "<!-- agent regression runner summary -->\n"  # GitHub shows no comment
STARTS = {"junit": JUNIT_START.encode(), "html": HTML_START.encode(),
          "markdown": SUMMARY_MARK.encode()}
START_BYTES = 4096  # enough for any start above and the first character of JSON or XML
TEMP_PREFIX, TEMP_SUFFIX = ".report-", ".tmp"  # short: any name its folder allows still fits
MARKDOWN_SUFFIXES = (".md", ".markdown")  # the only names a new summary may take
NOT_MARKDOWN = {".py", ".json", ".xml", ".html", ".htm", ".toml", ".yml", ".yaml", ".txt",
                ".csv", ".js", ".sh"}  # named in the refusal, so the reader sees why
NAME_PROBLEM = ("a new Markdown summary needs a name ending in .md or .markdown; "
                "name a new .md file")
# Characters that could corrupt a view or hide text: C0/C1 controls (an ANSI
# \x1b, a NUL: invalid XML, terminal escapes), zero-width and bidi overrides
# (Trojan Source), line separators, and lone surrogates (not even UTF-8).
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e"
                     "\u2060-\u2069\ufeff\ud800-\udfff\ufffe\uffff]")
MARKDOWN_ACTIVE = re.compile(r"([\\|<\[\]!`])")  # would start a link, an image, HTML, code

# --------------------------------------------------------------------------
# Pure: rows in, text out.
# --------------------------------------------------------------------------


def visible(text):
    """text with control characters shown as \\xNN: safe in a terminal, XML, Markdown."""
    return CONTROL.sub(control_code, str(text))


def control_code(match):
    """A control character as the escape a reader can type: \\x1b, \\u202e."""
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def testcase_name(case_id, model, repeat):
    """A testcase's name holds its model whole: JUnit viewers title a testcase by
    its file and name (and cut a classname at its last dot: gpt-5.6-sol -> 6-sol)."""
    return f"{case_id} on {model} [repeat {repeat}]"


def failure_message(row, rate):
    """What failed, how often this (model, case) passed, and what the row cost:
    the one line a JUnit viewer shows of a failure (none shows properties)."""
    parts = [", ".join(row.get("reasons") or []) or "failed"]
    if rate and rate.get("runs"):
        text = f"{rate['passed']}/{rate['runs']} passed"
        if "lower_bound" in rate:
            text += f", {bound_text(rate['lower_bound'], rate['confidence'])}"
        parts.append(text)
    cost = row.get("cost_usd")
    parts.append("cost unknown" if cost is None else f"cost ${cost}")
    return visible("; ".join(parts))


def row_outcome(testcase, row, rate):
    """One saved row's properties and outcome in its testcase: "errors",
    "failures", or "passed" (a pass, or an allowed failure of a qualified plan)."""
    properties = ET.SubElement(testcase, "properties")
    ET.SubElement(properties, "property", name="cost_usd", value=str(row.get("cost_usd")))
    if rate and "lower_bound" in rate:
        ET.SubElement(properties, "property", name="pass_rate_lower_bound",
                      value=f"{rate['lower_bound']} at {rate['confidence']}")
    if row.get("error"):
        detail = visible(row.get("error_message") or row["error"])
        element = ET.SubElement(testcase, "error", type=visible(row["error"]),
                                message=f"{visible(row['error'])}: {detail}")
        element.text = detail
        return "errors"
    if row.get("passed"):
        return "passed"
    message = failure_message(row, rate)
    if rate and rate.get("qualified") is True:
        # An allowed failure of a plan the pair still qualified under: shown, never a
        # <failure> (the gate passed it).
        ET.SubElement(properties, "property", name="allowed_failure",
                      value=visible(", ".join(row.get("reasons") or [])))
        element = ET.SubElement(testcase, "system-out")
        element.text = (f"allowed failure of a qualified plan: {message}\n"
                        f"answer: {visible(row.get('answer_text'))}")
        return "passed"
    element = ET.SubElement(testcase, "failure", type="check_failed", message=message)
    element.text = f"{message}\nanswer: {visible(row.get('answer_text'))}"
    return "failures"


def junit_xml(rows, plan, models, result=None, dropped=(), source="regression.py"):
    """JUnit XML: a testsuite per model, a testcase per planned row.

    rows: {plan index: row}; plan: [(repeat, case, model)]. A planned row that
    never ran (an interrupt, a stop) is a skipped testcase, so an incomplete
    run can never look green. result: the run's summary, whose per-case pass
    rate bound each testcase of that model and case carries as a property.
    dropped: plan indexes never to be sent (a proving pair stopped before them).
    source: the file that holds the cases, every testcase's `file`.
    """
    suites = {model: [] for model in models}
    for index, (repeat, case, model) in enumerate(plan):
        if index not in dropped:
            suites[model].append((index, repeat, case))
    root = ET.Element("testsuites", name=SUITES_NAME)
    for model, entries in suites.items():
        suite = ET.SubElement(root, "testsuite", name=visible(model))
        counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
        total_time = 0.0
        for index, repeat, case in entries:
            row = rows.get(index)
            seconds = (row or {}).get("seconds") or 0.0
            total_time += seconds
            testcase = ET.SubElement(suite, "testcase", classname=visible(model),
                                     name=visible(testcase_name(case["id"], model, repeat)),
                                     file=visible(source), time=f"{seconds:.3f}")
            counts["tests"] += 1
            if row is None:
                ET.SubElement(testcase, "skipped", message="not run: the run stopped early")
                counts["skipped"] += 1
                continue
            outcome = row_outcome(testcase, row, (result or {}).get("models", {}).get(
                model, {}).get("cases", {}).get(case["id"]))
            if outcome in counts:  # a pass (or an allowed failure) counts only as a test
                counts[outcome] += 1
        for key, value in counts.items():
            suite.set(key, str(value))
        suite.set("time", f"{total_time:.3f}")
    ET.indent(root)
    return XML_DECLARATION + ET.tostring(root, encoding="unicode") + "\n"


def cell(text):
    """Text safe inside a Markdown table cell or a line: no control characters, no
    link, image or HTML (GitHub renders those in a step summary), one line."""
    return MARKDOWN_ACTIVE.sub(r"\\\1", visible(str(text).replace("\n", " ")))


def table(header, rows):
    lines = ["| " + " | ".join(cell(h) for h in header) + " |",
             "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(value) for value in row) + " |" for row in rows]
    return "\n".join(lines)


def pass_rate(passed, runs):
    return f"{passed}/{runs}" if runs else "not run"


def run_markdown(title, result, rows, cases, verdict):
    """A run: per-model totals, then a case x model grid of pass rates and reasons."""
    models = list(result["models"])
    by_model = {model: [row for row in rows if row.get("model") == model] for model in models}
    totals = []
    for model, counts in result["models"].items():
        seconds = [row["seconds"] for row in by_model[model]
                   if isinstance(row.get("seconds"), (int, float))]
        cost = counts["reported_cost_usd"]
        totals.append([model, f"{counts['passed']}/{counts['total']}",
                       "yes" if counts["qualified"] else "**no**",
                       "unknown" if cost is None else f"${cost}",
                       f"{statistics.median(seconds):.1f}" if seconds else "-"])
    grid = []
    for case in cases:
        line = [case["id"]]
        for model in models:
            rate = result["models"][model]["cases"].get(case["id"], {"passed": 0, "runs": 0})
            reasons = sorted({reason for row in by_model[model]
                              if row.get("case_id") == case["id"]
                              for reason in row.get("reasons") or []})
            text = ("no verdict" if not rate["runs"] and rate.get("no_verdict")
                    else pass_rate(rate["passed"], rate["runs"]))
            if rate.get("flaky"):
                text += " FLAKY"
            if rate["runs"] and "lower_bound" in rate:
                text += f", {bound_text(rate['lower_bound'], rate['confidence'])}"
            if reasons:
                text += ": " + ", ".join(reasons)
            line.append(text)
        grid.append(line)
    return SUMMARY_MARK + "\n\n".join([
        f"## {cell(title)}",
        f"**{cell(verdict)}**",
        table(["model", "passed", "qualified", "reported cost", "median s"], totals),
        table(["case", *models], grid),
    ]) + "\n\n"


def bounds_text(item):
    """The pass-rate bounds of one compared item, before -> after, each at its
    record's own confidence, rounded down."""
    levels = item.get("before_confidence", item["confidence"]), item["confidence"]
    shown = []
    for rows, level in ((item["before"], levels[0]), (item["after"], levels[1])):
        lower = lower_bound(sum(row["passed"] for row in rows), len(rows), level)
        shown.append(f"{floor_percent(lower)} % ({given_percent(level)} %)")
    return f">= {shown[0]} -> {shown[1]}"


def compare_markdown(title, items, cautions, files=None):
    """A comparison: label counts, the cautions, then every case that did not pass both times.

    items: one per compared (model, case), as compare_runs builds them: label,
    before_model, after_model, case_id, before and after (the rows over the
    repeats) and p_value (None with one repeat).
    """

    def side(rows):
        reasons = sorted({reason for row in rows for reason in row["reasons"]})
        text = pass_rate(sum(1 for row in rows if row["passed"]), len(rows))
        return text + (": " + ", ".join(reasons) if reasons else "")

    count_table = table(["label", "cases"],
                        [[name, sum(1 for item in items if item["label"] == name)]
                         for name in BY_CONCERN])
    listed = [
        [item["label"],
         item["before_model"] if item["before_model"] == item["after_model"]
         else f"{item['before_model']}->{item['after_model']}",
         item["case_id"], side(item["before"]), side(item["after"]), p_text(item["p_value"]),
         bounds_text(item)]
        for item in items if item["label"] != "PASS"
    ]
    first = [caution for caution in cautions if "is newer than AFTER" in caution]  # swapped
    parts = [f"## {cell(title)}", *([cell(files)] if files else []),
             *[f"> **{cell(caution)}**" for caution in first], count_table]
    parts += [f"> {cell(caution)}" for caution in cautions if caution not in first]
    if listed:
        parts.append(table(["label", "model", "case", "before", "after", "p (rate fell)",
                            "pass rate proved"], listed))
    else:
        parts.append("Every compared case passed both times.")
    return SUMMARY_MARK + "\n\n".join(parts) + "\n\n"


# --------------------------------------------------------------------------
# I/O: the two ways a view reaches the disk.
# --------------------------------------------------------------------------


def output_problem(path, kind):
    """Why a report of kind "junit", "markdown" or "html" may not go to path, or None.

    A file is written only where that can harm nothing: JUnit and HTML reports
    replace only a file that begins as this tool's report of that kind; a
    Markdown summary is appended only to $GITHUB_STEP_SUMMARY, to an empty or
    new .md file, or to a file that begins as this tool's summary. The folder
    (or the file appended to) is tried for writing, so an unwritable place is
    refused before the run sends anything.
    """
    if not path:
        return ("the path is empty (outside GitHub Actions $GITHUB_STEP_SUMMARY is not "
                "set); name a file")
    folder = os.path.dirname(os.path.abspath(path))
    try:
        info = os.stat(path)
    except FileNotFoundError:
        if os.path.lexists(path):
            # Appending would create the link's target, somewhere never checked.
            return "it is a link to a missing file; name another file"
        if not os.path.isdir(folder):
            return f"folder {folder} does not exist; create it or choose another path"
        if kind == "markdown" and not step_summary(path) and not markdown_name(path):
            return NAME_PROBLEM
        return folder_problem(folder)
    except OSError as exc:
        return exc.strerror or str(exc)
    if stat.S_ISDIR(info.st_mode):
        return "it is a folder; name a file"
    if not stat.S_ISREG(info.st_mode):
        return "it is not a regular file"
    try:
        if kind == "markdown":
            # Actions creates $GITHUB_STEP_SUMMARY; earlier steps may have written
            # their own Markdown there.
            problem = None if step_summary(path) else markdown_problem(path, file_start(path))
            return problem or append_problem(path)
        start = file_start(path)
    except OSError as exc:
        return exc.strerror or str(exc)
    if not start.startswith(STARTS[kind]):
        return f"it exists and is not a {kind_name(kind)} written by this tool; name a new file"
    return folder_problem(folder)


def markdown_problem(path, start):
    """Why the existing file path, beginning with start, is not one to append to."""
    if start.startswith(STARTS["markdown"]):
        return None
    if not start:
        # As good as a new file, and named like one: an empty __init__.py is code.
        return None if markdown_name(path) else NAME_PROBLEM
    if start.lstrip()[:1] in (b"{", b"[", b"<"):
        return ("it holds JSON or XML, not a Markdown summary written by this tool; "
                "name a new .md file")
    if os.path.splitext(path)[1].lower() in NOT_MARKDOWN:
        return ("it is named like code or data, not a Markdown summary written by this tool; "
                "name a new .md file")
    return "it exists and is not a Markdown summary written by this tool; name a new .md file"


def file_start(path):
    with open(path, "rb") as handle:
        return handle.read(START_BYTES)


def markdown_name(path):
    return path.lower().endswith(MARKDOWN_SUFFIXES)


def step_summary(path):
    """True when path is the file GitHub Actions named in $GITHUB_STEP_SUMMARY."""
    named = os.environ.get("GITHUB_STEP_SUMMARY")
    if not named:
        return False
    try:
        return os.path.samefile(path, named)
    except OSError:  # not created yet: compare the names
        return os.path.realpath(path) == os.path.realpath(named)


def folder_problem(folder):
    """Why no file can be created in folder, found by creating one: os.access
    judges by mode bits and the real user, so it says yes to root where an
    immutable folder, a quota or a container's limits still refuse."""
    try:
        fd, probe = tempfile.mkstemp(prefix=TEMP_PREFIX, suffix=TEMP_SUFFIX, dir=folder)
    except OSError as exc:
        return f"cannot write in folder {folder} ({exc.strerror or exc}); choose another path"
    os.close(fd)
    os.unlink(probe)
    return None


def append_problem(path):
    """Why path cannot be opened for appending; opening it writes nothing."""
    try:
        with open(path, "ab"):
            pass
    except OSError as exc:
        return f"cannot write to it ({exc.strerror or exc}); choose another path"
    return None


def kind_name(kind):
    return {"junit": "JUnit report", "html": "report page"}[kind]


def write_replacing(path, text):
    """Write a report atomically, replacing an earlier report at path.

    The temporary file has a short name of its own, so any name that fits in
    its folder can be written.
    """
    fd, temp = tempfile.mkstemp(prefix=TEMP_PREFIX, suffix=TEMP_SUFFIX,
                                dir=os.path.dirname(os.path.abspath(path)))
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise


def append(path, text):
    """Append, as $GITHUB_STEP_SUMMARY expects: earlier content is kept."""
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(text)
