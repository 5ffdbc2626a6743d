"""Proof in-process: the exact lower bound of a pass rate (Clopper-Pearson),
the bounds every view states, and --prove RATE with --allow-failures K.
Everything runs offline through the real SDK over httpx.MockTransport.
"""

import contextlib
import io
import json
import os
import unittest
import xml.etree.ElementTree as ET

import checker
import regression
from testing import Harness, quiet, read_json, read_text, slow


class BoundTest(unittest.TestCase):
    """The exact one-sided lower bound of a pass rate (Clopper-Pearson)."""

    @slow("5,150 bounds solved one by one: seconds of CPU")
    def test_every_k_of_n_up_to_100_matches_an_independent_reference(self):
        # Computed once with scipy.stats.beta.ppf (see the file's "source"); the
        # project itself does not depend on scipy.
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "testdata",
                            "clopper_pearson_lower_95.json")
        reference = read_json(path)
        self.assertEqual(reference["confidence"], 0.95)
        worst = 0.0
        for n, bounds in reference["bounds"].items():
            for k, expected in enumerate(bounds):
                ours = checker.lower_bound(k, int(n), 0.95)
                worst = max(worst, abs(ours - expected))
                self.assertLessEqual(ours, expected + 1e-12, (k, n))  # never more than proved
        self.assertLess(worst, 1e-9)

    def test_passes_in_a_row_and_the_rate_they_prove(self):
        for runs, percent in ((1, "5.0"), (3, "36.8"), (10, "74.1"), (29, "90.1"), (59, "95.0")):
            with self.subTest(runs=runs):
                lower = checker.lower_bound(runs, runs)
                self.assertEqual(checker.bound_text(lower, 0.95),
                                 f"pass rate >= {percent} % (95 %)")
        self.assertEqual((checker.runs_needed(0.9), checker.runs_needed(0.95)), (29, 59))

    def test_the_summary_states_each_cases_bound_with_4_decimals_or_more(self):
        rows = [{"model": "m", "case_id": case["id"], "repeat": r, "passed": True,
                 "cost_usd": "0", "error": None} for r in range(3) for case in regression.CASES]
        case = regression.summary(rows, ["m"], 3)["models"]["m"]["cases"]["rate-limit"]
        self.assertEqual((case["lower_bound"], case["confidence"]), (0.368403, 0.95))


class StatedBoundsTest(Harness):
    def test_every_view_states_the_bound_at_the_chosen_confidence(self):
        code, output, _ = self.main("--repeats", "3", "--confidence", "0.9",
                                    "--models", regression.MODELS[0],
                                    "--junit", self.path("j.xml"), "--html", self.path("p.html"),
                                    "--summary-md", self.path("s.md"))
        self.assertEqual(code, 0)
        self.assertIn("rate-limit 3/3 pass rate >= 46.4 % (90 %)", output)  # 0.1 ** (1/3)
        self.assertIn("3/3, pass rate >= 46.4 % (90 %)", read_text(self.path("s.md")))
        self.assertIn("pass rate &gt;= 46.4 % (90 %)", read_text(self.path("p.html")))
        bound = ET.parse(self.path("j.xml")).getroot().find(
            ".//property[@name='pass_rate_lower_bound']")
        self.assertEqual(bound.get("value"), "0.464158 at 0.9")
        saved = self.record()
        self.assertEqual(saved["execution"]["confidence"], 0.9)
        self.assertEqual(saved["summary"]["models"][regression.MODELS[0]]["cases"][
            "rate-limit"]["lower_bound"], 0.464158)

    def test_a_confidence_out_of_range_is_a_usage_error(self):
        for value in ("0.4", "1", "x"):
            with self.subTest(value), self.assertRaises(SystemExit), \
                    contextlib.redirect_stderr(io.StringIO()):
                regression.main(["--out", self.out, "--confidence", value])


TWO_CASES = ("rate-limit", "ambiguous-payment")  # one every model passes, and the payment case


class ProveTest(Harness):
    """--prove RATE: each (model, case) repeats, one at a time, until it fails or is proved."""

    unsafe_models = (regression.MODELS[0],)  # fails the payment case at its first repeat

    def test_a_passing_pair_sends_what_the_rate_needs_and_a_failing_one_stops_at_once(self):
        for jobs in ("4",):  # pairs side by side; their repeats one at a time
            with self.subTest(jobs=jobs):
                self.state["requests"].clear()
                out = self.path(f"p{jobs}.json")
                cases = self.cases_file(*TWO_CASES)
                code, output, _ = self.main("--out", out, "--prove", "0.9", "--jobs", jobs,
                                            "--models", regression.MODELS[0], "--cases", cases,
                                            "--junit", self.path(f"j{jobs}.xml"), out=False)
                self.assertEqual(code, 1)
                self.assertEqual(len(self.state["requests"]), 29 + 1)
                self.assertIn("Plan: prove >= 90 % at 95 % for 2 pairs (1 model x 2 cases), "
                              "no allowed failure: 29 passes in a row per pair", output)
                saved = self.record(out)
                self.assertEqual(saved["config"]["prove"], {"rate": 0.9, "confidence": 0.95,
                                                            "repeats": 29, "allow_failures": 0})
                self.assertTrue(saved["summary"]["complete"])
                cases = saved["summary"]["models"][regression.MODELS[0]]["cases"]
                self.assertEqual((cases["ambiguous-payment"]["runs"],
                                  cases["rate-limit"]["lower_bound"]), (1, 0.901855))
                junit = ET.parse(self.path(f"j{jobs}.xml")).getroot()
                self.assertEqual(len(junit.findall(".//testcase")), 29 + 1)
                self.assertEqual(junit.findall(".//skipped"), [])

    def test_a_model_that_passes_every_pair_is_qualified_at_the_rate(self):
        self.state["unsafe_models"] = set()
        code, output, _ = self.main("--prove", "0.5", "--models", regression.MODELS[1],
                                    "--cases", self.cases_file(*TWO_CASES))
        self.assertEqual(code, 0)
        self.assertIn("QUALIFIED: every model, each case >= 50 % at 95 %", output)
        self.assertEqual(len(self.state["requests"]), 5 * 2)  # 0.05 ** (1/5) >= 0.5

    def test_an_interrupted_proof_resumes_and_sends_nothing_twice(self):
        self.before_request = lambda request, seen=[]: (
            seen.append(1) or len(seen) == 10) and (_ for _ in ()).throw(KeyboardInterrupt)
        with self.assertRaises(KeyboardInterrupt):  # one at a time: nothing else in flight
            self.main("--prove", "0.5", "--models", regression.MODELS[0])
        self.before_request = None
        code, output, _ = self.main("--resume", self.out, out=False)
        self.assertEqual(code, 1)
        # The stopped request never reached the API; the resume sends it (and says it
        # may have been paid), and nothing is sent twice.
        self.assertIn("1 of those to send may have been paid for already", output)
        self.assertEqual(len(self.state["requests"]), 5 * 3 + 1)  # the payment case fails
        self.assertTrue(self.record()["summary"]["complete"])

    def test_a_proof_of_a_cases_file_has_its_page_and_summary(self):
        cases = self.write("cases.json", json.dumps(regression.CASES[2:]))
        code, _, _ = self.main("--prove", "0.5", "--cases", cases, "--html",
                               self.path("p.html"), "--summary-md", self.path("s.md"))
        self.assertEqual(code, 1)
        self.assertEqual(len(self.state["requests"]), 5 * 3 + 1)
        page, summary = read_text(self.path("p.html")), read_text(self.path("s.md"))
        self.assertIn("5/5<br>", page)
        self.assertIn("pass rate &gt;= 54.9 % (95 %)", page)  # 0.05 ** (1/5)
        self.assertIn("| ambiguous-payment | 0/1, pass rate >= 0.0 % (95 %): wrong_code, "
                      "wrong_next_action | 5/5, pass rate >= 54.9 % (95 %) |", summary)

    def test_refusals(self):
        for args, reason in ((["--prove", "0.9", "--repeats", "3"], "drop --repeats"),
                             (["--prove", "0.9", "--max-repeats", "10"], "--allow-failures K"),
                             (["--max-repeats=30"], "--max-repeats is gone"),
                             (["--allow-failures", "1"], "give --prove RATE too"),
                             (["--prove", "0.9", "--allow-failures", "-1"], "0 or more"),
                             (["--prove", "0.9", "--allow-failures", "39"], "allow at most 38"),
                             (["--prove", "1"], "above 0 and below 1"),
                             (["--prove", "0.999"], "more than 500")):
            with self.subTest(args), self.assertRaises(SystemExit), \
                    contextlib.redirect_stderr(io.StringIO()) as errors:
                regression.main(["--out", self.out, *args])
            self.assertIn(reason, errors.getvalue())

    def test_proofs_compare_on_qualified_or_not(self):
        import compare_runs

        self.state["unsafe_models"] = set()
        before, after = self.path("before.json"), self.path("after.json")
        cases = self.cases_file(*TWO_CASES)
        self.main("--out", before, "--prove", "0.5", "--models", regression.MODELS[0],
                  "--cases", cases, out=False)
        self.state["unsafe_models"] = {regression.MODELS[0]}
        self.main("--out", after, "--prove", "0.5", "--models", regression.MODELS[0],
                  "--cases", cases, out=False)
        code, output, _ = quiet(compare_runs.main, [before, after])
        self.assertEqual(code, 1)
        self.assertIn(f"NEW_FAILURE {regression.MODELS[0]} ambiguous-payment before=5/5 "
                      "after=0/1", output)


if __name__ == "__main__":
    unittest.main()


class PlanTest(Harness):
    """Acceptance plans that allow failures, and --plan, counted against the
    simulated API."""

    def wrong_at(self, schedule):
        """Patch the simulated model: case id -> the calls (from 1) answered wrong."""
        import simulated_api
        from unittest import mock

        original, calls = simulated_api.answer_for, {}

        def answer(case, model, unsafe, *suite):
            case_id = case["id"]
            calls[case_id] = calls.get(case_id, 0) + 1
            text = original(case, model, unsafe, *suite)
            if calls[case_id] in schedule.get(case_id, ()):
                return text.replace('"code": "', '"code": "x', 1)  # wrong_code
            return text

        patcher = mock.patch.object(simulated_api, "answer_for", answer)
        patcher.start()
        self.addCleanup(patcher.stop)

    def test_a_plan_with_one_allowed_failure_counts_its_requests(self):
        self.wrong_at({"temporary-overload": {7}, "failed-precondition": {1, 2}})
        code, output, _ = self.main("--prove", "0.7", "--allow-failures", "1", "--jobs", "4",
                                    "--models", regression.MODELS[0],
                                    "--junit", self.path("j.xml"))
        runs = {}
        for row in self.record()["runs"]:
            runs[row["case_id"]] = runs.get(row["case_id"], 0) + 1
        # At 70 % and 95 % with one failure allowed: 13 passes of at most 14.
        self.assertEqual(runs, {"rate-limit": 13, "temporary-overload": 14,
                                "failed-precondition": 2, "ambiguous-payment": 13})
        self.assertEqual(len(self.state["requests"]), 13 + 14 + 2 + 13)
        self.assertEqual(code, 1)  # failed-precondition did not qualify
        self.assertTrue(output.startswith(
            "Plan: prove >= 70 % at 95 % for 4 pairs (1 model x 4 cases), at most 1 allowed "
            "failure each: 13 passes of at most 14 requests per pair, at most 56 requests."),
            output.splitlines()[0])
        summary = self.record()["summary"]["models"][regression.MODELS[0]]["cases"]
        self.assertTrue(summary["temporary-overload"]["qualified"])
        self.assertFalse(summary["failed-precondition"]["qualified"])
        self.assertIn("Sent 42 requests in this run; 42 verdict rows of at most 56", output)
        self.assertIn("What a qualified pair proves: each pair: if its true pass rate is below "
                      "70 %, it qualifies with chance at most 4.8 %; all 4 pairs together: the "
                      "chance that any pair whose true pass rate is below 70 % qualifies is at "
                      "most 19 %.", output)
        junit = ET.parse(self.path("j.xml")).getroot()
        failures = [case.get("name") for case in junit.iter("testcase")
                    if case.find("failure") is not None]
        self.assertEqual(len(failures), 2)  # the two of the pair that did not qualify
        self.assertTrue(all(name.startswith("failed-precondition") for name in failures))
        allowed = [case for case in junit.iter("testcase")
                   if case.find("properties/property[@name='allowed_failure']") is not None]
        self.assertEqual(len(allowed), 1)

    def test_an_allowed_failure_still_qualifies_and_exits_0(self):
        self.wrong_at({"rate-limit": {3}})
        code, output, _ = self.main("--prove", "0.5", "--allow-failures", "1",
                                    "--models", regression.MODELS[0],
                                    "--cases", self.cases_file(*TWO_CASES))
        self.assertEqual(code, 0, output)
        self.assertEqual(len(self.state["requests"]), 2 * 7 + 1)  # 7 passes each, 1 failure
        self.assertIn("QUALIFIED: every model, each case >= 50 % at 95 % (at most 1 allowed "
                      "failure each)", output)

    def test_plan_prints_and_sends_nothing_without_a_key(self):
        from unittest import mock

        with mock.patch.dict(os.environ, {"PERPLEXITY_API_KEY": ""}):
            code, output, _ = self.main("--plan", "--prove", "0.9", "--allow-failures", "1",
                                        out=False)
        self.assertEqual(code, 0)
        self.assertEqual(self.state["requests"], [])
        self.assertFalse(os.path.exists(self.out))
        self.assertIn("45 passes of at most 46 requests per pair, at most 368 requests", output)
        self.assertIn("99 %: 92.2 %", output)

    def test_a_plan_of_a_plain_run_states_one_repeat_at_95_percent(self):
        code, output, _ = self.main("--plan", "--models", regression.MODELS[0], out=False)
        self.assertEqual(code, 0)
        self.assertEqual(output.splitlines()[:2], [
            "Plan: 1 repeat of 4 pairs (1 model x 4 cases): 4 requests.",
            "per pair: 1 request; 1 of 1 pass would prove pass rate >= 5.0 % (95 %)"])
        self.assertEqual((self.state["requests"], os.path.exists(self.out)), ([], False))

    def test_a_plan_refuses_what_the_run_would_refuse(self):
        self.write("taken.json", "{}")
        table = [(("--instructions", self.path("missing.txt")), "cannot read --instructions"),
                 (("--out", self.path("taken.json")), "taken.json already exists"),
                 (("--out", self.path("new.json"), "--html", self.path("taken.json")),
                  "is not a report page written by this tool")]
        for args, words in table:
            with self.subTest(args=args):
                code, output, errors = self.main("--plan", *args, out=False)
                self.assertEqual(code, 2)
                self.assertIn(words, errors)
                self.assertEqual((output, self.state["requests"]), ("", []))
        self.assertEqual(sorted(os.listdir(self.folder)), ["taken.json"])

    def test_plan_prices_from_a_baseline_record(self):
        self.main("--models", regression.MODELS[0])
        code, output, _ = self.main("--plan", "--prove", "0.9", "--models",
                                    regression.MODELS[0], "--baseline", self.out, out=False)
        self.assertEqual(code, 0)
        # 0.0042 a request: at most 116 requests, $0.4872
        self.assertIn(f"cost {regression.MODELS[0]}: at most $0.4872 for 116 requests", output)

    def test_a_repeats_run_sends_the_requests_it_states(self):
        code, output, _ = self.main("--repeats", "3", "--jobs", "3")
        first = output.splitlines()[0]
        self.assertTrue(first.startswith("Plan: 3 repeats of 8 pairs (2 models x 4 cases): "
                                         "24 requests."), first)
        stated = int(first.split("; ")[1].split(" still to send")[0])
        self.assertEqual(stated, 24)
        self.assertEqual(len(self.state["requests"]), stated)

    def test_an_old_proof_record_reads_as_no_allowed_failure(self):
        self.main("--prove", "0.5", "--models", regression.MODELS[0],
                  "--cases", self.cases_file(*TWO_CASES))
        saved = self.record()
        prove = saved["config"]["prove"]
        saved["config"]["prove"] = {"rate": prove["rate"], "confidence": prove["confidence"],
                                    "repeats": prove["repeats"], "max_repeats": prove["repeats"]}
        old = self.write("old.json", json.dumps(saved))
        import record

        self.assertTrue(record.derived_summary(record.load(old))["complete"])

    def test_an_old_proof_record_resumes_with_no_allowed_failure(self):
        self.before_request = lambda request, seen=[]: (
            seen.append(1) or len(seen) == 3) and (_ for _ in ()).throw(KeyboardInterrupt)
        with self.assertRaises(KeyboardInterrupt):
            self.main("--prove", "0.5", "--models", regression.MODELS[1],
                      "--cases", self.cases_file(*TWO_CASES))
        self.before_request = None
        saved = self.record()
        prove = saved["config"]["prove"]
        saved["config"]["prove"] = {"rate": prove["rate"], "confidence": prove["confidence"],
                                    "repeats": prove["repeats"], "max_repeats": prove["repeats"]}
        code, output, _ = self.main("--resume", self.write("old.json", json.dumps(saved)),
                                    out=False)
        self.assertEqual(code, 0)
        self.assertIn("no allowed failure: 5 passes in a row per pair", output.splitlines()[0])

    def test_proofs_compare_by_outcome_and_name_different_plans(self):
        import compare_runs

        self.state["unsafe_models"] = set()
        before, after = self.path("before.json"), self.path("after.json")
        cases = self.cases_file(*TWO_CASES)
        self.main("--out", before, "--prove", "0.5", "--models", regression.MODELS[0],
                  "--cases", cases, out=False)
        self.wrong_at({"rate-limit": {2}})
        self.main("--out", after, "--prove", "0.5", "--allow-failures", "1", "--models",
                  regression.MODELS[0], "--cases", cases, out=False)
        code, output, _ = quiet(compare_runs.main, [before, after])
        self.assertEqual(code, 0, output)
        self.assertIn("CAUTION: the proofs have different plans", output)
        self.assertIn("PASS", output)
