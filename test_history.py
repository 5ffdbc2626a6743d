"""history.py: the history of many records, per (model, case) and per model.

Records are made by regression.main in-process over the simulated API (the
real SDK over httpx.MockTransport), one after another, so each has its own
created_at; history.main reads them in a pool of processes. Offline.
"""

import contextlib
import io
import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
import types
import unittest
from unittest import mock

from perplexity import Perplexity

import checker
import history
import regression
import reports
from testing import HERE, Harness, quiet, read_json, read_text, slow, temp_dir, write_text

CAREFUL, HASTY = "offline/careful", "offline/hasty"
PAYMENT = next(case for case in checker.CASES if case["action"] == "verify_outcome")
DOC = os.path.join(HERE, "docs", "history.md")
BIN = os.path.dirname(os.path.abspath(sys.executable))  # the venv's tools, not installed
ZIZMOR = shutil.which("zizmor") or shutil.which("zizmor", path=BIN)
SCHEMA_CHECK = shutil.which("check-jsonschema") or shutil.which("check-jsonschema", path=BIN)
PAIR_FIELDS = {"model", "case", "passed", "runs", "sequence", "first_failed", "label",
               "lower_bound"}
MODEL_FIELDS = {"model", "latency_p50", "latency_p95", "cost_per_request", "tokens_per_request"}


def pair(view, model, case="ambiguous-payment"):
    """The JSON view's entry of one (model, case)."""
    return next(p for p in view["pairs"] if (p["model"], p["case"]) == (model, case))


def request_body(request):
    """The JSON body of a POST the SDK sends, or {} for a GET."""
    return json.loads(request.content) if request.method == "POST" and request.content else {}


class HistoryTest(Harness):
    """Histories of records made one after another by regression.main."""

    def setUp(self):
        super().setUp()
        self.records = os.path.join(self.folder, "records")
        os.makedirs(self.records)
        self.made = 0
        # The pairs these tests read: a case every model passes, and the payment
        # case the unsafe model fails (half the requests of all four cases).
        self.cases = write_text(self.path("cases.json"),
                                json.dumps([checker.CASES[0], PAYMENT]))
        # The payment case alone: for a test that reads only its pairs.
        self.payment = write_text(self.path("payment.json"), json.dumps([PAYMENT]))

    def record(self, *args, unsafe=(), name=None, models=(CAREFUL, HASTY), cases=None):
        """A new record in self.records of cases, self.cases unless given (or
        args give --cases); unsafe: models that give the wrong payment advice
        this time."""
        self.state["unsafe_models"] = set(unsafe)
        self.made += 1
        path = os.path.join(self.records, name or f"r{self.made}.json")
        cases = () if "--cases" in args else ("--cases", cases or self.cases)
        code, _, errors = self.main("--out", path, "--models", *models, *cases, *args,
                                    out=False)
        self.assertIn(code, (0, 1, 2), errors)
        self.assertTrue(os.path.exists(path), errors)
        return path

    def history(self, *paths, views=()):
        """(exit code, stdout, stderr, the JSON view or None)."""
        out = self.path(f"history-{time.monotonic_ns()}.json")
        code, output, errors = quiet(history.main, ["--history", *(paths or [self.records]),
                                                    "--json", out, *views])
        return code, output, errors, read_json(out) if os.path.exists(out) else None


class PairHistoryTest(HistoryTest):
    def test_a_pair_that_passed_and_failed_is_flaky(self):
        first, second, third = (self.record(cases=self.payment),
                                self.record(unsafe=[HASTY], cases=self.payment),
                                self.record(cases=self.payment))
        code, _, _, view = self.history()
        self.assertEqual(code, 0)
        hasty = pair(view, HASTY)
        self.assertEqual((hasty["sequence"], hasty["label"], hasty["passed"], hasty["runs"]),
                         ("PFP", "FLAKY", 2, 3))
        self.assertEqual(hasty["first_failed"]["path"], second)
        self.assertEqual(hasty["longest_passing_streak"], 1)
        self.assertEqual((pair(view, CAREFUL)["sequence"], pair(view, CAREFUL)["label"]),
                         ("PPP", "STABLE"))
        self.assertEqual([entry["path"] for entry in view["records"]], [first, second, third])

    def test_a_pair_failing_in_every_record_from_one_on_is_broken_since_it(self):
        table = [((), (HASTY,), (HASTY,)), ((HASTY,), (HASTY,)), ((HASTY,), (), (HASTY,))]
        for runs in table:
            with self.subTest(runs=runs):
                shutil.rmtree(self.records)
                os.makedirs(self.records)
                # the one pair read: the hasty model on the payment case
                paths = [self.record(unsafe=unsafe, models=(HASTY,), cases=self.payment)
                         for unsafe in runs]
                since = next(n for n in range(len(runs)) if all(runs[n:]))
                hasty = pair(self.history()[3], HASTY)
                self.assertEqual(hasty["label"], f"BROKEN SINCE {paths[since]}")
                self.assertEqual(hasty["broken_since"]["path"], paths[since])

    def test_an_execution_error_row_shows_E_and_counts_no_run(self):
        self.state["faults"] = [(400, [], {"error": {"message": "bad request"}})]
        rate_limit = write_text(self.path("rate-limit.json"), json.dumps(checker.CASES[:1]))
        self.record(models=(CAREFUL,), cases=rate_limit)  # its one request is refused: no verdict
        self.record(models=(CAREFUL,), cases=rate_limit)
        careful = pair(self.history()[3], CAREFUL, "rate-limit")
        self.assertEqual((careful["sequence"], careful["passed"], careful["runs"],
                          careful["no_verdict"], careful["label"]), ("EP", 1, 1, 1, "STABLE"))

    def test_repeats_of_one_record_that_disagree_show_M(self):
        asked = []

        def first_payment_unsafe(request):
            body = request_body(request)
            if body.get("model") == HASTY and body.get("input") == PAYMENT["question"]:
                asked.append(body)
                self.state["unsafe_models"] = {HASTY} if len(asked) == 1 else set()

        self.before_request = first_payment_unsafe
        self.record("--repeats", "2", models=(HASTY,), cases=self.payment)
        self.before_request = None
        hasty = pair(self.history()[3], HASTY)
        self.assertEqual((hasty["sequence"], hasty["label"], hasty["passed"], hasty["runs"]),
                         ("M", "FLAKY", 1, 2))

    def test_labels_from_outcomes_in_time_order(self):
        table = [
            (["pass", "pass"], ("STABLE", None)),
            (["pass", None, "pass"], ("STABLE", None)),  # no verdict neither adds nor breaks
            (["fail"], ("BROKEN SINCE", 0)),
            (["pass", "fail", None, "fail"], ("BROKEN SINCE", 1)),
            (["fail", "pass"], ("FLAKY", None)),
            (["pass", "mixed"], ("FLAKY", None)),
            (["mixed", "fail"], ("BROKEN SINCE", 1)),
            ([None, None], ("NO VERDICT", None)),
        ]
        for outcomes, expected in table:
            with self.subTest(outcomes=outcomes):
                self.assertEqual(history.label_of(outcomes), expected)

    def test_the_longest_passing_streak_counts_records(self):
        for outcomes, streak in ((["pass", "pass", "fail", "pass"], 2), ([None, "fail"], 0),
                                 (["pass", None, "pass", "mixed", "pass"], 2)):
            with self.subTest(outcomes=outcomes):
                self.assertEqual(history.longest_streak(outcomes), streak)


class BoundTest(HistoryTest):
    def test_the_pooled_bound_is_exact_and_rounded_down_to_6_decimals(self):
        self.record(models=(CAREFUL,), cases=self.payment)
        self.record(models=(CAREFUL,), cases=self.payment)
        code, _, _, view = self.history()
        self.assertEqual(code, 0)
        careful = pair(view, CAREFUL)
        exact = checker.lower_bound(2, 2, 0.95)  # sqrt(0.05) = 0.2236067977...
        self.assertEqual(careful["lower_bound"], 0.223606)  # rounded half up it says ...607
        self.assertLessEqual(careful["lower_bound"], exact)
        self.assertEqual(careful["lower_bound"], math.floor(exact * 1e6) / 1e6)

    def test_the_bound_is_stated_at_the_lowest_confidence_of_the_records(self):
        self.record(models=(CAREFUL,), cases=self.payment)
        self.record("--confidence", "0.9", models=(CAREFUL,), cases=self.payment)
        careful = pair(self.history()[3], CAREFUL)
        self.assertEqual((careful["lower_bound"], careful["confidence"]), (0.316227, 0.9))

    def test_a_proof_shows_Q_or_N_and_is_left_out_of_the_bound(self):
        self.record(cases=self.payment)
        proof = self.record("--prove", "0.5", unsafe=[HASTY],  # 5 passes in a row prove 0.5
                            cases=self.payment)
        view = self.history()[3]
        careful, hasty = pair(view, CAREFUL), pair(view, HASTY)
        self.assertEqual((careful["sequence"], careful["passed"], careful["runs"]), ("PQ", 6, 6))
        self.assertEqual(careful["lower_bound"], 0.05)  # 1 of 1 fixed repeat: proofs not pooled
        self.assertEqual((hasty["sequence"], hasty["label"]), ("PN", f"BROKEN SINCE {proof}"))
        self.assertEqual(view["records"][1]["kind"], "proof")


class ModelsTest(HistoryTest):
    def test_a_slower_model_has_the_higher_latency(self):
        slow_model, quick_model = "offline/slow", "offline/quick"
        # The runner's clock jumps 0.1 s during each slow request: its latency
        # with no real-time wait. One request at a time, so no quick request
        # is in flight across a jump.
        ahead = [0.0]

        def clock():
            return time.monotonic() + ahead[0]

        def delay(request):
            if request_body(request).get("model") == slow_model:
                ahead[0] += 0.1

        self.before_request = delay
        with mock.patch.object(regression, "time", types.SimpleNamespace(monotonic=clock)):
            # Two cases: two rows a model, so a per-request mean is not its total.
            self.record("--jobs", "1", models=(quick_model, slow_model))
        models = {entry["model"]: entry for entry in self.history()[3]["models"]}
        self.assertGreaterEqual(models[slow_model]["latency_p50"], 0.1)
        self.assertGreater(models[slow_model]["latency_p50"], models[quick_model]["latency_p50"])
        self.assertEqual(models[slow_model]["tokens_per_request"], 960)  # the simulated usage
        self.assertEqual(models[slow_model]["cost_per_request"], "0.0042")

    def test_latency_comes_only_from_rows_answered_directly(self):
        plain = {"seconds": 2.5, "waited_seconds": 1.0, "error": None}
        table = [
            (plain, 1.5),  # the wait for a 429 is not the model's time
            ({**plain, "waited_seconds": None}, 2.5),
            ({**plain, "recovered": "fetched by its id resp_1 after an interruption"}, None),
            ({**plain, "batch": {"id": "batch_1"}}, None),
            ({**plain, "error": "APIConnectionError"}, None),
            ({**plain, "seconds": None}, None),
        ]
        for row, latency in table:
            with self.subTest(row=row):
                self.assertEqual(history.direct_latency(row), latency)


class WhichRecordsCountTest(HistoryTest):
    def test_a_regrade_counts_at_its_sources_time_and_replaces_it(self):
        source = self.record(unsafe=[HASTY], models=(HASTY,), cases=self.payment)
        later = self.record(models=(HASTY,), cases=self.payment)
        regraded = os.path.join(self.records, "regraded.json")
        code, _, errors = self.main("--regrade", source, "--out", regraded, out=False)
        self.assertEqual(code, 1, errors)
        code, _, errors, view = self.history()
        self.assertEqual([entry["path"] for entry in view["records"]], [regraded, later])
        self.assertEqual(view["records"][0]["regrade_of"], source)
        self.assertEqual(view["records"][0]["counted_at"],
                         read_json(source)["created_at"])
        self.assertEqual(pair(view, HASTY)["sequence"], "FP")  # not PF: placed at its source
        self.assertIn(f"{source}: replaced by its regrade {regraded}", errors)

    def test_a_response_in_two_records_is_counted_once(self):
        first = self.record()
        shutil.copyfile(first, os.path.join(self.records, "copy.json"))
        code, _, errors, view = self.history()
        self.assertEqual(code, 0)
        self.assertEqual(len(view["records"]), 1)
        self.assertEqual((pair(view, CAREFUL)["passed"], pair(view, CAREFUL)["runs"]), (1, 1))
        self.assertRegex(errors, r"not counted: every one of its 4 responses was counted "
                                 r"already")

    def test_a_record_sharing_some_responses_is_counted_without_them(self):
        first = self.record(models=(CAREFUL,))  # two rows: one shared, one not
        second = self.record(models=(CAREFUL,))
        data = read_json(second)
        data["runs"][0]["response"]["id"] = read_json(first)["runs"][0]["response"]["id"]
        write_text(second, json.dumps(data))  # an id is no part of a verdict: still valid
        view = self.history()[3]
        self.assertEqual(view["records"][1]["counted_already"], 1)
        key = (data["runs"][0]["model"], data["runs"][0]["case_id"])
        shared = pair(view, *key)
        self.assertEqual((shared["sequence"], shared["runs"]), ("P-", 1))

    def test_a_synthetic_record_is_refused_among_live_ones(self):
        live = self.record(models=(CAREFUL,), cases=self.payment)
        demo = os.path.join(self.folder, "demo")
        with mock.patch.object(self.regression, "Perplexity", Perplexity):  # the demo's own
            self.assertEqual(quiet(self.regression.main, ["--demo", demo])[0], 1)
        code, _, errors, view = self.history(self.records, demo)
        self.assertEqual(code, 0)
        self.assertEqual([entry["path"] for entry in view["records"]], [live])
        synthetic = os.path.join(demo, "results.json")
        self.assertIn(f"{synthetic}: refused: its evidence is synthetic", errors)

    def test_only_synthetic_records_are_accepted_and_the_scale_generator_makes_them(self):
        paths = history.scale_records(self.records, records=3, models=2, repeats=1)
        code, output, errors, view = self.history()
        self.assertEqual((code, errors), (0, ""))
        self.assertEqual([entry["path"] for entry in view["records"]], paths)
        self.assertEqual(pair(view, "offline/scale-00")["label"], f"BROKEN SINCE {paths[1]}")
        self.assertEqual(pair(view, "offline/scale-01")["sequence"], "PFP")
        self.assertIn("8 pairs over 3 records: 1 broken, 1 flaky, 6 stable", output)

    def test_a_record_of_another_suite_is_refused_naming_both(self):
        cases = write_text(self.path("two.json"), json.dumps(checker.CASES[:2]))
        other = self.record("--cases", cases, models=(CAREFUL,))
        newest = self.record(models=(CAREFUL,))
        code, _, errors, view = self.history()
        self.assertEqual(code, 0)
        self.assertEqual([entry["path"] for entry in view["records"]], [newest])
        [line] = [line for line in errors.splitlines() if other in line]
        self.assertIn(f"differs from the newest record {newest}", line)
        self.assertIn("suites are never mixed", line)

    def test_a_record_made_before_suites_is_of_the_built_in_suite(self):
        old = self.record(models=(CAREFUL,))
        data = read_json(old)
        for field in ("suite", "suite_sha256"):  # what a record of the published design lacks
            data.pop(field, None)
        write_text(old, json.dumps(data))
        new = self.record(models=(CAREFUL,))
        code, _, errors, view = self.history()
        self.assertEqual((code, errors), (0, ""))
        self.assertEqual([entry["path"] for entry in view["records"]], [old, new])

    def test_a_record_whose_created_at_is_not_a_time_is_refused(self):
        good, odd = (self.record(models=(CAREFUL,), cases=self.payment),
                     self.record(models=(CAREFUL,), cases=self.payment))
        data = read_json(odd)
        data["created_at"] = "yesterday"
        write_text(odd, json.dumps(data))
        _, _, errors, view = self.history()
        self.assertEqual([entry["path"] for entry in view["records"]], [good])
        self.assertIn(f"{odd}: refused: its created_at yesterday is not a time", errors)

    def test_an_unreadable_file_is_skipped_with_a_one_line_note(self):
        good = self.record(models=(CAREFUL,), cases=self.payment)
        bad = write_text(os.path.join(self.records, "bad.json"), "{not json")
        write_text(os.path.join(self.records, ".hidden.json"), "{not json")  # never read
        code, _, errors, view = self.history()
        self.assertEqual(code, 0)
        self.assertEqual([entry["path"] for entry in view["records"]], [good])
        self.assertEqual([line for line in errors.splitlines() if "bad.json" in line],
                         [f"history.py: note: {bad}: skipped: {bad} is not valid JSON "
                          "(Expecting property name enclosed in double quotes: line 1 "
                          "column 2 (char 1))"])
        self.assertNotIn(".hidden", errors)

    def test_through_compare_runs_every_line_names_compare_runs(self):
        import compare_runs

        missing = self.path("missing.json")
        code, _, errors = quiet(compare_runs.main, ["--history", missing])
        self.assertEqual(code, 2)
        self.assertEqual(errors.splitlines(), [
            f"compare_runs.py: note: {missing}: skipped: cannot open {missing}: No such file "
            "or directory",
            "compare_runs.py: error: no record could be read of the 1 files given; the notes "
            "above say why"])
        for args, words in ((["--histroy", missing], "(did you mean --history?)"),
                            (["--hist", missing], "write --history in full")):
            with self.subTest(args=args), self.assertRaises(SystemExit), \
                    contextlib.redirect_stderr(io.StringIO()) as usage:
                compare_runs.main(args)
            self.assertIn(words, usage.getvalue())

    def test_only_our_own_history_json_is_replaced(self):
        ours = self.path("ours.json")
        record_path = self.record(models=(CAREFUL,), cases=self.payment)
        self.assertEqual(self.history(views=("--json", ours))[0], 0)  # a history JSON of ours
        table = [(ours, None),
                 (record_path, "it exists and is not a history JSON written by this tool"),
                 (self.folder, "it is not a regular file; name a file"),
                 (self.path("none/x.json"), "does not exist; create it")]
        for path, problem in table:
            with self.subTest(path=path):
                found = history.output_problem(path, "json", [])
                if problem is None:
                    self.assertIsNone(found)
                else:
                    self.assertIn(problem, found)
        with mock.patch.object(reports, "file_start",
                               side_effect=PermissionError(13, "Permission denied")):
            self.assertEqual(history.json_problem(ours), "Permission denied")
        code, _, errors = quiet(history.main, ["--history", record_path, "--json", record_path])
        self.assertEqual(code, 2)
        self.assertIn("it is one of the records read", errors)

    def test_names_sort_with_their_numbers_as_numbers(self):
        self.assertEqual(sorted(["case-10", "case-2", "b", "case-1a", "A"], key=history.natural),
                         ["A", "b", "case-1a", "case-2", "case-10"])

    def test_a_long_or_many_line_value_is_shown_on_one_cut_line(self):
        self.assertEqual(history.shown("a\nb"), "a\\nb")
        self.assertEqual(history.shown("x" * 12, limit=10), "x" * 10 + "...")
        self.assertEqual(history.shown("x" * 10, limit=10), "x" * 10)

    def test_exit_2_when_no_record_can_be_read(self):
        table = [("not JSON", "{"), ("no runs", json.dumps({"config": {}})),
                 ("a list", "[]")]
        for what, text in table:
            with self.subTest(what):
                path = write_text(self.path("only.json"), text)
                code, output, errors, view = self.history(path)
                self.assertEqual((code, output, view), (2, "", None))
                self.assertIn("history.py: error: no record could be read", errors)
        code, _, errors, _ = self.history(self.records)  # a folder with no record at all
        self.assertEqual(code, 2)
        self.assertIn("no record found in", errors)


class ViewsTest(HistoryTest):
    def test_the_json_view_has_every_field_and_our_mark_first(self):
        self.record(cases=self.payment)
        self.record(unsafe=[HASTY], cases=self.payment)
        out = self.path("h.json")
        self.assertEqual(quiet(history.main, ["--history", self.records, "--json", out])[0], 0)
        self.assertTrue(read_text(out).startswith(history.JSON_START))
        view = read_json(out)
        self.assertLessEqual({"pairs", "models", "records"}, set(view))
        for entry in view["pairs"]:
            self.assertLessEqual(PAIR_FIELDS, set(entry))
            self.assertTrue(0 <= entry["lower_bound"] <= 1)
        for entry in view["models"]:
            self.assertLessEqual(MODEL_FIELDS, set(entry))
        self.assertEqual(pair(view, HASTY)["first_failed"],
                         {"path": view["records"][1]["path"],
                          "created_at": view["records"][1]["counted_at"]})
        # replacing our own JSON is fine; a second run writes it again
        self.assertEqual(quiet(history.main, ["--history", self.records, "--json", out])[0], 0)

    def test_its_own_json_beside_the_records_is_neither_read_nor_refused(self):
        self.record(models=(CAREFUL,), cases=self.payment)
        out = os.path.join(self.records, "history.json")
        for _ in range(2):  # the second run meets the first one's view among the records
            code, _, errors = quiet(history.main, ["--history", self.records, "--json", out])
            self.assertEqual((code, errors), (0, ""))
        self.assertEqual(len(read_json(out)["records"]), 1)

    def test_the_terminal_table_fits_its_widest_pair_and_cuts_no_case_id(self):
        long_id = "a-case-id-that-is-long-" + "x" * 41  # 64 characters, the most allowed
        cases = [dict(case) for case in checker.CASES]
        cases[0]["id"] = long_id  # the simulated API knows a case by its question
        self.record("--cases", write_text(self.path("c.json"), json.dumps(cases)))
        _, output, _, _ = self.history()
        lines = output.splitlines()
        header = next(n for n, line in enumerate(lines) if line.startswith("pair "))
        column = lines[header].index("runs")
        self.assertEqual(column, len(f"{CAREFUL} {long_id}  "))  # the widest, whole
        for line in lines[header + 1:header + 9]:
            with self.subTest(line=line):
                self.assertEqual((line[column - 2:column], line[column]), ("  ", "P"))
        self.assertIn(f"{HASTY} {long_id} ", output)

    def test_markdown_lists_pairs_not_stable_first_then_counts_the_stable(self):
        self.record()
        self.record(unsafe=[HASTY])
        md = self.path("comment.md")
        code, *_ = self.history(views=("--summary-md", md))
        self.assertEqual(code, 0)
        text = read_text(md)
        self.assertTrue(text.startswith(reports.SUMMARY_MARK))
        self.assertIn(f"| BROKEN SINCE {self.records}/r2.json | {HASTY} | ambiguous-payment | PF |",
                      text.replace("\\", ""))
        self.assertIn("3 stable pairs", text)
        self.assertNotIn(f"| {CAREFUL} |", text.split("stable pairs")[0])

    def test_markdown_of_a_huge_history_stays_within_65535_characters(self):
        pairs = [{"model": f"provider/{'m' * 150}-{number}", "case": f"case-{number}",
                  "passed": 50, "runs": 100, "sequence": "PF" * 50, "first_failed":
                  {"path": "records/" + "r" * 100 + ".json", "created_at": "2026"},
                  "label": "FLAKY", "state": "FLAKY", "lower_bound": 0.4, "confidence": 0.95,
                  "bound_runs": 100, "bound_passed": 50, "longest_passing_streak": 1,
                  "no_verdict": 0, "broken_since": None} for number in range(600)]
        models = [{"model": entry["model"], "passed": 1, "runs": 2, "latency_p50": 1.0,
                   "latency_p95": 2.0, "tokens_per_request": 960.0, "cost_per_request": "0.0042"}
                  for entry in pairs]
        view = {"records": [{}] * 100, "pairs": pairs, "models": models, "notes": []}
        text = history.markdown(view)
        self.assertLessEqual(len(text), history.MARKDOWN_LIMIT)
        shown = text.count("| FLAKY |")
        more = int(re.search(r"\.\.\. and ([0-9,]+) more pairs", text).group(1).replace(",", ""))
        self.assertEqual(shown + more, 600)  # 600 rows hold over twice the limit
        self.assertGreater(shown, 10)
        self.assertRegex(text, r"\.\.\. and [0-9,]+ more models")

    def test_the_html_page_escapes_a_hostile_model_name_and_path(self):
        hostile = '<img src=x onerror="alert(1)">'
        path = self.record(models=(hostile,), name="<b onmouseover=alert(2)>.json",
                           cases=self.payment)
        page_path = self.path("history.html")
        code, *_ = self.history(path, views=("--html", page_path))
        self.assertEqual(code, 0)
        page = read_text(page_path)
        self.assertTrue(page.startswith(reports.HTML_START))
        self.assertIn("Content-Security-Policy", page)
        self.assertIn("&lt;img src=x onerror=&quot;alert(1)&quot;&gt;", page)
        self.assertIn("&lt;b onmouseover=alert(2)&gt;.json", page)
        self.assertNotIn("<img", page)
        self.assertNotIn("<b ", page)
        self.assertNotRegex(page, r"<script|<[a-z]+[^>]*\s(src|href)=")  # nothing runs or loads
        self.assertEqual(page.count("<svg"), 2)  # pass rate per record, latency per model

    def test_a_view_is_never_written_over_an_input_or_a_file_not_ours(self):
        path = self.record(models=(CAREFUL,), cases=self.payment)
        before = read_text(path)
        other = write_text(self.path("notes.html"), "<p>mine</p>")
        table = [("--json", path), ("--html", path), ("--html", other),
                 ("--json", write_text(self.path("data.json"), "{}")),
                 ("--summary-md", self.path("summary.txt"))]
        for flag, target in table:
            with self.subTest(flag=flag, target=target):
                code, output, errors = quiet(history.main, ["--history", path, flag, target])
                self.assertEqual((code, output), (2, ""))
                self.assertEqual(len(errors.splitlines()), 1, errors)
        self.assertEqual(read_text(path), before)
        self.assertEqual(read_text(other), "<p>mine</p>")


class PureViewTest(unittest.TestCase):
    """Functions of history.py on hand-made data: tokens, the model table, the chart."""

    def test_tokens_come_from_usage_total_or_its_parts_zero_included(self):
        table = [
            ({"total_tokens": 0}, 0),  # zero is a count, not an unknown
            ({"total_tokens": 960, "input_tokens": 1, "output_tokens": 1}, 960),
            ({"input_tokens": 0, "output_tokens": 0}, 0),
            ({"input_tokens": 700, "output_tokens": 260}, 960),
            ({"total_tokens": -1, "input_tokens": 700}, None),
            ({"total_tokens": True}, None),
        ]
        for usage, tokens in table:
            with self.subTest(usage=usage):
                self.assertEqual(history.usage_tokens({"usage": usage}), tokens)

    def test_a_model_with_no_reported_cost_reads_unknown_in_the_terminal_table(self):
        model = {"model": "offline/m", "passed": 1, "runs": 2, "latency_p50": None,
                 "latency_p95": None, "tokens_per_request": None, "cost_per_request": None}
        lines = history.terminal_lines({"records": [], "pairs": [], "models": [model],
                                        "notes": []})
        header = lines.index("model      passed  p50 s  p95 s  tokens/request  cost/request")
        self.assertEqual(lines[header + 1],
                         "offline/m  1/2     -      -      -               unknown")

    def test_the_rate_chart_draws_no_bar_for_a_record_without_a_verdict(self):
        chart = history.rate_chart([
            {"number": 1, "path": "r1.json", "passed": 0, "failed": 0},  # every row an error
            {"number": 2, "path": "r2.json", "passed": 1, "failed": 1}])
        self.assertEqual(re.findall(r"<title>(.*?)</title>", chart),
                         ["record 2: r2.json: 1/2 passed"])
        self.assertEqual(chart.count("<rect"), 1)


    def test_each_bar_has_the_colour_of_its_pass_rate(self):
        chart = history.rate_chart([
            {"number": 1, "path": "a", "passed": 2, "failed": 0},
            {"number": 2, "path": "b", "passed": 1, "failed": 1},
            {"number": 3, "path": "c", "passed": 0, "failed": 2}])
        self.assertEqual(re.findall(r'fill="(#[0-9a-f]{6})"><title>', chart),
                         ["#1a7f37", "#9a6700", "#cf222e"])


class DocTest(unittest.TestCase):
    """docs/history.md: its recipe is pinned and minimal, its prune step runs."""

    def blocks(self):
        """(skipped, language, text) of each fenced block of the doc."""
        text = read_text(DOC)
        return [(bool(skip), language, body) for skip, language, body in re.findall(
            r"(<!-- doc-test: skip \([^)]+\) -->\n)?```(\w+)\n(.*?)```", text, re.S)]

    def workflow_text(self):
        """The recipe: the one YAML block that is a whole workflow (others are steps)."""
        [text] = [body for _, language, body in self.blocks()
                  if language == "yaml" and body.startswith("name:")]
        return text

    def workflow(self):
        from ruamel.yaml import YAML

        return YAML(typ="safe").load(self.workflow_text())

    def test_the_recipe_pins_actions_keeps_permissions_minimal_and_keys_per_run(self):
        workflow = self.workflow()
        self.assertEqual(workflow["permissions"], {})
        [job] = workflow["jobs"].values()
        self.assertEqual(job["permissions"], {"contents": "read"})
        for step in job["steps"]:
            with self.subTest(step=step.get("name", step.get("uses"))):
                if "uses" in step:
                    self.assertRegex(step["uses"], r"^[\w-]+/[\w/-]+@[0-9a-f]{40}$")
                else:
                    self.assertNotIn("${{", step["run"])  # inputs reach scripts through env:
        caches = [step["with"] for step in job["steps"] if "actions/cache" in step.get("uses", "")]
        self.assertIn("history-${{ github.ref_name }}-${{ github.run_id }}",
                      {cache["key"] for cache in caches})
        self.assertIn("history-${{ github.ref_name }}-",
                      {cache.get("restore-keys") for cache in caches})

    def test_every_shell_block_is_run_here_or_marked_skipped(self):
        runnable = [body for skipped, language, body in self.blocks()
                    if language in ("sh", "bash") and not skipped]
        self.assertEqual(len(runnable), 1, "only the prune step runs without an API key")
        steps = [step["run"] for step in self.workflow()["jobs"]["history"]["steps"]
                 if "run" in step]
        self.assertIn(runnable[0], steps)  # the workflow runs this very text

    @slow("starts zizmor and check-jsonschema")
    @unittest.skipUnless(ZIZMOR and SCHEMA_CHECK, "zizmor and check-jsonschema are dev tools "
                         "(requirements-dev.txt)")
    def test_the_recipe_passes_the_security_audit_and_githubs_schema(self):
        path = write_text(os.path.join(temp_dir(self), "history.yml"), self.workflow_text())
        offline = {**os.environ, "HTTPS_PROXY": "http://127.0.0.1:9",
                   "HTTP_PROXY": "http://127.0.0.1:9"}  # any fetch meets a closed port
        for command in ([ZIZMOR, "--offline", path],
                        [SCHEMA_CHECK, "--builtin-schema", "vendor.github-workflows", path]):
            with self.subTest(tool=os.path.basename(command[0])):
                done = subprocess.run(command, capture_output=True, text=True, timeout=120,
                                      env=offline)
                self.assertEqual(done.returncode, 0, done.stdout + done.stderr)

    @slow("runs the doc's prune step in bash")
    def test_the_prune_step_keeps_the_newest_records(self):
        [script] = [body for skipped, language, body in self.blocks()
                    if language in ("sh", "bash") and not skipped]
        folder = temp_dir(self)
        records = os.path.join(folder, "history")
        os.makedirs(records)
        for number in range(5):
            path = write_text(os.path.join(records, f"results-{number}.json"), "{}")
            os.utime(path, (1_000_000 + number, 1_000_000 + number))
        write_text(os.path.join(records, ".results-0.json.lock"), "")
        for keep, left in (("9", 5), ("3", 3)):
            with self.subTest(keep=keep):
                done = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c",
                                       script], cwd=folder, env={**os.environ, "KEEP": keep},
                                      capture_output=True, text=True, timeout=30)
                self.assertEqual(done.returncode, 0, done.stderr)
                kept = sorted(name for name in os.listdir(records) if name.endswith(".json"))
                self.assertEqual(kept, [f"results-{n}.json" for n in range(5 - left, 5)])
        self.assertTrue(os.path.exists(os.path.join(records, ".results-0.json.lock")))


if __name__ == "__main__":
    unittest.main()


@slow("reads records in a pool of processes")
class PoolTest(HistoryTest):
    def test_a_pool_reads_what_this_process_reads(self):
        self.record()
        self.record(unsafe=(HASTY,))
        self.record()
        here = self.history()[3]
        with mock.patch.object(history, "POOL_BYTES", 0):  # every history in the pool
            pooled = self.history()[3]
        self.assertEqual([pair["sequence"] for pair in pooled["pairs"]],
                         [pair["sequence"] for pair in here["pairs"]])
        self.assertIn("PFP", [pair["sequence"] for pair in pooled["pairs"]])
