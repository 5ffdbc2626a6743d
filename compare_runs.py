"""Compare two saved runs of regression.py and name every new failure.

    python compare_runs.py before.json after.json
    python compare_runs.py before.json after.json --summary-md "$GITHUB_STEP_SUMMARY"
    python compare_runs.py before.json after.json --html comparison.html
    python compare_runs.py sonar.json agent.json --switch chat:sonar-pro=openai/gpt-5.6-sol
    python compare_runs.py migration.json --switch chat:sonar-pro=openai/gpt-5.6-sol
    python compare_runs.py --demo NEW_DIR      # a synthetic pair, made offline

Two records made with one repeat: one line per (model, case, repeat), sorted by
model, case id (numbers in ids compare as numbers: case-2 before case-10) and
repeat (numbered from 0):
    LABEL model case repeat before= [reasons] after= [reasons]
More repeats: one line per (model, case), judged on its pass rates:
    LABEL model case before=K/N after=K/N p=P
where P is the one-sided Fisher exact p-value that the pass rate fell (small:
the drop is unlikely to be chance). LABEL is one of
    NEW_FAILURE    passed every time before, fails at least once now:
                   the change broke an approved decision
    WORSE          failed some of the time before, fails more often now
    RECOVERED      failed at least once before, passes every time now
    BETTER         fails less often than before, but still fails
    PASS           passed every time, before and now
    STILL_FAILING  fails as often as before
(with one repeat only NEW_FAILURE, RECOVERED, PASS and STILL_FAILING occur).
Any fall of the pass rate is NEW_FAILURE or WORSE: both fail the gate.

Every verdict is derived again from the saved responses by the checker
(checker.py): a record whose saved verdicts do not follow from its responses
is refused. First line: the files compared. Then CAUTION lines (the SDK or
regression.py changed; a record judged by another checker or with answers
that have no receipt; a model answered by another model; BEFORE is newer
than AFTER) and `instructions changed: +A -R lines`. Last: a count line,
`compared 8: 1 new failure, 0 worse, 0 recovered, 0 better, 6 pass, 1 still
failing`. The label words appear only on labelled lines.

Only `instructions` may differ between the two configs. --switch OLD=NEW (may
be repeated) judges a model switch instead: OLD's rows in BEFORE against NEW's
rows in AFTER, case by case and repeat by repeat, and only those models; the
configs may then differ in models (and instructions, chat_request) too. With
one record, RUN --switch OLD=NEW compares two models of the same run. Such
lines name the model as OLD->NEW.

Exit codes:
    0  no pass rate fell
    1  at least one NEW_FAILURE or WORSE
    2  no verdict: NOT_COMPARABLE (a file is missing, unreadable, not JSON,
       malformed, or the runs differ in more than they may), a usage error, an
       output that cannot be written, or an internal error
"""

import sys

# Before any other import, so that an old interpreter gets one line, not a
# SyntaxError or ImportError from a module it cannot load.
if sys.version_info < (3, 11):
    print("compare_runs.py: error: needs Python 3.11 or later; this is %d.%d" % sys.version_info[:2],
          file=sys.stderr)
    raise SystemExit(2)

import argparse
import datetime
import difflib
import hashlib
import os
import re
import shlex
import shutil
from decimal import Decimal

# Only the record's reader and the checker: comparing two files must start in
# about the interpreter's start-up time, and never loads the SDK. So what only
# some paths need is imported there: regression (and with it the SDK and httpx)
# by --demo alone, reports by --summary-md and --html, traceback by an
# internal error.
import checker
import plans
import record
import runs
import suites
from vocabulary import (BETTER, COUNT_WORDS, GATING, LABELS, NEW_FAILURE, WORSE, Parser,
                        UserError, crash_report, fisher_drop, label, mend_standard_streams,
                        p_text)

SWITCHABLE = {"instructions", "models", "chat_request"}  # config keys --switch lets differ
DEMO_MODEL = "offline/model"  # plainly fictional: no model is called
SWAPPED = "is newer than AFTER"  # the words of the out-of-time-order caution
SHOWN_CHARS = 80  # longest value from a record printed as it is; longer is "(unreadable)"
MESSAGE_CHARS = 500  # longest reason printed: a hostile record may name anything at length
NAMES_CHARS = 128  # room for the two file names a refusal starts with
MAX_DIFF_LINES = 10_000  # instruction lines counted by difflib, whose cost grows quadratically

# --------------------------------------------------------------------------
# Pure: safe text, labels, pass rates.
# --------------------------------------------------------------------------


def one_line(text, limit=MESSAGE_CHARS):
    """text with anything unprintable escaped (\\n, \\x1b...), cut to limit: one safe line."""
    text = "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in str(text)[:limit + 1])
    return text if len(text) <= limit else text[:limit] + "..."


def shown(value):
    """A record's value fit for a CAUTION line, or "(unreadable)".

    Only a short printable string without a label word is printed as it is, so
    a record cannot forge an output line, a terminal escape or a label.
    """
    if value is None:
        return "(none)"
    if (not isinstance(value, str) or not value.isprintable() or len(value) > SHOWN_CHARS
            or any(word in value for word in LABELS)):
        return "(unreadable)"
    return value


def natural(case_id):
    """Sort key: digit runs compare as numbers, so case-2 comes before case-10."""
    parts = re.split(r"([0-9]+)", case_id)
    # re.split with a group alternates text and digits: never str against int.
    return tuple(int(part) if number % 2 else part for number, part in enumerate(parts)), case_id


def unlabelled(text):
    """text with any label word in lower case, for lines that carry no label."""
    for word in LABELS:
        text = text.replace(word, word.lower())
    return text


def model_name(item):
    old, new = item["before_model"], item["after_model"]
    return old if old == new else f"{old}->{new}"


def item_line(item, repeats):
    """The printed line of one compared (model, case)."""
    old, new = item["before"], item["after"]
    if repeats == 1:  # the one-repeat line, exactly as print() has always written it
        return (f"{item['label']} {model_name(item)} {item['case_id']} {old[0]['repeat']} "
                f"before= {old[0]['reasons']} after= {new[0]['reasons']}")
    good = [sum(row["passed"] for row in rows) for rows in (old, new)]
    levels = item.get("before_confidence", item["confidence"]), item["confidence"]
    bounds = [checker.floor_percent(checker.lower_bound(passes, len(rows), level))
              for passes, rows, level in zip(good, (old, new), levels)]
    stated = (f"{bounds[0]} % -> {bounds[1]} % ({checker.given_percent(levels[1])} %)"
              if levels[0] == levels[1] else
              f"{bounds[0]} % ({checker.given_percent(levels[0])} %) -> {bounds[1]} % "
              f"({checker.given_percent(levels[1])} %)")
    return (f"{item['label']} {model_name(item)} {item['case_id']} before={good[0]}/{len(old)} "
            f"after={good[1]}/{len(new)} p={p_text(item['p_value'])} pass rate >= {stated}")


def count_line(items, repeats):
    """`compared N: ...` with a count of every label that can occur (with one
    repeat a rate is all or nothing: never WORSE or BETTER)."""
    shown_labels = [name for name in LABELS if repeats > 1 or name not in (WORSE, BETTER)]
    counts = {name: sum(1 for item in items if item["label"] == name) for name in LABELS}
    words = [f"{counts[name]} {COUNT_WORDS[name]}" + ("s" if name == NEW_FAILURE and
                                                      counts[name] != 1 else "")
             for name in shown_labels]
    return f"compared {len(items)}: " + ", ".join(words)


def swapped(cautions):
    """The caution that BEFORE started after AFTER, which every view shows next
    to its verdict (comparing out of time order stays allowed)."""
    return [line for line in cautions if SWAPPED in line]


def files_line(paths, switches):
    """The first line: which files were compared (label words never appear on it)."""
    if paths is None:
        return None
    names = [unlabelled(one_line(path, 200)) for path in paths]
    if paths[0] == paths[1] and switches:
        return f"comparing models of one record: {names[0]}"
    return f"comparing BEFORE {names[0]} with AFTER {names[1]}"


def command(*args, script=None):
    """A shell command that runs this script (or the project's `script`) with args,
    or None if an arg is unprintable."""
    script = os.path.abspath(script and os.path.join(os.path.dirname(__file__), script)
                             or __file__)
    relative = os.path.relpath(script)
    words = [sys.executable or "python3",
             script if relative.startswith(os.pardir) else relative, *args]
    if not all(word.isprintable() for word in words):
        return None  # it could not be printed on one line and still run
    return " ".join(shlex.quote(word) for word in words)


# --------------------------------------------------------------------------
# Pure: validating and comparing two records.
# --------------------------------------------------------------------------


def parse_switch(text):
    """argparse type of --switch: (OLD, NEW)."""
    old, sep, new = text.partition("=")
    if not sep or not old or not new:
        raise argparse.ArgumentTypeError(f"{one_line(text, 200)!r}: give OLD=NEW, two model names")
    if old == new:
        raise argparse.ArgumentTypeError(f"{one_line(text, 200)!r} names one model twice; give "
                                         "the model before and the one after the switch")
    return old, new


def shared_responses(before, after):
    """Why two records are one run saved twice (they hold the same responses:
    a copy, or a record resumed from another's file), or None. A regrade holds
    its source's responses by design, and compares with it."""
    shared = getattr(before, "response_ids", set()) & getattr(after, "response_ids", set())
    if not shared or any(
            isinstance(one.get("regraded_from"), dict)
            and one["regraded_from"].get("created_at") == other.get("created_at")
            for one, other in ((before, after), (after, before))):
        return None
    return (f"BEFORE and AFTER hold the same responses ({len(shared)}, e.g. "
            f"{one_line(min(shared), 80)}): one run saved twice (a copy, or a record resumed "
            "from another's file), not two runs; compare two separate runs")


def finish_hint(problem, path, run):
    """How to make an unfinished record comparable: the command that finishes it.

    A record stopped by its budget keeps that budget when resumed, so the
    command raises it by one more budget above what was spent: as printed,
    it sends the next request.
    """
    text = str(problem)
    if "execution error" not in text and "missing" not in text:
        return ""
    if run.get("evidence", "live") != "live":
        return "; it holds synthetic demo data: make a new demo pair"
    rows = [row for row in run["runs"] if isinstance(row, dict)]
    if any(row.get("error") == "SonarRetired" or row.get("error_status") in (400, 404, 422)
           for row in rows):
        return ("; the API refused a request of it, so --resume would fail the same way: "
                "fix the request (model name, retired API) and start a new run")
    problem = runs.resume_problem(run)  # the one rule of what --resume finishes
    if problem:
        return f"; --resume refuses it: {problem}"
    costs = [Decimal(row["cost_usd"]) for row in rows
             if row.get("cost_usd") is not None and not record.cost_problem(row["cost_usd"])]
    missing = len(record.plan_keys(run["config"])) - len(rows)
    budget = record.raised_budget(run.get("execution"), costs, missing)
    words = ["--resume", path, *(["--max-cost", budget] if budget else [])]
    hint = command(*words, script="regression.py")
    return f"; finish it first with: {hint}" if hint else "; finish it first with --resume"


def index(run):
    """Rows keyed by (model, case id, repeat); ValueError for anything malformed.

    A record read from disk by record.load was judged a row at a time as it was
    read (it holds light rows); a record given as data is judged here.
    """
    if isinstance(run, record.Judged):
        return run.check(complete=True, errors=False)
    return record.validate_record(run, complete=True, errors=False)


def config_problem(before, after, switches, paths):
    """Why the configs of two validated records cannot be compared, or None."""
    old, new = before["config"], after["config"]
    differing = sorted(key for key in set(old) | set(new) if old.get(key) != new.get(key)
                       # two proofs are compared by outcome: their plans may differ
                       and not ("prove" in old and "prove" in new
                                and key in ("prove", "repeats")))
    if not switches:
        if "models" in differing and set(differing) <= SWITCHABLE:
            old_set, new_set = set(old["models"]), set(new["models"])
            gone = [model for model in old["models"] if model not in new_set]
            came = [model for model in new["models"] if model not in old_set]
            example = (command(*paths, "--switch", f"{gone[0]}={came[0]}")
                       if paths and len(gone) == len(came) == 1 else None)
            hint = "configs differ in models; to judge a model switch give --switch OLD=NEW"
            # Shown only whole: a command cut short by one_line would not run as printed.
            fits = example and len(hint) + len(example) + 7 + NAMES_CHARS <= MESSAGE_CHARS
            return hint + (f", e.g. {example}" if fits else "")
        differing = [key for key in differing if key != "instructions"]
        if differing:
            return (f"configs differ in {', '.join(map(shown, differing))}; only "
                    "instructions may change between compared runs")
        return None
    differing = [key for key in differing if key not in SWITCHABLE
                 and not (key == "tool" and pinned_budget(old, new))]
    if differing:
        return (f"configs differ in {', '.join(map(shown, differing))}; with --switch "
                "only models, instructions and chat_request may change (and the web search "
                "tool from the published form to the pinned budget)")
    for old_model, new_model in switches:
        for model, which, config in ((old_model, "BEFORE", old), (new_model, "AFTER", new)):
            if model not in config["models"]:
                return (f"--switch {old_model}={new_model}: model {model} is not in {which}'s "
                        f"models ({', '.join(config['models'])})")
    return None


def suite_problem(before, after):
    """Why two records are of different suites (naming both and what differs),
    or None. A record made before suites is of the built-in suite."""
    old, new = record.suite_of(before), record.suite_of(after)
    if suites.suite_sha256(old) == suites.suite_sha256(new):
        return None
    differences = []
    if old["answer"] != new["answer"]:
        differences.append("the answer's fields")
    if old["sources"] != new["sources"]:
        differences.append("the approved sources")
    old_cases = {case["id"]: case for case in old["cases"]}
    new_cases = {case["id"]: case for case in new["cases"]}
    for verb, ids in (("added", [i for i in new_cases if i not in old_cases]),
                      ("removed", [i for i in old_cases if i not in new_cases])):
        if ids:
            differences.append(f"cases {verb}: {', '.join(ids[:5])}"
                               + (f" and {len(ids) - 5} more" if len(ids) > 5 else ""))
    for key, what in (("expect", "expect changed"), ("cite", "cite changed"),
                      ("question", "question changed")):
        ids = [i for i in old_cases if i in new_cases and old_cases[i][key] != new_cases[i][key]]
        if ids:
            differences.append(f"{what}: {', '.join(ids[:5])}"
                               + (f" and {len(ids) - 5} more" if len(ids) > 5 else ""))
    return (f"the records are of different suites (BEFORE {shown(old['name'])}, AFTER "
            f"{shown(new['name'])}): {'; '.join(differences) or 'case order changed'}; "
            "compare two runs of the same suite")


def pinned_budget(old, new):
    """Whether the tools differ only as the published form and the pinned budget do."""
    return ({json_key(old.get("tool")), json_key(new.get("tool"))}
            == {json_key(checker.PUBLISHED_TOOL), json_key(checker.TOOL)})


def json_key(value):
    return record.dumps(value, sort_keys=True)


def text_lines(value):
    return value.splitlines() if isinstance(value, str) else [repr(value)]


def instructions_line(old, new):
    """`instructions changed: +A -R lines`, or None when they are the same."""
    if old == new:
        return None
    old, new = text_lines(old), text_lines(new)
    if max(len(old), len(new)) > MAX_DIFF_LINES:
        return f"instructions changed: more than {MAX_DIFF_LINES} lines, not counted"
    added = removed = 0
    for tag, old_start, old_end, new_start, new_end in difflib.SequenceMatcher(
            None, old, new).get_opcodes():
        if tag != "equal":
            removed += old_end - old_start
            added += new_end - new_start
    return f"instructions changed: +{added} -{removed} lines"


def answering(rows):
    """{asked model: the models the responses name as answering for it}, in one
    pass over the rows (a comparison stays linear in the number of models)."""
    found = {}
    for key, row in rows.items():
        if row.get("answered_model"):
            found.setdefault(key[0], set()).add(row["answered_model"])
    return {model: sorted(names) for model, names in found.items()}


def receipt_cautions(before, after, rows, switches, paths):
    """CAUTION lines on what the verdicts rest on: the checker that judged each
    record, answers without receipts, and models answered by other models."""
    names = [one_line(path, 200) for path in paths] if paths else ["BEFORE", "AFTER"]
    lines = []
    for run, side, name in zip((before, after), rows, names):
        if run is after and after is before:
            break  # one record compared with itself: said once
        lines += [f"CAUTION: {note}" for note in record.evidence_notes(run, side, name)]
    named = answering(rows[0]), answering(rows[1])
    kept = set(after["config"]["models"])
    for model in before["config"]["models"]:
        if model not in kept:
            continue  # a switched model: its answering model changes by design
        old = new = model
        answered = named[0].get(old, []), named[1].get(new, [])
        if answered[0] != answered[1]:
            said = [", ".join(map(shown, names_)) or "(not named)" for names_ in answered]
            lines.append(f"CAUTION: {shown(old)} was answered by {said[0]} in BEFORE, "
                         f"{shown(new)} by {said[1]} in AFTER; the router changed the model")
    return lines


def budget_text(tool):
    """How a web_search tool sized its search context, in a few words."""
    if tool.get("max_tokens") is not None:
        return (f"pinned at max_tokens {tool['max_tokens']}, max_tokens_per_page "
                f"{tool.get('max_tokens_per_page')}")
    return (f"search_context_size {tool.get('search_context_size')} with max_results "
            f"{tool.get('max_results')}")


def cautions(before, after, switches, paths):
    """The lines printed before the labelled ones: none carries a label word."""
    lines = []
    times = (record.created_moment(before.get("created_at")),
             record.created_moment(after.get("created_at")))
    if None not in times and times[0] > times[1]:
        names = [f"{one_line(path, 200)}, " for path in paths] if paths else ["", ""]
        line = (f"CAUTION: BEFORE ({names[0]}{shown(before['created_at'])}) {SWAPPED} "
                f"({names[1]}{shown(after['created_at'])}); the files look swapped")
        # Swapping the files reverses the comparison, so every switch turns round too.
        turned = [word for old, new in switches for word in ("--switch", f"{new}={old}")]
        swapped = paths and command(paths[1], paths[0], *turned)
        lines.append(line + (f"; if so, run: {swapped}" if swapped else ""))
    # Every module that makes a record (runner_sha256), or regression.py alone for
    # records made before that field (code_sha256, as published).
    made_by = ("runner_sha256" if "runner_sha256" in before and "runner_sha256" in after
               else "code_sha256")
    for field in ("sdk_version", made_by):
        if before.get(field) != after.get(field):
            lines.append(f"CAUTION: changed {field}: {shown(before.get(field))} -> "
                         f"{shown(after.get(field))}; a difference may come from the tooling, "
                         "not the model")
    if before["config"].get("tool") != after["config"].get("tool"):  # allowed by a switch
        lines.append(f"CAUTION: changed tool: the web search budget was "
                     f"{budget_text(before['config']['tool'])} in BEFORE and "
                     f"{budget_text(after['config']['tool'])} in AFTER; the models saw "
                     "different amounts of search context")
    plan = [run["config"].get("prove") for run in (before, after)]
    if None not in plan and plan[0] != plan[1]:
        said = [f"prove >= {checker.given_percent(p['rate'])} % at "
                f"{checker.given_percent(p['confidence'])} % with "
                f"{p.get('allow_failures', 0)} allowed failures" for p in plan]
        lines.append(f"CAUTION: the proofs have different plans (BEFORE {said[0]}; AFTER "
                     f"{said[1]}); they are compared by whether each pair qualified")
    changed = instructions_line(before["config"].get("instructions"),
                                after["config"].get("instructions"))
    return lines + ([changed] if changed else [])


def comparison(before, after, switches=(), paths=None):
    """{"items", "cautions", "repeats"} of two records, or ValueError with the reason.

    items: one per compared (model, case), in printed order: label,
    before_model, after_model, case_id, before and after (rows over the
    repeats) and p_value (None with one repeat). switches: [(OLD, NEW)];
    paths: the records' paths, named in messages and printed commands.
    """
    rows = []
    for path, run in zip(paths or ("BEFORE", "AFTER"), (before, after)):
        try:
            rows.append(index(run))
        except ValueError as exc:
            raise UserError(f"{path}: {exc}{finish_hint(exc, path, run)}") from None
    evidence = (before.get("evidence", "live"), after.get("evidence", "live"))
    problem = ((before is not after and shared_responses(before, after))
               or suite_problem(before, after) or config_problem(before, after, switches, paths)
               or (evidence[0] != evidence[1] and f"evidence differs ({shown(evidence[0])} vs "
                   f"{shown(evidence[1])}); compare live runs with live runs"))
    if problem:  # named with the files it is about, whichever line of the output is read
        named = (f"{one_line(os.path.basename(paths[0]), 60)} and "
                 f"{one_line(os.path.basename(paths[1]), 60)}: " if paths else "")
        raise UserError(named + problem)
    config = before["config"]
    repeats = config["repeats"]
    pairs = sorted(set(switches)) if switches else [(model, model) for model in
                                                     sorted(config["models"])]
    levels = record.confidence_of(before), record.confidence_of(after)
    items = compared_items((before, after), rows, pairs, levels)
    lines = cautions(before, after, switches, paths)
    if levels[0] != levels[1]:
        lines.append(f"CAUTION: the records were made at different confidences (BEFORE "
                     f"{checker.given_percent(levels[0])} %, AFTER "
                     f"{checker.given_percent(levels[1])} %); each bound is stated at its "
                     "record's own")
    lines[:0] = receipt_cautions(before, after, rows, switches, paths)
    return {"items": items, "cautions": lines, "repeats": repeats,
            "files": files_line(paths, switches)}


def compared_items(records, rows, pairs, levels):
    """One item per compared (model, case): its label, its rows before and after,
    its p-value (repeats above 1) and the confidence each record states bounds at."""
    plans_of = [proof_tally(run, side) for run, side in zip(records, rows)]
    items = []
    for old_model, new_model in pairs:
        for case_id in sorted((case["id"] for case in records[0]["config"]["cases"]),
                              key=natural):
            old, new = ([side[(model, case_id, repeat)]
                         for repeat in range(run["config"]["repeats"])
                         if (model, case_id, repeat) in side]
                        for side, model, run in zip(rows, (old_model, new_model), records))
            good = [sum(row["passed"] for row in side) for side in (old, new)]
            if plans_of[0] is not None:  # proofs: judged on their outcome, not a rate
                judged = plans.proof_label(*(
                    {"qualified": tally.state(tally.pairs[(model, case_id)]) == "qualified",
                     "passed": passes, "runs": len(side)}
                    for tally, model, passes, side in zip(plans_of, (old_model, new_model),
                                                          good, (old, new))), levels[1])
            else:
                judged = label(good[0], len(old), good[1], len(new))
            single = records[0]["config"]["repeats"] == 1
            items.append({
                "label": judged, "confidence": levels[1], "before_confidence": levels[0],
                "before_model": old_model, "after_model": new_model, "case_id": case_id,
                "before": old, "after": new,
                "p_value": None if single else fisher_drop(good[0], len(old), good[1], len(new)),
            })
    return items


def proof_tally(run, rows):
    """A proof record's plan state per pair (checker.Tally over its judged rows),
    or None for a record of fixed repeats."""
    config = run["config"]
    if "prove" not in config:
        return None
    tally = checker.Tally(config["models"], config["repeats"], config["cases"],
                          prove=config["prove"])
    for row in rows.values():
        tally.add(row)
    return tally


def title(before, switches):
    """The heading of the Markdown view."""
    text = "Comparison"
    if switches:
        text += ": " + ", ".join(f"{old} -> {new}" for old, new in sorted(set(switches)))
    if before.get("evidence") == "synthetic":
        text += " (synthetic demo)"
    return one_line(text)


# --------------------------------------------------------------------------
# I/O: printing, the views, the synthetic demo pair.
# --------------------------------------------------------------------------


class OutputFailed(Exception):
    """Standard output cannot be written (a closed pipe, a full disk)."""


class ReportError(Exception):
    """A --summary-md or --html view cannot be written."""


def say(line):
    try:
        print(line)
    except (OSError, ValueError) as exc:  # ValueError: the stream was closed
        raise OutputFailed(getattr(exc, "strerror", None) or str(exc)) from None


def show(result):
    """Print a comparison; 1 if any pass rate fell (NEW_FAILURE or WORSE), else 0."""
    for line in ([result["files"]] if result["files"] else []) + result["cautions"]:
        say(line)
    for item in result["items"]:
        say(item_line(item, result["repeats"]))
    say(count_line(result["items"], result["repeats"]))
    for line in swapped(result["cautions"]):  # beside the verdict, where it is read
        say(line)
    return 1 if any(item["label"] in GATING for item in result["items"]) else 0


def write_views(before, after, result, heading, summary_md=None, html=None):
    """Append the Markdown view and write the page; ReportError when one cannot be."""
    if summary_md is None and html is None:
        return
    import reports

    if summary_md is not None:
        text = reports.compare_markdown(heading, result["items"], result["cautions"],
                                        result["files"])
        try:
            reports.append(summary_md, text)
        except OSError as exc:
            raise ReportError(f"cannot write --summary-md {summary_md}: "
                              f"{exc.strerror or exc}") from None
    if html is not None:
        import evidence_page

        page = evidence_page.comparison_page(before, after, result["items"],
                                             result["cautions"], result["files"])
        try:
            reports.write_replacing(html, page)
        except OSError as exc:
            raise ReportError(f"cannot write --html {html}: {exc.strerror or exc}") from None


def compare(before, after, switches=(), paths=None, summary_md=None, html=None):
    """Print the comparison of two records; 1 if any pass rate fell, else 0.

    ValueError (nothing printed) when they cannot be compared; ReportError
    when a view cannot be written.
    """
    result = comparison(before, after, switches, paths)
    code = show(result)
    write_views(before, after, result, title(before, switches), summary_md, html)
    return code


def demo_record(created_at, unsafe_models):
    """A record shaped like a live one, its rows from run_one over the simulated API."""
    import copy

    import regression  # the demo alone needs the runner, the SDK and the simulated API
    import simulated_api

    state = simulated_api.new_state(regression.CASES, unsafe_models=unsafe_models)
    # Ids of this record alone, as two live runs' are: the pair is two runs, not one saved twice.
    state["id_prefix"] = hashlib.sha256(created_at.encode()).hexdigest()[:8]
    with simulated_api.sdk_client(state) as client:
        # derived() adds the answering model, as the runner's own rows have it.
        rows = [checker.derived(case, {"repeat": 0,
                                       **regression.run_one(client, case, DEMO_MODEL)})
                for case in regression.CASES]
    if os.environ.get("SOURCE_DATE_EPOCH", "").isdigit():  # a fixed demo clock
        rows = [{**row, "seconds": 0.0} for row in rows]
    return {
        "created_at": created_at,
        # A deep copy, so that nothing done to a demo record reaches regression's own.
        "config": copy.deepcopy(regression.run_config([DEMO_MODEL], regression.CASES, 1)),
        "sdk_version": runs.sdk_version(),
        "code_sha256": record.code_sha256(),
        "checker_sha256": record.checker_sha256(),
        "evidence": "synthetic",
        "runs": rows,
        "summary": regression.summary(rows, [DEMO_MODEL], 1),
    }


def demo(folder, summary_md=None, html=None):
    """Write a synthetic before/after pair into a new folder and compare them (1)."""
    try:
        os.makedirs(folder)  # never into a folder that exists: nothing is overwritten
    except FileExistsError:
        raise UserError(f"{folder} already exists; name a new folder for --demo") from None
    except OSError as exc:
        raise UserError(f"cannot create {folder}: {exc.strerror or exc}") from None
    now = runs.demo_clock(folder).replace(microsecond=0)
    paths = (os.path.join(folder, "before.json"), os.path.join(folder, "after.json"))
    try:
        before = demo_record((now - datetime.timedelta(minutes=1)).isoformat(), ())
        after = demo_record(now.isoformat(), {DEMO_MODEL})
        for path, run in zip(paths, (before, after)):
            with open(path, "x", encoding="utf-8") as handle:
                handle.write(record.dumps(run, indent=2) + "\n")
    except BaseException as exc:
        shutil.rmtree(folder, ignore_errors=True)  # ours alone: a failed demo leaves nothing
        if isinstance(exc, OSError):
            raise UserError(f"cannot write the demo pair into {folder}: "
                             f"{exc.strerror or exc}") from None
        raise
    again = command(*paths)
    say(f"SYNTHETIC: synthetic demo records, made offline; no model was called "
        f"({one_line(paths[0], 200)}, {one_line(paths[1], 200)})"
        + (f"; compare them again with: {again}" if again else ""))
    return compare(before, after, paths=paths, summary_md=summary_md, html=html)


def same_file(first, second):
    try:
        return os.path.samefile(first, second)
    except OSError:  # one does not exist (yet): compare the names
        return os.path.realpath(first) == os.path.realpath(second)


def output_problem(path, kind, inputs):
    """Why a view may not be written to path, checked before anything is read."""
    import reports

    if path and any(same_file(path, source) for source in inputs if source):
        return "it is one of the records compared; name another file"
    return reports.output_problem(path, kind)


def command_line():
    """The parser: flags, their help and the exit codes."""
    parser = Parser(
        prog="compare_runs.py",
        description="Compare two saved runs and name every new failure.",
        epilog="Exit codes: 0 no new failure, 1 new failure, 2 no verdict (not comparable, "
               "usage, output or internal error). Many runs at once: compare_runs.py "
               "--history RECORD... (docs/history.md).",
    )
    parser.add_argument("before", nargs="?", metavar="BEFORE",
                        help="the earlier record; alone with --switch, the run of both models")
    parser.add_argument("after", nargs="?", metavar="AFTER", help="the later record")
    parser.add_argument("--switch", action="append", type=parse_switch, metavar="OLD=NEW",
                        help="compare model OLD in BEFORE with model NEW in AFTER (repeatable)")
    parser.add_argument("--demo", metavar="NEW_DIR",
                        help="write a synthetic before/after pair into NEW_DIR and compare it")
    parser.add_argument("--summary-md", metavar="FILE",
                        help="append a Markdown view, e.g. to $GITHUB_STEP_SUMMARY")
    parser.add_argument("--html", metavar="FILE", help="write the comparison as one HTML page")
    # Read by history.py's own command line (parse_args), never here: listed so that
    # --help shows it and a misspelt --histroy gets its "did you mean".
    parser.add_argument("--history", nargs="+", metavar="RECORD",
                        help="the history of many records, or folders of them, with its own "
                        "options (docs/history.md)")
    return parser


def parse_args(argv):
    if any(arg == "--history" or arg.startswith("--history=") for arg in argv or ()):
        import history  # --history RECORD...: the history module's own command line

        return history.parse_args(argv, "compare_runs.py")
    parser = command_line()
    args = parser.parse_args(argv)
    if args.history is not None:  # an abbreviation (--hist): the check above missed it
        parser.error("write --history in full: compare_runs.py --history RECORD...")
    args.switch = args.switch or []
    if args.demo is not None and (args.before is not None or args.switch):
        parser.error("give BEFORE AFTER, RUN --switch OLD=NEW or --demo NEW_DIR, not several")
    if args.demo is None and args.before is None:
        parser.error("give two records to compare: BEFORE AFTER (or RUN --switch OLD=NEW, "
                     "or --demo NEW_DIR)")
    if args.demo is None and args.after is None and not args.switch:
        parser.error("one record compares two of its models: give RUN --switch OLD=NEW, "
                     "or two records BEFORE AFTER")
    if len(set(args.switch)) != len(args.switch):
        parser.error("--switch: the same OLD=NEW is given twice")
    if args.summary_md is not None and args.html is not None and same_file(args.summary_md,
                                                                           args.html):
        parser.error("--summary-md and --html name the same file")
    for flag, path, kind in (("--summary-md", args.summary_md, "markdown"),
                             ("--html", args.html, "html")):
        problem = path is not None and output_problem(path, kind, (args.before, args.after))
        if problem:
            parser.error(f"{flag} {path}: {problem}")
    return args


def loaded(path, role):
    """The record at path (record.load), or UserError saying which file it is:
    BEFORE, AFTER or RUN, and its path where the reason does not name it."""
    try:
        return record.load(path)
    except UserError as exc:
        reason = str(exc)
        raise UserError(f"{role}: {reason}" if path in reason
                        else f"{role} {path}: {reason}") from None


def run(args):
    """The exit code of a parsed command line."""
    try:
        if args.demo is not None:
            return demo(args.demo, args.summary_md, args.html)
        before = loaded(args.before, "BEFORE" if args.after is not None else "RUN")
        if args.after is None:  # RUN --switch OLD=NEW: two models of one run
            return compare(before, before, args.switch, (args.before, args.before),
                           args.summary_md, args.html)
        after = loaded(args.after, "AFTER")
        if not args.switch and (same_file(args.before, args.after)
                                or before.sha256 == after.sha256):
            raise UserError("BEFORE and AFTER are the same record; compare it with a later "
                             "run, or two of its models with: RUN --switch OLD=NEW")
        return compare(before, after, args.switch, (args.before, args.after),
                       args.summary_md, args.html)
    except UserError as exc:
        say(f"NOT_COMPARABLE: {unlabelled(one_line(exc))}")
    except ReportError as exc:
        complain(f"compare_runs.py: {one_line(exc)}; no verdict")
    return 2


def silence_stdout():
    """Point standard output at /dev/null, so the interpreter's last flush of
    what is still buffered cannot fail with a traceback at exit."""
    try:
        target = sys.stdout.fileno()
    except (OSError, ValueError, AttributeError):
        return  # not a real file (a test's StringIO): nothing is flushed at exit
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, target)
    os.close(null)


def complain(line):
    """One line on stderr, if stderr can still be written: the exit code says the rest."""
    try:
        print(line, file=sys.stderr, flush=True)
    except (OSError, ValueError, AttributeError):
        pass


def main(argv=None):
    given = sys.argv[1:] if argv is None else argv
    if any(arg == "--history" or arg.startswith("--history=") for arg in given):
        import history  # many records, over time: its own module

        return history.main(given, "compare_runs.py")
    mend_standard_streams()
    if sys.stdout is None:  # started with standard output closed (>&-)
        complain("compare_runs.py: standard output is closed; no verdict")
        return 2
    args = parse_args(argv)
    try:
        code = run(args)
        try:
            sys.stdout.flush()  # a full disk or a closed pipe shows here, not at exit
        except (OSError, ValueError) as exc:
            raise OutputFailed(getattr(exc, "strerror", None) or str(exc)) from None
        return code
    except OutputFailed as exc:
        silence_stdout()
        complain(f"compare_runs.py: cannot write the output ({one_line(exc)}); no verdict")
        return 2
    except Exception as exc:  # noqa: BLE001 - a bug must read as "no verdict", never as 1
        import traceback

        first = args.before or args.demo  # the report goes beside the records
        where = crash_report("compare_runs", first and os.path.dirname(os.path.abspath(first)),
                             traceback.format_exc())
        complain(f"compare_runs.py: internal error: {type(exc).__name__}: {one_line(exc)}; "
                 "no verdict; " + (f"the traceback is in {where}: please report it" if where
                                   else "please report it"))
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
