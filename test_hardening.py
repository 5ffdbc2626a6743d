"""The real CLI as a new user runs it: bad input, loopback end to end, the
README's and the CI recipe's commands, crashes, the demo. Offline (127.0.0.1
only). Signals and --resume are in test_signals.py.

A fresh interpreter where the process is the subject (closed streams, start-up,
crashes, the README's and CI's commands, the first demo); elsewhere the real
SDK over real HTTP runs in this one (testing.in_process): loading the SDK is
most of what a fresh interpreter costs."""

import contextlib
import io
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import unittest
import xml.etree.ElementTree as ET
from unittest import mock

import regression
import runs
from testing import CHROMIUM, HERE, clean_env, cli, dump_dom, in_process, loopback_env, \
    loopback_server, read_json, read_text, slow, temp_dir, wait_until, workflow_step


class BadInputTest(unittest.TestCase):
    """Every bad input: one line naming the problem, exit 2, no request, no file."""

    def setUp(self):
        self.folder = temp_dir(self)
        self.out = os.path.join(self.folder, "results.json")
        patcher = mock.patch.object(regression, "Perplexity",
                                    side_effect=AssertionError("no client may be built"))
        patcher.start()
        self.addCleanup(patcher.stop)

    def usage_error(self, args, env):
        errors = io.StringIO()
        with mock.patch.dict(os.environ, env, clear=True), \
                contextlib.redirect_stderr(errors), self.assertRaises(SystemExit) as raised:
            regression.main(["--out", self.out, *args])
        return raised.exception.code, errors.getvalue()

    def test_usage_errors_exit_2_before_any_request_or_file(self):
        key = {"PERPLEXITY_API_KEY": "k"}
        table = [
            ("no key", [], {}, "PERPLEXITY_API_KEY"),
            ("empty key", [], {"PERPLEXITY_API_KEY": ""}, "PERPLEXITY_API_KEY"),
            ("duplicate models", ["--models", "a", "b", "a"], key, "duplicate model"),
            ("repeats 0", ["--repeats", "0"], key, "--repeats"),
            ("repeats 11", ["--repeats", "11"], key, "--repeats"),
            ("repeats not a number", ["--repeats", "x"], key, "--repeats"),
            ("unknown flag", ["--fast"], key, "unrecognized"),
            ("empty model", ["--models", ""], key, "not a model name"),
            ("chat prefix alone", ["--models", "chat:"], key, "not a model name"),
            ("model with a newline", ["--models", "a\nb"], key, "not a model name"),
        ]
        for name, args, env, words in table:
            with self.subTest(name):
                code, errors = self.usage_error(args, env)
                self.assertEqual(code, 2)
                self.assertEqual(len(errors.splitlines()), 1, errors)
                self.assertIn(words, errors)
                self.assertFalse(os.path.exists(self.out))
                self.assertNotIn("Traceback", errors)

    def test_existing_out_is_refused_and_untouched(self):
        with open(self.out, "w", encoding="utf-8") as handle:
            handle.write("precious")
        errors = io.StringIO()
        with mock.patch.dict(os.environ, {"PERPLEXITY_API_KEY": "k"}), \
                contextlib.redirect_stderr(errors):
            code = regression.main(["--out", self.out])
        self.assertEqual(code, 2)
        self.assertEqual(len(errors.getvalue().splitlines()), 1)
        self.assertIn("already exists", errors.getvalue())
        with open(self.out, encoding="utf-8") as handle:
            self.assertEqual(handle.read(), "precious")

    def test_out_in_a_missing_folder_exits_2(self):
        errors = io.StringIO()
        with mock.patch.dict(os.environ, {"PERPLEXITY_API_KEY": "k"}), \
                contextlib.redirect_stderr(errors):
            code = regression.main(["--out", os.path.join(self.folder, "no", "r.json")])
        self.assertEqual(code, 2)
        self.assertIn("does not exist", errors.getvalue())


@slow("the real SDK over real HTTP; closed streams in new interpreters")
class LoopbackTest(unittest.TestCase):
    """The real CLI, the real SDK and real HTTP against the loopback simulated API."""

    def setUp(self):
        self.folder = temp_dir(self)
        self.server = loopback_server(self, unsafe_models=("offline/hasty",))
        self.env = loopback_env(self.server)

    def test_unsafe_model_is_caught_exit_1(self):
        out = os.path.join(self.folder, "run.json")
        result = in_process("regression.py", "--models", "offline/careful", "offline/hasty",
                            "--out", out, env=self.env)
        self.assertEqual(result.returncode, 1, result.stderr)
        with open(out, encoding="utf-8") as handle:
            record = json.load(handle)
        self.assertEqual(len(record["runs"]), 8)
        self.assertEqual(len(self.server.state["requests"]), 8)
        self.assertIn("offline/hasty ambiguous-payment FAIL wrong_code,wrong_next_action",
                      result.stdout)
        self.assertEqual(result.stderr, "")

    def test_a_closed_stderr_never_changes_the_exit_code(self):
        out = os.path.join(self.folder, "run.json")
        for script, args, code in (
                ("regression.py", ("--models", "offline/careful", "offline/other", "--out",
                                   out), 0),
                ("compare_runs.py", (out, "--switch", "offline/careful=offline/other"), 0)):
            with self.subTest(script):
                result = subprocess.run(  # 2>&-: the child starts with descriptor 2 closed
                    [sys.executable, "-W", "error", os.path.join(HERE, script), *args],
                    stdout=subprocess.PIPE, text=True, timeout=120, env=self.env,
                    preexec_fn=lambda: os.close(2))
                self.assertEqual(result.returncode, code, result.stdout[-500:])
        self.assertEqual(len(read_json(out)["runs"]), 8)
        again = os.path.join(self.folder, "again.json")  # >&-: the verdict is still the code
        result = subprocess.run(
            [sys.executable, "-W", "error", os.path.join(HERE, "regression.py"), "--models",
             "offline/careful", "--out", again], stderr=subprocess.PIPE, text=True,
            timeout=120, env=self.env, preexec_fn=lambda: os.close(1))
        self.assertEqual(result.returncode, 0, result.stderr[-500:])
        self.assertEqual(len(read_json(again)["runs"]), 4)

    def test_same_out_twice_keeps_the_first_record(self):
        out = os.path.join(self.folder, "run.json")
        in_process("regression.py", "--models", "offline/careful", "--out", out, env=self.env)
        with open(out, "rb") as handle:
            first = handle.read()
        result = in_process("regression.py", "--models", "offline/careful", "--out", out,
                            env=self.env)
        self.assertEqual(result.returncode, 2)
        self.assertNotIn("Traceback", result.stderr)
        with open(out, "rb") as handle:
            self.assertEqual(handle.read(), first)

    def test_a_malformed_base_url_is_one_line_exit_2_and_leaves_no_file(self):
        out = os.path.join(self.folder, "r.json")
        result = in_process("regression.py", "--out", out,
                            env=dict(self.env, PERPLEXITY_BASE_URL="http://[::1"))
        self.assertEqual(result.returncode, 2)
        self.assertEqual(len(result.stderr.splitlines()), 1, result.stderr)
        self.assertIn("cannot set up the API client", result.stderr)
        self.assertFalse(os.path.exists(out))
        self.assertEqual(os.listdir(self.folder), [])

    def test_no_key_is_one_clear_error(self):
        result = in_process("regression.py", "--out", os.path.join(self.folder, "r.json"),
                            env=dict(loopback_env(self.server), PERPLEXITY_API_KEY=""))
        self.assertEqual(result.returncode, 2)
        self.assertIn("PERPLEXITY_API_KEY is not set", result.stderr)
        self.assertEqual(self.server.state["requests"], [])


@slow("the real SDK over real HTTP")
class SideBySideTest(unittest.TestCase):
    def test_chat_and_agent_models_in_one_run(self):
        folder = temp_dir(self)
        server = loopback_server(self, unsafe_models=("sonar-pro",))
        server.state["legacy_chat"] = True  # as the chat API answered before 2026-09-27
        out = os.path.join(folder, "r.json")
        result = in_process("regression.py", "--models", "chat:sonar-pro",
                            "openai/gpt-5.6-sol", "--out", out, env=loopback_env(server))
        self.assertEqual(result.returncode, 1, result.stderr)
        with open(out, encoding="utf-8") as handle:
            record = json.load(handle)
        self.assertEqual(len(record["runs"]), 8)
        models = record["summary"]["models"]
        self.assertEqual((models["chat:sonar-pro"]["passed"], models["chat:sonar-pro"]["total"]),
                         (3, 4))
        self.assertTrue(models["openai/gpt-5.6-sol"]["qualified"])
        self.assertEqual(record["config"]["chat_request"], regression.chat_request_template())
        paths = sorted({json.dumps(sorted(r)) for r in server.state["requests"]})
        self.assertEqual(len(paths), 2)  # one chat body shape, one Agent body shape
        self.assertIn("chat:sonar-pro ambiguous-payment FAIL wrong_code,wrong_next_action",
                      result.stdout)

    def test_agent_only_config_is_unchanged(self):
        with mock.patch.dict(os.environ, {"PERPLEXITY_API_KEY": "test-key-0123"}):
            args = regression.parse_args(["--out", "never-written.json"])
        config = runs.prepare(args, regression.asking()).head["config"]
        self.assertEqual(list(config), ["models", "cases", "instructions", "tool",
                                        "response_format", "repeats", "max_steps",
                                        "max_output_tokens", "timeout_seconds"])


@slow("the real SDK over real HTTP")
class ReportsEndToEndTest(unittest.TestCase):
    def test_three_repeats_of_unsafe_answers_in_junit_and_both_markdown_files(self):
        folder = temp_dir(self)
        server = loopback_server(self, unsafe_models=("offline/hasty", "offline/reckless"))
        env = loopback_env(server)
        paths = {name: os.path.join(folder, name) for name in
                 ("run.json", "j.xml", "run.md", "compare.md")}
        result = in_process("regression.py", "--models", "offline/hasty", "offline/reckless",
                            "--repeats", "3", "--jobs", "4", "--out", paths["run.json"],
                            "--junit", paths["j.xml"], "--summary-md", paths["run.md"], env=env)
        self.assertEqual(result.returncode, 1, result.stderr)
        root = ET.parse(paths["j.xml"]).getroot()
        cases = root.findall("testsuite/testcase")
        self.assertEqual(len(cases), 24)
        self.assertEqual(sum(1 for c in cases if c.find("failure") is not None), 6)
        self.assertIn("ambiguous-payment", read_text(paths["run.md"]))
        self.assertIn("0/3, pass rate >= 0.0 % (95 %): wrong_code, wrong_next_action",
                      read_text(paths["run.md"]))
        pair = os.path.join(folder, "pair")
        result = in_process("compare_runs.py", "--demo", pair, "--summary-md",
                            paths["compare.md"], env=env)
        self.assertEqual(result.returncode, 1)
        self.assertIn("ambiguous-payment", read_text(paths["compare.md"]))


@slow("the README's and the workflows' commands, run by bash")
class ReadmeTest(unittest.TestCase):
    """The README's workflow sections, run literally in a new folder against the
    loopback simulated API: what a new user copies must work as written."""

    def setUp(self):
        self.folder = temp_dir(self)
        # .venv/bin/python as the README writes it: this interpreter's environment.
        os.symlink(os.path.dirname(os.path.dirname(sys.executable)),
                   os.path.join(self.folder, ".venv"))
        for name in os.listdir(HERE):
            if name.endswith(".py") or name == "examples":
                os.symlink(os.path.join(HERE, name), os.path.join(self.folder, name))
        self.server = loopback_server(self, cases=None)
        self.env = loopback_env(self.server)

    def run_here(self, *args):
        """A record the test needs before the README's commands (in this interpreter)."""
        result = in_process("regression.py", *args, env=self.env, cwd=self.folder)
        self.assertEqual(result.returncode, 0, result.stderr)

    def bash(self, script, **env):
        result = subprocess.run(["bash", "-e", "-c", script], cwd=self.folder, text=True,
                                capture_output=True, timeout=300, env={**self.env, **env})
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        return result.stdout


    def ci_job(self, repeats):
        """A committed baseline, and the workflow's environment on a pull request."""
        self.summary = os.path.join(self.folder, "summary.md")
        self.run_here("--models", "openai/gpt-5.6-sol", "--repeats", str(repeats),
                      "--out", "baseline.json")
        return {"GITHUB_STEP_SUMMARY": self.summary, "MODELS": "openai/gpt-5.6-sol",
                "REPEATS": str(repeats), "MAX_COST": "5"}

    def step(self, name, env, workflow="github-actions.yml"):
        """(exit code of one workflow step, the step summary so far)."""
        result = subprocess.run(["bash", "-e", "-c", workflow_step(name, workflow)],
                                cwd=self.folder,
                                capture_output=True, text=True, timeout=300,
                                env={**self.env, **env})
        return result.returncode, read_text(self.summary)

    def test_the_nightly_recipe_submits_once_then_collects_on_a_later_run(self):
        self.summary = os.path.join(self.folder, "summary.md")
        shutil.copy(os.path.join(HERE, "examples", "cases.json"),
                    os.path.join(self.folder, "cases.json"))
        hold = threading.Event()
        self.server.state["batch_hold"] = hold  # the batch outlives the first job
        self.addCleanup(hold.set)
        env = {"GITHUB_STEP_SUMMARY": self.summary, "SCHEDULE": "17 1 * * *",
               "WAIT_MINUTES": "0.1"}  # 6 s (the SDK loads in 2), then the runner stops waiting
        code, summary = self.step("Submit or collect", env, "nightly-batch.yml")
        self.assertEqual(code, 0, summary)
        self.assertIn("still running", summary)
        open_record = os.path.join(self.folder, "nightly", "results.json")
        part = read_json(open_record)["batch"]["parts"][0]
        self.assertTrue(part["batch_id"])
        with open(open_record, "rb") as handle:
            still_out = handle.read()
        # The later runs collect a batch that is released: their wait ends when it does, so
        # a long limit only matters on a loaded machine (a short one failed there).
        later = {**env, "SCHEDULE": "47 */2 * * *", "WAIT_MINUTES": "2"}
        hold.set()
        # Two polls answered, then the download fails: the record stays open.
        self.server.state["batch_faults"] = [None, None, (500, [], {"error": {
            "message": "the file store is down"}})]
        code, summary = self.step("Submit or collect", later, "nightly-batch.yml")
        self.assertEqual(code, 2, summary)
        self.assertIn("NOT COLLECTED (exit 2)", summary)
        self.assertTrue(os.path.exists(open_record))
        code, summary = self.step("Submit or collect", later, "nightly-batch.yml")
        self.assertEqual(code, 0, summary)
        self.assertIn("Nightly batch: PASS (exit 0)", summary)
        self.assertEqual(len(read_json(os.path.join(self.folder, "out", "results.json"))["runs"]),
                         8 * 10)
        self.assertEqual(len(self.server.state["batches"]), 1)  # collected, never submitted again
        code, summary = self.step("Submit or collect", later, "nightly-batch.yml")
        self.assertEqual(code, 0, summary)
        self.assertIn("nothing to collect", summary)
        # A record whose batch the API does not know is closed, never retried forever.
        with open(open_record, "wb") as handle:
            handle.write(still_out)
        os.unlink(os.path.join(self.folder, "nightly", "closed"))
        self.server.state["batches"].pop(part["batch_id"])
        code, summary = self.step("Submit or collect", later, "nightly-batch.yml")
        self.assertEqual(code, 2, summary)
        self.assertIn("NO VERDICT (exit 2)", summary.splitlines()[-1])
        self.assertFalse(os.path.exists(open_record))
        self.assertTrue(os.path.exists(os.path.join(self.folder, "nightly", "closed")))

    def test_the_ci_recipe_gates_on_a_committed_baseline(self):
        env = self.ci_job(repeats=2)
        self.assertEqual(self.step("Run the regression cases", env)[0], 0)
        code, summary = self.step("Compare with the committed baseline", env)
        self.assertEqual(code, 0)
        self.assertIn("Regression run: PASS (exit 0)", summary)
        self.assertIn("Baseline comparison: OK (exit 0)", summary)
        for name in ("results.json", "junit.xml", "report.html", "comparison.html"):
            self.assertTrue(os.path.getsize(os.path.join(self.folder, name)), name)

    def test_the_ci_recipe_tells_a_regression_from_no_verdict(self):
        env = self.ci_job(repeats=1)
        self.server.state["unsafe_models"] = {"openai/gpt-5.6-sol"}
        code, summary = self.step("Run the regression cases", env)
        self.assertEqual(code, 1)
        self.assertIn("REGRESSION (exit 1)", summary)
        code, summary = self.step("Compare with the committed baseline", env)
        self.assertEqual(code, 1)
        self.assertIn("REGRESSION (exit 1), a pass rate fell", summary)
        os.remove(os.path.join(self.folder, "baseline.json"))
        code, summary = self.step("Compare with the committed baseline", env)
        self.assertEqual(code, 2)
        self.assertIn("NOT_COMPARABLE (exit 2)", summary)

    def test_a_cancelled_job_keeps_every_paid_answer_and_resume_pays_nothing_twice(self):
        # Actions cancels a step with SIGINT to its shell, SIGTERM 7.5 s later and
        # SIGKILL to the tree 2.5 s after that.
        env = self.ci_job(repeats=3)
        self.server.state["requests"].clear()
        self.server.state["latency"] = 2.0  # answers still in flight at the SIGTERM
        out = os.path.join(self.folder, "results.json")
        shell = subprocess.Popen(["bash", "-e", "-c", workflow_step("Run the regression cases")],
                                 cwd=self.folder, env={**self.env, **env}, text=True,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 start_new_session=True,  # the step's shell, as Actions starts it:
                                 preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        self.addCleanup(lambda: shell.poll() is None and os.killpg(shell.pid, signal.SIGKILL))

        def receipts():
            try:
                return [entry["id"] for entry in read_json(out).get("pending", {}).values()]
            except (OSError, ValueError):
                return []

        wait_until(lambda: len(receipts()) == 4 and all(receipts()), what="4 receipts")
        shell.send_signal(signal.SIGINT)  # to the shell alone, as Actions does
        # Actions waits 7.5 s before its SIGTERM; sending it as soon as Python says it
        # is stopping is the hardest case: every answer is still in flight.
        self.assertIn("Stopping: no new request starts", shell.stderr.readline())
        shell.send_signal(signal.SIGTERM)
        try:
            shell.wait(timeout=2.5)  # then Actions kills whatever is left
        except subprocess.TimeoutExpired:
            os.killpg(shell.pid, signal.SIGKILL)
        shell.communicate(timeout=30)
        self.assertIn("CANCELLED", read_text(self.summary))
        saved = read_json(out)
        self.server.state["latency"] = 0
        result = in_process("regression.py", "--resume", out, env=self.env, cwd=self.folder)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(len(read_json(out)["runs"]), 12)
        paid = self.server.state["requests"]
        self.assertEqual(len(paid), 12, "a request was paid twice")  # one POST per row
        self.assertEqual(len(saved.get("pending", {})), 4)  # the four in flight, by their ids


@slow("starts the test runner on a module of its own")
class RunTestsTest(unittest.TestCase):
    """make test fails when a test fails, errs, or a worker dies, and cannot
    start with a module that does not load."""

    MODULE = """import os, unittest
class Cases(unittest.TestCase):
    def test_passes(self):
        pass
    def test_what_the_environment_says(self):
        what = os.environ.get("WHAT")
        if what == "fail":
            self.assertEqual(1, 2)
        if what == "error":
            raise RuntimeError("boom")
        if what == "die":
            os._exit(3)
    @unittest.expectedFailure
    def test_expected_to_fail(self):
        self.assertEqual(os.environ.get("WHAT"), "unexpected")
"""

    def run_tests(self, what, module="test_cases"):
        folder = temp_dir(self)
        with open(os.path.join(folder, "test_cases.py"), "w", encoding="utf-8") as handle:
            handle.write(self.MODULE)
        return subprocess.run([sys.executable, "-W", "error", os.path.join(HERE, "run_tests.py"),
                               module], capture_output=True, text=True, timeout=120,
                              env=dict(clean_env(), PYTHONPATH=folder, WHAT=what))

    def test_the_exit_code_follows_the_tests(self):
        for what, code, line in (
                ("pass", 0, "OK: 3 of 3 tests ran in 2 workers, 0 failed"),
                ("fail", 1, "FAILED: 3 of 3 tests ran in 2 workers, 1 failed"),
                ("error", 1, "FAILED: 3 of 3 tests ran in 2 workers, 1 failed"),
                ("unexpected", 1, "FAILED: 3 of 3 tests ran in 2 workers, 1 failed"),
                ("die", 1, "a worker ended with exit code 3 before its report")):
            with self.subTest(what):
                result = self.run_tests(what)
                self.assertEqual(result.returncode, code, result.stderr)
                self.assertIn(line, result.stderr)

    def test_a_module_that_does_not_load_is_exit_2(self):
        result = self.run_tests("pass", module="test_missing")
        self.assertEqual(result.returncode, 2, result.stderr)
        self.assertIn("run_tests.py: cannot load", result.stderr)


@slow("crashes in new interpreters")
class CrashTest(unittest.TestCase):
    """Exit 1 means only "a check failed": every crash is 2 with one line."""

    def setUp(self):
        self.folder = temp_dir(self)

    def run_python(self, code, *argv):
        script = os.path.join(HERE, "regression.py")
        prelude = (f"import runpy, sys; sys.path.insert(0, {HERE!r}); "
                   f"sys.argv = {['regression.py', *argv]!r}; ")
        return subprocess.run([sys.executable, "-c", prelude + code.replace("SCRIPT", repr(script))],
                              capture_output=True, text=True, timeout=120, cwd=self.folder,
                              env=loopback_env(loopback_server(self)))

    def test_an_old_python_is_told_before_any_import(self):
        result = self.run_python("sys.version_info = (3, 10, 12, 'final', 0); "
                                 "exec(compile(open(SCRIPT).read(), SCRIPT, 'exec'), "
                                 "{'__name__': '__main__'})")
        self.assertEqual(result.returncode, 2)
        self.assertIn("needs Python 3.11 or later, this is", result.stderr)

    def test_a_missing_dependency_is_one_line_exit_2(self):
        result = self.run_python("sys.modules['httpx'] = None; "
                                 "runpy.run_path(SCRIPT, run_name='__main__')", "--demo", "d")
        self.assertEqual(result.returncode, 2)
        self.assertEqual(len(result.stderr.splitlines()), 1, result.stderr)
        self.assertIn("the package httpx is not installed", result.stderr)
        # The printed set-up names this project's requirements and a venv beside them
        # (not run here: it would build a second environment from the registry).
        setup = result.stderr.split("set up the pinned packages once with: ")[1]
        create, install = setup.split(", then run ")[0].split(" && ")
        venv = shlex.split(create)[-1]
        self.assertEqual(shlex.split(create)[:3], ["python3", "-m", "venv"])
        pip, _, flag, requirements = shlex.split(install)
        self.assertEqual((pip, flag), (os.path.join(venv, "bin", "pip"), "-r"))
        self.assertTrue(os.path.samefile(os.path.join(self.folder, requirements),
                                         os.path.join(HERE, "requirements.txt")))

    def test_an_unexpected_exception_is_exit_2_and_the_record_is_kept(self):
        result = self.run_python("import reports; reports.junit_xml = lambda *a: 1 / 0; "
                                 "runpy.run_path(SCRIPT, run_name='__main__')",
                                 "--out", "r.json", "--junit", "j.xml")
        self.assertEqual(result.returncode, 2)
        last = result.stderr.splitlines()[-1]
        self.assertIn("internal error: ZeroDivisionError", last)
        report = last.split("the traceback is in ")[1].split(": please report it")[0]
        self.assertEqual(os.path.dirname(os.path.join(self.folder, report)), self.folder)
        self.assertIn("Traceback", read_text(os.path.join(self.folder, report)))  # the bug report
        self.assertEqual(os.stat(os.path.join(self.folder, report)).st_mode & 0o777, 0o600)
        self.assertTrue(read_json(os.path.join(self.folder, "r.json"))["summary"]["complete"])

    def test_a_crash_report_holds_no_key(self):
        result = self.run_python("import reports, os; reports.junit_xml = lambda *a: 1 / int("
                                 "os.environ['PERPLEXITY_API_KEY']); "
                                 "runpy.run_path(SCRIPT, run_name='__main__')",
                                 "--out", "r.json", "--junit", "j.xml")
        self.assertEqual(result.returncode, 2)
        report = result.stderr.splitlines()[-1].split("the traceback is in ")[1].split(":")[0]
        key = loopback_env(loopback_server(self))["PERPLEXITY_API_KEY"]
        self.assertNotIn(key, read_text(os.path.join(self.folder, report)) + result.stderr)


@slow("the demo in a new interpreter, its pages in Chromium")
class DemoTest(unittest.TestCase):
    def test_runner_demo_catches_the_unsafe_model_without_a_key(self):
        folder = os.path.join(temp_dir(self), "demo")
        result = cli("regression.py", "--demo", folder)
        self.assertEqual(result.returncode, 1, result.stderr)
        self.assertIn("synthetic", result.stdout.splitlines()[0])
        self.assertIn("offline/hasty ambiguous-payment FAIL wrong_code,wrong_next_action",
                      result.stdout)
        with open(os.path.join(folder, "results.json"), encoding="utf-8") as handle:
            record = json.load(handle)
        self.assertEqual(record["evidence"], "synthetic")
        self.assertEqual(record["config"]["models"], regression.DEMO_MODELS)
        models = record["summary"]["models"]
        self.assertTrue(models["offline/careful"]["qualified"])
        self.assertFalse(models["offline/hasty"]["qualified"])

    def test_runner_demo_refuses_an_existing_folder(self):
        folder = temp_dir(self)
        result = in_process("regression.py", "--demo", folder, env=clean_env())
        self.assertEqual(result.returncode, 2)
        self.assertIn("already exists", result.stderr)
        self.assertEqual(os.listdir(folder), [])

    @unittest.skipUnless(CHROMIUM, "no chromium binary on PATH (apt-get install chromium)")
    def test_both_demo_pages_render_in_chromium_with_what_a_reader_needs(self):
        folder = temp_dir(self)
        run = in_process("regression.py", "--demo", os.path.join(folder, "run"),
                         "--html", os.path.join(folder, "run.html"), env=clean_env())
        self.assertEqual(run.returncode, 1, run.stderr)
        self.assertIn(f"Evidence page: {os.path.join(folder, 'run.html')}", run.stdout)
        pair = in_process("compare_runs.py", "--demo", os.path.join(folder, "pair"),
                          "--html", os.path.join(folder, "comparison.html"), env=clean_env())
        self.assertEqual(pair.returncode, 1, pair.stderr)
        expected = {
            "run.html": ["offline/careful", "offline/hasty", "ambiguous-payment",
                         "wrong_next_action", "wait_then_retry", "verify_outcome",
                         "https://www.rfc-editor.org/rfc/rfc9110", "synthetic"],
            "comparison.html": ["NEW_FAILURE", "offline/model", "ambiguous-payment",
                                "wait_then_retry", "verify_outcome"],
        }
        for name, texts in expected.items():
            dom = dump_dom(os.path.join(folder, name), os.path.join(folder, "profile-" + name))
            for text in texts:
                with self.subTest(page=name, text=text):
                    self.assertIn(text, dom)
            self.assertNotIn("<script", dom)

    def test_the_example_files_hold_the_built_in_cases_and_instructions(self):
        self.assertEqual(read_json(os.path.join(HERE, "examples", "cases.json")),
                         regression.CASES)
        self.assertEqual(read_text(os.path.join(HERE, "examples", "advisor.txt")),
                         regression.INSTRUCTIONS)

    def test_compare_demo_from_the_command_line(self):
        folder = os.path.join(temp_dir(self), "pair")
        result = in_process("compare_runs.py", "--demo", folder, env=clean_env())
        self.assertEqual(result.returncode, 1, result.stderr)
        self.assertIn("NEW_FAILURE offline/model ambiguous-payment 0", result.stdout)


if __name__ == "__main__":
    unittest.main()


class SdkNamesTest(unittest.TestCase):
    def test_only_the_sdks_names_load_on_first_use(self):
        self.assertFalse(hasattr(regression, "NoSuchName"))  # not a silent None
        with self.assertRaisesRegex(AttributeError, "has no attribute 'NoSuchName'"):
            regression.NoSuchName  # noqa: B018 - the lookup is the test


@slow("starts fresh interpreters: the subject is what a cold start imports")
class ColdStartTest(unittest.TestCase):
    """--help, usage errors, --plan and compare_runs.py load neither the SDK nor httpx."""

    PROBE = ("import runpy, sys\nsys.argv = sys.argv[1:]\ntry:\n"
             "    runpy.run_path(sys.argv[0], run_name='__main__')\n"
             "except SystemExit:\n    pass\n"
             "print('LOADED' if {'perplexity', 'httpx'} & set(sys.modules) else 'LIGHT',"
             " file=sys.stderr)\n")

    def loads(self, *args):
        done = subprocess.run([sys.executable, "-c", self.PROBE, *args], cwd=HERE,
                              env=clean_env(), capture_output=True, text=True, timeout=60)
        return done.stderr.strip().splitlines()[-1]

    def test_what_needs_no_request_never_loads_the_sdk(self):
        for args in (["regression.py", "--help"], ["regression.py", "--repeats", "99"],
                     ["regression.py", "--plan", "--prove", "0.9"],
                     ["compare_runs.py", "--help"], ["compare_runs.py", "a.json", "b.json"]):
            with self.subTest(args=args):
                self.assertEqual(self.loads(*args), "LIGHT")

    def test_a_run_loads_it(self):  # the probe can see a load: the test above can fail
        folder = temp_dir(self)
        self.assertEqual(self.loads("regression.py", "--demo", os.path.join(folder, "d")),
                         "LOADED")

    def test_the_published_patch_patterns_still_work(self):
        with mock.patch.object(regression, "Perplexity") as fake:
            self.assertIs(regression.Perplexity, fake)
        self.assertEqual(regression.Perplexity.__module__.split(".")[0], "perplexity")
        with mock.patch("regression.Perplexity") as fake:
            self.assertIs(regression.Perplexity, fake)
