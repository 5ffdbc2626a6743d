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

from vocabulary import BY_CONCERN, p_text

SUITES_NAME = "agent regression runner"  # marks a JUnit file as ours: only ours is replaced
HTML_MARK = '<meta name="generator" content="agent regression runner">'  # likewise for pages
MARKS = {"junit": f'<testsuites name="{SUITES_NAME}"'.encode(), "html": HTML_MARK.encode()}
MARK_BYTES = 4096  # where a report's mark must appear
NOT_MARKDOWN = {".py", ".json", ".xml", ".html", ".htm", ".toml", ".yml", ".yaml", ".txt",
                ".csv", ".js", ".sh"}  # a Markdown summary is never appended to these
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


def testcase_name(case_id, repeat):
    return f"{case_id} [repeat {repeat}]"


def junit_xml(rows, plan, models):
    """JUnit XML: a testsuite per model, a testcase per planned row.

    rows: {plan index: row}; plan: [(repeat, case, model)]. A planned row that
    never ran (an interrupt, a stop) is a skipped testcase, so an incomplete
    run can never look green.
    """
    suites = {model: [] for model in models}
    for index, (repeat, case, model) in enumerate(plan):
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
                                     name=testcase_name(case["id"], repeat),
                                     time=f"{seconds:.3f}")
            counts["tests"] += 1
            if row is None:
                ET.SubElement(testcase, "skipped", message="not run: the run stopped early")
                counts["skipped"] += 1
                continue
            properties = ET.SubElement(testcase, "properties")
            ET.SubElement(properties, "property", name="cost_usd",
                          value=str(row.get("cost_usd")))
            if row.get("error"):
                detail = visible(row.get("error_message") or row["error"])
                element = ET.SubElement(testcase, "error", type=visible(row["error"]),
                                        message=f"{visible(row['error'])}: {detail}")
                element.text = detail
                counts["errors"] += 1
            elif not row.get("passed"):
                reasons = visible(", ".join(row.get("reasons") or []))
                element = ET.SubElement(testcase, "failure", type="check_failed",
                                        message=reasons)
                element.text = f"{reasons}\nanswer: {visible(row.get('answer_text'))}"
                counts["failures"] += 1
        for key, value in counts.items():
            suite.set(key, str(value))
        suite.set("time", f"{total_time:.3f}")
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


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
            text = pass_rate(rate["passed"], rate["runs"])
            if rate.get("flaky"):
                text += " FLAKY"
            if reasons:
                text += ": " + ", ".join(reasons)
            line.append(text)
        grid.append(line)
    return "\n\n".join([
        f"## {cell(title)}",
        f"**{cell(verdict)}**",
        table(["model", "passed", "qualified", "reported cost", "median s"], totals),
        table(["case", *models], grid),
    ]) + "\n\n"


def compare_markdown(title, items, cautions):
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
         item["case_id"], side(item["before"]), side(item["after"]), p_text(item["p_value"])]
        for item in items if item["label"] != "PASS"
    ]
    parts = [f"## {cell(title)}", count_table]
    parts += [f"> {cell(caution)}" for caution in cautions]
    if listed:
        parts.append(table(["label", "model", "case", "before", "after", "p (rate fell)"],
                           listed))
    else:
        parts.append("Every compared case passed both times.")
    return "\n\n".join(parts) + "\n\n"


# --------------------------------------------------------------------------
# I/O: the two ways a view reaches the disk.
# --------------------------------------------------------------------------


def output_problem(path, kind):
    """Why a report of kind "junit", "markdown" or "html" may not go to path, or None.

    JUnit and HTML reports replace only an earlier report of ours; Markdown is
    appended only to a plain text file. A record, an XML file of another tool
    or an empty name is refused before the run sends anything.
    """
    if not path:
        return ("the path is empty (outside GitHub Actions $GITHUB_STEP_SUMMARY is not "
                "set); name a file")
    try:
        info = os.stat(path)
    except FileNotFoundError:
        folder = os.path.dirname(os.path.abspath(path))
        return None if os.path.isdir(folder) else f"folder {folder} does not exist"
    except OSError as exc:
        return exc.strerror or str(exc)
    if stat.S_ISDIR(info.st_mode):
        return "it is a folder; name a file"
    if not stat.S_ISREG(info.st_mode):
        return "it is not a regular file"
    try:
        with open(path, "rb") as handle:
            start = handle.read(MARK_BYTES)
    except OSError as exc:
        return exc.strerror or str(exc)
    if kind == "markdown":
        if start.lstrip()[:1] in (b"{", b"[", b"<"):
            return "it holds JSON or XML, not Markdown; name another file"
        if os.path.splitext(path)[1].lower() in NOT_MARKDOWN:
            return "it is named like code or data, not Markdown; name another file"
        return None
    if MARKS[kind] not in start:
        return f"it exists and is not a {kind_name(kind)} written by this tool; name a new file"
    return None


def kind_name(kind):
    return {"junit": "JUnit report", "html": "report page"}[kind]


def write_replacing(path, text):
    """Write a report atomically, replacing an earlier report at path.

    The temporary file has a short name of its own, so any name that fits in
    its folder can be written.
    """
    fd, temp = tempfile.mkstemp(prefix=".report-", suffix=".tmp",
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
