"""Views of a finished run or comparison for CI: JUnit XML and Markdown.

Pure functions build the text from rows and summaries; two small writers put
it on disk. The record (results.json) stays the evidence: these are views.

    regression.py --junit junit.xml --summary-md "$GITHUB_STEP_SUMMARY"
    compare_runs.py before.json after.json --summary-md "$GITHUB_STEP_SUMMARY"
"""

import os
import statistics
import xml.etree.ElementTree as ET

# --------------------------------------------------------------------------
# Pure: rows in, text out.
# --------------------------------------------------------------------------


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
    root = ET.Element("testsuites", name="agent regression runner")
    for model, entries in suites.items():
        suite = ET.SubElement(root, "testsuite", name=model)
        counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
        total_time = 0.0
        for index, repeat, case in entries:
            row = rows.get(index)
            seconds = (row or {}).get("seconds") or 0.0
            total_time += seconds
            testcase = ET.SubElement(suite, "testcase", classname=model,
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
                detail = row.get("error_message") or row["error"]
                element = ET.SubElement(testcase, "error", type=row["error"],
                                        message=f"{row['error']}: {detail}")
                element.text = detail
                counts["errors"] += 1
            elif not row.get("passed"):
                reasons = ", ".join(row.get("reasons") or [])
                element = ET.SubElement(testcase, "failure", type="check_failed",
                                        message=reasons)
                element.text = f"{reasons}\nanswer: {row.get('answer_text')}"
                counts["failures"] += 1
        for key, value in counts.items():
            suite.set(key, str(value))
        suite.set("time", f"{total_time:.3f}")
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def cell(text):
    """Text safe inside a Markdown table cell."""
    return str(text).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


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
        f"## {title}",
        f"**{verdict}**",
        table(["model", "passed", "qualified", "reported cost", "median s"], totals),
        table(["case", *models], grid),
    ]) + "\n\n"


def compare_markdown(title, lines, cautions, before_rows, after_rows):
    """A comparison: label counts, then every changed row with pass rates."""

    def rates(rows):
        counts = {}
        for (model, case_id, _), row in rows.items():
            passed, runs = counts.get((model, case_id), (0, 0))
            counts[(model, case_id)] = (passed + bool(row["passed"]), runs + 1)
        return counts

    before_rates, after_rates = rates(before_rows), rates(after_rows)
    labels = ("NEW_FAILURE", "RECOVERED", "STILL_FAILING", "PASS")
    count_table = table(["label", "rows"],
                        [[name, sum(1 for line in lines if line[0] == name)] for name in labels])
    changed = [
        [name, model, case_id, repeat, ", ".join(old) or "pass", ", ".join(new) or "pass",
         pass_rate(*before_rates[(model, case_id)]), pass_rate(*after_rates[(model, case_id)])]
        for name, (model, case_id, repeat), old, new in lines
        if name in ("NEW_FAILURE", "RECOVERED")
    ]
    parts = [f"## {title}", count_table]
    parts += [f"> {caution}" for caution in cautions]
    if changed:
        parts.append(table(["label", "model", "case", "repeat", "before", "after",
                            "before pass rate", "after pass rate"], changed))
    else:
        parts.append("No row changed between the two runs.")
    return "\n\n".join(parts) + "\n\n"


# --------------------------------------------------------------------------
# I/O: the two ways a view reaches the disk.
# --------------------------------------------------------------------------


def replace_problem(path):
    """Why path may not be replaced by a report, or None. Records are never."""
    try:
        with open(path, "rb") as handle:
            start = handle.read(64).lstrip()
    except FileNotFoundError:
        folder = os.path.dirname(os.path.abspath(path))
        return None if os.path.isdir(folder) else f"folder {folder} does not exist"
    except OSError as exc:
        return exc.strerror
    if start and not start.startswith((b"<?xml", b"<testsuites")):
        return "it exists and is not a JUnit report; name a new file"
    return None


def append_problem(path):
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        return "it is a folder"
    return None if os.path.isdir(folder) else f"folder {folder} does not exist"


def write_replacing(path, text):
    """Write a report atomically, replacing an earlier report at path."""
    temp = f"{path}.{os.getpid()}.tmp"
    with open(temp, "w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temp, path)


def append(path, text):
    """Append, as $GITHUB_STEP_SUMMARY expects: earlier content is kept."""
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(text)
