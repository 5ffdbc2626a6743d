"""Bad input, the real CLI end to end over loopback, and the offline demo. Offline."""

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
from unittest import mock

import regression
import simulated_api

HERE = os.path.dirname(os.path.abspath(__file__))


def temp_dir(test):
    folder = tempfile.mkdtemp()
    test.addCleanup(shutil.rmtree, folder, True)
    return folder


def cli(script, *args, env=None, cwd=None):
    """Run a script as a new user would: a fresh interpreter, no inherited key."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("PERPLEXITY_")}
    return subprocess.run([sys.executable, "-W", "error", os.path.join(HERE, script), *args],
                          capture_output=True, text=True, timeout=120, cwd=cwd,
                          env={**base, **(env or {})})


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
        self.assertIn("cannot write", errors.getvalue())


class EndToEndTest(unittest.TestCase):
    """The real CLI, the real SDK and real HTTP against the loopback simulated API."""

    def setUp(self):
        self.folder = temp_dir(self)
        self.server = simulated_api.start(regression.CASES, unsafe_models=("offline/hasty",))
        self.addCleanup(self.server.stop)
        self.env = {"PERPLEXITY_API_KEY": "test-key", "PERPLEXITY_BASE_URL": self.server.url,
                    "NO_PROXY": "127.0.0.1"}

    def test_unsafe_model_is_caught_exit_1(self):
        out = os.path.join(self.folder, "run.json")
        result = cli("regression.py", "--models", "offline/careful", "offline/hasty",
                     "--out", out, env=self.env)
        self.assertEqual(result.returncode, 1, result.stderr)
        with open(out, encoding="utf-8") as handle:
            record = json.load(handle)
        self.assertEqual(len(record["runs"]), 8)
        self.assertEqual(len(self.server.state["requests"]), 8)
        self.assertIn("offline/hasty ambiguous-payment FAIL wrong_code,wrong_next_action",
                      result.stdout)
        self.assertEqual(result.stderr, "")

    def test_same_out_twice_keeps_the_first_record(self):
        out = os.path.join(self.folder, "run.json")
        cli("regression.py", "--models", "offline/careful", "--out", out, env=self.env)
        with open(out, "rb") as handle:
            first = handle.read()
        result = cli("regression.py", "--models", "offline/careful", "--out", out, env=self.env)
        self.assertEqual(result.returncode, 2)
        self.assertNotIn("Traceback", result.stderr)
        with open(out, "rb") as handle:
            self.assertEqual(handle.read(), first)

    def test_a_malformed_base_url_is_one_line_exit_2_and_leaves_no_file(self):
        out = os.path.join(self.folder, "r.json")
        result = cli("regression.py", "--out", out,
                     env={**self.env, "PERPLEXITY_BASE_URL": "http://[::1"})
        self.assertEqual(result.returncode, 2)
        self.assertEqual(len(result.stderr.splitlines()), 1, result.stderr)
        self.assertIn("cannot set up the API client", result.stderr)
        self.assertFalse(os.path.exists(out))
        self.assertEqual(os.listdir(self.folder), [])

    def test_no_key_is_one_clear_error(self):
        result = cli("regression.py", "--out", os.path.join(self.folder, "r.json"),
                     env={"PERPLEXITY_BASE_URL": self.server.url})
        self.assertEqual(result.returncode, 2)
        self.assertIn("PERPLEXITY_API_KEY is not set", result.stderr)
        self.assertEqual(self.server.state["requests"], [])


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
        result = cli("regression.py", "--demo", folder)
        self.assertEqual(result.returncode, 2)
        self.assertIn("already exists", result.stderr)
        self.assertEqual(os.listdir(folder), [])

    def test_compare_demo_from_the_command_line(self):
        folder = os.path.join(temp_dir(self), "pair")
        result = cli("compare_runs.py", "--demo", folder)
        self.assertEqual(result.returncode, 1, result.stderr)
        self.assertIn("NEW_FAILURE offline/model ambiguous-payment 1", result.stdout)


if __name__ == "__main__":
    unittest.main()
