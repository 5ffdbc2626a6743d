"""The views of a run for CI: JUnit XML and Markdown, from the same clean rows. Offline."""

import contextlib
import io
import os
import unittest
import xml.etree.ElementTree as ET
from unittest import mock

import httpx
from perplexity import Perplexity

import regression
import simulated_api
from testing import KEY, Harness, read_text as read

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
                         {"ambiguous-payment [repeat 0]", "ambiguous-payment [repeat 1]"})
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
                with contextlib.redirect_stderr(io.StringIO()):
                    code = regression.main(["--out", self.path("new.json"), "--junit", target])
                self.assertEqual(code, 2)
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

    def test_markdown_cells_escape_pipes(self):
        self.assertEqual(regression.reports.cell("a|b\nc"), "a\\|b c")


if __name__ == "__main__":
    unittest.main()
