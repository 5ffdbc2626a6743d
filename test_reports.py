"""The views of a run for CI: JUnit XML and Markdown, from the same clean rows, and
where a view may be written. Offline."""

import contextlib
import io
import json
import os
import re
import unittest
import xml.etree.ElementTree as ET
from unittest import mock

import httpx
from perplexity import Perplexity

import evidence_page
import regression
import reports
import simulated_api
from testing import KEY, Harness, read_text as read, temp_dir, write_text

HERE = os.path.dirname(os.path.abspath(__file__))

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
        model = regression.MODELS[0]
        self.assertEqual({c.get("name") for c in failures},
                         {f"ambiguous-payment on {model} [repeat 0]",
                          f"ambiguous-payment on {model} [repeat 1]"})
        self.assertEqual(failures[0].find("failure").get("message"),
                         "wrong_code, wrong_next_action; 0/2 passed, pass rate >= 0.0 % (95 %); "
                         "cost $0.0042")
        self.assertEqual({c.get("file") for c in cases}, {"regression.py"})  # built-in cases
        suite = root.find("testsuite")
        self.assertEqual((suite.get("tests"), suite.get("failures")), ("8", "2"))
        cost = cases[0].find("properties/property[@name='cost_usd']")
        self.assertEqual(cost.get("value"), "0.0042")
        for case in cases:
            float(case.get("time"))

    def test_each_testcase_names_the_file_that_holds_its_cases(self):
        one_model = ("--models", regression.MODELS[0])  # the file named is the cases' alone
        cases = self.write("cases.json", json.dumps(regression.CASES[:1]))
        self.main("--cases", cases, *one_model)
        regraded = self.path("regraded.json")
        table = [  # built-in cases live in the runner; a regrade's in its record's config
            ("built-in", ["--out", self.path("a.json"), *one_model], "regression.py"),
            ("--cases", ["--out", self.path("b.json"), "--cases", cases, *one_model], cases),
            ("regrade", ["--regrade", self.out, "--out", regraded], regraded),
        ]
        for name, args, source in table:
            with self.subTest(name):
                junit = self.path(f"{name}.xml")
                code, _, errors = self.main(*args, "--junit", junit, out=False)
                self.assertEqual(code, 0, errors)
                _, testcases = self.junit(junit)
                self.assertEqual({c.get("file") for c in testcases}, {source})

    def test_execution_error_is_an_error_and_unrun_rows_are_skipped(self):
        self.state["faults"] = [simulated_api.error(401, "invalid api key")]
        code, _, _ = self.main("--junit", self.path("j.xml"))
        self.assertEqual(code, 2)
        _, cases = self.junit(self.path("j.xml"))
        self.assertEqual(len(cases), 8)
        errors = [c.find("error") for c in cases if c.find("error") is not None]
        self.assertEqual(len(errors), 1)
        self.assertIn("invalid api key", errors[0].text)
        self.assertEqual(sum(1 for c in cases if c.find("failure") is not None), 0)
        suites = ET.parse(self.path("j.xml")).getroot().findall("testsuite")
        self.assertEqual(sum(int(s.get("errors")) for s in suites), 1)
        self.assertEqual(sum(int(s.get("failures")) for s in suites), 0)  # no verdict, no failure
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
        # a record of one row: what it holds plays no part
        self.main("--models", regression.MODELS[0],
                  "--cases", self.write("cases.json", json.dumps(regression.CASES[:1])))
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


def mikepenz_annotation(suite, testcase):
    """(file, title, message) of a testcase as action-junit-report makes its
    annotation, with its default settings: the file is the testcase's `file`,
    else its failure's, else its suite's, else the last dot-separated part of
    its classname; without a line, the failure text is searched for the file
    name followed by `:N` (a Rust path found there replaces the file); the
    title is `file.name` (just the name when the two are equal); the message
    is the failure's or error's `message`, else the text's first two lines,
    else the name. {{SUITE_NAME}} and {{BREAD_CRUMB}} in a title template are
    the suite's name as written; {{CLASS_NAME}} is cut like the file."""
    problem = testcase.find("failure")
    if problem is None:
        problem = testcase.find("error")
    details = {} if problem is None else problem.attrib
    text = ("" if problem is None else problem.text or "").strip()
    classname = testcase.get("classname") or testcase.get("name")
    file = (testcase.get("file") or details.get("file") or suite.get("file")
            or classname.split(".")[-1])
    if not (testcase.get("line") or details.get("line") or suite.get("line")):
        escaped = re.escape(file).replace("::", "/", 1)
        found = re.findall(f" [^ ]*{escaped}.*?:\\d+", text)
        if found:
            prefix = found[-1].split(":")[:-1]
            if prefix and prefix[-1].endswith(".rs"):
                file = prefix[-1].split(" ")[-1]
    name = testcase.get("name")
    title = name if file == name else f"{file}.{name}"
    message = (details.get("message") or "\n".join(text.split("\n")[:2]) or name).strip()
    return file, title, message


def dorny_tests(root):
    """[(suite, title, message)] of every testcase as test-reporter's java-junit
    reader lists it: the suite is the testsuite's trimmed name; a testcase whose
    classname differs from its suite's name goes in a group of that classname;
    an annotation is titled `suite ► group ► name` (no group when there is
    none); the message is the failure's or error's `message`, else the first
    line of its text that is not blank."""
    listed = []
    for suite in root.findall("testsuite"):
        suite_name = suite.get("name").strip()
        for testcase in suite.findall("testcase"):
            group = "" if testcase.get("classname") == suite.get("name") else \
                testcase.get("classname")
            name = testcase.get("name").strip()
            title = f"{suite_name} ► {group} ► {name}" if group else f"{suite_name} ► {name}"
            problem = testcase.find("failure")
            if problem is None:
                problem = testcase.find("error")
            message = None
            if problem is not None:
                message = problem.get("message") or next(
                    (line for line in (problem.text or "").splitlines() if line.strip()), None)
            listed.append((suite_name, title, message))
    return listed


class JunitViewersTest(Harness):
    """What the two common JUnit viewers of GitHub Actions show of a report,
    by their own parsing rules: the model whole, the cases file, and a failure
    message with the reasons, the pass rate and the cost."""

    model = "openai/gpt-5.6-sol"  # cut to "6-sol" by a viewer that splits classnames on dots

    def report(self, *args):
        self.state["unsafe_models"] = {self.model}
        code, _, _ = self.main("--models", self.model, "anthropic/claude-sonnet-4-6",
                               "--repeats", "2", "--junit", self.path("j.xml"), *args)
        self.assertEqual(code, 1)
        return ET.parse(self.path("j.xml")).getroot()

    def test_action_junit_report_keeps_the_model_and_names_the_cases_file(self):
        # a cases file of a case both models pass and the one self.model fails
        kept = ("rate-limit", "ambiguous-payment")
        cases = self.write("cases.json", json.dumps(
            [case for case in regression.CASES if case["id"] in kept]))
        root = self.report("--cases", cases)
        seen = 0
        for suite in root.findall("testsuite"):
            for testcase in suite.findall("testcase"):
                file, title, message = mikepenz_annotation(suite, testcase)
                model = testcase.get("classname")
                with self.subTest(title=title):
                    self.assertEqual(file, cases)
                    self.assertIn(f" on {model} [repeat ", title)
                    self.assertEqual(suite.get("name"), model)  # {{SUITE_NAME}}
                if testcase.find("failure") is not None:
                    seen += 1
                    self.assertEqual(message, "wrong_code, wrong_next_action; 0/2 passed, "
                                              "pass rate >= 0.0 % (95 %); cost $0.0042")
        self.assertEqual(seen, 2)
        self.assertIn(self.model, {s.get("name") for s in root.findall("testsuite")})

    def test_test_reporter_keeps_the_model_and_the_failure_message(self):
        listed = dorny_tests(self.report())
        self.assertEqual(len(listed), 16)
        failed = [(suite, title, message) for suite, title, message in listed if message]
        self.assertEqual({suite for suite, _, _ in failed}, {self.model})
        self.assertEqual({title for _, title, _ in failed},
                         {f"{self.model} ► ambiguous-payment on {self.model} [repeat {n}]"
                          for n in (0, 1)})
        for _, _, message in failed:
            self.assertIn("0/2 passed", message)
            self.assertIn("cost $0.0042", message)
            self.assertIn("wrong_next_action", message)


class MarkdownTest(Harness):
    def test_run_summary_appends_and_names_the_failing_case(self):
        self.state["unsafe_models"] = {regression.MODELS[0]}
        summary = self.write("step_summary", "earlier step\n")
        with mock.patch.dict(os.environ, {"GITHUB_STEP_SUMMARY": summary}):
            self.main("--repeats", "2", "--summary-md", summary)
        text = read(summary)
        self.assertTrue(text.startswith("earlier step\n" + reports.SUMMARY_MARK))
        self.assertIn(f"| {regression.MODELS[0]} | 6/8 | **no** | $0.0336 |", text)
        self.assertIn("| ambiguous-payment | 0/2, pass rate >= 0.0 % (95 %): wrong_code, "
                      "wrong_next_action | 2/2, pass rate >= 22.3 % (95 %) |", text)

    def test_markdown_cells_escape_pipes(self):
        self.assertEqual(regression.reports.cell("a|b\nc"), "a\\|b c")


class JunitTextTest(unittest.TestCase):
    """The exact JUnit text reports.junit_xml builds from rows, pure."""

    def allowed_failure(self):
        row = {"passed": False, "reasons": ["wrong_code", "wrong_next_action"],
               "cost_usd": "0.0042", "answer_text": '{"code": "503"}', "seconds": 1.0}
        result = {"models": {"m": {"cases": {"c": {
            "passed": 9, "runs": 10, "qualified": True, "lower_bound": 0.6,
            "confidence": 0.95}}}}}
        root = ET.fromstring(reports.junit_xml({0: row}, [(0, {"id": "c"}, "m")], ["m"],
                                               result).encode())
        return root.find("testsuite"), root.find("testsuite/testcase")

    def test_the_report_begins_with_the_xml_declaration(self):
        self.assertTrue(reports.junit_xml({}, [], []).startswith(
            '<?xml version="1.0" encoding="UTF-8"?>\n<testsuites '), "no declaration first")

    def test_the_testsuites_element_names_the_runner(self):
        root = ET.fromstring(reports.junit_xml({}, [], []).encode())
        self.assertEqual(root.get("name"), "agent regression runner")

    def test_a_small_run_is_this_exact_indented_document(self):
        # One element a line, as a reader of the CI artifact sees it.
        rows = {0: {"passed": True, "reasons": [], "cost_usd": "0.0042", "seconds": 1.5},
                1: {"passed": False, "reasons": ["wrong_code"], "cost_usd": None,
                    "seconds": 2.25, "answer_text": "{}"}}
        plan = [(0, {"id": "c"}, "m"), (1, {"id": "c"}, "m"), (2, {"id": "c"}, "m")]
        self.assertEqual(reports.junit_xml(rows, plan, ["m"]), """\
<?xml version="1.0" encoding="UTF-8"?>
<testsuites name="agent regression runner">
  <testsuite name="m" tests="3" failures="1" errors="0" skipped="1" time="3.750">
    <testcase classname="m" name="c on m [repeat 0]" file="regression.py" time="1.500">
      <properties>
        <property name="cost_usd" value="0.0042" />
      </properties>
    </testcase>
    <testcase classname="m" name="c on m [repeat 1]" file="regression.py" time="2.250">
      <properties>
        <property name="cost_usd" value="None" />
      </properties>
      <failure type="check_failed" message="wrong_code; cost unknown">wrong_code; cost unknown
answer: {}</failure>
    </testcase>
    <testcase classname="m" name="c on m [repeat 2]" file="regression.py" time="0.000">
      <skipped message="not run: the run stopped early" />
    </testcase>
  </testsuite>
</testsuites>
""")

    def test_an_allowed_failure_of_a_qualified_plan_is_no_failure(self):
        suite, testcase = self.allowed_failure()
        self.assertEqual((suite.get("tests"), suite.get("failures"), suite.get("errors")),
                         ("1", "0", "0"))
        self.assertIsNone(testcase.find("failure"))

    def test_a_testcase_carries_its_pass_rate_bound_as_a_property(self):
        _, testcase = self.allowed_failure()
        bound = testcase.find("properties/property[@name='pass_rate_lower_bound']")
        self.assertEqual(bound.get("value"), "0.6 at 0.95")

    def test_an_allowed_failure_names_its_reasons_in_a_property(self):
        _, testcase = self.allowed_failure()
        allowed = testcase.find("properties/property[@name='allowed_failure']")
        self.assertEqual(allowed.get("value"), "wrong_code, wrong_next_action")

    def test_an_allowed_failure_is_told_in_system_out(self):
        _, testcase = self.allowed_failure()
        self.assertEqual(testcase.find("system-out").text,
                         "allowed failure of a qualified plan: wrong_code, wrong_next_action; "
                         "9/10 passed, pass rate >= 60.0 % (95 %); cost $0.0042\n"
                         'answer: {"code": "503"}')


class MarkdownTextTest(unittest.TestCase):
    """The exact Markdown text GitHub renders in a step summary, pure."""

    def test_run_totals_are_one_exact_table_row_per_model(self):
        table = [  # (qualified, seconds of its rows, cost): the row shown
            (True, [1.0, 3.0, 9.0], "0.01", "| m | 1/1 | yes | $0.01 | 3.0 |"),
            (False, [None], None, "| m | 1/1 | **no** | unknown | - |"),
        ]
        for qualified, seconds, cost, line in table:
            with self.subTest(qualified=qualified, seconds=seconds):
                result = {"models": {"m": {"passed": 1, "total": 1, "qualified": qualified,
                                           "reported_cost_usd": cost,
                                           "cases": {"c": {"passed": 1, "runs": 1}}}}}
                rows = [{"model": "m", "case_id": "c", "seconds": s, "reasons": [],
                         "passed": True} for s in seconds]
                text = reports.run_markdown("Run", result, rows, [{"id": "c"}], "PASS")
                self.assertIn("\n| model | passed | qualified | reported cost | median s |\n"
                              "|---|---|---|---|---|\n" + line + "\n", text)

    def test_the_grid_shows_flaky_and_unrun_cases(self):
        result = {"models": {"m": {"passed": 1, "total": 2, "qualified": False,
                                   "reported_cost_usd": None,
                                   "cases": {"c": {"passed": 1, "runs": 2, "flaky": True},
                                             "e": {"passed": 0, "runs": 0, "no_verdict": 1}}}}}
        text = reports.run_markdown("Run", result, [],
                                    [{"id": "c"}, {"id": "d"}, {"id": "e"}], "FAIL")
        table = [("c", "| c | 1/2 FLAKY |"), ("d", "| d | not run |"),  # d: not in the result
                 ("e", "| e | no verdict |")]
        for case_id, line in table:
            with self.subTest(case=case_id):
                self.assertIn("\n" + line + "\n", text)

    def test_a_comparison_summary_is_the_exact_markdown(self):
        self.assertEqual(
            reports.compare_markdown("T", [], []),
            "<!-- agent regression runner summary -->\n## T\n\n"
            "| label | cases |\n|---|---|\n| NEW_FAILURE | 0 |\n| WORSE | 0 |\n"
            "| RECOVERED | 0 |\n| BETTER | 0 |\n| STILL_FAILING | 0 |\n| PASS | 0 |\n\n"
            "Every compared case passed both times.\n\n")


def no_step_summary(test):
    """An environment without $GITHUB_STEP_SUMMARY, as on a developer's machine,
    even when the tests themselves run in a GitHub Actions step."""
    patcher = mock.patch.dict(os.environ)
    patcher.start()
    test.addCleanup(patcher.stop)
    os.environ.pop("GITHUB_STEP_SUMMARY", None)


class OutputProblemTest(unittest.TestCase):
    """Where a report may go: never over or into a file this tool did not write."""

    def setUp(self):
        no_step_summary(self)
        self.folder = temp_dir(self)

    def path(self, name):
        return os.path.join(self.folder, name)

    def write(self, name, text):
        return write_text(self.path(name), text)

    def assert_untouched(self, check):
        """check() with the folder's files and their bytes the same after as before."""
        def snapshot():
            found = {}
            for name in os.listdir(self.folder):
                path = self.path(name)
                if os.path.isfile(path):
                    with open(path, "rb") as handle:
                        found[name] = handle.read()
                else:
                    found[name] = None
            return found

        before = snapshot()
        result = check()
        self.assertEqual(snapshot(), before)
        return result

    def test_files_of_others_are_refused(self):
        with open(os.path.join(HERE, "reports.py"), encoding="utf-8") as handle:
            source = handle.read()
        self.assertIn(reports.HTML_MARK, source[:4096])  # the copy that was once replaced
        os.mkdir(self.path("sub"))
        table = [
            ("Makefile", "all:\n\techo hi\n", "markdown", "is not a Markdown summary"),
            (".gitignore", "*.pyc\n", "markdown", "is not a Markdown summary"),
            ("Dockerfile", "FROM python:3.12\n", "markdown", "is not a Markdown summary"),
            (".bashrc", "export EDITOR=vi\n", "markdown", "is not a Markdown summary"),
            ("notes.md", "# My notes\n", "markdown", "is not a Markdown summary"),
            ("tool.py", "print(1)\n", "markdown", "named like code or data"),
            ("old.json", '{"runs": []}', "markdown", "JSON or XML"),
            ("new.json", None, "markdown", "ending in .md or .markdown"),
            ("new.xml", None, "markdown", "ending in .md or .markdown"),
            ("new.py", None, "markdown", "ending in .md or .markdown"),
            ("summary", None, "markdown", "ending in .md or .markdown"),
            ("__init__.py", "", "markdown", "ending in .md or .markdown"),
            ("reports.py", source, "html", "not a report page written by this tool"),
            ("copy.html", source, "html", "not a report page written by this tool"),
            ("marked.html", reports.HTML_MARK + "\n<p>mine</p>", "html", "not a report page"),
            ("note.xml", "Our reports begin with " + reports.JUNIT_START, "junit",
             "not a JUnit report written by this tool"),
            ("empty.xml", "", "junit", "not a JUnit report"),
            ("s.md", reports.SUMMARY_MARK, "junit", "not a JUnit report"),
            ("j.xml", reports.JUNIT_START, "html", "not a report page"),
            ("sub", None, "markdown", "it is a folder"),
            ("none/r.md", None, "markdown", "does not exist"),
        ]
        for name, text, kind, words in table:
            with self.subTest(name=name, kind=kind):
                if text is not None:
                    self.write(name, text)
                problem = self.assert_untouched(
                    lambda: reports.output_problem(self.path(name), kind))
                self.assertIn(words, problem or "")
                self.assertEqual(len(problem.splitlines()), 1)
                self.assertTrue(problem.endswith(("file", "path")), problem)

    def test_a_fifo_or_a_device_is_refused(self):
        os.mkfifo(self.path("pipe.xml"))
        for path in (self.path("pipe.xml"), "/dev/null"):
            for kind in ("junit", "markdown", "html"):
                with self.subTest(path=path, kind=kind):
                    self.assertEqual(reports.output_problem(path, kind),
                                     "it is not a regular file")

    def test_new_empty_and_own_files_are_accepted(self):
        junit = reports.junit_xml({}, [], [])
        page = evidence_page.run_page({}, lambda url: None)
        table = [
            ("s.md", None, "markdown"),
            ("S.MARKDOWN", None, "markdown"),
            ("empty.md", "", "markdown"),
            ("earlier.md", reports.SUMMARY_MARK + "## Regression run\n", "markdown"),
            ("earlier.txt", reports.SUMMARY_MARK + "## Regression run\n", "markdown"),
            ("j.xml", None, "junit"),
            ("old.xml", junit, "junit"),
            ("p.html", None, "html"),
            ("old.html", page, "html"),
        ]
        for name, text, kind in table:
            with self.subTest(name=name, kind=kind):
                if text is not None:
                    self.write(name, text)
                self.assertIsNone(self.assert_untouched(
                    lambda: reports.output_problem(self.path(name), kind)))

    def test_the_step_summary_is_accepted_whatever_it_holds(self):
        table = [
            ("step_summary_1", "## Earlier step\n\nits own Markdown\n"),
            ("step_summary_2", '{"json": "from an earlier step"}'),
            ("step_summary_3", ""),
            ("step_summary_4", None),  # not created yet
        ]
        for name, text in table:
            with self.subTest(name=name):
                path = self.path(name) if text is None else self.write(name, text)
                with mock.patch.dict(os.environ, {"GITHUB_STEP_SUMMARY": path}):
                    self.assertIsNone(self.assert_untouched(
                        lambda: reports.output_problem(path, "markdown")))
                    # Only that very file: its neighbour is judged as any other file.
                    self.assertIsNotNone(reports.output_problem(self.write("other", "x"),
                                                                "markdown"))

    def test_an_unwritable_folder_is_refused(self):
        locked = os.path.join(self.folder, "locked")
        os.mkdir(locked)
        os.chmod(locked, 0o555)
        self.addCleanup(os.chmod, locked, 0o700)
        # Nothing can be created in /proc, even by root; a read-only folder stops
        # everyone else.
        table = [("/proc", None), (locked, "root writes in a read-only folder")]
        for folder, root_skip in table:
            for kind, name in (("junit", "r.xml"), ("html", "r.html"), ("markdown", "r.md")):
                with self.subTest(folder=folder, kind=kind):
                    if root_skip and os.geteuid() == 0:
                        self.skipTest(root_skip)
                    problem = reports.output_problem(os.path.join(folder, name), kind)
                    self.assertRegex(problem or "", rf"^cannot write in folder {folder} "
                                                    r"\(.+\); choose another path$")

    def test_an_own_report_in_an_unwritable_folder_is_refused(self):
        # A report is replaced by a new file in the same folder. /proc/self/fd/N
        # names an open file of ours in a folder where no file can be created.
        for kind, text in (("junit", reports.junit_xml({}, [], [])),
                           ("html", evidence_page.run_page({}, lambda url: None))):
            with self.subTest(kind=kind), open(self.write("report", text)) as handle:
                path = f"/proc/self/fd/{handle.fileno()}"
                self.assertIn("cannot write in folder /proc/self/fd",
                              reports.output_problem(path, kind) or "")

    def test_an_unwritable_summary_is_refused(self):
        read_only = self.write("read-only.md", "")
        os.chmod(read_only, 0o444)
        # /proc/sys/kernel/ostype opens for reading only, even for root.
        table = [("/proc/sys/kernel/ostype", None),
                 (read_only, "root writes in a read-only file")]
        for path, root_skip in table:
            with self.subTest(path=path):
                if root_skip and os.geteuid() == 0:
                    self.skipTest(root_skip)
                with mock.patch.dict(os.environ, {"GITHUB_STEP_SUMMARY": path}):
                    problem = reports.output_problem(path, "markdown")
                self.assertRegex(problem or "", r"^cannot write to it \(.+\); choose another path$")

    def test_a_link_to_a_missing_file_is_refused(self):
        # Appending through it would create its target, in a folder never checked.
        link = self.path("s.md")
        os.symlink(os.path.join(self.folder, "elsewhere", "target.md"), link)
        for kind in ("markdown", "junit", "html"):
            with self.subTest(kind=kind):
                self.assertEqual(reports.output_problem(link, kind),
                                 "it is a link to a missing file; name another file")

    def test_a_path_through_a_file_is_refused_with_the_system_reason(self):
        # stat fails with ENOTDIR, no FileNotFoundError: its words, not a Python repr.
        self.write("file.txt", "x")
        for kind in ("junit", "html", "markdown"):
            with self.subTest(kind=kind):
                self.assertEqual(reports.output_problem(self.path("file.txt/r.md"), kind),
                                 "Not a directory")

    def test_the_writers_begin_as_the_check_demands(self):
        result = {"models": {"m": {"passed": 1, "total": 1, "qualified": True,
                                   "reported_cost_usd": "0.01",
                                   "cases": {"c": {"passed": 1, "runs": 1}}}}}
        rows = [{"model": "m", "case_id": "c", "seconds": 1.0, "reasons": [], "passed": True}]
        views = [
            ("run.md", "markdown",
             reports.run_markdown("Run", result, rows, [{"id": "c"}], "PASS")),
            ("compare.md", "markdown", reports.compare_markdown("Compare", [], [])),
            ("j.xml", "junit", reports.junit_xml({0: rows[0]}, [(0, {"id": "c"}, "m")], ["m"])),
            ("run.html", "html", evidence_page.run_page({}, lambda url: None)),
            ("compare.html", "html",
             evidence_page.comparison_page({}, {}, [], [], lambda url: None)),
        ]
        for name, kind, text in views:
            with self.subTest(name=name):
                self.assertTrue(text.startswith(reports.STARTS[kind].decode()), text[:200])
                path = self.write(name, text)
                self.assertIsNone(reports.output_problem(path, kind))


if __name__ == "__main__":
    unittest.main()
