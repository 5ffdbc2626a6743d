"""The record on disk: the slot-file store, the one reader and the one validator,
and what every script does with a hostile file. Offline."""

import copy
import functools
import json
import os
import signal
import stat
import unittest
from decimal import Decimal
from unittest import mock

import checker
import record
from testing import Harness, clean_env, in_process, popen, run_warm, slow, loopback_env, \
    loopback_server, read_json, read_text, saved_rows, temp_dir, wait_until, write_text


def valid_record(repeats=1):
    """A small complete record: two models, two cases, every row passing."""
    cases = [{"id": case_id, "expected": "503", "rfc": "rfc9110", "action": "wait_then_retry",
              "question": "log"} for case_id in ("one", "two")]
    rows = [{"repeat": r, "case_id": c["id"], "model": m, "error": None, "error_status": None,
             "cost_usd": "0.0042", "response": {"status": "completed", "output": [
                 {"type": "message", "content": [{"type": "output_text", "text": "{}"}]}]},
             "answer_text": "{}",
             "reasons": [], "seconds": 0.5, "passed": True, "attempts": 1,
             "waited_seconds": 0.0, "error_message": None}
            for r in range(repeats) for c in cases for m in ("a", "b")]
    return {"created_at": "2026-11-30T12:00:00+00:00",
            "config": {"models": ["a", "b"], "cases": cases, "instructions": "x",
                       "repeats": repeats},
            "runs": rows, "summary": {}}


class RecordFileTest(unittest.TestCase):
    def setUp(self):
        self.folder = temp_dir(self)
        self.path = os.path.join(self.folder, "r.json")

    def create(self, head=None, tail=None, **options):
        saved = record.RecordFile.create(self.path, head or {"a": 1}, tail or {"s": 0},
                                         **options)
        self.addCleanup(saved.close)
        return saved

    def test_rows_finished_out_of_order_are_saved_in_plan_order(self):
        head = {"created_at": "t", "config": {"models": ["m"]}}
        saved = self.create(head, {"summary": {"n": 0}})
        self.assertEqual(read_json(self.path), {**head, "runs": [], "summary": {"n": 0}})
        for step, index in enumerate([2, 0, 3, 1, 4], 1):
            saved.add(index, {"i": index})
            saved.save({"summary": {"n": step}})
            now = read_json(self.path)
            self.assertEqual(now["summary"], {"n": step})
            self.assertEqual([r["i"] for r in now["runs"]], sorted([2, 0, 3, 1, 4][:step]))

    def test_rows_waiting_within_their_byte_limit_wait_in_order(self):
        row = {"i": "x" * 100}
        size = len(record.dumps(row).encode())
        with mock.patch.object(record, "PENDING_BYTES", 2 * size):  # exactly two may wait
            saved = self.create()
            saved.add(2, row)
            saved.add(1, row)
            self.assertFalse(saved.unordered)
            saved.add(3, row)  # a third passes the limit: written as they finished
            self.assertTrue(saved.unordered)

    def test_a_saved_row_is_not_kept_in_memory_once_both_slots_hold_it(self):
        saved = self.create()
        for index in range(6):
            saved.add(index, {"i": index, "pad": "x" * 1000})
            saved.save({"s": index})
            self.assertEqual([r["i"] for r in read_json(self.path)["runs"]], list(range(index + 1)))
        held = sum(len(data) for data in saved.prefix if data)
        self.assertLess(held, 2 * 1100)  # at most the last row, which one slot lacks

    def test_rows_given_to_create_are_written_in_pieces_then_linked_once(self):
        rows = ((index, {"i": index}) for index in range(record.CREATE_ROWS * 2 + 7))
        linked, link = [], os.link

        def counted(source, target):
            if target == self.path:
                linked.append(len(read_json(source)["runs"]))
            return link(source, target)

        with mock.patch.object(record.os, "link", counted):
            saved = self.create(rows=rows)
        self.assertEqual(linked, [record.CREATE_ROWS * 2 + 7])  # at its path once, whole
        self.assertEqual(len(read_json(self.path)["runs"]), record.CREATE_ROWS * 2 + 7)
        self.assertEqual(saved.freed, record.CREATE_ROWS * 2 + 7)
        saved.add(record.CREATE_ROWS * 2 + 7, {"i": -1})
        saved.save({"s": 1})  # the second slot starts as a copy of the first
        self.assertEqual(read_json(self.path)["runs"][-2:], [{"i": record.CREATE_ROWS * 2 + 6},
                                                            {"i": -1}])

    def test_rows_after_a_long_gap_are_written_at_once_then_put_in_plan_order(self):
        with mock.patch.object(record, "PENDING_BYTES", 2500):
            saved = self.create()
            saved.skip(3)
            for index in (2, 1, 5, 4, 6):  # row 0 comes last: the others cannot wait
                saved.add(index, {"i": index, "pad": "x" * 1000})
                saved.save({"s": index})
            on_disk = [row["i"] for row in read_json(self.path)["runs"]]
            self.assertEqual(sorted(on_disk), [1, 2, 4, 5, 6])  # every row saved already
            self.assertNotEqual(on_disk, sorted(on_disk))  # in the order they came
            self.assertLess(sum(len(data) for data in saved.prefix if data), 2 * 1100)
            saved.add(0, {"i": 0})
            saved.save({"s": "end"}, final=True)
        self.assertEqual([row["i"] for row in read_json(self.path)["runs"]], [0, 1, 2, 4, 5, 6])
        self.assertEqual(read_json(self.path)["s"], "end")

    def test_create_refuses_an_existing_path_and_leaves_it(self):
        write_text(self.path, "keep")
        with self.assertRaises(FileExistsError):
            record.RecordFile.create(self.path, {"a": 1}, {})
        self.assertEqual(read_text(self.path), "keep")
        self.assertEqual(os.listdir(self.folder), ["r.json"])

    def test_close_leaves_only_the_record_with_mode_0600(self):
        old_umask = os.umask(0)
        self.addCleanup(os.umask, old_umask)
        saved = self.create()
        saved.add(0, {"i": 0})
        saved.save({"s": 1})
        saved.close()
        self.assertEqual(os.listdir(self.folder), ["r.json"])
        self.assertEqual(read_json(self.path), {"a": 1, "runs": [{"i": 0}], "s": 1})
        self.assertEqual(stat.S_IMODE(os.stat(self.path).st_mode), 0o600)

    def test_nan_is_never_written(self):
        saved = self.create()
        with self.assertRaises(ValueError):
            saved.add(0, {"cost": float("nan")})

    def test_a_second_writer_is_refused_while_the_first_holds_the_record(self):
        self.create()
        with self.assertRaises(record.RecordBusy):
            record.RecordFile.create(self.path, {"a": 2}, {}, replace=True)
        self.assertEqual(read_json(self.path)["a"], 1)

    def test_hidden_file_names_do_not_grow_with_the_record_name(self):
        for length in (1, 200, 250):
            with self.subTest(length=length):
                self.path = os.path.join(self.folder, "r" * (length - 5) + ".json")
                saved = self.create()
                hidden = [name for name in os.listdir(self.folder) if name.startswith(".")]
                self.assertTrue(hidden)
                self.assertTrue(all(len(name) <= 60 for name in hidden), hidden)
                saved.add(0, {"i": 0})
                saved.save({"s": 1})  # a save links and renames: must not fail
                saved.close()

    def test_stale_slots_of_a_killed_run_are_removed_by_the_next_writer(self):
        self.create().close()
        stem = record.hidden_stem(os.path.realpath(self.path))
        for suffix in (".slot0", ".slot1", ".slot-link"):
            write_text(stem + suffix, "copy of paid answers")
        saved = self.create(replace=True)
        saved.save({"s": 2})
        saved.close()
        self.assertEqual(os.listdir(self.folder), ["r.json"])

    def test_replacing_through_a_symlink_writes_the_real_file(self):
        real = self.path
        self.create().close()
        link = os.path.join(self.folder, "link.json")
        os.symlink(real, link)
        saved = record.RecordFile.create(link, {"a": 3}, {"s": 3}, replace=True)
        saved.close()
        self.assertTrue(os.path.islink(link))
        self.assertEqual(read_json(real)["a"], 3)


class LoadRefusalsTest(unittest.TestCase):
    def setUp(self):
        self.folder = temp_dir(self)

    def path(self, name):
        return os.path.join(self.folder, name)

    def test_hostile_files_are_refused_with_one_line_and_no_hang(self):
        fifo = self.path("fifo")
        os.mkfifo(fifo)
        sparse = self.path("huge.json")
        with open(sparse, "wb") as handle:
            handle.truncate(record.MAX_RECORD_BYTES + 1)
        table = [
            ("missing", self.path("none.json"), "cannot open"),
            ("a folder", self.folder, "not a regular file"),
            ("a FIFO", fifo, "not a regular file"),
            ("a device", "/dev/zero", "not a regular file"),
            ("too large", sparse, "too large"),
            ("not JSON", write_text(self.path("bad.json"), "{"), "not valid JSON"),
            ("nested too deeply", write_text(self.path("deep.json"), "[" * 100000),
             "nested too deeply"),
            ("a list", write_text(self.path("list.json"), "[]"), "is not a JSON object"),
            ("no runs", write_text(self.path("noruns.json"), '{"config": {}}'),
             "the record has no runs list"),
            ("runs not a list", write_text(self.path("runs.json"), '{"runs": {}}'),
             "the record has no runs list"),
        ]
        for name, path, words in table:
            with self.subTest(name):
                open_before = len(os.listdir("/proc/self/fd"))
                with self.assertRaises(ValueError) as raised:
                    record.load(path)
                self.assertIn(words, str(raised.exception))
                self.assertNotIn("\n", str(raised.exception))
                self.assertEqual(len(os.listdir("/proc/self/fd")), open_before)  # none left


class ValidateRecordTest(unittest.TestCase):
    def test_a_valid_record_is_keyed_by_model_case_repeat(self):
        rows = record.validate_record(valid_record(repeats=2))
        self.assertEqual(len(rows), 8)
        self.assertIn(("a", "one", 1), rows)

    def test_every_broken_rule_is_refused_with_its_reason(self):
        def broken(change):
            data = copy.deepcopy(valid_record())
            change(data)
            return data

        row0 = lambda **fields: (lambda r: r["runs"][0].update(fields))
        table = [
            ("not an object", lambda r: r.clear(), "runs list"),
            ("models empty", lambda r: r["config"].update(models=[]), "config.models"),
            ("models duplicated", lambda r: r["config"].update(models=["a", "a"]), "duplicates"),
            ("repeats True", lambda r: r["config"].update(repeats=True), "config.repeats"),
            ("repeats huge", lambda r: r["config"].update(repeats=10**9), "config.repeats"),
            ("case ids duplicated", lambda r: r["config"]["cases"].append(
                r["config"]["cases"][0]), "duplicates"),
            ("repeat from 1", row0(repeat=1), "planned requests"),
            ("foreign model", row0(model="z"), "planned requests"),
            ("reasons not strings", row0(reasons=[1], passed=False), "list of strings"),
            ("passed disagrees", row0(passed=False), "disagree"),
            ("passed not a bool", row0(passed=1), "disagree"),
            ("cost overflow", row0(cost_usd="1e999999999"), "out of range"),
            ("cost negative", row0(cost_usd="-1"), "cost_usd"),
            ("cost a number", row0(cost_usd=0.1), "cost_usd"),
            ("seconds text", row0(seconds="slow"), "seconds"),
            ("answer not text", row0(answer_text=7), "answer_text"),
            ("error without its reason", row0(error="X", reasons=["wrong_code"], passed=False),
             "execution_error"),
            ("an execution error", row0(error="X", reasons=["execution_error"], passed=False),
             "execution error"),
            ("rows missing", lambda r: r["runs"].pop(), "1 missing"),
        ]
        for name, change, words in table:
            with self.subTest(name):
                with self.assertRaises(ValueError) as raised:
                    record.validate_record(broken(change))
                self.assertIn(words, str(raised.exception))

    def test_a_resume_accepts_error_rows_and_missing_rows(self):
        data = valid_record()
        data["runs"][0].update(error="X", reasons=["execution_error"], passed=False)
        data["runs"].pop()
        rows = record.validate_record(data, complete=False, errors=True)
        self.assertEqual(len(rows), 3)


class LoadTest(unittest.TestCase):
    """record.load: a record read and judged a row at a time, as validate_record judges it."""

    def setUp(self):
        self.folder = temp_dir(self)

    def saved(self, data, layout):
        """data on disk in this runner's own layout, or as a hand-made indented file."""
        path = os.path.join(self.folder, f"{layout}.json")
        if layout == "own":
            fields = {k: v for k, v in data.items() if k not in ("runs", "summary")}
            with record.RecordFile.create(path, fields, {"summary": data["summary"]},
                                          rows=enumerate(data["runs"])):
                pass
        else:
            write_text(path, json.dumps(data, indent=2))
        return path

    def test_both_layouts_give_the_rows_validate_record_gives(self):
        data = valid_record(repeats=2)
        judged = record.validate_record(data)
        for layout in ("own", "indented"):
            with self.subTest(layout):
                loaded = record.load(self.saved(data, layout))
                self.assertEqual(loaded.check(), {key: record.light(row)
                                                  for key, row in judged.items()})
                self.assertEqual(loaded["config"], data["config"])
                self.assertEqual(loaded.sha256, record.file_sha256(
                    os.path.join(self.folder, f"{layout}.json")))

    def test_it_reads_exactly_what_the_whole_file_reader_reads(self):
        own = read_text(self.saved(valid_record(), "own"))
        lines = own.splitlines(keepends=True)
        first_row = lines.index('"runs": [\n') + 1
        variants = {
            "as written": own,
            "no comma between rows": own.replace("},\n{", "}\n{", 1),
            "no comma between tail members": own.replace(',\n"summary"', '\n"summary"', 1),
            "a comma before the closing brace": own[:own.rindex("\n}")] + ",\n}\n",
            "a comma after the last row": own.replace("}\n],", "},\n],", 1),
            "a row over two lines": "".join(
                lines[:first_row] + [lines[first_row].replace(', "model"', ',\n"model"', 1)]
                + lines[first_row + 1:]),
            "two rows on one line": own.replace("},\n{", "}, {", 1),
            "crlf": own.replace("\n", "\r\n"),
        }
        for name, text in variants.items():
            with self.subTest(name):
                path = os.path.join(self.folder, "variant.json")
                write_text(path, text)
                try:
                    expected = {key: record.light(row) for key, row in
                                record.validate_record(json.loads(text)).items()}
                except ValueError:
                    expected = None
                try:
                    got = record.load(path).check()
                except ValueError:
                    got = None
                self.assertEqual(got, expected)
                if name == "as written":  # read a row at a time, not whole
                    self.assertFalse(record.load(path).whole)
                if expected is not None:
                    keys = set(expected)
                    whole = record.load(path).whole
                    self.assertEqual(len(list(record.full_rows(path, keys, whole))), len(keys))
                os.unlink(path)

    def test_rows_are_kept_light_unless_keep_says_otherwise(self):
        path = self.saved(valid_record(), "own")
        self.assertTrue(all(row["response"] is None for row in record.load(path)["runs"]))
        whole = record.load(path, keep=lambda row, suite: row)
        self.assertEqual(whole["runs"][0]["response"], valid_record()["runs"][0]["response"])

    def test_what_validate_record_refuses_load_refuses(self):
        for name, change, words in (
                ("passed disagrees", lambda r: r["runs"][1].update(passed=False), "disagree"),
                ("a repeated row", lambda r: r["runs"].append(dict(r["runs"][0])), "repeats"),
                ("a broken row line", None, "not valid JSON")):
            with self.subTest(name):
                data = copy.deepcopy(valid_record())
                if change:
                    change(data)
                path = self.saved(data, "own")
                if change is None:  # one row line cut short: the file is no JSON at all
                    text = read_text(path).replace('"seconds": 0.5', '"seconds": ', 1)
                    os.unlink(path)
                    write_text(path, text)
                with self.assertRaises(ValueError) as raised:
                    record.load(path)
                self.assertIn(words, str(raised.exception))
                os.unlink(path)

    def test_check_says_what_a_comparison_needs(self):
        data = valid_record()
        data["runs"][2].update(error="X", reasons=["execution_error"], passed=False)
        loaded = record.load(self.saved(data, "own"))
        self.assertEqual(len(loaded.check(complete=False, errors=True)), 4)
        with self.assertRaises(ValueError) as raised:
            loaded.check()
        self.assertIn("run 3 (a two 0) has an execution error", str(raised.exception))

    def test_a_record_changed_while_it_was_read_is_refused(self):
        path = self.saved(valid_record(), "own")

        def keep(row, suite):
            with open(path, "ab") as handle:  # a save rewriting the file being read
                handle.write(b" ")
            return row

        with self.assertRaises(ValueError) as raised:
            record.load(path, keep)
        self.assertIn("changed while it was read", str(raised.exception))


@slow("a FIFO and a device are read in processes of their own")
class SameRefusalsTest(Harness):
    """--resume and compare_runs.py refuse the same hostile files the same way."""

    def test_both_scripts_refuse_each_hostile_file_with_one_line_and_exit_2(self):
        fifo = self.path("fifo")
        os.mkfifo(fifo)
        deep = self.write("deep.json", "[" * 100000)
        edited = copy.deepcopy(valid_record())
        edited["runs"][0]["cost_usd"] = "1e999999999"
        tampered = self.write("tampered.json", json.dumps(edited))
        # A FIFO or a device could hang or fill a reader that does not check first:
        # those run in processes of their own, with a timeout.
        apart = functools.partial(run_warm, self)
        for name, path, run in (("FIFO", fifo, apart), ("folder", self.folder, in_process),
                                ("device", "/dev/zero", apart), ("deep", deep, in_process),
                                ("tampered cost", tampered, in_process)):
            with self.subTest(name):
                resumed = run("regression.py", "--resume", path,
                              env=dict(os.environ, PERPLEXITY_API_KEY="k"))
                compared = run("compare_runs.py", path, path, env=clean_env())
                self.assertEqual((resumed.returncode, compared.returncode), (2, 2))
                self.assertEqual(len(resumed.stderr.splitlines()), 1, resumed.stderr)
                self.assertIn("NOT_COMPARABLE", compared.stdout)
                self.assertNotIn("Traceback", resumed.stderr + compared.stderr)


@slow("kills real processes")
class KillTest(unittest.TestCase):
    """SIGKILL the real CLI after N rows are saved: the record is always whole, and
    a --resume finishes it and leaves only the record."""

    def test_sigkill_after_n_saved_rows_leaves_a_valid_resumable_record(self):
        server = loopback_server(self)
        server.state["latency"] = 0.01
        folder = temp_dir(self)
        env = loopback_env(server)
        # The first row alone, then past the first rows with three in flight; make
        # bench kills a run 50 times.
        for attempt, (rows, jobs) in enumerate(((1, 1), (13, 3))):
            with self.subTest(rows=rows):
                out = os.path.join(folder, f"r{attempt}.json")
                process = popen(self, "regression.py", "--out", out, "--repeats", "10",
                                "--jobs", str(jobs), env=env)
                wait_until(lambda: saved_rows(out) >= rows, what=f"{rows} saved rows")
                process.send_signal(signal.SIGKILL)
                process.communicate(timeout=30)
                saved = read_json(out)
                self.assertTrue(rows <= len(saved["runs"]) < 80, len(saved["runs"]))
                finished = in_process("regression.py", "--resume", out, env=env)
                self.assertEqual(finished.returncode, 0, finished.stderr)
                self.assertEqual(len(read_json(out)["runs"]), 80)
                self.assertEqual(sorted(os.listdir(folder))[-1], f"r{attempt}.json")
                self.assertFalse([n for n in os.listdir(folder) if n.startswith(".")])


def saved_row(**changes):
    return {"case_id": "c1", "model": "m/x", "error": None, "cost_usd": None, "response": None,
            "answer_text": None, "reasons": [], "seconds": 1.5, "passed": True, "repeat": 0,
            **changes}


class RowRulesTest(unittest.TestCase):
    """The pure rules a saved row, a receipt and a batch step are held to."""

    def test_a_valid_row_has_no_problem(self):
        self.assertIsNone(record.row_problem(saved_row()))

    def test_seconds_must_be_null_or_not_negative(self):
        for seconds, problem in ((None, None), (0, None), (-1, "has seconds that is not null "
                                                                "or a number of seconds")):
            with self.subTest(seconds=seconds):
                self.assertEqual(record.row_problem(saved_row(seconds=seconds)), problem)

    def test_an_id_the_api_gave(self):
        table = [("resp_1", True), ("x" * 256, True), ("x" * 257, False), ("", False),
                 ("a/b", False), ("a\nb", False), (7, False), (None, False)]
        for value, ok in table:
            with self.subTest(value=value):
                self.assertEqual(record.saved_id(value), ok)

    def test_a_difference_is_shown_in_the_field_that_differs(self):
        table = [("reasons", {"reasons": []}, {"reasons": ["a", "b"]},
                  "saved: pass; its response proves: a,b"),
                 ("passed", {"reasons": ["x"], "passed": False}, {"reasons": [], "passed": True},
                  "saved: x; its response proves: pass"),
                 ("cost_usd", {"cost_usd": "0.5"}, {"cost_usd": None},
                  'saved: "0.5"; its response proves: null'),
                 ("answer_text", {"answer_text": "y" * 80}, {"answer_text": "z"},
                  'saved: "' + "y" * 58 + '…; its response proves: "z"')]
        for name, saved, judged, words in table:
            with self.subTest(name):
                self.assertEqual(record.shown_difference(name, saved, judged), words)


class PendingTest(unittest.TestCase):
    PLAN = [(0, {"id": "c1"}, "m/x"), (1, {"id": "c1"}, "m/x")]

    def pending(self, pending, finished=()):
        return record.validate_pending({"pending": pending}, self.PLAN, set(finished))

    def test_a_receipt_is_kept_by_its_plan_index(self):
        entry = {"id": "resp_1", "model": "m/x", "case_id": "c1", "repeat": 1}
        self.assertEqual(self.pending({"1": entry}), {1: entry})
        self.assertEqual(self.pending({"1": entry}, finished=[1]), {})

    def test_a_receipt_sent_before_its_id_came_back_has_none(self):
        entry = {"id": None, "model": "m/x", "case_id": "c1", "repeat": 0}
        self.assertEqual(self.pending({"0": entry}), {0: entry})

    def test_a_key_of_ten_digits_is_not_a_place(self):
        entry = {"id": None, "model": "m/x", "case_id": "c1", "repeat": 0}
        with self.assertRaisesRegex(ValueError, "pending receipt '0000000000' is not a place"):
            self.pending({"0000000000": entry})
        self.assertEqual(self.pending({"000000000": entry}), {0: entry})

    def test_an_id_that_is_not_an_id_does_not_match(self):
        entry = {"id": "a/b", "model": "m/x", "case_id": "c1", "repeat": 0}
        with self.assertRaisesRegex(ValueError, "pending receipt 0 does not match"):
            self.pending({"0": entry})


class BatchStepsTest(unittest.TestCase):
    def batch(self, **part):
        part = {"start": 0, "stop": 2, "collected": False, **part}
        return record.validate_batch({"batch": {"parts": [part]}}, 2)

    def test_a_part_keeps_its_ids_and_the_known_counts(self):
        kept = self.batch(input_file_id="f1", batch_id="b1", status="completed",
                          counts={"total": 2, "completed": 1, "failed": 1, "other": 3,
                                  "expired": "x"})
        self.assertEqual(kept, {"parts": [{
            "start": 0, "stop": 2, "input_file_id": "f1", "batch_id": "b1",
            "status": "completed", "collected": False,
            "counts": {"total": 2, "completed": 1, "failed": 1}}]})

    def test_a_batch_id_needs_an_input_file_id(self):
        with self.assertRaisesRegex(ValueError, "batch part 1 has a batch_id but no "
                                                "input_file_id"):
            self.batch(batch_id="b1")
        self.assertEqual(self.batch(input_file_id="f1")["parts"][0]["input_file_id"], "f1")


class RaisedBudgetTest(unittest.TestCase):
    def test_the_budget_a_resume_needs(self):
        costs = [Decimal("1"), Decimal("2")]
        table = [(None, None), ({}, None), ({"max_cost": "0"}, None),
                 ({"max_cost": "-1"}, None), ({"max_cost": "x"}, None),
                 ({"max_cost": "5"}, "15"), ({"max_cost": "20"}, "23")]
        for execution, budget in table:
            with self.subTest(execution=execution):
                self.assertEqual(record.raised_budget(execution, costs, 3), budget)


class CheckerRulesTest(unittest.TestCase):
    """The checker's pure rules that a record's rows are judged again by."""

    CASE = checker.CASES[0]  # rate-limit: its own document is rfc6585

    def test_a_citation_is_approved_if_its_own_or_the_general_document(self):
        table = [("https://www.rfc-editor.org/rfc/rfc6585", (True, True)),
                 ("https://www.rfc-editor.org/rfc/rfc9110", (True, False)),
                 ("https://www.rfc-editor.org/rfc/rfc1234", (False, False)),
                 ("https://example.com/rfc/rfc6585", (False, False))]
        for url, (approved, primary) in table:
            with self.subTest(url=url):
                facts = checker.citation_facts(checker.BUILTIN_SUITE, self.CASE, url, set())
                self.assertEqual((facts["approved"], facts["primary"]), (approved, primary))

    def test_an_answer_field_of_another_type_is_the_wrong_shape(self):
        suite = {"answer": {"code": {"type": "string"}, "retry": {"type": "boolean"},
                            "count": {"type": "integer"}}}
        table = [({"code": "429", "retry": True, "count": 2}, True),
                 ({"code": 429, "retry": True, "count": 2}, False),
                 ({"code": "429", "retry": 1, "count": 2}, False),
                 ({"code": "429", "retry": True, "count": True}, False)]
        for answer, ok in table:
            with self.subTest(answer=answer):
                self.assertEqual(checker.shape_ok(suite, answer), ok)

    def test_an_enum_field_the_case_does_not_expect_must_be_in_its_enum(self):
        suite = {"answer": {"grant": {"enum": ["yes", "no"]}, "level": {"enum": ["read"]}}}
        table = [({"grant": "yes", "level": "read"}, (), True),
                 ({"grant": "yes", "level": "superuser"}, ("grant",), False),
                 ({"grant": "maybe", "level": "read"}, ("grant",), True),  # wrong_grant
                 ({"grant": "yes", "level": 3}, ("level",), False)]
        for answer, expect, ok in table:
            with self.subTest(answer=answer, expect=expect):
                self.assertEqual(checker.shape_ok(suite, answer, expect), ok)

    def test_a_reported_cost_must_be_a_number_in_usd(self):
        table = [(0.25, "0.25"), (0, "0"), ("0.25", None), (True, None), (-1, None)]
        for total, cost in table:
            with self.subTest(total=total):
                raw = {"usage": {"cost": {"currency": "USD", "total_cost": total}}}
                self.assertEqual(checker.reported_cost(raw), cost)

    def test_the_bound_of_one_pass_in_one_run(self):
        table = [((1, 1), 0.05), ((0, 3), 0.0), ((3, 3), 0.368403), ((2, 4), 0.097611)]
        for (passed, runs), bound in table:
            with self.subTest(passed=passed, runs=runs):
                self.assertAlmostEqual(checker.lower_bound(passed, runs, 0.95), bound, places=6)

    def test_a_low_rate_is_proved_by_one_pass(self):
        for rate, runs in ((0.01, 1), (0.9, 29)):
            with self.subTest(rate=rate):
                self.assertEqual(checker.runs_needed(rate, 0.95), runs)

    def test_the_tally_sums_the_reported_costs(self):
        tally = checker.Tally(["m/x"], 2, [self.CASE])
        for repeat, cost in ((0, "0.25"), (1, "0.5")):
            tally.add({"model": "m/x", "case_id": self.CASE["id"], "repeat": repeat,
                       "passed": True, "cost_usd": cost})
        self.assertEqual(tally.spent(), (Decimal("0.75"), True))
        self.assertEqual(tally.summary()["models"]["m/x"]["reported_cost_usd"], "0.75")

    def test_a_proof_pair_with_a_row_after_its_deciding_one_is_not_complete(self):
        prove = {"rate": 0.5, "confidence": 0.95, "repeats": 5, "allow_failures": 0}
        for verdicts, complete in (((False,), True), ((False, True), False),
                                   ((True,) * 5, True), ((True,) * 4 + (False,), True),
                                   ((True, False, True), False)):
            with self.subTest(verdicts=verdicts):
                tally = checker.Tally(["m/x"], 5, [self.CASE], prove=prove)
                for repeat, passed in enumerate(verdicts):
                    tally.add({"model": "m/x", "case_id": self.CASE["id"], "repeat": repeat,
                               "passed": passed, "error": None})
                self.assertEqual(tally.summary()["complete"], complete)

    def test_a_row_with_no_verdict_is_no_run_of_its_case(self):
        tally = checker.Tally(["m/x"], 2, [self.CASE])
        tally.add({"model": "m/x", "case_id": self.CASE["id"], "repeat": 0, "passed": True,
                   "error": None, "cost_usd": "0.1"})
        tally.add({"model": "m/x", "case_id": self.CASE["id"], "repeat": 1, "passed": False,
                   "error": "BatchExpired", "reasons": ["execution_error"], "cost_usd": None})
        summary = tally.summary()
        case = summary["models"]["m/x"]["cases"][self.CASE["id"]]
        self.assertEqual((case["passed"], case["runs"], case["no_verdict"], case["flaky"]),
                         (1, 1, 1, False))
        self.assertEqual((summary["models"]["m/x"]["total"], summary["exit_code"]), (2, 2))
        self.assertIn(f"{self.CASE['id']} 1/1 pass rate >= 5.0 % (95 %) (1 no verdict)",
                      checker.pass_rate_lines(summary)[0])

    def test_only_search_results_items_are_receipts(self):
        url = "https://www.rfc-editor.org/rfc/rfc9110"
        for item, found in (({"type": "search_results", "results": [{"url": url}]}, [url]),
                            ({"type": "message", "results": [{"url": url}]}, []),
                            ({"results": [{"url": url}]}, [])):
            with self.subTest(item=item):
                self.assertEqual(checker.search_result_urls({"output": [item]}), found)


class LightRowTest(unittest.TestCase):
    def test_a_light_row_keeps_the_documents_its_search_returned(self):
        response = {"output": [{"type": "search_results", "results": [
            {"url": "https://www.rfc-editor.org/rfc/rfc9110"},
            {"url": "https://www.rfc-editor.org/rfc/rfc6585.html"}]}]}
        row = record.light({"model": "openai/gpt-5.6-sol", "response": response, "passed": True})
        self.assertEqual(row, {"model": "openai/gpt-5.6-sol", "response": None, "light": True,
                               "passed": True, "returned": ["rfc6585", "rfc9110"]})


class PublishedToolTest(unittest.TestCase):
    def test_records_made_before_the_budget_was_pinned_hold_the_published_tool(self):
        self.assertEqual(checker.PUBLISHED_TOOL, {
            "type": "web_search", "search_context_size": "medium", "max_results": 5,
            "filters": {"search_domain_filter": ["rfc-editor.org"]}})


class SmallRulesTest(unittest.TestCase):
    def test_a_proof_plan_holds_numbers_only(self):
        plan = {"rate": 0.05, "confidence": 0.95, "repeats": 1, "allow_failures": 0}
        self.assertIsNone(record.prove_problem(plan, 1))
        for name in plan:
            with self.subTest(name), self.assertRaises(ValueError):
                record.prove_problem({**plan, name: True}, 1)

    def test_pending_receipts_without_an_id_share_nothing(self):
        pending = {"0": {"id": None}, "1": {"id": None}, "2": {"id": "resp_2"}}
        self.assertIsNone(record.shared_receipt(pending, {}))
        self.assertIn("hold the same response id 'resp_2'", record.shared_receipt(
            {**pending, "3": {"id": "resp_2"}}, {}))

    def test_a_key_is_shown_with_each_part_cut_to_80_characters(self):
        self.assertEqual(record.shown_key(("m" * 81, "c", 0)), "m" * 80 + " c 0")

    def test_bounds_are_stated_at_the_proofs_confidence_else_the_runs(self):
        table = [({"prove": {"confidence": 0.9}}, {"confidence": 0.8}, 0.9),
                 ({}, {"confidence": 0.8}, 0.8), ({}, None, checker.CONFIDENCE),
                 ({}, {"confidence": 1.5}, checker.CONFIDENCE)]
        for config, execution, confidence in table:
            with self.subTest(config=config, execution=execution):
                self.assertEqual(record.confidence_of({"config": config,
                                                        "execution": execution}), confidence)


class CoverageTest(unittest.TestCase):
    CASE = checker.CASES[0]
    CONFIG = {"models": ["m/x"], "cases": [CASE], "repeats": 2,
              "prove": {"rate": 0.5, "confidence": 0.5, "repeats": 2, "allow_failures": 0}}

    def rows(self, *repeats):
        return {("m/x", self.CASE["id"], repeat): {"model": "m/x", "case_id": self.CASE["id"],
                                                   "repeat": repeat, "passed": True}
                for repeat in repeats}

    def test_a_proving_pair_with_every_pass_it_needs_is_whole(self):
        self.assertEqual(record.coverage_problem(self.rows(0, 1), self.CONFIG), 0)

    def test_a_proving_pair_short_of_its_passes_is_missing_rows(self):
        self.assertEqual(record.coverage_problem(self.rows(0), self.CONFIG),
                         "runs do not cover the config: 1 proving pairs are missing rows")

    def test_a_broken_saved_suite_is_named_as_such(self):
        with self.assertRaisesRegex(ValueError, "^its saved suite: needs name"):
            record.suite_of({"config": {"cases": []}, "suite": {}})


if __name__ == "__main__":
    unittest.main()
