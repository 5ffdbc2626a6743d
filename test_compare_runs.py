"""compare_runs.py: refusals, labels, pass rates, switches, cautions,
views, the demo, the command line and hostile files. Offline.

Records are built row by row here (repeats numbered from 0), not through the SDK.
"""

import contextlib
import copy
import importlib.util
import io
import itertools
import json
import os
import random
import shlex
import subprocess
import sys
import unittest
from unittest import mock

import checker
import compare_runs
import record as record_module
import regression
import reports
import simulated_api
from testing import (HERE, Harness, cli, clean_env, quiet, read_json, read_text, slow,
                     temp_dir, write_text)

MODEL = "offline/model"
CREATED = "2026-03-01T12:00:00+00:00"
CASE_IDS = [case["id"] for case in regression.CASES]
CASES_BY_ID = {case["id"]: case for case in regression.CASES}
RESPONSE_SERIAL = itertools.count(1)  # every fixture response its own id
SCRIPT = os.path.join(HERE, "compare_runs.py")


def answer_of(case, reasons):
    """The answer text that fails `case` with exactly `reasons` (wrong code and/or action)."""
    unsafe = {"wrong_code", "wrong_next_action"}
    if not set(reasons) <= unsafe:
        raise AssertionError(f"this fixture makes only {unsafe}, not {reasons}")
    code = "000" if "wrong_code" in reasons else case["expected"]
    action = "wait_then_retry" if case["action"] != "wait_then_retry" else "verify_outcome"
    action = action if "wrong_next_action" in reasons else case["action"]
    return json.dumps({"code": code, "next_action": action,
                       "source_urls": [f"https://www.rfc-editor.org/rfc/{case['rfc']}"]})


def make_row(model, case_id, repeat, reasons=(), case=None):
    """A row as the runner saves it: its verdict follows from its saved response,
    whose id is its own (as the API's are: two runs never share one)."""
    serial = next(RESPONSE_SERIAL)
    case = case or CASES_BY_ID.get(case_id) or {"id": case_id, **CASES_BY_ID["rate-limit"]}
    text, url = answer_of(case, reasons), f"https://www.rfc-editor.org/rfc/{case['rfc']}"
    if model.startswith(checker.CHAT_PREFIX):
        response = {"id": f"chat_{case_id}_{repeat}_{serial}", "model": model[len(checker.CHAT_PREFIX):],
                    "choices": [
            {"finish_reason": "stop", "message": {"role": "assistant", "content": text}}],
            "search_results": [{"url": url}], "usage": {"cost": {"total_cost": 0.0042}}}
    else:
        response = {"id": f"resp_{model}_{case_id}_{repeat}_{serial}", "model": model,
                    "status": "completed", "output": [
            {"type": "search_results", "results": [{"url": url}]},
            {"type": "message", "role": "assistant",
             "content": [{"type": "output_text", "text": text}]}],
            "usage": {"cost": {"currency": "USD", "total_cost": 0.0042}}}
    row = {"repeat": repeat, "case_id": case_id, "model": model, "error": None,
           "error_status": None, "cost_usd": "0.0042", "response": response,
           "answer_text": text, "answered_model": response["model"], "reasons": list(reasons),
           "seconds": 0.5, "passed": not reasons}
    if checker.derived(case, row) != row:
        raise AssertionError(f"fixture row {model} {case_id} does not follow from its response")
    return row


def make_record(models=(MODEL,), repeats=1, failing=None, cases=None, **head):
    """A valid record: every row passes but failing {(model, case id, repeat): reasons}."""
    cases = regression.CASES if cases is None else cases
    failing = failing or {}
    rows = [make_row(model, case["id"], repeat, failing.get((model, case["id"], repeat), ()),
                     case)
            for repeat in range(repeats) for case in cases for model in models]
    return {"created_at": CREATED,
            "config": copy.deepcopy(regression.run_config(list(models), cases, repeats)),
            "sdk_version": "1.0.0", "code_sha256": "a" * 64,
            "checker_sha256": record_module.checker_sha256(), "evidence": "synthetic",
            "runs": rows, "summary": {}, **head}


def record():
    """A valid record of one model, four cases, one repeat, every row passing."""
    return make_record()


def fail(rec, case_id, reasons=("wrong_code",), repeat=None, model=None):
    """rec with the rows of case_id (of one repeat or model, if given) failing for reasons."""
    cases = {case["id"]: case for case in rec["config"]["cases"]}
    for number, row in enumerate(rec["runs"]):
        if row["case_id"] == case_id and repeat in (None, row["repeat"]) \
                and model in (None, row["model"]):
            rec["runs"][number] = make_row(row["model"], case_id, row["repeat"], reasons,
                                           cases[case_id])
    return rec


def compare(*args, **kwargs):
    """(exit code, stdout lines) of compare_runs.compare."""
    code, output, _ = quiet(compare_runs.compare, *args, **kwargs)
    return code, output.splitlines()


class Files:
    """A temp folder and compare_runs.main() in-process."""

    def setUp(self):
        self.folder = temp_dir(self)

    def path(self, name):
        return os.path.join(self.folder, name)

    def write(self, name, content):
        text = content if isinstance(content, str) else json.dumps(content)
        return write_text(self.path(name), text)

    def main(self, *args):
        """(exit code, stdout, stderr) of compare_runs.main(args)."""
        return quiet(compare_runs.main, list(args))

    def usage_error(self, *args):
        """stderr of a usage error; fails unless main exits 2 through argparse."""
        errors = io.StringIO()
        with self.assertRaises(SystemExit) as raised, contextlib.redirect_stderr(errors), \
                contextlib.redirect_stdout(io.StringIO()):
            compare_runs.main(list(args))
        self.assertEqual(raised.exception.code, 2)
        return errors.getvalue()


# --------------------------------------------------------------------------
# index(): what a comparable record is.
# --------------------------------------------------------------------------


class IndexTest(unittest.TestCase):
    def test_valid_record_is_keyed_by_model_case_repeat_from_0(self):
        rows = compare_runs.index(record())
        self.assertEqual(sorted(rows), sorted((MODEL, case_id, 0) for case_id in CASE_IDS))

    def test_refusals(self):
        def mutate(change):
            rec = record()
            change(rec)
            return rec

        table = [
            ("not a dict", []),
            ("config not a dict", mutate(lambda r: r.update(config=[]))),
            ("runs not a list", mutate(lambda r: r.update(runs={}))),
            ("empty models", mutate(lambda r: r["config"].update(models=[]))),
            ("duplicate models", mutate(lambda r: r["config"].update(models=["a", "a"]))),
            ("models not a list", mutate(lambda r: r["config"].update(models=MODEL))),
            ("empty cases", mutate(lambda r: r["config"].update(cases=[]))),
            ("duplicate case ids", mutate(lambda r: r["config"]["cases"].append(
                dict(r["config"]["cases"][0])))),
            ("case id not a string", mutate(lambda r: r["config"]["cases"][0].update(id=3))),
            ("repeats zero", mutate(lambda r: r["config"].update(repeats=0))),
            ("repeats True", mutate(lambda r: r["config"].update(repeats=True))),
            ("repeats string", mutate(lambda r: r["config"].update(repeats="1"))),
            ("repeats huge", mutate(lambda r: r["config"].update(repeats=1_000_000_000))),
            ("repeated key", mutate(lambda r: r["runs"].append(dict(r["runs"][0])))),
            ("row with an error", mutate(lambda r: r["runs"][0].update(
                error="APIStatusError", reasons=["execution_error"], passed=False))),
            ("passed not a bool", mutate(lambda r: r["runs"][0].update(passed=1))),
            ("passed disagrees", mutate(lambda r: r["runs"][0].update(reasons=["wrong_code"]))),
            ("reasons not a list", mutate(lambda r: r["runs"][0].update(reasons="x"))),
            ("missing row", mutate(lambda r: r["runs"].pop())),
            ("extra row", mutate(lambda r: r["runs"].append(dict(r["runs"][0], repeat=1)))),
            ("repeat numbered from 1", mutate(lambda r: [row.update(repeat=1)
                                                         for row in r["runs"]])),
            ("row not an object", mutate(lambda r: r["runs"].append(7))),
            ("repeat not an int", mutate(lambda r: r["runs"][0].update(repeat=[1]))),
        ]
        for name, rec in table:
            with self.subTest(name):
                with self.assertRaises(ValueError):
                    compare_runs.index(rec)


# --------------------------------------------------------------------------
# One repeat: one line per (model, case, repeat), then the count line.
# --------------------------------------------------------------------------


class OneRepeatTest(unittest.TestCase):
    def test_every_label(self):
        before, after = record(), record()
        fail(before, "rate-limit")                      # RECOVERED
        fail(before, "temporary-overload")              # STILL_FAILING
        fail(after, "temporary-overload")
        fail(after, "ambiguous-payment", ["wrong_code", "wrong_next_action"])  # NEW_FAILURE
        code, lines = compare(before, after)
        self.assertEqual(code, 1)
        self.assertEqual(lines, [
            "NEW_FAILURE offline/model ambiguous-payment 0 before= [] after= "
            "['wrong_code', 'wrong_next_action']",
            "PASS offline/model failed-precondition 0 before= [] after= []",
            "RECOVERED offline/model rate-limit 0 before= ['wrong_code'] after= []",
            "STILL_FAILING offline/model temporary-overload 0 before= ['wrong_code'] "
            "after= ['wrong_code']",
            "compared 4: 1 new failure, 1 recovered, 1 pass, 1 still failing",
        ])

    def test_no_new_failure_returns_0(self):
        code, lines = compare(fail(record(), "rate-limit"), record())
        self.assertEqual(code, 0)
        self.assertEqual(lines[-1], "compared 4: 0 new failures, 1 recovered, 3 pass, "
                                    "0 still failing")
        self.assertIn("RECOVERED offline/model rate-limit 0 before= ['wrong_code'] after= []",
                      lines)

    def test_count_line_counts_the_lines_without_a_label_word(self):
        before = make_record(models=("a", "b"))
        _, lines = compare(before, fail(make_record(models=("a", "b")), "rate-limit", model="b"))
        self.assertEqual(lines[-1], "compared 8: 1 new failure, 0 recovered, 7 pass, "
                                    "0 still failing")
        self.assertFalse([word for word in compare_runs.LABELS if word in lines[-1]])

    def test_case_ids_sort_with_numbers_as_numbers(self):
        cases = [dict(regression.CASES[0], id=case_id)
                 for case_id in ("case-10", "case-2", "case-1")]
        _, lines = compare(make_record(cases=cases), make_record(cases=cases))
        self.assertEqual([line.split()[2] for line in lines[:-1]],
                         ["case-1", "case-2", "case-10"])

    def test_changed_instructions_are_comparable(self):
        after = record()
        after["config"]["instructions"] = "new wording"
        self.assertEqual(compare(record(), after)[0], 0)

    def test_refusals(self):
        def changed(**config):
            rec = record()
            rec["config"].update(config)
            return rec

        table = [
            ("before not a dict", [], record()),
            ("after has no runs", record(), {"config": {}}),
            ("after config not a dict", record(), {"config": 1, "runs": []}),
            ("different models", record(), make_record(models=("other/model",))),
            ("different tool", record(), changed(tool={})),
            ("different repeats", record(), make_record(repeats=2)),
            ("evidence differs", record(), dict(record(), evidence="live")),
            ("after malformed", record(), fail(record(), "rate-limit") | {"runs": []}),
            ("a case's question differs", record(),
             make_record(cases=[{**case, "question": case["question"] + " (edited)"}
                                for case in regression.CASES])),
        ]
        for name, before, after in table:
            with self.subTest(name):
                with self.assertRaises(ValueError):
                    compare(before, after)

    def test_cases_may_not_differ_even_under_a_switch(self):
        before = make_record(models=("a",))
        after = make_record(models=("b",), cases=[{**regression.CASES[0], "expected": "503",
                                                    "rfc": "rfc9110"}, *regression.CASES[1:]])
        with self.assertRaises(ValueError) as refused:
            compare(before, after, [("a", "b")])
        self.assertIn("different suites", str(refused.exception))
        self.assertIn("expect changed: rate-limit; cite changed: rate-limit",
                      str(refused.exception))

    def test_a_case_added_to_the_suite_is_named_alone(self):
        before = make_record(cases=regression.CASES[:3])
        added = regression.CASES[3]["id"]
        with self.assertRaises(ValueError) as refused:
            compare(before, record())
        self.assertEqual(str(refused.exception),
                         "the records are of different suites (BEFORE http-failures, AFTER "
                         f"http-failures): cases added: {added}; compare two runs of the "
                         "same suite")

    def test_changed_cases_are_named_up_to_five_then_counted(self):
        cases = [dict(regression.CASES[0], id=f"c-{number}") for number in range(1, 7)]
        table = [  # cases whose question changed, what the refusal says of them
            (5, "question changed: c-1, c-2, c-3, c-4, c-5; compare"),
            (6, "question changed: c-1, c-2, c-3, c-4, c-5 and 1 more; compare"),
        ]
        for changed, said in table:
            with self.subTest(changed=changed):
                edited = [dict(case, question=case["question"] + " (edited)")
                          if number < changed else case for number, case in enumerate(cases)]
                with self.assertRaises(ValueError) as refused:
                    compare(make_record(cases=cases), make_record(cases=edited))
                self.assertIn(f"): {said} two runs of the same suite", str(refused.exception))

    def test_records_of_the_published_runner_without_error_status_compare(self):
        before, after = record(), fail(record(), "ambiguous-payment")
        for rec in (before, after):
            for row in rec["runs"]:
                del row["error_status"]
        code, lines = compare(before, after)
        self.assertEqual(code, 1)
        self.assertTrue(any(line.startswith("NEW_FAILURE") for line in lines))

    def test_evidence_defaults_to_live(self):
        before, after = record(), record()
        del before["evidence"]
        after["evidence"] = "live"
        self.assertEqual(compare(before, after)[0], 0)


# --------------------------------------------------------------------------
# More repeats: one line per (model, case), judged on pass rates.
# --------------------------------------------------------------------------


class PassRateTest(unittest.TestCase):
    def rates(self, before_fails, after_fails, repeats=3):
        """(code, lines) with ambiguous-payment failing on the given repeats."""
        before = make_record(repeats=repeats, failing={
            (MODEL, "ambiguous-payment", r): ["wrong_code"] for r in before_fails})
        after = make_record(repeats=repeats, failing={
            (MODEL, "ambiguous-payment", r): ["wrong_code"] for r in after_fails})
        return compare(before, after)

    def test_one_line_per_model_and_case(self):
        code, lines = self.rates([], [1])
        self.assertEqual(code, 1)
        self.assertEqual(lines, [
            "NEW_FAILURE offline/model ambiguous-payment before=3/3 after=2/3 p=0.500 "
            "pass rate >= 36.8 % -> 13.5 % (95 %)",
            "PASS offline/model failed-precondition before=3/3 after=3/3 p=1.000 "
            "pass rate >= 36.8 % -> 36.8 % (95 %)",
            "PASS offline/model rate-limit before=3/3 after=3/3 p=1.000 "
            "pass rate >= 36.8 % -> 36.8 % (95 %)",
            "PASS offline/model temporary-overload before=3/3 after=3/3 p=1.000 "
            "pass rate >= 36.8 % -> 36.8 % (95 %)",
            "compared 4: 1 new failure, 0 worse, 0 recovered, 0 better, 3 pass, 0 still failing",
        ])

    def test_labels_on_rates(self):
        table = [  # before's failing repeats, after's, label, exit code
            ([], [], "PASS", 0),
            ([], [2], "NEW_FAILURE", 1),
            ([], [0, 1, 2], "NEW_FAILURE", 1),
            ([0], [], "RECOVERED", 0),
            # Flaky on both sides, on other repeats: judged per repeat this was a
            # NEW_FAILURE at repeat 0; on rates it is a case still failing.
            ([1], [0], "STILL_FAILING", 0),
            ([0, 1, 2], [0], "BETTER", 0),
            ([0, 1, 2], [0, 1, 2], "STILL_FAILING", 0),
            # The gate is monotone: a falling rate fails it even when some
            # repeat failed before (2/3 -> 0/3 and 2/3 -> 1/3 are WORSE).
            ([1], [0, 1, 2], "WORSE", 1),
            ([1], [0, 2], "WORSE", 1),
        ]
        for before_fails, after_fails, name, exit_code in table:
            with self.subTest(before=before_fails, after=after_fails):
                code, lines = self.rates(before_fails, after_fails)
                self.assertEqual(lines[0].split()[0], name)
                self.assertEqual(code, exit_code)

    def test_fisher_p_values_by_hand(self):
        table = [  # before passed/runs, after passed/runs, p = P(X >= before passed)
            (3, 3, 0, 3, 1 / 20),      # C(3,3)C(3,0)/C(6,3)
            (3, 3, 1, 3, 4 / 20),      # C(4,3)C(2,0)/C(6,3)
            (3, 3, 2, 3, 10 / 20),     # C(5,3)C(1,0)/C(6,3)
            (2, 3, 2, 3, 16 / 20),     # (C(4,2)C(2,1) + C(4,3)C(2,0))/C(6,3)
            (3, 3, 3, 3, 1.0),
            (0, 3, 3, 3, 1.0),
            (1, 1, 0, 1, 1 / 2),
            (10, 10, 0, 10, 1 / 184756),  # 1/C(20,10)
        ]
        for before_good, before_runs, after_good, after_runs, expected in table:
            with self.subTest(before=f"{before_good}/{before_runs}",
                              after=f"{after_good}/{after_runs}"):
                self.assertAlmostEqual(compare_runs.fisher_drop(
                    before_good, before_runs, after_good, after_runs), expected, places=12)

    def test_3_of_3_to_0_of_3_prints_p_0_05(self):
        _, lines = self.rates([], [0, 1, 2])
        self.assertTrue(lines[0].endswith("before=3/3 after=0/3 p=0.050 pass rate >= 36.8 % "
                                          "-> 0.0 % (95 %)"), lines[0])

    def test_a_tiny_p_is_never_printed_as_zero(self):
        _, lines = self.rates([], list(range(10)), repeats=10)
        self.assertIn("before=10/10 after=0/10 p=5.4e-06 pass rate >= 74.1 % -> 0.0 %", lines[0])


# --------------------------------------------------------------------------
# Lines before the labelled ones: CAUTION and instructions.
# --------------------------------------------------------------------------


class CautionTest(Files, unittest.TestCase):
    def test_caution_when_sdk_or_code_changed(self):
        for field in ("sdk_version", "code_sha256"):
            with self.subTest(field):
                after = record()
                after[field] = "other"
                code, lines = compare(record(), after)
                self.assertEqual(code, 0)
                self.assertTrue(lines[0].startswith(f"CAUTION: changed {field}"))

    def test_no_caution_when_only_instructions_changed(self):
        after = record()
        after["config"]["instructions"] = "new wording"
        _, lines = compare(record(), after)
        self.assertFalse([line for line in lines if "CAUTION" in line])

    def test_changed_instructions_print_lines_added_and_removed(self):
        before, after = record(), record()
        before["config"]["instructions"] = "one\ntwo\nthree\n"
        after["config"]["instructions"] = "one\nTWO\nthree\nfour\n"
        _, lines = compare(before, after)
        self.assertEqual(lines[0], "instructions changed: +2 -1 lines")

    def test_a_short_value_cannot_carry_a_label_word(self):
        after = record()
        after["sdk_version"] = "PASS"
        _, lines = compare(record(), after)
        self.assertEqual(lines[0], "CAUTION: changed sdk_version: 1.0.0 -> (unreadable); "
                                   "a difference may come from the tooling, not the model")

    def test_a_field_missing_from_a_record_reads_none_in_its_caution(self):
        after = record()
        del after["sdk_version"]
        _, lines = compare(record(), after)
        self.assertEqual(lines[0], "CAUTION: changed sdk_version: 1.0.0 -> (none); "
                                   "a difference may come from the tooling, not the model")

    def test_records_given_as_data_are_named_before_and_after_in_receipt_cautions(self):
        for name in ("BEFORE", "AFTER"):
            with self.subTest(name=name):
                records = {"BEFORE": record(), "AFTER": record()}
                records[name]["checker_sha256"] = "b" * 64
                _, lines = compare(records["BEFORE"], records["AFTER"])
                self.assertEqual(lines[0], f"CAUTION: {name} was judged by another version of "
                                           "checker.py; its verdicts were derived again from "
                                           "its saved responses by this checker")

    def test_a_record_cannot_inject_lines_or_escapes(self):
        after = fail(record(), "rate-limit")
        after["sdk_version"] = "x\nNEW_FAILURE offline/model fake 0 before= [] after= []"
        after["code_sha256"] = "\x1b[2J" + "f" * 10
        code, output, _ = quiet(compare_runs.compare, record(), after)
        new = [line for line in output.splitlines() if line.startswith("NEW_FAILURE")]
        self.assertEqual(new, ["NEW_FAILURE offline/model rate-limit 0 before= [] "
                               "after= ['wrong_code']"])
        self.assertNotIn("\x1b", output)
        self.assertIn("-> (unreadable)", output)
        self.assertEqual(code, 1)

    def test_a_model_answered_by_another_snapshot_is_cautioned(self):
        after = record()
        for row in after["runs"]:  # the router moved to a dated snapshot of the same model
            row["response"]["model"] = row["answered_model"] = MODEL + "-2026-11-30"
        code, lines = compare(record(), after)
        self.assertEqual(code, 0)
        self.assertIn(f"CAUTION: {MODEL} was answered by {MODEL} in BEFORE, {MODEL} by "
                      f"{MODEL}-2026-11-30 in AFTER; the router changed the model", lines)

    def test_a_not_comparable_line_never_carries_a_label_word(self):
        path = self.write("PASS-NEW_FAILURE.json", "{")
        code, output, _ = self.main(path, path + "x")
        self.assertEqual(code, 2)
        self.assertTrue(output.startswith("NOT_COMPARABLE: "), output)
        self.assertFalse(any(word in output for word in compare_runs.LABELS), output)

    @slow("runs the printed command")
    def test_before_newer_than_after_is_cautioned_with_the_swapped_command(self):
        before = self.write("before.json", dict(record(), created_at="2026-03-02T00:00:00+00:00"))
        after = self.write("after.json", dict(record(), created_at="2026-03-01T00:00:00+00:00"))
        code, output, _ = self.main(before, after)
        self.assertEqual(code, 0)
        self.assertEqual(output.splitlines()[0], f"comparing BEFORE {before} with AFTER {after}")
        first = output.splitlines()[1]
        self.assertTrue(first.startswith(f"CAUTION: BEFORE ({before}, 2026-03-02T00:00:00+00:00)"
                                         f" is newer than AFTER ({after}, "), first)
        swapped = first.split("; if so, run: ")[1]
        self.assertEqual(shlex.split(swapped)[-2:], [after, before])
        result = subprocess.run(shlex.split(swapped), capture_output=True, text=True,
                                timeout=120, env=clean_env())
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        self.assertNotIn("CAUTION", result.stdout)

    def test_the_swapped_caution_stands_by_the_verdict_in_every_view(self):
        before = self.write("before.json", dict(record(), created_at="2026-03-02T00:00:00+00:00"))
        after = self.write("after.json", fail(dict(record(), created_at="2026-03-01T00:00:00"
                                                              "+00:00"), "rate-limit"))
        summary = os.path.join(self.folder, "s.md")
        code, output, _ = self.main(before, after, "--summary-md", summary)
        self.assertEqual(code, 1)
        lines = output.splitlines()
        self.assertTrue(lines[-2].startswith("compared 4:"), lines[-2])
        self.assertTrue(lines[-1].startswith("CAUTION: BEFORE ("), lines[-1])
        self.assertFalse(any(word in lines[-1].split("; if so")[0]
                             for word in compare_runs.LABELS))
        markdown = read_text(summary)
        self.assertLess(markdown.index("> **CAUTION: BEFORE ("), markdown.index("| label |"))

    def test_unreadable_or_ordered_created_at_prints_no_order_caution(self):
        for before_time, after_time in [("yesterday", CREATED), (5, CREATED), (CREATED, None),
                                        ("2026-03-01T12:00:00", "2026-03-01T13:00:00+00:00")]:
            with self.subTest(before=before_time, after=after_time):
                _, lines = compare(dict(record(), created_at=before_time),
                                   dict(record(), created_at=after_time))
                self.assertFalse([line for line in lines if "newer" in line])


# --------------------------------------------------------------------------
# --switch OLD=NEW: a model switch, across two records or inside one.
# --------------------------------------------------------------------------


class SwitchTest(Files, unittest.TestCase):
    OLD, NEW = "chat:sonar-pro", "openai/gpt-5.6-sol"

    def pair(self):
        """Paths of a Sonar run and an Agent API run; the new model fails the payment case."""
        before = make_record(models=(self.OLD,))
        after = fail(make_record(models=(self.NEW,)), "ambiguous-payment")
        return self.write("sonar.json", before), self.write("agent.json", after)

    def test_a_legacy_record_with_the_published_tool_stays_the_baseline_of_a_switch(self):
        legacy = make_record(models=(self.OLD,))
        legacy["config"]["tool"] = checker.PUBLISHED_TOOL  # made before the budget was pinned
        before = self.write("legacy.json", legacy)
        after = self.write("agent.json", make_record(models=(self.NEW,)))
        code, output, _ = self.main(before, after, "--switch", f"{self.OLD}={self.NEW}")
        self.assertEqual(code, 0, output)
        self.assertIn("CAUTION: changed tool: the web search budget was search_context_size "
                      "medium with max_results 5 in BEFORE and pinned at max_tokens 1000, "
                      "max_tokens_per_page 1000 in AFTER", output)
        same = make_record(models=(self.NEW,), created_at="2026-03-02T00:00:00+00:00")
        same["config"]["tool"] = checker.PUBLISHED_TOOL
        code, output, _ = self.main(self.write("old-agent.json", same), after)
        self.assertEqual(code, 2)  # without --switch the tools must match
        self.assertIn("agent.json: configs differ in tool", output)

    def test_two_records(self):
        before, after = self.pair()
        self.assertIn("chat_request", read_json(before)["config"])
        code, output, _ = self.main(before, after, "--switch", f"{self.OLD}={self.NEW}")
        self.assertEqual(code, 1)
        self.assertEqual(output.splitlines(), [
            f"comparing BEFORE {before} with AFTER {after}",
            f"NEW_FAILURE {self.OLD}->{self.NEW} ambiguous-payment 0 before= [] "
            "after= ['wrong_code']",
            f"PASS {self.OLD}->{self.NEW} failed-precondition 0 before= [] after= []",
            f"PASS {self.OLD}->{self.NEW} rate-limit 0 before= [] after= []",
            f"PASS {self.OLD}->{self.NEW} temporary-overload 0 before= [] after= []",
            "compared 4: 1 new failure, 0 recovered, 3 pass, 0 still failing",
        ])

    def test_one_run_holding_both_models_compares_only_the_named_ones(self):
        run = make_record(models=("a", "b", "c"))
        fail(run, "rate-limit", model="b")
        fail(run, "temporary-overload", model="c")  # c is not named: not compared
        code, output, _ = self.main(self.write("run.json", run), "--switch", "a=b")
        self.assertEqual(code, 1)
        self.assertEqual([line.split()[:3] for line in output.splitlines()[:-1]], [
            ["comparing", "models", "of"], ["PASS", "a->b", "ambiguous-payment"], ["PASS", "a->b", "failed-precondition"],
            ["NEW_FAILURE", "a->b", "rate-limit"], ["PASS", "a->b", "temporary-overload"]])

    @slow("runs the printed command")
    def test_swapped_files_turn_the_switch_round_in_the_printed_command(self):
        before = self.write("b.json", make_record(models=("a",), created_at="2026-03-02"))
        after = self.write("a.json", make_record(models=("b",), created_at="2026-03-01"))
        _, output, _ = self.main(before, after, "--switch", "a=b")
        swapped = shlex.split(output.splitlines()[1].split("; if so, run: ")[1])
        self.assertEqual(swapped[-4:], [after, before, "--switch", "b=a"])
        result = subprocess.run(swapped, capture_output=True, text=True, timeout=120,
                                env=clean_env())
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)

    def test_pass_rates_across_a_switch(self):
        before = make_record(models=("a",), repeats=3)
        after = make_record(models=("b",), repeats=3, failing={("b", "rate-limit", 2): ["wrong_code"]})
        code, lines = compare(before, after, [("a", "b")])
        self.assertEqual(code, 1)
        self.assertIn("NEW_FAILURE a->b rate-limit before=3/3 after=2/3 p=0.500 "
                      "pass rate >= 36.8 % -> 13.5 % (95 %)", lines)

    @slow("runs the printed command")
    def test_models_differ_without_switch_names_the_flag_and_a_runnable_command(self):
        before, after = self.pair()
        code, output, _ = self.main(before, after)
        self.assertEqual(code, 2)
        self.assertTrue(output.startswith("NOT_COMPARABLE: sonar.json and agent.json: configs "
                                          "differ in models; to judge a model switch give "
                                          "--switch OLD=NEW, e.g. "), output)
        result = subprocess.run(shlex.split(output.strip().split(", e.g. ")[1]),
                                capture_output=True, text=True, timeout=120, env=clean_env())
        self.assertEqual(result.returncode, 1, result.stdout + result.stderr)

    def test_models_differ_without_switch_prints_the_switch_to_give(self):
        before, after = self.pair()
        code, output, _ = self.main(before, after)
        self.assertEqual(code, 2)
        self.assertIn("--switch OLD=NEW, e.g. ", output)
        self.assertTrue(output.strip().endswith(f"--switch {self.OLD}={self.NEW}"), output)

    def test_models_instructions_and_chat_request_may_all_differ_in_a_switch(self):
        before, after = self.pair()
        edited = read_json(after)
        edited["config"]["instructions"] += "\nBe brief."
        write_text(after, json.dumps(edited))
        code, output, _ = self.main(before, after)
        self.assertEqual(code, 2)
        self.assertIn("configs differ in models; to judge a model switch give --switch", output)

    def test_a_model_missing_from_its_side_is_not_comparable(self):
        before, after = self.pair()
        for switch, missing in [(f"other={self.NEW}", "model other is not in BEFORE's"),
                                (f"{self.OLD}=other", "model other is not in AFTER's"),
                                (f"{self.NEW}={self.OLD}", f"model {self.NEW} is not in BEFORE")]:
            with self.subTest(switch):
                code, output, _ = self.main(before, after, "--switch", switch)
                self.assertEqual(code, 2)
                self.assertTrue(output.startswith("NOT_COMPARABLE: "), output)
                self.assertIn(missing, output)

    def test_switch_still_refuses_any_other_config_difference(self):
        before = make_record(models=("a",))
        after = make_record(models=("b",))
        after["config"]["tool"] = {}
        with self.assertRaisesRegex(ValueError, "configs differ in tool"):
            compare(before, after, [("a", "b")])

    def test_malformed_switch_is_a_usage_error(self):
        path = self.write("run.json", make_record(models=("a", "b")))
        for args in (["--switch", "a"], ["--switch", "=b"], ["--switch", "a="],
                     ["--switch", "a=b", "--switch", "a=b"]):
            with self.subTest(args=args):
                self.assertIn("give OLD=NEW" if len(args) == 2 else "given twice",
                              self.usage_error(path, *args))


# --------------------------------------------------------------------------
# --summary-md and --html: views written after the comparison.
# --------------------------------------------------------------------------


class ViewTest(Files, unittest.TestCase):
    def setUp(self):
        super().setUp()
        self.before = self.write("before.json", make_record(models=("a",), repeats=3))
        self.after = self.write("after.json", make_record(
            models=("b",), repeats=3, failing={("b", "rate-limit", 1): ["wrong_code"]}))

    def test_summary_md_lists_rates_of_a_switch(self):
        summary = self.write("summary.md", "earlier step\n")
        # Actions' step summary: another step's Markdown may come first.
        with mock.patch.dict(os.environ, {"GITHUB_STEP_SUMMARY": summary}):
            code, _, _ = self.main(self.before, self.after, "--switch", "a=b",
                                   "--summary-md", summary)
        self.assertEqual(code, 1)
        text = read_text(summary)
        self.assertTrue(text.startswith("earlier step\n" + reports.SUMMARY_MARK
                                        + "## Comparison: a -> b (synthetic demo)"), text[:200])
        self.assertIn("| NEW_FAILURE | 1 |", text)
        self.assertIn("| NEW_FAILURE | a->b | rate-limit | 3/3 | 2/3: wrong_code | 0.500 |", text)

    def test_summary_md_empty_path_is_refused_before_reading(self):
        path = self.write("run.json", record())
        with mock.patch.object(compare_runs.record, "load") as read:
            errors = self.usage_error(path, path, "--summary-md", "")
        read.assert_not_called()
        self.assertTrue(errors.startswith("compare_runs.py: error: --summary-md : the path is "
                                          "empty"), errors)

    def test_summary_md_naming_a_record_is_refused_and_the_record_untouched(self):
        before, after = self.write("b.json", record()), self.write("a.json", record())
        with open(after, "rb") as handle:
            kept = handle.read()
        for target in (after, self.before):  # a record compared, and one that is not
            with self.subTest(target=target):
                errors = self.usage_error(before, after, "--summary-md", target)
                self.assertIn(f"--summary-md {target}: ", errors)
        with open(after, "rb") as handle:
            self.assertEqual(handle.read(), kept)

    def test_html_naming_an_input_is_refused(self):
        with open(self.after, "rb") as handle:
            kept = handle.read()
        errors = self.usage_error(self.before, self.after, "--switch", "a=b", "--html", self.after)
        self.assertIn("it is one of the records compared", errors)
        with open(self.after, "rb") as handle:
            self.assertEqual(handle.read(), kept)

    def test_a_view_that_cannot_be_written_exits_2_not_1(self):
        summary = self.write("summary.md", "")
        with mock.patch.object(reports, "append", side_effect=OSError(28, "No space left")):
            code, output, errors = self.main(self.before, self.after, "--switch", "a=b",
                                             "--summary-md", summary)
        self.assertEqual(code, 2)
        self.assertIn("NEW_FAILURE", output)
        self.assertEqual(errors, f"compare_runs.py: cannot write --summary-md {summary}: "
                                 "No space left; no verdict\n")

    @unittest.skipUnless(importlib.util.find_spec("evidence_page"), "evidence_page.py not here")
    def test_html_page_of_a_switch(self):
        page = self.path("page.html")
        code, _, errors = self.main(self.before, self.after, "--switch", "a=b", "--html", page)
        self.assertEqual(code, 1, errors)
        text = read_text(page)
        self.assertTrue(text.startswith("<!DOCTYPE html>"))
        self.assertIn("rate-limit", text)
        self.assertIn("NEW_FAILURE", text)


# --------------------------------------------------------------------------
# --demo: a synthetic pair through run_one over the simulated API.
# --------------------------------------------------------------------------


class DemoTest(unittest.TestCase):
    def setUp(self):
        self.folder = os.path.join(temp_dir(self), "pair")
        self.code, output, _ = quiet(compare_runs.demo, self.folder)
        self.lines = output.splitlines()

    def test_demo_writes_a_synthetic_pair_and_finds_the_new_failure(self):
        self.assertEqual(self.code, 1)
        self.assertIn("SYNTHETIC", self.lines[0])
        new = [line for line in self.lines if line.startswith("NEW_FAILURE")]
        self.assertEqual(new, ["NEW_FAILURE offline/model ambiguous-payment 0 before= [] "
                               "after= ['wrong_code', 'wrong_next_action']"])
        after = read_json(os.path.join(self.folder, "after.json"))
        self.assertEqual(after["evidence"], "synthetic")
        self.assertEqual(after["config"]["models"], ["offline/model"])
        self.assertEqual(set(after["config"]), {
            "models", "cases", "instructions", "tool", "response_format", "repeats",
            "max_steps", "max_output_tokens", "timeout_seconds"})

    def test_before_is_older_than_after(self):
        records = [read_json(os.path.join(self.folder, name))
                   for name in ("before.json", "after.json")]
        self.assertLess(records[0]["created_at"], records[1]["created_at"])
        self.assertFalse([line for line in self.lines if "CAUTION" in line])

    @slow("runs the printed command")
    def test_the_printed_command_runs_as_printed(self):
        again = self.lines[0].split("; compare them again with: ")[1]
        result = subprocess.run(shlex.split(again), capture_output=True, text=True,
                                timeout=120, env=clean_env())
        self.assertEqual(result.returncode, 1, result.stderr)
        self.assertEqual(result.stdout.splitlines(), self.lines[1:])

    def test_no_command_is_printed_for_a_folder_it_could_not_run_in(self):
        folder = os.path.join(temp_dir(self), "new\nline")
        code, output, _ = quiet(compare_runs.demo, folder)
        self.assertEqual(code, 1)
        self.assertTrue(output.startswith("SYNTHETIC: "))
        self.assertNotIn("compare them again", output)
        self.assertEqual(len(output.splitlines()), len(self.lines))

    def test_label_words_appear_only_on_labelled_lines(self):
        for line in self.lines:
            words = [w for w in compare_runs.LABELS if w in line]
            with self.subTest(line=line):
                if words:
                    self.assertIn(line.split()[0], compare_runs.LABELS)


# --------------------------------------------------------------------------
# main(): exit codes, refusals and usage, in-process.
# --------------------------------------------------------------------------


class CliTest(Files, unittest.TestCase):
    def test_one_record_given_twice_is_not_comparable(self):
        path = self.write("a.json", record())
        copy_ = self.write("copy.json", read_text(path))
        for pair in ((path, path), (path, copy_)):
            with self.subTest(pair=pair):
                code, output, _ = self.main(*pair)
                self.assertEqual(code, 2)
                self.assertTrue(output.startswith("NOT_COMPARABLE: BEFORE and AFTER are the "
                                                  "same record"), output)

    def test_one_run_saved_twice_is_not_comparable(self):
        original = record()
        table = [("created_at edited", {**original, "created_at": "2026-03-02T12:00:00+00:00"}),
                 ("resumed copy", {**original, "execution": {"resumed": 1}})]
        path = self.write("a.json", original)
        for name, copy_ in table:
            with self.subTest(name):
                code, output, _ = self.main(path, self.write("copy.json", copy_))
                self.assertEqual(code, 2)
                self.assertIn("BEFORE and AFTER hold the same responses (4, e.g. resp_", output)
                self.assertIn("one run saved twice", output)

    def test_a_record_and_its_regrade_compare(self):
        original = record()
        regraded = {**copy.deepcopy(original), "created_at": "2026-03-02T12:00:00+00:00",
                    "regraded_from": {"path": "a.json", "created_at": original["created_at"],
                                      "code_sha256": "a" * 64, "checker_sha256": "b" * 64}}
        code, output, _ = self.main(self.write("a.json", original),
                                    self.write("r.json", regraded))
        self.assertEqual(code, 0, output)

    def test_a_switch_to_the_same_model_is_a_usage_error(self):
        path = self.write("a.json", record())
        self.assertIn(f"'{MODEL}={MODEL}' names one model twice",
                      self.usage_error(path, "--switch", f"{MODEL}={MODEL}"))

    def test_exit_1_for_a_new_failure(self):
        before = self.write("b.json", record())
        after = self.write("a.json", fail(record(), "ambiguous-payment"))
        self.assertEqual(self.main(before, after)[0], 1)

    def test_exit_1_for_the_demo(self):
        self.assertEqual(self.main("--demo", self.path("new"))[0], 1)

    def test_not_comparable_inputs_exit_2(self):
        good = self.write("good.json", record())
        os.mkfifo(self.path("pipe.json"))
        with open(self.path("latin.json"), "wb") as handle:
            handle.write(b'{"config": "\xff\xfe"}')
        table = [
            ("missing file", self.path("nope.json")),
            ("a directory", self.folder),
            ("a FIFO, which must not hang", self.path("pipe.json")),
            ("not JSON", self.write("bad.json", "{nope")),
            ("empty file", self.write("empty.json", "")),
            ("not UTF-8", self.path("latin.json")),
            ("wrong shape", self.write("list.json", [1, 2])),
            ("no runs", self.write("noruns.json", {"config": {}})),
            ("a model name with a newline", self.write("nl.json", fail(record(), "rate-limit")
                                                       | {"runs": [make_row("x\ny", "c", 0)]})),
        ]
        for name, path in table:
            with self.subTest(name):
                code, output, _ = self.main(good, path)
                self.assertEqual(code, 2)
                self.assertTrue(output.startswith("NOT_COMPARABLE: "), output)
                self.assertEqual(len(output.splitlines()), 1)

    def test_a_bad_record_is_named_as_before_after_or_run(self):
        good = self.write("good.json", record())
        bad = self.write("bad.json", record() | {"suite_sha256": "0" * 64})  # its suite cut
        table = [((bad, good), f"NOT_COMPARABLE: BEFORE {bad}: its suite is missing, but its "
                  "cases or suite_sha256 are a suite's: the record was edited"),
                 ((good, bad), f"NOT_COMPARABLE: AFTER {bad}: "),
                 ((bad, "--switch", f"{MODEL}=other"), f"NOT_COMPARABLE: RUN {bad}: "),
                 ((good, self.path("nope.json")), "NOT_COMPARABLE: AFTER: cannot open ")]
        for args, start in table:
            with self.subTest(args=args):
                code, output, _ = self.main(*args)
                self.assertEqual(code, 2)
                self.assertTrue(output.startswith(start), output)

    def test_views_that_cannot_be_written_as_asked_are_usage_errors(self):
        good = self.write("good.json", record())
        later = self.write("later.json", fail(record(), "rate-limit"))
        table = [(("--summary-md", self.path("v.md"), "--html", self.path("v.md")),
                  "--summary-md and --html name the same file"),
                 (("--summary-md", self.path("notes.txt")),
                  f"--summary-md {self.path('notes.txt')}: ")]
        for args, words in table:
            with self.subTest(args=args):
                self.assertIn(words, self.usage_error(good, later, *args))

    def test_help_names_the_history_and_its_records(self):
        with self.assertRaises(SystemExit), contextlib.redirect_stdout(io.StringIO()) as out:
            compare_runs.main(["--help"])
        self.assertIn("--history RECORD [RECORD ...]", out.getvalue())

    def test_demo_folder_that_exists_is_not_comparable(self):
        code, output, _ = self.main("--demo", self.folder)
        self.assertEqual(code, 2)
        self.assertIn("already exists", output)
        self.assertEqual(os.listdir(self.folder), [])

    def test_usage_errors_exit_2(self):
        path = self.write("a.json", record())
        for args in ([], [path], [path, path, "--demo", "x"], ["--demo"],
                     ["--demo", "x", "--switch", "a=b"]):
            with self.subTest(args=args):
                self.usage_error(*args)

    @slow("a new interpreter")
    def test_usage_error_is_one_line_on_stderr(self):
        result = cli("compare_runs.py", self.write("a.json", record()))
        self.assertEqual(result.returncode, 2)
        self.assertEqual(len(result.stderr.splitlines()), 1, result.stderr)
        self.assertTrue(result.stderr.startswith("compare_runs.py: error: "))

    def test_stdout_failing_at_the_last_flush_exits_2(self):
        class Full(io.StringIO):
            def flush(self):
                raise OSError(28, "No space left on device")

        path = self.write("a.json", fail(record(), "rate-limit"))
        errors = io.StringIO()
        with contextlib.redirect_stdout(Full()), contextlib.redirect_stderr(errors):
            code = compare_runs.main([self.write("b.json", record()), path])
        self.assertEqual(code, 2)
        self.assertEqual(errors.getvalue(), "compare_runs.py: cannot write the output "
                                            "(No space left on device); no verdict\n")

    def test_a_closed_stdout_exits_2_with_one_line_on_stderr(self):
        before, after = self.write("b.json", record()), self.write("a.json", record())
        errors = io.StringIO()
        with contextlib.redirect_stdout(None), contextlib.redirect_stderr(errors):
            code = compare_runs.main([before, after])
        self.assertEqual(code, 2)
        self.assertEqual(errors.getvalue(),
                         "compare_runs.py: standard output is closed; no verdict\n")

    def test_a_history_command_line_parses_with_the_history_options(self):
        args, paths, _ = compare_runs.parse_args(["--history", "a.json", "--json", "h.json"])
        self.assertEqual((args.history, args.json, paths), (["a.json"], "h.json", ["a.json"]))

    def test_a_stdout_that_fails_mid_comparison_exits_2_naming_the_reason(self):
        class Full(io.StringIO):
            def write(self, text):
                raise OSError(28, "No space left on device")

        before, after = self.write("b.json", record()), self.write("a.json", record())
        errors = io.StringIO()
        with contextlib.redirect_stdout(Full()), contextlib.redirect_stderr(errors):
            code = compare_runs.main([before, after])
        self.assertEqual(code, 2)
        self.assertEqual(errors.getvalue(), "compare_runs.py: cannot write the output "
                                            "(No space left on device); no verdict\n")

    def test_history_flag_shows_the_history_of_the_records(self):
        path = self.write("a.json", record())
        for args in (["--history", path], [f"--history={path}"]):
            with self.subTest(args=args):
                code, output, errors = self.main(*args)
                self.assertEqual((code, errors), (0, ""))
                self.assertEqual(output.splitlines()[:2],
                                 ["History of 1 record, oldest first:",
                                  f"  1. {path}  {CREATED}  repeats, 1 models, 4 rows: "
                                  "4 passed, 0 failed, 0 no verdict"])

    def test_an_internal_error_exits_2_with_the_traceback_and_one_line(self):
        path = self.write("a.json", record())
        later = self.write("b.json", dict(record(), created_at="2026-03-02T00:00:00+00:00"))
        with mock.patch.object(compare_runs, "comparison", side_effect=RuntimeError("boom")):
            code, output, errors = self.main(path, later)
        self.assertEqual(code, 2)
        self.assertEqual(output, "")
        line = errors.splitlines()[-1]
        self.assertTrue(line.startswith("compare_runs.py: internal error: RuntimeError: boom; "
                                        "no verdict; the traceback is in "), line)
        report = line.split("the traceback is in ")[1].split(": please report it")[0]
        self.assertEqual(os.path.dirname(report), os.path.dirname(path))  # beside the records
        self.assertIn("Traceback", read_text(report))
        self.assertEqual(os.stat(report).st_mode & 0o777, 0o600)


# --------------------------------------------------------------------------
# The real command in a new interpreter: start-up, closed or full stdout.
# --------------------------------------------------------------------------


@slow("the printed command runs in a shell, as printed")
class UnfinishedRecordTest(unittest.TestCase):
    def test_an_unfinished_record_is_refused_with_the_command_that_finishes_it(self):
        from testing import in_process, loopback_env, loopback_server

        server = loopback_server(self)
        env = loopback_env(server)
        folder = temp_dir(self)
        done = os.path.join(folder, "done.json")
        part = os.path.join(folder, "part.json")
        self.assertEqual(in_process("regression.py", "--out", done, env=env).returncode, 0)
        server.state["faults"] = [(401, [], {"error": {"message": "bad key"}})]
        self.assertEqual(in_process("regression.py", "--out", part, env=env).returncode, 2)
        refused = in_process("compare_runs.py", done, part, env=env)
        self.assertEqual(refused.returncode, 2)
        hint = refused.stdout.rsplit("finish it first with: ", 1)[1].strip()
        finished = subprocess.run(hint, shell=True, env=env, capture_output=True, text=True,
                                  timeout=120)  # exactly as printed
        self.assertEqual(finished.returncode, 0, finished.stderr)
        self.assertEqual(in_process("compare_runs.py", done, part, env=env).returncode, 0)


class UnfinishedByBudgetTest(Harness):
    def test_the_finish_command_of_a_record_stopped_by_its_budget_finishes_it(self):
        done, part = self.path("done.json"), self.path("part.json")
        # 8 rows: the budget stops it after 3, so the finish must pay for 5 more.
        self.main("--out", done, out=False)
        self.main("--out", part, "--max-cost", "0.01", out=False)
        code, output, _ = quiet(compare_runs.main, [done, part])
        self.assertEqual(code, 2)
        self.assertIn("--max-cost", output)  # the kept budget alone would send nothing
        args = shlex.split(output.rsplit("finish it first with: ", 1)[1].strip())
        self.assertTrue(os.path.samefile(args[1], regression.__file__), args)
        code, _, errors = quiet(regression.main, args[2:])
        self.assertEqual(code, 0, errors)
        self.assertEqual(quiet(compare_runs.main, [done, part])[0], 0)


class UnfinishableRecordTest(Harness):
    def setUp(self):
        super().setUp()
        # Records of one row: the unfinished one is its refused request alone.
        self.one_row = ("--models", regression.MODELS[0], "--cases",
                        self.write("cases.json", json.dumps(regression.CASES[:1])))

    def test_a_record_whose_request_was_refused_is_not_told_to_resume(self):
        done, part = self.path("done.json"), self.path("part.json")
        self.main("--out", done, *self.one_row, out=False)
        self.state["faults"] = [simulated_api.error(400, "unknown model")]
        self.main("--out", part, *self.one_row, out=False)
        code, output, _ = quiet(compare_runs.main, [done, part])
        self.assertEqual(code, 2)
        self.assertIn("the API refused a request of it", output)
        self.assertNotIn("finish it first with", output)

    def test_a_record_of_another_regression_py_is_not_told_to_resume(self):
        done, part = self.path("done.json"), self.path("part.json")
        self.main("--out", done, *self.one_row, out=False)
        self.state["faults"] = [simulated_api.error(401, "bad key")]
        self.main("--out", part, *self.one_row, out=False)
        saved = read_json(part)
        saved["runner_sha256"] = "0" * 64
        write_text(part, json.dumps(saved))
        code, output, _ = quiet(compare_runs.main, [done, part])
        self.assertEqual(code, 2)
        self.assertIn("--resume refuses it: it was made by another version of the runner",
                      output)
        self.assertNotIn("finish it first with", output)


@slow("new interpreters")
class ProcessTest(Files, unittest.TestCase):
    def setUp(self):
        super().setUp()
        self.before = self.write("before.json", make_record(repeats=3))
        self.after = self.write("after.json", fail(make_record(repeats=3), "rate-limit"))

    def assert_no_verdict(self, open_stdout, *prefix):
        """Exit 2 and one line on stderr, whether stdout is buffered (a print fails at
        the last flush) or not (the first print fails)."""
        for buffered in (True, False):
            env = {k: v for k, v in clean_env().items() if k != "PYTHONUNBUFFERED"}
            with self.subTest(buffered=buffered), open_stdout() as stdout:
                result = subprocess.run(
                    [*prefix, sys.executable, "-W", "error", SCRIPT, self.before, self.after],
                    stdout=stdout, stderr=subprocess.PIPE, text=True, timeout=120,
                    env=env if buffered else {**env, "PYTHONUNBUFFERED": "1"})
                self.assertEqual(result.returncode, 2, result.stderr)
                self.assertNotIn("Traceback", result.stderr)
                self.assertNotIn("Exception ignored", result.stderr)
                self.assertEqual(len(result.stderr.splitlines()), 1, result.stderr)

    def test_a_pipe_closed_by_the_reader_exits_2(self):
        @contextlib.contextmanager
        def closed_pipe():
            read_end, write_end = os.pipe()
            os.close(read_end)  # the reader is gone before the first line, as `| head -0`
            try:
                yield write_end
            finally:
                os.close(write_end)

        self.assert_no_verdict(closed_pipe)

    @unittest.skipUnless(os.path.exists("/dev/full"), "needs /dev/full")
    def test_a_full_disk_on_stdout_exits_2(self):
        self.assert_no_verdict(lambda: open("/dev/full", "w", encoding="utf-8"))

    def test_a_closed_stdout_exits_2(self):
        self.assert_no_verdict(contextlib.nullcontext, "sh", "-c", 'exec "$@" >&-', "sh")

    def test_comparing_files_imports_neither_the_sdk_nor_the_runner(self):
        script = ("import sys; sys.path.insert(0, sys.argv[1]); import compare_runs, io, "
                  "contextlib\nwith contextlib.redirect_stdout(io.StringIO()):\n"
                  "    code = compare_runs.main(sys.argv[2:])\n"
                  "print(code, sorted(m for m in ('perplexity', 'httpx', 'regression') "
                  "if m in sys.modules))")
        views = (("--html", self.path("c.html"), "--summary-md", self.path("c.md")),)
        for extra in ((), *views):  # the page judges citations with the checker alone
            with self.subTest(extra=extra):
                result = subprocess.run([sys.executable, "-W", "error", "-c", script, HERE,
                                         self.before, self.after, *extra], capture_output=True,
                                        text=True, timeout=120, env=clean_env())
                self.assertEqual(result.stdout, "1 []\n", result.stderr)

    def test_an_old_python_gets_one_line_and_exit_2(self):
        script = ("import runpy, sys; sys.version_info = (3, 10, 4, 'final', 0); "
                  f"runpy.run_path({SCRIPT!r}, run_name='__main__')")
        result = subprocess.run([sys.executable, "-c", script], capture_output=True,
                                text=True, timeout=120, env=clean_env())
        self.assertEqual(result.returncode, 2)
        self.assertEqual(result.stderr,
                         "compare_runs.py: error: needs Python 3.11 or later; this is 3.10\n")


# --------------------------------------------------------------------------
# Hostile files: a seeded fuzz of 300 mutated records.
# --------------------------------------------------------------------------


@slow("300 whole comparisons of mutated files")
class CompareFuzzTest(unittest.TestCase):
    """compare_runs.py answers every hostile file with exit 0, 1 or 2, never a crash."""

    def setUp(self):
        self.folder = temp_dir(self)
        self.good = make_record()
        self.good_path = self.write("good.json", json.dumps(self.good))
        self.later = make_record()  # another run of the same config: the files mutated

    def write(self, name, text):
        path = os.path.join(self.folder, name)
        # surrogatepass: a lone surrogate becomes bytes that are not UTF-8.
        with open(path, "w", encoding="utf-8", errors="surrogatepass") as handle:
            handle.write(text)
        return path

    def compare(self, text):
        path = self.write("fuzz.json", text)
        code, output, _ = quiet(compare_runs.main, [self.good_path, path])
        return code, output

    def test_known_holes(self):
        deep = '{"config": {}, "runs": ' + "[" * 100_000 + "]" * 100_000 + "}"
        huge = json.loads(json.dumps(self.good))
        huge["config"]["repeats"] = 1_000_000_000
        string_models = json.loads(json.dumps(self.good))
        string_models["config"]["models"] = MODEL
        big_int = json.dumps(self.good).replace('"repeats": 1', '"repeats": 1' + "0" * 5000)
        nan = json.dumps(self.good).replace('"repeats": 1', '"repeats": NaN')
        for name, text in [("deep nesting", deep), ("billion repeats", json.dumps(huge)),
                           ("models a string", json.dumps(string_models)),
                           ("5000-digit repeats", big_int), ("NaN repeats", nan)]:
            with self.subTest(name):
                code, output = self.compare(text)
                self.assertEqual(code, 2)
                self.assertTrue(output.startswith("NOT_COMPARABLE: "), output[:200])

    def test_300_seeded_mutations(self):
        rng = random.Random(20261130)
        junk = [None, 0, -1, 1.5, 10 ** 9, "", "x", [], {}, True, [None], {"a": 1}]
        valid = {  # values each row field may hold in a valid record
            "seconds": [None, 0, 1.5, 10 ** 9],
            "extra": junk,
        }
        edits = {  # evidence a verdict follows from: an edit is refused, never trusted
            "answer_text": [None, "", "x", "\x1b[2J\nNEW_FAILURE fake"],
            "response": [None, {}, {"a": 1}],
            "cost_usd": [None, "0", "0.5"],
        }

        def breaking(record):
            """Mutations that make a record malformed: each must be NOT_COMPARABLE."""
            config, runs = record["config"], record["runs"]
            row = rng.choice(runs)
            choice = rng.randrange(13)
            if choice == 0:
                config["models"] = rng.choice([j for j in junk if j != [MODEL]])
            elif choice == 1:
                config["repeats"] = rng.choice([0, -1, 11, 1.0, True, "1", None, 10 ** 12])
            elif choice == 2:
                runs.remove(row)
            elif choice == 3:
                runs.append(dict(row))
            elif choice == 4:
                row["passed"] = rng.choice([None, 0, 1, "true", not row["passed"]])
            elif choice == 5:
                row["reasons"] = rng.choice([None, "wrong_code", [1], {}, [None]])
            elif choice == 6:
                row["error"] = rng.choice(["APIStatusError", 1, True, ["wrong_code"]])
            elif choice == 7:
                # Repeats are numbered from 0: 0 is a row's own repeat, not junk.
                row[rng.choice(["model", "case_id", "repeat"])] = rng.choice(
                    [value for value in junk + [2] if value != 0])
            elif choice == 8:
                config["cases"] = rng.choice([None, [], "x", [1], config["cases"] * 2])
            elif choice == 9:
                del record[rng.choice(["config", "runs"])]
            elif choice == 10:
                record["runs"] = rng.choice(junk[:3] + ["x", {}])
            elif choice == 11:
                field = rng.choice(sorted(edits))
                row[field] = rng.choice(edits[field])
            else:
                return rng.choice(["[]", "null", '"x"', "7"])
            return json.dumps(record)

        def harmless(record):
            """Mutations that keep a record valid: a verdict, 0 or 1, never 2 or a crash."""
            row = rng.choice(record["runs"])
            field = rng.choice(sorted(valid))
            row[field] = rng.choice(valid[field])
            if rng.random() < 0.3:
                record["sdk_version"] = rng.choice(junk)
            if rng.random() < 0.3:
                record["config"]["instructions"] = rng.choice(junk)
            return json.dumps(record)

        def truncated(record):
            text = json.dumps(record)
            return text[: rng.randrange(1, len(text) - 2)]

        outcomes = {0: 0, 1: 0, 2: 0}
        for number in range(300):
            record = json.loads(json.dumps(self.later))
            kind = rng.choice([breaking, breaking, harmless, truncated])
            text = kind(record)
            if rng.random() < 0.1:  # a few stray bytes anywhere
                spot = rng.randrange(len(text))
                text = text[:spot] + rng.choice(["\x00", "}", "\ud800", "é", "[[["]) + text[spot:]
                kind = None if kind is harmless else kind
            with self.subTest(number=number, kind=getattr(kind, "__name__", "bytes")):
                code, output = self.compare(text)
                self.assertIn(code, (0, 1, 2))
                outcomes[code] += 1
                if kind in (breaking, truncated):
                    self.assertEqual(code, 2, output[:300])
                    self.assertTrue(output.startswith("NOT_COMPARABLE: "))
                if kind is harmless:
                    self.assertIn(code, (0, 1), output[:300])
                    self.assertFalse([line for line in output.splitlines()
                                      if "fake" in line or "\x1b" in line])
        self.assertGreater(outcomes[2], 150)
        self.assertGreater(outcomes[0] + outcomes[1], 40)


if __name__ == "__main__":
    unittest.main()
