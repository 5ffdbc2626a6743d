"""Fitting users' cases and CI (issue 5): --cases, JUnit, Markdown, budgets, pass rates."""

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
import xml.etree.ElementTree as ET
from unittest import mock

import httpx
from perplexity import Perplexity

import compare_runs
import regression
import simulated_api

HERE = os.path.dirname(os.path.abspath(__file__))
KEY = "pplx-test-key-0123456789"
INCIDENT = {
    "id": "refund-timeout",
    "expected": "unknown",
    "rfc": "rfc9110",
    "action": "verify_outcome",
    "question": "Checkout log: POST /v1/refunds; refund_id=rf_9\nhttpx.ReadTimeout after 30s; "
                "no response received.",
}
TOML_CASES = '''
[[cases]]
id = "refund-timeout"
expected = "unknown"
rfc = "rfc9110"
action = "verify_outcome"
question = """Checkout log: POST /v1/refunds; refund_id=rf_9
httpx.ReadTimeout after 30s; no response received."""
'''


def temp_dir(test):
    folder = tempfile.mkdtemp()
    test.addCleanup(shutil.rmtree, folder, True)
    return folder


def read(path):
    with open(path, encoding="utf-8") as handle:
        return handle.read()


class Harness(unittest.TestCase):
    """main() in-process over MockTransport and the simulated API's answers."""

    def setUp(self):
        self.folder = temp_dir(self)
        self.out = self.path("r.json")
        self.state = simulated_api.new_state(regression.CASES + [INCIDENT], unsafe_models=())
        env = mock.patch.dict(os.environ, {"PERPLEXITY_API_KEY": KEY})
        env.start()
        self.addCleanup(env.stop)
        patcher = mock.patch.object(regression, "Perplexity", self.fake_perplexity)
        patcher.start()
        self.addCleanup(patcher.stop)

    def path(self, name):
        return os.path.join(self.folder, name)

    def write(self, name, text):
        with open(self.path(name), "w", encoding="utf-8") as handle:
            handle.write(text)
        return self.path(name)

    def fake_perplexity(self, **kwargs):
        return simulated_api.sdk_client(self.state, api_key=KEY, **kwargs)

    def main(self, *args):
        output, errors = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(output), contextlib.redirect_stderr(errors):
            code = regression.main(["--out", self.out, *args])
        return code, output.getvalue(), errors.getvalue()

    def record(self):
        return json.loads(read(self.out))


class CasesFileTest(Harness):
    def test_json_and_toml_case_files_replace_the_built_in_cases(self):
        for name, text in [("c.json", json.dumps([INCIDENT])),
                           ("wrapped.json", json.dumps({"cases": [INCIDENT]})),
                           ("c.toml", TOML_CASES)]:
            with self.subTest(name):
                if os.path.exists(self.out):
                    os.remove(self.out)
                code, output, _ = self.main("--cases", self.write(name, text))
                self.assertEqual(code, 0, output)
                record = self.record()
                self.assertEqual(record["config"]["cases"], [INCIDENT])
                self.assertEqual(len(record["runs"]), 2)
                self.assertEqual({r["case_id"] for r in record["runs"]}, {"refund-timeout"})

    def test_every_invalid_case_file_is_one_line_exit_2_and_nothing_sent(self):
        def with_case(**change):
            case = {**INCIDENT, **change}
            return json.dumps([{k: v for k, v in case.items() if v is not None}])

        table = [
            ("empty id", with_case(id=""), "field id"),
            ("id with spaces", with_case(id="a b"), "field id"),
            ("duplicate id", json.dumps([INCIDENT, INCIDENT]), "field id repeats"),
            ("expected 42", with_case(expected="42"), "field expected"),
            ("expected int", with_case(expected=503), "field expected"),
            ("action", with_case(action="retry_now"), "field action"),
            ("rfc", with_case(rfc="RFC 9110"), "field rfc"),
            ("question empty", with_case(question="  "), "field question"),
            ("missing field", with_case(rfc=None), "missing field rfc"),
            ("unknown field", with_case(note="x"), "unknown field note"),
            ("empty list", "[]", "non-empty list"),
            ("not a list", '{"id": "x"}', "non-empty list"),
            ("case not an object", "[7]", "case 1"),
            ("bad JSON", "[{", "cannot parse"),
        ]
        for name, text, words in table:
            with self.subTest(name):
                code, _, errors = self.main("--cases", self.write("bad.json", text))
                self.assertEqual(code, 2)
                self.assertEqual(len(errors.splitlines()), 1, errors)
                self.assertIn(words, errors)
                self.assertIn("bad.json", errors)
                self.assertFalse(os.path.exists(self.out))
                self.assertEqual(self.state["requests"], [])

    def test_invalid_toml_and_other_extensions_are_refused(self):
        for name, text, words in [("bad.toml", "[[cases]\nid=", "cannot parse"),
                                  ("c.yaml", "- id: x", ".json or .toml"),
                                  ("toml-case.toml", TOML_CASES.replace('"unknown"', '"5xx"'),
                                   "case 1 (refund-timeout): field expected")]:
            with self.subTest(name):
                code, _, errors = self.main("--cases", self.write(name, text))
                self.assertEqual(code, 2)
                self.assertIn(words, errors)

    def test_missing_case_file_exits_2(self):
        code, _, errors = self.main("--cases", self.path("none.json"))
        self.assertEqual(code, 2)
        self.assertIn("none.json", errors)


class JunitTest(Harness):
    def junit(self, path):
        root = ET.parse(path).getroot()
        cases = root.findall("testsuite/testcase")
        return root, cases

    def test_junit_matches_the_rows(self):
        self.state["unsafe_models"] = {regression.MODELS[0]}
        code, _, _ = self.main("--repeats", "2", "--junit", self.path("j.xml"))
        self.assertEqual(code, 1)
        root, cases = self.junit(self.path("j.xml"))
        rows = self.record()["runs"]
        self.assertEqual(len(cases), len(rows))
        self.assertEqual([s.get("name") for s in root.findall("testsuite")], regression.MODELS)
        failures = [c for c in cases if c.find("failure") is not None]
        self.assertEqual(len(failures), sum(1 for r in rows if not r["passed"]))
        self.assertEqual({c.get("name") for c in failures},
                         {"ambiguous-payment [repeat 1]", "ambiguous-payment [repeat 2]"})
        self.assertIn("wrong_code", failures[0].find("failure").get("message"))
        suite = root.find("testsuite")
        self.assertEqual((suite.get("tests"), suite.get("failures")), ("8", "2"))
        cost = cases[0].find("properties/property[@name='cost_usd']")
        self.assertEqual(cost.get("value"), "0.0042")
        for case in cases:
            float(case.get("time"))

    def test_execution_error_is_an_error_and_unrun_rows_are_skipped(self):
        self.state["faults"] = [simulated_api.error(401, "invalid api key")]
        code, _, _ = self.main("--junit", self.path("j.xml"))
        self.assertEqual(code, 2)
        _, cases = self.junit(self.path("j.xml"))
        self.assertEqual(len(cases), 8)
        errors = [c.find("error") for c in cases if c.find("error") is not None]
        self.assertEqual(len(errors), 1)
        self.assertIn("invalid api key", errors[0].text)
        self.assertEqual(sum(1 for c in cases if c.find("skipped") is not None), 7)

    def test_junit_is_written_on_ctrl_c(self):
        def interrupt(request):
            if len(self.state["requests"]) == 2:
                raise KeyboardInterrupt
            return transport.handle_request(request)

        transport = simulated_api.mock_transport(self.state)
        with mock.patch.object(regression, "Perplexity", lambda **kw: Perplexity(
                api_key=KEY, http_client=httpx.Client(transport=httpx.MockTransport(interrupt)),
                **kw)), self.assertRaises(KeyboardInterrupt):
            self.main("--junit", self.path("j.xml"))
        _, cases = self.junit(self.path("j.xml"))
        self.assertEqual(sum(1 for c in cases if c.find("skipped") is None), 2)

    def test_junit_never_replaces_a_record_or_another_file(self):
        self.main()
        for target in (self.out, self.write("notes.txt", "keep")):
            with self.subTest(target=target):
                before = read(target)
                with self.assertRaises(SystemExit), contextlib.redirect_stderr(io.StringIO()):
                    regression.main(["--out", self.path("new.json"), "--junit", target])
                self.assertEqual(read(target), before)
        new = self.path("new.json")
        for flag in ("--junit", "--summary-md"):
            with self.subTest(flag=flag), contextlib.redirect_stderr(io.StringIO()) as errors:
                self.assertEqual(regression.main(["--out", new, flag, new]), 2)
            self.assertIn("is the record itself", errors.getvalue())
            self.assertFalse(os.path.exists(new))


class MarkdownTest(Harness):
    def test_run_summary_appends_and_names_the_failing_case(self):
        self.state["unsafe_models"] = {regression.MODELS[0]}
        summary = self.write("summary.md", "earlier step\n")
        self.main("--repeats", "2", "--summary-md", summary)
        text = read(summary)
        self.assertTrue(text.startswith("earlier step\n"))
        self.assertIn(f"| {regression.MODELS[0]} | 6/8 | **no** | $0.0336 |", text)
        self.assertIn("| ambiguous-payment | 0/2: wrong_code, wrong_next_action | 2/2 |", text)

    def test_compare_summary_counts_labels_and_lists_changes(self):
        summary = self.write("summary.md", "")
        with contextlib.redirect_stdout(io.StringIO()):
            code = compare_runs.main(["--demo", self.path("pair"), "--summary-md", summary])
        self.assertEqual(code, 1)
        text = read(summary)
        self.assertIn("| NEW_FAILURE | 1 |", text)
        self.assertIn("| NEW_FAILURE | offline/model | ambiguous-payment | 1 | pass | "
                      "wrong_code, wrong_next_action | 1/1 | 0/1 |", text)

    def test_markdown_cells_escape_pipes(self):
        self.assertEqual(regression.reports.cell("a|b\nc"), "a\\|b c")


class PassRateTest(unittest.TestCase):
    def test_pass_rates_and_flaky(self):
        rows = []
        for repeat, outcomes in enumerate([(True, True), (True, False), (True, True)], 1):
            for case in regression.CASES:
                for model, passed in zip(("a", "b"), outcomes):
                    ok = passed or case["id"] != "rate-limit"
                    rows.append({"model": model, "case_id": case["id"], "repeat": repeat,
                                 "passed": ok, "reasons": [] if ok else ["wrong_code"],
                                 "cost_usd": "0", "error": None})
        result = regression.summary(rows, ["a", "b"], 3)
        self.assertEqual(result["models"]["b"]["cases"]["rate-limit"],
                         {"passed": 2, "runs": 3, "flaky": True})
        self.assertEqual(result["models"]["a"]["cases"]["rate-limit"],
                         {"passed": 3, "runs": 3, "flaky": False})
        self.assertFalse(result["models"]["b"]["qualified"])
        self.assertEqual(result["exit_code"], 1)
        self.assertIn("rate-limit 2/3 FLAKY", regression.pass_rate_lines(result)[1])

    def test_verdict_line(self):
        table = [
            ({"complete": True, "exit_code": 0, "models": {"a": {"qualified": True,
              "passed": 4, "total": 4}}}, "QUALIFIED"),
            ({"complete": True, "exit_code": 1, "models": {"a": {"qualified": False,
              "passed": 3, "total": 4}}}, "not qualified: a (3/4 passed)"),
            ({"complete": False, "exit_code": 2, "models": {"a": {"qualified": False,
              "passed": 1, "total": 1}}}, "INCOMPLETE"),
        ]
        for result, words in table:
            with self.subTest(words):
                self.assertIn(words, regression.verdict_line(result))


class BudgetAndProgressTest(Harness):
    def test_max_cost_stops_new_requests_and_exits_2(self):
        code, output, errors = self.main("--max-cost", "0.01")
        self.assertEqual(code, 2)
        record = self.record()
        self.assertEqual(len(record["runs"]), 3)  # 0.0042 each: 0.0126 >= 0.01
        self.assertEqual(len(self.state["requests"]), 3)
        self.assertTrue(record["execution"]["stopped_for_budget"])
        self.assertEqual(record["execution"]["max_cost"], "0.01")
        self.assertIn("--max-cost", errors)

    def test_unknown_cost_warns_once(self):
        original = simulated_api.agent_response

        def no_cost(*args):
            response = original(*args)
            del response["usage"]["cost"]
            return response

        with mock.patch.object(simulated_api, "agent_response", no_cost):
            code, output, errors = self.main("--max-cost", "1")
        self.assertEqual(code, 0)
        self.assertEqual(errors.count("warning: a row has no reported cost"), 1)
        self.assertIn("at least $0 so far", output)

    def test_bad_budget_is_a_usage_error(self):
        for value in ("0", "-1", "NaN", "lots"):
            with self.subTest(value), self.assertRaises(SystemExit) as raised, \
                    contextlib.redirect_stderr(io.StringIO()):
                regression.main(["--out", self.out, "--max-cost", value])
            self.assertEqual(raised.exception.code, 2)

    def test_rows_show_progress_and_the_run_ends_with_a_verdict(self):
        code, output, _ = self.main()
        lines = output.splitlines()
        self.assertTrue(lines[0].startswith("[1/8] "))
        self.assertTrue(lines[7].startswith("[8/8] "))
        self.assertRegex(lines[7], r"\| \d+\.\ds elapsed, \$0\.0336 so far$")
        self.assertTrue(lines[8].startswith("QUALIFIED"))

    def test_settings_that_cannot_change_answers_live_in_execution(self):
        self.main("--junit", self.path("j.xml"), "--summary-md", self.path("s.md"),
                  "--max-cost", "5")
        record = self.record()
        self.assertEqual(record["execution"]["junit"], self.path("j.xml"))
        self.assertEqual(record["execution"]["summary_md"], self.path("s.md"))
        self.assertEqual(record["execution"]["max_cost"], "5")
        for key in ("junit", "summary_md", "max_cost", "jobs", "retries"):
            self.assertNotIn(key, record["config"])


class EndToEndTest(unittest.TestCase):
    def test_three_repeats_of_unsafe_answers_in_junit_and_both_markdown_files(self):
        folder = temp_dir(self)
        server = simulated_api.start(regression.CASES,
                                     unsafe_models=("offline/hasty", "offline/reckless"))
        self.addCleanup(server.stop)
        env = {**{k: v for k, v in os.environ.items() if not k.startswith("PERPLEXITY")},
               "PERPLEXITY_API_KEY": KEY, "PERPLEXITY_BASE_URL": server.url,
               "NO_PROXY": "127.0.0.1"}
        paths = {name: os.path.join(folder, name) for name in
                 ("run.json", "j.xml", "run.md", "compare.md")}
        result = subprocess.run(
            [sys.executable, "-W", "error", os.path.join(HERE, "regression.py"), "--models",
             "offline/hasty", "offline/reckless", "--repeats", "3", "--jobs", "4",
             "--out", paths["run.json"], "--junit", paths["j.xml"],
             "--summary-md", paths["run.md"]],
            env=env, capture_output=True, text=True, timeout=120)
        self.assertEqual(result.returncode, 1, result.stderr)
        root = ET.parse(paths["j.xml"]).getroot()
        cases = root.findall("testsuite/testcase")
        self.assertEqual(len(cases), 24)
        self.assertEqual(sum(1 for c in cases if c.find("failure") is not None), 6)
        self.assertIn("ambiguous-payment", read(paths["run.md"]))
        self.assertIn("0/3: wrong_code, wrong_next_action", read(paths["run.md"]))
        pair = os.path.join(folder, "pair")
        result = subprocess.run(
            [sys.executable, "-W", "error", os.path.join(HERE, "compare_runs.py"), "--demo",
             pair, "--summary-md", paths["compare.md"]],
            env=env, capture_output=True, text=True, timeout=120)
        self.assertEqual(result.returncode, 1)
        self.assertIn("ambiguous-payment", read(paths["compare.md"]))


if __name__ == "__main__":
    unittest.main()
