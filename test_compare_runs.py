"""compare_runs.py: labels, refusals, CAUTION, the demo and exit codes (SPEC A6). Offline."""

import contextlib
import io
import json
import os
import shutil
import tempfile
import unittest

import compare_runs
import regression


def record():
    """A valid record, all four cases passing, from the real check()."""
    return compare_runs.demo_record(unsafe_models=())


def fail(rec, case_id, reasons=("wrong_code",)):
    for row in rec["runs"]:
        if row["case_id"] == case_id:
            row["reasons"], row["passed"] = list(reasons), False
    return rec


def quiet(function, *args):
    output = io.StringIO()
    with contextlib.redirect_stdout(output):
        result = function(*args)
    return result, output.getvalue()


def temp_dir(test):
    folder = tempfile.mkdtemp()
    test.addCleanup(shutil.rmtree, folder, True)
    return folder


class IndexTest(unittest.TestCase):
    def test_valid_record_is_keyed_by_model_case_repeat(self):
        rows = compare_runs.index(record())
        self.assertEqual(sorted(rows), sorted(("offline/model", c["id"], 1)
                                              for c in regression.CASES))

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
            ("models not a list", mutate(lambda r: r["config"].update(models="offline/model"))),
            ("empty cases", mutate(lambda r: r["config"].update(cases=[]))),
            ("duplicate case ids", mutate(lambda r: r["config"]["cases"].append(
                dict(r["config"]["cases"][0])))),
            ("case id not a string", mutate(lambda r: r["config"]["cases"][0].update(id=3))),
            ("repeats zero", mutate(lambda r: r["config"].update(repeats=0))),
            ("repeats True", mutate(lambda r: r["config"].update(repeats=True))),
            ("repeats string", mutate(lambda r: r["config"].update(repeats="1"))),
            ("repeats huge", mutate(lambda r: r["config"].update(repeats=1_000_000_000))),
            ("repeated key", mutate(lambda r: r["runs"].append(dict(r["runs"][0])))),
            ("row with an error", mutate(lambda r: r["runs"][0].update(error="APIStatusError"))),
            ("passed not a bool", mutate(lambda r: r["runs"][0].update(passed=1))),
            ("passed disagrees", mutate(lambda r: r["runs"][0].update(reasons=["wrong_code"]))),
            ("reasons not a list", mutate(lambda r: r["runs"][0].update(reasons="x"))),
            ("missing row", mutate(lambda r: r["runs"].pop())),
            ("extra row", mutate(lambda r: r["runs"].append(dict(r["runs"][0], repeat=2)))),
            ("row not an object", mutate(lambda r: r["runs"].append(7))),
            ("repeat not an int", mutate(lambda r: r["runs"][0].update(repeat=[1]))),
        ]
        for name, rec in table:
            with self.subTest(name):
                with self.assertRaises(ValueError):
                    compare_runs.index(rec)


class CompareTest(unittest.TestCase):
    def test_every_label(self):
        before, after = record(), record()
        fail(before, "rate-limit")                      # RECOVERED
        fail(before, "temporary-overload")              # STILL_FAILING
        fail(after, "temporary-overload")
        fail(after, "ambiguous-payment", ["wrong_code", "wrong_next_action"])  # NEW_FAILURE
        code, output = quiet(compare_runs.compare, before, after)
        self.assertEqual(code, 1)
        self.assertEqual(output.splitlines(), [
            "NEW_FAILURE offline/model ambiguous-payment 1 before= [] after= "
            "['wrong_code', 'wrong_next_action']",
            "PASS offline/model failed-precondition 1 before= [] after= []",
            "RECOVERED offline/model rate-limit 1 before= ['wrong_code'] after= []",
            "STILL_FAILING offline/model temporary-overload 1 before= ['wrong_code'] "
            "after= ['wrong_code']",
        ])

    def test_no_new_failure_returns_0(self):
        before = fail(record(), "rate-limit")
        code, output = quiet(compare_runs.compare, before, record())
        self.assertEqual(code, 0)
        self.assertIn("RECOVERED", output)

    def test_changed_instructions_are_comparable(self):
        after = record()
        after["config"]["instructions"] = "new wording"
        self.assertEqual(quiet(compare_runs.compare, record(), after)[0], 0)

    def test_caution_when_sdk_or_code_changed(self):
        for field in ("sdk_version", "code_sha256"):
            with self.subTest(field):
                after = record()
                after[field] = "other"
                code, output = quiet(compare_runs.compare, record(), after)
                self.assertEqual(code, 0)
                self.assertTrue(output.startswith(f"CAUTION: changed {field}"))

    def test_refusals(self):
        def changed(**config):
            rec = record()
            rec["config"].update(config)
            return rec

        table = [
            ("before not a dict", [], record()),
            ("after has no runs", record(), {"config": {}}),
            ("after config not a dict", record(), {"config": 1, "runs": []}),
            ("different models", record(), changed(models=["other/model"])),
            ("different tool", record(), changed(tool={})),
            ("different repeats", record(), changed(repeats=2)),
            ("evidence differs", record(), dict(record(), evidence="live")),
            ("after malformed", record(), fail(record(), "rate-limit") | {"runs": []}),
        ]
        for name, before, after in table:
            with self.subTest(name):
                with self.assertRaises(ValueError):
                    quiet(compare_runs.compare, before, after)

    def test_evidence_defaults_to_live(self):
        before, after = record(), record()
        del before["evidence"]
        after["evidence"] = "live"
        self.assertEqual(quiet(compare_runs.compare, before, after)[0], 0)


class DemoTest(unittest.TestCase):
    def test_demo_writes_a_synthetic_pair_and_finds_the_new_failure(self):
        folder = os.path.join(temp_dir(self), "pair")
        code, output = quiet(compare_runs.demo, folder)
        self.assertEqual(code, 1)
        self.assertIn("SYNTHETIC", output.splitlines()[0])
        new = [line for line in output.splitlines() if line.startswith("NEW_FAILURE")]
        self.assertEqual(new, ["NEW_FAILURE offline/model ambiguous-payment 1 before= [] "
                               "after= ['wrong_code', 'wrong_next_action']"])
        with open(os.path.join(folder, "after.json"), encoding="utf-8") as handle:
            after = json.load(handle)
        self.assertEqual(after["evidence"], "synthetic")
        self.assertEqual(after["config"]["models"], ["offline/model"])
        self.assertEqual(set(after["config"]), {
            "models", "cases", "instructions", "tool", "response_format", "repeats",
            "max_steps", "max_output_tokens", "timeout_seconds"})

    def test_label_words_appear_only_on_labelled_lines(self):
        _, output = quiet(compare_runs.demo, os.path.join(temp_dir(self), "pair"))
        for line in output.splitlines():
            words = [w for w in compare_runs.LABELS if w in line]
            with self.subTest(line=line):
                if words:
                    self.assertIn(line.split()[0], compare_runs.LABELS)


class CliTest(unittest.TestCase):
    def setUp(self):
        self.folder = temp_dir(self)

    def write(self, name, content):
        path = os.path.join(self.folder, name)
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(content if isinstance(content, str) else json.dumps(content))
        return path

    def main(self, *args):
        return quiet(compare_runs.main, list(args))

    def test_exit_0_for_no_new_failure(self):
        path = self.write("a.json", record())
        self.assertEqual(self.main(path, path)[0], 0)

    def test_exit_1_for_a_new_failure(self):
        before = self.write("b.json", record())
        after = self.write("a.json", fail(record(), "ambiguous-payment"))
        self.assertEqual(self.main(before, after)[0], 1)

    def test_exit_1_for_the_demo(self):
        self.assertEqual(self.main("--demo", os.path.join(self.folder, "new"))[0], 1)

    def test_not_comparable_inputs_exit_2(self):
        good = self.write("good.json", record())
        table = [
            ("missing file", os.path.join(self.folder, "nope.json")),
            ("a directory", self.folder),
            ("a FIFO, which must not hang", self.fifo("pipe.json")),
            ("not JSON", self.write("bad.json", "{nope")),
            ("empty file", self.write("empty.json", "")),
            ("not UTF-8", self.binary("latin.json", b'{"config": "\xff\xfe"}')),
            ("wrong shape", self.write("list.json", [1, 2])),
            ("no runs", self.write("noruns.json", {"config": {}})),
        ]
        for name, path in table:
            with self.subTest(name):
                code, output = self.main(good, path)
                self.assertEqual(code, 2)
                self.assertTrue(output.startswith("NOT_COMPARABLE: "), output)
                self.assertEqual(len(output.splitlines()), 1)

    def fifo(self, name):
        path = os.path.join(self.folder, name)
        os.mkfifo(path)
        return path

    def binary(self, name, content):
        path = os.path.join(self.folder, name)
        with open(path, "wb") as handle:
            handle.write(content)
        return path

    def test_demo_folder_that_exists_is_not_comparable(self):
        code, output = self.main("--demo", self.folder)
        self.assertEqual(code, 2)
        self.assertIn("already exists", output)
        self.assertEqual(os.listdir(self.folder), [])

    def test_usage_errors_exit_2(self):
        path = self.write("a.json", record())
        for args in ([], [path], [path, path, "--demo", "x"], ["--demo"]):
            with self.subTest(args=args):
                with self.assertRaises(SystemExit) as raised, \
                        contextlib.redirect_stderr(io.StringIO()):
                    self.main(*args)
                self.assertEqual(raised.exception.code, 2)


if __name__ == "__main__":
    unittest.main()
