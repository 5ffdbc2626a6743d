"""The history of many saved runs: which (model, case) pairs broke, when, and how often.

    python history.py --history records/                     # a folder, read recursively
    python history.py --history a.json b.json c.json --json history.json
    python history.py --history records/ --summary-md comment.md --html history.html
    python compare_runs.py --history records/                # the same, through compare_runs

Every record is read through record.load, so every row is judged again by the
checker (never trusted), in a pool of processes that each return counts, not
rows. Records are put in order of their created_at (a regrade at the time of
the record it re-checked, which it replaces). For each (model, case) a glyph
per record:
    P passed   F failed   M mixed (its repeats disagree)   E no verdict (an
    execution error)   - not run;   a proof (--prove): Q qualified, N not
then its passes over all counted rows, the record where it first failed, its
longest passing streak, the exact lower bound of its pass rate pooled over the
fixed-repeat records, and a label:
    BROKEN SINCE R  failed in every record that ran it from record R on
    FLAKY           passed and failed, but is not broken at the end
    STABLE          passed in every record that ran it
    NO VERDICT      never judged: every row of it was an execution error
Per model: pass rate, latency p50/p95 per request, tokens and reported cost
per request. Notes on stderr name each file skipped or refused (unreadable, a
synthetic record among live ones, another suite, a copy already counted).

Exit codes (history never gates):
    0  the history was shown
    2  no record could be read, a usage error, an output that cannot be
       written, or an internal error
"""

import sys

if sys.version_info < (3, 11):  # one line, not a SyntaxError, on an old interpreter
    print("history.py: error: needs Python 3.11 or later; this is %d.%d" % sys.version_info[:2],
          file=sys.stderr)
    raise SystemExit(2)

import array
import concurrent.futures
import contextlib
import datetime
import hashlib
import math
import os
import re
from decimal import ROUND_FLOOR, ROUND_HALF_EVEN, Decimal

import checker
import evidence_page
import record
import reports
import runs
from vocabulary import Parser, UserError, mend_standard_streams

STABLE, FLAKY, BROKEN, NO_VERDICT = "STABLE", "FLAKY", "BROKEN SINCE", "NO VERDICT"
LABEL_ORDER = {BROKEN: 0, FLAKY: 1, NO_VERDICT: 2, STABLE: 3}  # a view lists worst first
GLYPHS = "P passed, F failed, M mixed, E no verdict, - not run; proofs: Q qualified, N not"
BUILT_IN_SUITE = "built-in"  # a record's suite where the runner has no suites module
ID_BYTES = 16  # a response id kept as a 16-byte digest: bounded whatever the id's length,
               # and no collision in practice among millions of responses
BOUND_PLACES = Decimal("0.000001")  # bounds are rounded down to 6 decimals: never more
COST_PLACES = Decimal("1e-10")  # USD per request: past any price the API reports
SECONDS_PLACES = 3  # latency shown to the millisecond, as rows save it
MARKDOWN_LIMIT = 65_535  # characters of a GitHub comment body (65,536 at most)
MORE_RESERVE = 120  # characters kept free for the "... and N more" line of a table
CUT_NOTE = "\n\n... (cut to fit 65,535 characters)\n"
NOTE_CHARS = 500  # longest note printed: a hostile file may name anything at length
SHOWN_CHARS = 120  # longest path or time shown in a table cell as it is
CHART_MODELS = 40  # models in the latency chart (the slowest by p95); the table has all
CHART_NAME = 40  # characters of a model name inside a chart; tables show it whole
CHART_WIDTH = 360  # SVG user units: about 1:1 on a 400 px screen, scaled up on wider
JSON_START = '{\n  "generator": "agent regression runner history"'  # our JSON view's start
POOL_BYTES = 8 << 20  # records to read before a process pool pays for its start
SCALE_SECONDS = 0.5  # the generator's base latency per request; each model is slower


class HistoryError(UserError):
    """A user error found where input is read: one line on stderr, exit 2."""


# --------------------------------------------------------------------------
# Pure: one record's counts, made in a worker from the record as load judged it.
# --------------------------------------------------------------------------


def id_digest(value):
    """A response id as a short digest, or None when the row has no usable id."""
    if not isinstance(value, str) or not value:
        return None
    return hashlib.blake2b(value.encode("utf-8", "surrogatepass"), digest_size=ID_BYTES).digest()


def direct_latency(row):
    """Seconds the API took for a row answered directly, without the waits for a
    429/503; None for a row fetched after an interruption or made by a batch
    (its seconds are not one request's) or with no verdict."""
    seconds = row.get("seconds")
    if (row.get("error") or row.get("recovered") or "batch" in row
            or not record.number(seconds)):
        return None
    waited = row.get("waited_seconds")
    return max(0.0, seconds - (waited if record.number(waited) else 0))


def usage_tokens(response):
    """Total tokens the response's usage reports (Agent and chat APIs), or None."""
    usage = response.get("usage") if isinstance(response, dict) else None
    if not isinstance(usage, dict):
        return None
    total = usage.get("total_tokens")
    if type(total) is int and total >= 0:
        return total
    parts = [usage.get(name) for name in ("input_tokens", "output_tokens")]
    return sum(parts) if all(type(part) is int and part >= 0 for part in parts) else None


def brief(row, suite=None):
    """What history keeps of a judged row: its key, verdict and receipts' numbers,
    never its response (a row is ~10 KB; this is ~200 B). record.load calls it
    with the record's suite too, which a verdict made already needs no more."""
    response = row.get("response") if isinstance(row.get("response"), dict) else {}
    return {"model": row["model"], "case_id": row["case_id"], "repeat": row["repeat"],
            "error": row.get("error"), "passed": row["passed"], "cost_usd": row.get("cost_usd"),
            "id": id_digest(response.get("id")), "latency": direct_latency(row),
            "tokens": usage_tokens(response)}


def outcome_of(row):
    return "errors" if row["error"] else "passed" if row["passed"] else "failed"


def record_confidence(fields):
    """The confidence a record states its bounds at: its proof's, or its run's."""
    config, execution = fields["config"], fields.get("execution")
    level = (config.get("prove") or {}).get("confidence") or (
        execution.get("confidence") if isinstance(execution, dict) else None)
    return level if type(level) is float and 0.5 <= level <= 0.999 else checker.CONFIDENCE


def add_row(models, row):
    """Count one row's latency, tokens and cost into its model's stats."""
    stats = models.setdefault(row["model"], {"latency": array.array("d"), "tokens": [0, 0],
                                             "cost": [Decimal(0), 0]})
    if row["latency"] is not None:
        stats["latency"].append(row["latency"])
    if row["tokens"] is not None:
        stats["tokens"] = [stats["tokens"][0] + row["tokens"], stats["tokens"][1] + 1]
    if row["cost_usd"] is not None:
        stats["cost"] = [stats["cost"][0] + Decimal(row["cost_usd"]), stats["cost"][1] + 1]


def tally(fields, rows, path, skip=frozenset()):
    """The counts of one record: per pair (passed, failed, errors; a proof adds
    whether it qualified), per model (latencies, tokens, cost), and the digests
    of its response ids, sorted, in one bytes string (16 B a row: what finds a
    response counted twice). Rows whose response is in skip are left out (an
    earlier record counted it), as is a response saved twice in this record."""
    pairs, models, digests, rows_seen, again = {}, {}, set(), 0, 0
    for row in rows:
        rows_seen += 1
        if row["id"] is not None and (row["id"] in digests or row["id"] in skip):
            again += 1
            continue
        counts = pairs.setdefault((row["model"], row["case_id"]),
                                  {"passed": 0, "failed": 0, "errors": 0})
        counts[outcome_of(row)] += 1
        add_row(models, row)
        if row["id"] is not None:
            digests.add(row["id"])
    return {"path": path, "created_at": fields.get("created_at"),
            "evidence": fields.get("evidence", "live"), "suite": suite_of(fields),
            "config_key": hashlib.sha256(record.dumps(fields["config"], sort_keys=True)
                                         .encode()).hexdigest(),
            "regraded_from": regrade_source(fields), "proof": "prove" in fields["config"],
            "repeats": fields["config"]["repeats"], "confidence": record_confidence(fields),
            "models": list(fields["config"]["models"]), "rows": rows_seen, "again": again,
            "case_order": [case["id"] for case in fields["config"]["cases"]],
            "pairs": pairs, "stats": models, "digests": b"".join(sorted(digests)),
            "qualified": {}}


def qualified_pairs(summary, repeats):
    """{(model, case id): qualified} of a proof, from its summary as derived again:
    a pair is qualified when it holds every repeat its rate needs, all passed."""
    return {(model, case_id): rate["passed"] == rate["runs"] == repeats
            for model, counts in summary["models"].items()
            for case_id, rate in counts["cases"].items()}


def suite_of(fields):
    """(suite hash, sorted case ids): what history never mixes. A record made
    before suites has the built-in suite with its config.cases, hashed as the
    runner hashes a suite today, so it stays in one history with newer ones."""
    sha = fields.get("suite_sha256")
    ids = tuple(sorted(case["id"] for case in fields["config"]["cases"]))
    if isinstance(sha, str) and sha:
        return sha, ids
    try:
        import suites  # the suite's hash, where this version of the runner has one

        return suites.suite_sha256(record.suite_of(fields)), ids
    except (ImportError, AttributeError, ValueError, KeyError, TypeError):
        return BUILT_IN_SUITE, ids


def regrade_source(fields):
    """{"created_at", "path"} of the record a regrade re-checked, or None."""
    source = fields.get("regraded_from")
    if not isinstance(source, dict) or not isinstance(source.get("created_at"), str):
        return None
    return {"created_at": source["created_at"], "path": source.get("path")}


# --------------------------------------------------------------------------
# Pure: which records count, and in what order.
# --------------------------------------------------------------------------


def made_at(rec):
    """A record's (or a regrade source's) created_at as an aware datetime, or None."""
    return record.created_moment(rec["created_at"])


def shown(text, limit=SHOWN_CHARS):
    """Any value as one safe line (controls escaped), cut to limit."""
    text = reports.visible(str(text).replace("\n", "\\n"))
    return text if len(text) <= limit else text[:limit] + "..."


def live_only(records):
    """The live records, with a note for each synthetic one; all of them when
    none is live (the demo)."""
    live = [rec for rec in records if rec["evidence"] == "live"]
    if not live:
        return records, []
    return live, [f"{shown(rec['path'])}: refused: its evidence is {shown(rec['evidence'])}, "
                  "not live; history never mixes demo data with live runs"
                  for rec in records if rec["evidence"] != "live"]


def describe_suite(suite, other):
    """A suite in a few words, naming the case ids it has that other lacks."""
    sha, ids = suite
    extra = [case_id for case_id in ids if case_id not in other[1]][:3]
    return (f"suite {'built-in' if sha == BUILT_IN_SUITE else sha[:12]}, {len(ids)} cases"
            + (f", with {', '.join(extra)}" if extra else ""))


def one_suite(records):
    """The records of the newest record's suite, with a note for each other one."""
    newest = max(records, key=lambda rec: (made_at(rec), rec["path"]))
    kept, notes = [], []
    for rec in records:
        if rec["suite"] == newest["suite"]:
            kept.append(rec)
            continue
        notes.append(f"{shown(rec['path'])}: refused: "
                     f"{describe_suite(rec['suite'], newest['suite'])} differs from the newest "
                     f"record {shown(newest['path'])} "
                     f"({describe_suite(newest['suite'], rec['suite'])}); suites are never mixed")
    return kept, notes


def regrades_resolved(records):
    """(records that count, each with its "counted_at" time, notes): a regrade
    counts at the time of the record it re-checked and replaces it (the newest
    regrade of a record wins); its source is matched by created_at and config."""
    by_key = {}
    for number, rec in enumerate(records):
        by_key.setdefault((rec["created_at"], rec["config_key"]), []).append(number)
    sources = {number: sources_of(records, number, by_key) for number in range(len(records))}
    winner = {}  # a record regraded -> the newest regrade of it
    for number in sorted(sources, key=lambda n: made_at(records[n]), reverse=True):
        for target in sources[number]:
            winner.setdefault(target, number)
    dropped = {target: f"replaced by its regrade {shown(records[by]['path'])}"
               for target, by in winner.items()}
    for number, targets in sources.items():
        if any(winner[target] != number for target in targets):
            dropped.setdefault(number, "not counted: a newer regrade of the same record "
                                       "replaces it")
    notes = [f"{shown(records[number]['path'])}: {why}" for number, why in sorted(dropped.items())]
    kept = [dict(rec, counted_at=counted_at(records, number, by_key))
            for number, rec in enumerate(records) if number not in dropped]
    return kept, notes


def sources_of(records, number, by_key):
    """The records (by number) that record number regraded: none unless a regrade."""
    source = records[number]["regraded_from"]
    if source is None:
        return []
    made = made_at(records[number])
    # Only an older record: a forged loop of regrades cannot drop both of its records.
    return [target for target in by_key.get((source["created_at"],
                                             records[number]["config_key"]), [])
            if made_at(records[target]) < made]


def counted_at(records, number, by_key):
    """The time a record counts at: a regrade's source's, through any chain."""
    for _ in range(len(records) + 1):  # a chain is never longer; a loop stops here
        source = records[number]["regraded_from"]
        if source is None:
            return made_at(records[number])
        targets = sources_of(records, number, by_key)
        if not targets:
            return made_at(source) or made_at(records[number])
        number = targets[0]
    return made_at(records[number])


def digests_of(rec):
    blob = rec["digests"]
    return {blob[at:at + ID_BYTES] for at in range(0, len(blob), ID_BYTES)}


def repeated(records):
    """{record number: the response digests an earlier record counted already},
    in time order; only records that hold such a response are named."""
    seen, found = set(), {}
    for number, rec in enumerate(records):
        mine = digests_of(rec)
        if mine & seen:
            found[number] = frozenset(mine & seen)
        seen |= mine
    return found


def without_repeats(records, recounted, repeats):
    """(records, notes): each record whose every row was counted already is
    dropped, with a note; each partly counted one is its recount (recounted:
    {number: tally made with those responses skipped})."""
    kept, notes = [], []
    for number, rec in enumerate(records):
        if number not in repeats:
            kept.append(rec)
        elif number in recounted and recounted[number]["pairs"]:
            kept.append({**recounted[number], "counted_at": rec["counted_at"]})
        else:
            notes.append(f"{shown(rec['path'])}: not counted: every one of its {rec['rows']} "
                         "responses was counted already in an earlier record (a copy?)")
    return kept, notes


def select(records):
    """(the records that count, oldest first, notes on every one left out);
    a response counted twice is found after this (repeated)."""
    notes, placed = [], []
    for rec in records:
        if made_at(rec) is None:
            notes.append(f"{shown(rec['path'])}: refused: its created_at "
                         f"{shown(rec['created_at'], 40)} is not a time; it cannot be placed")
        else:
            placed.append(rec)
    if not placed:
        return [], notes
    placed, more = live_only(placed)
    notes += more
    placed, more = one_suite(placed)
    notes += more
    placed, more = regrades_resolved(placed)
    notes += more
    placed.sort(key=lambda rec: (rec["counted_at"], made_at(rec), rec["path"]))
    return placed, notes


# --------------------------------------------------------------------------
# Pure: the history of each pair and each model.
# --------------------------------------------------------------------------


def floor6(value):
    """A bound rounded down to 6 decimals, exactly: never more than proved."""
    return float(Decimal(value).quantize(BOUND_PLACES, rounding=ROUND_FLOOR))


def glyph(rec, key):
    """The pair's mark in one record, and its outcome there: pass, fail, mixed or None."""
    counts = rec["pairs"].get(key)
    if counts is None:
        return "-", None
    passed, failed = counts["passed"], counts["failed"]
    if rec["proof"]:  # a proof states qualified or not: a stopping time, not a rate
        if rec["qualified"].get(key):
            return "Q", "pass"
        return "N", "fail" if failed else None
    if passed and failed:
        return "M", "mixed"
    if failed:
        return "F", "fail"
    return ("P", "pass") if passed else ("E", None)


def label_of(outcomes):
    """(label, index of the record it names) from a pair's outcomes in time order
    (None where it had no verdict): BROKEN SINCE the first record of a final
    stretch of failures, else FLAKY when it passed and failed, else STABLE."""
    judged = [(number, outcome) for number, outcome in enumerate(outcomes) if outcome]
    if not judged:
        return NO_VERDICT, None
    since = None
    for number, outcome in reversed(judged):
        if outcome != "fail":
            break
        since = number
    if since is not None:
        return BROKEN, since
    kinds = {outcome for _, outcome in judged}
    if "mixed" in kinds or {"pass", "fail"} <= kinds:
        return FLAKY, None
    return STABLE, None


def longest_streak(outcomes):
    """Most records passed in a row; records with no verdict neither add nor break."""
    best = current = 0
    for outcome in outcomes:
        if outcome is None:
            continue
        current = current + 1 if outcome == "pass" else 0
        best = max(best, current)
    return best


def where(rec):
    return {"path": rec["path"], "created_at": rec["counted_at"].isoformat()}


def pair_history(key, records):
    """One (model, case) over the records: sequence, passes, first failure,
    streak, the pooled bound of the fixed-repeat records, and its label."""
    marks = [glyph(rec, key) for rec in records]
    outcomes = [outcome for _, outcome in marks]
    counts = [rec["pairs"].get(key, {"passed": 0, "failed": 0, "errors": 0}) for rec in records]
    fixed = [(c, rec["confidence"]) for c, rec in zip(counts, records)
             if not rec["proof"] and c["passed"] + c["failed"]]
    good, runs = sum(c["passed"] for c, _ in fixed), sum(c["passed"] + c["failed"]
                                                         for c, _ in fixed)
    # Pooled at the lowest confidence among them: no record is made to say more.
    confidence = min((level for _, level in fixed), default=None)
    bound = floor6(checker.lower_bound(good, runs, confidence)) if confidence else 0.0
    label, since = label_of(outcomes)
    first = next((n for n, outcome in enumerate(outcomes) if outcome in ("fail", "mixed")), None)
    return {"model": key[0], "case": key[1],
            "passed": sum(c["passed"] for c in counts),
            "runs": sum(c["passed"] + c["failed"] for c in counts),
            "no_verdict": sum(c["errors"] for c in counts),
            "sequence": "".join(mark for mark, _ in marks),
            "first_failed": None if first is None else where(records[first]),
            "longest_passing_streak": longest_streak(outcomes),
            "label": label if since is None else f"{BROKEN} {records[since]['path']}",
            "state": label,  # the label without its record: what a view sorts and counts by
            "broken_since": None if since is None else where(records[since]),
            "lower_bound": bound, "confidence": confidence,
            "bound_runs": runs, "bound_passed": good}


def percentile(values, share):
    """The nearest-rank percentile of values (share 0.5 is the median), or None."""
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[max(0, math.ceil(share * len(ordered)) - 1)], SECONDS_PLACES)


def per_request(total, count, places):
    if not count:
        return None
    value = (Decimal(total) / count).quantize(places, rounding=ROUND_HALF_EVEN)
    return format(value.normalize(), "f")


def model_history(model, records, pairs):
    """One model over the records: its pass rate (from pairs, its entries of
    the pair histories) and what a request cost it."""
    latency, tokens, cost = array.array("d"), [0, 0], [Decimal(0), 0]
    for rec in records:
        stats = rec["stats"].get(model)
        if stats is not None:
            latency.extend(stats["latency"])
            tokens = [tokens[0] + stats["tokens"][0], tokens[1] + stats["tokens"][1]]
            cost = [cost[0] + stats["cost"][0], cost[1] + stats["cost"][1]]
    passed, runs = sum(pair["passed"] for pair in pairs), sum(pair["runs"] for pair in pairs)
    tokens_each = per_request(tokens[0], tokens[1], Decimal("0.1"))
    return {"model": model, "passed": passed, "runs": runs,
            "pass_rate": round(passed / runs, 6) if runs else None,
            "latency_p50": percentile(latency, 0.50), "latency_p95": percentile(latency, 0.95),
            "latency_rows": len(latency),
            "tokens_per_request": None if tokens_each is None else float(tokens_each),
            "cost_per_request": per_request(cost[0], cost[1], COST_PLACES)}


def record_entry(number, rec):
    """One record as the views list it."""
    totals = {name: sum(c[name] for c in rec["pairs"].values())
              for name in ("passed", "failed", "errors")}
    return {"number": number, "path": rec["path"], "created_at": rec["created_at"],
            "counted_at": rec["counted_at"].isoformat(), "evidence": rec["evidence"],
            "kind": "proof" if rec["proof"] else "repeats",
            "regrade_of": rec["regraded_from"]["path"] if rec["regraded_from"] else None,
            "models": rec["models"], "rows": rec["rows"], "counted_already": rec["again"],
            "passed": totals["passed"], "failed": totals["failed"],
            "no_verdict": totals["errors"], "confidence": rec["confidence"]}


def natural(text):
    """Sort key: digit runs compare as numbers (case-2 before case-10)."""
    return [(0, int(part), "") if part.isdigit() else (1, 0, part)
            for part in re.split(r"([0-9]+)", text)]


def build(records, notes=()):
    """The history of records (tallies, oldest first, as select leaves them)."""
    # Cases in the order of the newest record's suite; models by name.
    order = {case_id: n for n, case_id in enumerate(records[-1]["case_order"])} if records else {}
    keys = sorted({key for rec in records for key in rec["pairs"]},
                  key=lambda key: (natural(key[0]), key[0], order.get(key[1], 0), key[1]))
    pairs = [pair_history(key, records) for key in keys]
    by_model = {}
    for entry in pairs:  # keys are sorted by model: each model's pairs in one run
        by_model.setdefault(entry["model"], []).append(entry)
    return {"records": [record_entry(n, rec) for n, rec in enumerate(records, 1)],
            "pairs": pairs,
            "models": [model_history(model, records, entries)
                       for model, entries in by_model.items()],
            "notes": list(notes)}


def many(count, word):
    """"1 record", "2 records"."""
    return f"{count:,} {word}{'' if count == 1 else 's'}"


def label_counts(history):
    states = [pair["state"] for pair in history["pairs"]]
    return {name: states.count(name) for name in LABEL_ORDER}


def count_line(history):
    counts = label_counts(history)
    return (f"{many(len(history['pairs']), 'pair')} over "
            f"{many(len(history['records']), 'record')}: "
            f"{counts[BROKEN]} broken, {counts[FLAKY]} flaky, {counts[STABLE]} stable"
            + (f", {counts[NO_VERDICT]} with no verdict" if counts[NO_VERDICT] else ""))


def worst_first(pairs):
    """Pairs broken first, then flaky, then with no verdict, then stable; stable order within."""
    return sorted(pairs, key=lambda pair: LABEL_ORDER[pair["state"]])


# --------------------------------------------------------------------------
# Pure: the views. Every string from a record goes through shown (terminal),
# reports.cell (Markdown) or evidence_page.esc (HTML).
# --------------------------------------------------------------------------


def bound_text(pair):
    """The pooled bound as every view writes it, or "-" with no fixed-repeat run."""
    if not pair["bound_runs"]:
        return "-"
    return (f">= {checker.floor_percent(pair['lower_bound'])} % "
            f"({round(pair['confidence'] * 100, 1):g} %)")


def seconds_text(value):
    return "-" if value is None else f"{value:.{SECONDS_PLACES}f}"


def tokens_text(value):
    return "-" if value is None else f"{value:g}"


def plain_table(header, rows):
    """Lines of a text table: each column as wide as its widest cell, so the
    first (a pair's model and case) is never cut; the last is not padded."""
    rows = [[str(cell) for cell in row] for row in [header, *rows]]
    widths = [max(len(row[column]) for row in rows) for column in range(len(header))]
    return ["  ".join(cell.ljust(width) for cell, width in zip(row[:-1], widths))
            + "  " + row[-1] for row in rows]


def record_line(entry):
    """One line per record: where, when, what it ran and what it counted."""
    extra = ""
    if entry["regrade_of"] is not None:
        extra += f"; a regrade of {shown(entry['regrade_of'])}, counted at {entry['counted_at']}"
    if entry["counted_already"]:
        extra += f"; {entry['counted_already']} responses counted already, left out"
    return (f"  {entry['number']}. {shown(entry['path'])}  {shown(entry['created_at'], 40)}  "
            f"{entry['kind']}, {len(entry['models'])} models, {entry['rows']} rows: "
            f"{entry['passed']} passed, {entry['failed']} failed, {entry['no_verdict']} no "
            f"verdict{extra}")


def terminal_lines(history):
    """The history as printed: records, a row per pair, a row per model, counts."""
    numbers = {entry["path"]: entry["number"] for entry in history["records"]}
    pairs = [[shown(f"{pair['model']} {pair['case']}", 10_000), pair["sequence"],
              f"{pair['passed']}/{pair['runs']}", bound_text(pair),
              pair["longest_passing_streak"],
              f"#{numbers[pair['first_failed']['path']]}" if pair["first_failed"] else "-",
              shown(pair["label"], 10_000)] for pair in history["pairs"]]
    models = [[shown(model["model"], 10_000), f"{model['passed']}/{model['runs']}",
               seconds_text(model["latency_p50"]), seconds_text(model["latency_p95"]),
               tokens_text(model["tokens_per_request"]),
               "unknown" if model["cost_per_request"] is None
               else f"{model['cost_per_request']} USD"] for model in history["models"]]
    return ([f"History of {many(len(history['records']), 'record')}, oldest first:"]
            + [record_line(entry) for entry in history["records"]]
            + [f"Runs by record: {GLYPHS}."]
            + plain_table(["pair", "runs", "passed", "pass rate (fixed repeats)", "streak",
                           "first failed", "label"], pairs)
            + plain_table(["model", "passed", "p50 s", "p95 s", "tokens/request",
                           "cost/request"], models)
            + [count_line(history)])


def markdown_row(values):
    return "| " + " | ".join(reports.cell(value) for value in values) + " |"


def fitted(header, rows, budget, what):
    """A Markdown table of as many rows as fit in budget characters, then
    "... and N more": never longer than budget (only that line if no row fits)."""
    head = reports.table(header, [])
    used, lines = len(head), [head]
    for number, row in enumerate(rows):
        line = markdown_row(row)
        if used + 1 + len(line) + MORE_RESERVE > budget:
            more = (f"\n\n... and {len(rows) - number:,} more {what} (the JSON and HTML "
                    "views list all)")
            return ("\n".join(lines) + more) if number else more.strip()
        lines.append(line)
        used += 1 + len(line)
    return "\n".join(lines)


def markdown(history):
    """The history as a PR comment: pairs not stable first, a count of the stable
    ones, then the models; always within MARKDOWN_LIMIT characters."""
    counts = label_counts(history)
    head = (f"{reports.SUMMARY_MARK}## History of {many(len(history['records']), 'record')}"
            "\n\n"
            f"**{reports.cell(count_line(history))}**\n\n"
            f"Runs by record, oldest first: {reports.cell(GLYPHS)}. Pass-rate bounds pool the "
            "fixed-repeat records, rounded down."
            + (f" {len(history['notes'])} notes on files left out or replaced: see the job's "
               "log or the JSON view." if history["notes"] else "") + "\n\n")
    stable = (f"{many(counts[STABLE], 'stable pair')}: every verdict passed in every record "
              "that ran it.\n\n")
    unsettled = [[pair["label"], pair["model"], pair["case"], pair["sequence"],
                  f"{pair['passed']}/{pair['runs']}", bound_text(pair),
                  pair["first_failed"]["path"] if pair["first_failed"] else "-"]
                 for pair in worst_first(history["pairs"]) if pair["state"] != STABLE]
    models = [[model["model"], f"{model['passed']}/{model['runs']}",
               seconds_text(model["latency_p50"]), seconds_text(model["latency_p95"]),
               tokens_text(model["tokens_per_request"]),
               model["cost_per_request"] or "unknown"] for model in history["models"]]
    room = MARKDOWN_LIMIT - len(head) - len(stable) - 4
    model_header = ["model", "passed", "p50 s", "p95 s", "tokens/request", "cost/request USD"]
    model_room = min(len(reports.table(model_header, models)) + MORE_RESERVE, room // 4)
    pair_header = ["label", "model", "case", "runs", "passed", "pass rate (fixed repeats)",
                   "first failed"]
    pair_table = fitted(pair_header, unsettled, room - model_room, "pairs") if unsettled else ""
    model_table = fitted(model_header, models, room - len(pair_table), "models")
    text = head + (pair_table + "\n\n" if pair_table else "") + stable + model_table + "\n\n"
    if len(text) > MARKDOWN_LIMIT:  # cannot happen by the budget above; never risk it
        text = text[:text.rfind("\n", 0, MARKDOWN_LIMIT - len(CUT_NOTE))] + CUT_NOTE
    return text


def json_view(history):
    """The history as JSON data: our mark first, so only our own file is replaced."""
    return record.dumps({"generator": "agent regression runner history", **history},
                        indent=2) + "\n"


RATE_COLOURS = {"pass": "#1a7f37", "flaky": "#9a6700", "fail": "#cf222e"}  # evidence_page's


def svg(height, label, parts):
    """An inline chart: scales to the page's width (360 units is about 1:1 at 400 px)."""
    return (f'<svg viewBox="0 0 {CHART_WIDTH} {height}" width="100%" '
            f'style="max-width:720px;height:auto;display:block" role="img" '
            f'aria-label="{evidence_page.esc(label)}" font-family="system-ui,sans-serif" '
            f'font-size="10">{"".join(parts)}</svg>')


def rate_chart(records):
    """Bars of each record's pass rate over its counted verdicts, oldest left."""
    left, top, plot_w, plot_h = 34, 8, CHART_WIDTH - 42, 100
    step = plot_w / max(len(records), 1)
    parts = [f'<line x1="{left}" x2="{left + plot_w}" y1="{top + plot_h * (1 - share)}" '
             f'y2="{top + plot_h * (1 - share)}" stroke="#d0d7de"/><text x="{left - 4}" '
             f'y="{top + plot_h * (1 - share) + 3}" text-anchor="end">{int(share * 100)} %'
             "</text>" for share in (0, 0.5, 1)]
    for index, entry in enumerate(records):
        verdicts = entry["passed"] + entry["failed"]
        if not verdicts:
            continue  # no verdict in it: no bar, its title says so in the table
        share = entry["passed"] / verdicts
        kind = "pass" if share == 1 else "fail" if share == 0 else "flaky"
        height = max(plot_h * share, 2)  # a 0 % record still shows, as a red line
        parts.append(
            f'<rect x="{left + index * step:.2f}" y="{top + plot_h - height:.2f}" '
            f'width="{max(step - 1, 0.5):.2f}" height="{height:.2f}" '
            f'fill="{RATE_COLOURS[kind]}"><title>record {entry["number"]}: '
            f'{evidence_page.esc(entry["path"])}: {entry["passed"]}/{verdicts} passed</title>'
            "</rect>")
    parts.append(f'<text x="{left}" y="{top + plot_h + 14}">record 1</text>')
    if len(records) > 1:
        parts.append(f'<text x="{left + plot_w}" y="{top + plot_h + 14}" text-anchor="end">'
                     f'record {len(records)}</text>')
    return svg(top + plot_h + 20, "pass rate per record", parts)


def latency_chart(models):
    """Per model a p95 bar with its p50 inside, the slowest first; name above."""
    timed = sorted((m for m in models if m["latency_p95"] is not None),
                   key=lambda m: -m["latency_p95"])[:CHART_MODELS]
    if not timed:
        return '<p class="small">No row was answered directly: no latency to chart.</p>'
    longest, width, parts = max(m["latency_p95"] for m in timed) or 1, CHART_WIDTH - 8, []
    for index, model in enumerate(timed):
        y = 4 + index * 30
        name = model["model"] if len(model["model"]) <= CHART_NAME else (
            model["model"][:CHART_NAME - 1] + "…")
        parts.append(
            f'<text x="4" y="{y + 10}">{evidence_page.esc(name)} · p50 '
            f'{seconds_text(model["latency_p50"])} s · p95 {seconds_text(model["latency_p95"])}'
            f' s<title>{evidence_page.esc(model["model"])}</title></text>'
            f'<rect x="4" y="{y + 14}" width="{width * model["latency_p95"] / longest:.2f}" '
            f'height="10" fill="#d0d7de"/><rect x="4" y="{y + 14}" '
            f'width="{width * model["latency_p50"] / longest:.2f}" height="10" fill="#0969da"/>')
    return svg(8 + len(timed) * 30, "latency per model, p50 inside p95", parts)


def html_rows(history):
    """The table rows of every pair, worst first."""
    kinds = {BROKEN: "fail", FLAKY: "flaky", STABLE: "pass", NO_VERDICT: "none"}
    esc = evidence_page.esc
    return "".join(
        f'<tr><td><code>{esc(pair["model"])}</code></td><td><code>{esc(pair["case"])}</code></td>'
        f'<td class="{kinds[pair["state"]]}">{esc(pair["label"])}</td>'
        f'<td class="mono" style="word-break:break-all">{esc(pair["sequence"])}</td>'
        f'<td>{pair["passed"]}/{pair["runs"]}</td><td>{esc(bound_text(pair))}</td>'
        f'<td>{pair["longest_passing_streak"]}</td>'
        f'<td>{esc(pair["first_failed"]["path"]) if pair["first_failed"] else "-"}</td></tr>'
        for pair in worst_first(history["pairs"]))


def synthetic_banner(history):
    if all(entry["evidence"] == "live" for entry in history["records"]):
        return ""
    return ('<p class="banner">SYNTHETIC evidence: demo data from a simulated API, not '
            "answers from a live model.</p>")


def html_page(history):
    """One self-contained page: no script, nothing fetched (evidence_page's CSP)."""
    esc = evidence_page.esc
    notes = "".join(f"<li>{esc(note)}</li>" for note in history["notes"])
    models = "".join(
        f'<tr><td><code>{esc(m["model"])}</code></td><td>{m["passed"]}/{m["runs"]}</td>'
        f'<td>{seconds_text(m["latency_p50"])}</td><td>{seconds_text(m["latency_p95"])}</td>'
        f'<td>{tokens_text(m["tokens_per_request"])}</td>'
        f'<td>{"unknown" if m["cost_per_request"] is None else esc(m["cost_per_request"]) + " USD"}'
        "</td></tr>"
        for m in history["models"])
    records = "".join(
        f'<tr><td>{e["number"]}</td><td><code>{esc(e["path"])}</code></td>'
        f'<td>{esc(e["counted_at"])}</td><td>{esc(e["kind"])}'
        f'{" (regrade of " + esc(e["regrade_of"]) + ")" if e["regrade_of"] else ""}</td>'
        f'<td>{e["rows"]}</td><td>{e["passed"]}</td><td>{e["failed"]}</td>'
        f'<td>{e["no_verdict"]}</td></tr>' for e in history["records"])
    body = (
        synthetic_banner(history)
        + f'<p class="meta">{esc(count_line(history))}. Runs by record, oldest first: '
        f'{esc(GLYPHS)}.</p>'
        + (f'<ul class="small">{notes}</ul>' if notes else "")
        + f'<h2>Pass rate per record</h2>{rate_chart(history["records"])}'
        f'<h2>Latency per model (seconds per request)</h2>{latency_chart(history["models"])}'
        "<h2>Pairs, worst first</h2><table><tr><th>model</th><th>case</th><th>label</th>"
        "<th>runs</th><th>passed</th><th>pass rate (fixed repeats)</th><th>streak</th>"
        f"<th>first failed</th></tr>{html_rows(history)}</table>"
        "<h2>Models</h2><table><tr><th>model</th><th>passed</th><th>p50 s</th><th>p95 s</th>"
        f"<th>tokens/request</th><th>cost/request</th></tr>{models}</table>"
        "<h2>Records</h2><table><tr><th>#</th><th>record</th><th>counted at</th><th>kind</th>"
        "<th>rows</th><th>passed</th><th>failed</th><th>no verdict</th></tr>"
        f"{records}</table>")
    return evidence_page.page(f"History of {many(len(history['records']), 'record')}", body)


# --------------------------------------------------------------------------
# I/O: finding and reading the records (in a pool), writing the views.
# --------------------------------------------------------------------------


def record_paths(arguments):
    """(files, notes): each file named, and every *.json file under each folder
    named, read recursively; names starting with a dot are skipped (a record's
    lock and slot files are such), as is a history JSON of ours (a view kept
    beside the records, which the next run may replace), and a file reached
    twice is read once."""
    found, notes = [], []
    for argument in arguments:
        if not os.path.isdir(argument):
            found.append(argument)
            continue
        for folder, folders, files in os.walk(argument, onerror=lambda exc: notes.append(
                f"{shown(exc.filename)}: skipped: {shown(exc.strerror or exc)}")):
            folders[:] = sorted(name for name in folders if not name.startswith("."))
            found += [os.path.join(folder, name) for name in sorted(files)
                      if name.endswith(".json") and not name.startswith(".")]
    unique, seen = [], set()
    for path in found:
        if os.path.realpath(path) not in seen and not history_json(path):
            seen.add(os.path.realpath(path))
            unique.append(path)
    return unique, notes


def history_json(path):
    """Whether path is a JSON view this tool wrote (its first bytes say so)."""
    try:
        return os.path.isfile(path) and reports.file_start(path).startswith(JSON_START.encode())
    except OSError:
        return False


def read_one(path, skip=frozenset()):
    """(tally, None) of the record at path, or (None, a note on why it was skipped).
    Runs in a worker: what it returns is counts, never rows."""
    try:
        judged = record.load(path, keep=brief)
    except ValueError as exc:
        return None, f"{shown(path)}: skipped: {shown(exc, NOTE_CHARS)}"
    tallied = tally(judged, judged.rows.values(), path, skip)
    if tallied["proof"]:
        tallied["qualified"] = qualified_pairs(record.derived_summary(judged),
                                               judged["config"]["repeats"])
    return tallied, None


def read_all(paths, skips=None, workers=None):
    """read_one of every path (with its skip set, if given), in order: in a
    pool of os.cpu_count() processes (records are independent), or here when
    there is one record, one core, or less than POOL_BYTES to read."""
    skips = skips or [frozenset()] * len(paths)
    workers = min(workers or os.cpu_count() or 1, len(paths))
    if workers <= 1 or sum(map(file_size, paths)) < POOL_BYTES:
        return [read_one(path, skip) for path, skip in zip(paths, skips)]
    with concurrent.futures.ProcessPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(read_one, paths, skips))


def file_size(path):
    try:
        return os.path.getsize(path)
    except OSError:  # read_one says why it cannot be read
        return 0


def counted_once(records):
    """(records, notes): each response counted once, by the earliest record that
    holds it. A record holding responses counted already is read again without
    them (rare: a copy, or a record resumed from another's file)."""
    repeats = repeated(records)
    partly = [number for number, skip in repeats.items()
              if len(skip) * ID_BYTES < len(records[number]["digests"])
              or records[number]["rows"] > len(records[number]["digests"]) // ID_BYTES]
    again = read_all([records[number]["path"] for number in partly],
                     [repeats[number] for number in partly])
    recounted = {number: tallied for number, (tallied, _) in zip(partly, again) if tallied}
    kept, notes = without_repeats(records, recounted, repeats)
    return kept, [note for _, note in again if note] + notes


def same_file(first, second):
    try:
        return os.path.samefile(first, second)
    except OSError:  # one does not exist (yet): compare the names
        return os.path.realpath(first) == os.path.realpath(second)


def json_problem(path):
    """Why the JSON view may not replace path: only our own history JSON is replaced."""
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.lexists(path):
        if not os.path.isdir(folder):
            return f"folder {folder} does not exist; create it or choose another path"
        return reports.folder_problem(folder)
    if os.path.isdir(path) or not os.path.isfile(path):
        return "it is not a regular file; name a file"
    try:
        start = reports.file_start(path)
    except OSError as exc:
        return exc.strerror or str(exc)
    if not start.startswith(JSON_START.encode()):
        return "it exists and is not a history JSON written by this tool; name a new file"
    return reports.folder_problem(folder)


def output_problem(path, kind, inputs):
    """Why a view may not be written to path, checked before anything is read."""
    if any(same_file(path, source) for source in inputs):
        return "it is one of the records read; name another file"
    return json_problem(path) if kind == "json" else reports.output_problem(path, kind)


class OutputFailed(Exception):
    """Standard output or a view cannot be written (a closed pipe, a full disk)."""


def say(line):
    try:
        print(line)
    except (OSError, ValueError) as exc:  # ValueError: the stream was closed
        raise OutputFailed(f"cannot write the output ({getattr(exc, 'strerror', None) or exc})"
                           ) from None


def complain(line):
    """One line on stderr, if stderr can still be written."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        print(line, file=sys.stderr, flush=True)


def write_views(history, args):
    """Each view asked for; OutputFailed naming the one that cannot be written."""
    for flag, path, write in (("--json", args.json, lambda: reports.write_replacing(
            args.json, json_view(history))),
                              ("--summary-md", args.summary_md, lambda: reports.append(
                                  args.summary_md, markdown(history))),
                              ("--html", args.html, lambda: reports.write_replacing(
                                  args.html, html_page(history)))):
        if path is None:
            continue
        try:
            write()
        except OSError as exc:
            raise OutputFailed(f"cannot write {flag} {path}: {exc.strerror or exc}") from None


def command_line(prog="history.py"):
    """The parser: flags, their help and the exit codes. prog: the script the
    user ran (compare_runs.py --history, or history.py)."""
    parser = Parser(prog=prog,
                    description="The history of saved runs: per (model, case) and model.",
                    epilog="Exit codes: 0 the history was shown (it never gates), 2 no record "
                           "could be read, a usage error, an output that cannot be written, "
                           "or an internal error.")
    parser.add_argument("--history", nargs="+", required=True, metavar="RECORD",
                        help="records, or folders of them (*.json, read recursively; names "
                             "starting with a dot skipped), in any order")
    parser.add_argument("--json", metavar="FILE", help="write the history as JSON (replaces "
                        "only an earlier history JSON of ours)")
    parser.add_argument("--summary-md", metavar="FILE", help="append a Markdown view of at "
                        "most 65,535 characters (a PR comment), e.g. to $GITHUB_STEP_SUMMARY")
    parser.add_argument("--html", metavar="FILE", help="write one self-contained HTML page")
    return parser


def parse_args(argv, prog="history.py"):
    """(args, record files): a usage error or an output that may not be written
    exits 2 with one line, before any record is read."""
    parser = command_line(prog)
    args = parser.parse_args(argv)
    paths, notes = record_paths(args.history)
    outputs = [(flag, path, kind) for flag, path, kind in (
        ("--json", args.json, "json"), ("--summary-md", args.summary_md, "markdown"),
        ("--html", args.html, "html")) if path is not None]
    for number, (flag, path, kind) in enumerate(outputs):
        if any(same_file(path, other) for _, other, _ in outputs[:number]):
            parser.error(f"{flag} {path}: another view is written to the same file")
        problem = output_problem(path, kind, paths)
        if problem:
            parser.error(f"{flag} {path}: {problem}")
    return args, paths, notes


def run(args, paths, notes, prog="history.py"):
    """Read, select, print and write; the exit code (0, or 2 with no record)."""
    if not paths:
        raise HistoryError("no record found in " + ", ".join(map(shown, args.history))
                           + " (a folder is searched for *.json files)")
    results = read_all(paths)
    notes = notes + [note for _, note in results if note]
    records, more = select([tallied for tallied, _ in results if tallied])
    notes += more
    records, more = counted_once(records)
    notes += more
    for note in notes:
        complain(f"{prog}: note: {note}")
    if not records:
        raise HistoryError(f"no record could be read of the {len(paths)} files given; "
                           "the notes above say why")
    history = build(records, notes)
    for line in terminal_lines(history):
        say(line)
    write_views(history, args)
    return 0


def main(argv=None, prog="history.py"):
    """The command line: the exit code (never raises for a user's mistake).
    prog: the script the user ran, which every message names."""
    mend_standard_streams()
    if sys.stdout is None:  # started with standard output closed (>&-)
        complain(f"{prog}: standard output is closed")
        return 2
    try:
        try:
            args, paths, notes = parse_args(argv, prog)
        except SystemExit as stop:  # usage error (2) or --help (0), already printed
            return stop.code if isinstance(stop.code, int) else 2
        code = run(args, paths, notes, prog)
        try:
            sys.stdout.flush()  # a full disk or a closed pipe shows here, not at exit
        except (OSError, ValueError) as exc:
            raise OutputFailed(f"cannot write the output ({exc})") from None
        return code
    except (HistoryError, OutputFailed) as exc:
        complain(f"{prog}: error: {shown(exc, NOTE_CHARS)}")
        return 2
    except Exception as exc:  # noqa: BLE001 - a bug must read as exit 2, with its traceback
        import traceback

        with contextlib.suppress(OSError, ValueError):
            traceback.print_exc()
        complain(f"{prog}: internal error: {type(exc).__name__}: {shown(exc, NOTE_CHARS)}")
        return 2


# --------------------------------------------------------------------------
# The scale generator: synthetic records for the timing in docs/history.md.
# --------------------------------------------------------------------------


def scale_rows(number, models, repeats, unsafe, snippet_bytes):
    """(plan index, row) of one generated record, each judged by the checker as
    a live row would be; every response id is new."""
    import simulated_api  # the generator alone answers as the simulated API does

    for index, (repeat, case, model) in enumerate(checker.run_order(models, checker.CASES,
                                                                    repeats)):
        response = simulated_api.agent_response(f"{number}_{index}", case, model, unsafe)
        if snippet_bytes:  # a response the size of a live one (~10 KB)
            response["output"][0]["results"][0]["snippet"] = "x" * snippet_bytes
        seconds = SCALE_SECONDS * (1 + models.index(model) / len(models)) + repeat / 1000
        row = {"repeat": repeat, "case_id": case["id"], "model": model, "error": None,
               "error_status": None, "cost_usd": None, "response": response,
               "answer_text": None, "reasons": [], "seconds": round(seconds, 3),
               "passed": False, "attempts": 1, "waited_seconds": 0.0}
        yield index, checker.derived(case, row)


def scale_records(folder, records=100, models=25, repeats=10, snippet_bytes=0):
    """Write `records` synthetic records of models x the 4 built-in cases x
    repeats rows into folder (100, 25, 10: the 1,000-row records timed in
    docs/history.md): model 0 breaks in the middle record, model 1 fails on
    every other record. Returns their paths."""
    import regression  # run_config, as the runner writes it (this loads the SDK)

    names = [f"offline/scale-{number:02d}" for number in range(models)]
    start = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)
    paths = []
    for number in range(records):
        unsafe = {names[0]} if number >= records // 2 else set()
        unsafe |= {names[1 % models]} if number % 2 and models > 1 else set()
        rows = list(scale_rows(number, names, repeats, unsafe, snippet_bytes))
        head = {"created_at": (start + datetime.timedelta(hours=number)).isoformat(),
                "config": regression.run_config(names, checker.CASES, repeats),
                "sdk_version": runs.sdk_version(), "code_sha256": record.code_sha256(),
                "checker_sha256": record.checker_sha256(), "evidence": "synthetic"}
        tail = {"execution": {"jobs": 1, "retries": 2, "foreground": False, "batch": False,
                              "confidence": checker.CONFIDENCE},
                "summary": checker.summary([row for _, row in rows], names, repeats)}
        paths.append(os.path.join(folder, f"scale-{number:03d}.json"))
        with record.RecordFile.create(paths[-1], head, tail, rows=rows):
            pass  # saved and closed: the lock and slot files are gone
    return paths


if __name__ == "__main__":
    raise SystemExit(main())
