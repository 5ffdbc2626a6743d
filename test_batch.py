"""regression.py --batch against the simulated Batch and Files endpoints.

In-process (the simulated API behind httpx.MockTransport) unless marked slow.
Polls are not slept: batching's first wait is 0 here, and the simulated batch
moves one stage per poll.
"""

import contextlib
import io
import os
import shlex
import signal
import subprocess
import threading
import unittest
from unittest import mock

import httpx
from perplexity import Perplexity

import batching
import regression
import sending
import simulated_api
from testing import (Harness, loopback_env, loopback_server, popen, quiet, read_json,
                     saved_rows, slow, temp_dir, wait_until)
from vocabulary import UserError

MODELS = ["openai/gpt-5.6-sol", "offline/hasty"]  # the simulated API's unsafe model: a failure
POLLS = (batching.FIRST_POLL_SECONDS, batching.MAX_POLL_SECONDS)  # as shipped: the harness
                                                                  # makes both 0
POLL_FAILURES = 5  # failed polls in a row a run rides out (a network blip); the next stops it


class BatchHarness(Harness):
    unsafe_models = ("offline/hasty",)

    def setUp(self):
        super().setUp()
        for patcher in (mock.patch.object(batching, "FIRST_POLL_SECONDS", 0),
                        mock.patch.object(batching, "MAX_POLL_SECONDS", 0)):
            patcher.start()
            self.addCleanup(patcher.stop)

    def batch(self, *args):
        return self.main("--batch", "--models", *MODELS, *args)

    def resume(self, *args):
        return self.main("--resume", self.out, *args, out=False)

    def stop_at_the_first_poll(self):
        """Ctrl+C while the runner waits: its first poll of a batch raises it."""
        polls = []

        def before(request):
            if request.method == "GET" and "/v1/batches/" in request.url.path:
                polls.append(request)
                if len(polls) == 1:
                    raise KeyboardInterrupt

        self.before_request = before

    def keys(self, path=None):
        return [(row["model"], row["case_id"], row["repeat"])
                for row in self.record(path)["runs"]]

    def fail_polls(self, failing):
        """The polls numbered in failing (1 is the first) cannot reach the API;
        returns the list every poll is counted in."""
        polls = []

        def before(request):
            if request.method == "GET" and "/v1/batches/" in request.url.path:
                polls.append(request)
                if len(polls) in failing:
                    raise httpx.ConnectError("connection reset")

        self.before_request = before
        return polls


class BatchRunTest(BatchHarness):

    def test_rows_come_in_the_saved_order_judged_like_a_direct_run(self):
        code, out, err = self.batch("--repeats", "2")
        self.assertEqual(code, 1, err)  # the unsafe model's payment answer is caught
        self.assertEqual(self.state["requests"], [])  # nothing was sent directly
        batched = self.record()
        direct_out = self.path("direct.json")
        code, _, err = quiet(regression.main, ["--foreground", "--models", *MODELS,
                                               "--repeats", "2", "--out", direct_out])
        self.assertEqual(code, 1, err)
        direct = read_json(direct_out)
        self.assertEqual(self.keys(), self.keys(direct_out))
        self.assertEqual([row["reasons"] for row in batched["runs"]],
                         [row["reasons"] for row in direct["runs"]])
        self.assertEqual(batched["summary"]["models"], direct["summary"]["models"])
        for place, row in enumerate(batched["runs"]):
            self.assertEqual(row["batch"]["custom_id"], f"row-{place}")
        self.assertEqual(self.state["batch_creates"], 1)
        self.assertEqual(self.state["file_creates"], 1)
        (part,) = batched["batch"]["parts"]
        self.assertTrue(part["collected"])
        self.assertEqual(batched["execution"]["batch"], True)

    def test_its_record_passes_every_reader(self):
        self.batch()
        import record

        rows = record.load(self.out).check()
        self.assertEqual(len(rows), 8)

    def test_the_ids_are_saved_before_the_first_poll(self):
        seen = []

        def before(request):
            if request.method == "GET" and "/v1/batches/" in request.url.path and not seen:
                seen.append(self.record()["batch"]["parts"][0])

        self.before_request = before
        self.batch()
        self.assertTrue(seen[0]["input_file_id"] and seen[0]["batch_id"], seen)

    def test_large_plans_go_in_parts_each_with_its_own_key(self):
        keys = []

        def before(request):
            if request.method == "POST" and request.url.path == "/v1/batches":
                keys.append(request.headers.get("Idempotency-Key"))

        self.before_request = before
        with mock.patch.object(batching, "PART_LINES", 3):
            code, _, err = self.batch()
        self.assertEqual(code, 1, err)
        parts = self.record()["batch"]["parts"]
        self.assertEqual([(part["start"], part["stop"]) for part in parts],
                         [(0, 3), (3, 6), (6, 8)])
        self.assertEqual(len(set(keys)), 3)
        self.assertEqual(len(self.record()["runs"]), 8)

    def test_a_failed_line_is_an_execution_error_and_the_rest_are_judged(self):
        self.state["batch_fail_ids"] = {"row-1"}
        with mock.patch.object(batching, "PART_LINES", 3):  # the error is in the first part
            code, _, err = self.batch()
        self.assertEqual(code, 2, err)
        rows = self.record()["runs"]
        self.assertEqual(len(rows), 8)  # every later part is collected too
        self.assertNotIn("Stopped", err)  # the batch ran every row: an error stops nothing
        self.assertEqual((rows[1]["error"], rows[1]["error_status"], rows[1]["reasons"]),
                         ("BatchRequestFailed", 500, ["execution_error"]))
        self.assertTrue(all(row["error"] is None for place, row in enumerate(rows) if place != 1))
        self.assertIn("--resume", err + _)

    def test_a_batch_row_has_a_direct_rows_fields_with_its_batch_in_place_of_attempts(self):
        self.batch()
        direct_out = self.path("direct.json")  # its row 0 alone is compared: one request
        quiet(regression.main, ["--foreground", "--models", MODELS[0], "--out", direct_out,
                                "--cases", self.cases_file("rate-limit")])
        direct = set(read_json(direct_out)["runs"][0])
        for row in self.record()["runs"]:
            self.assertEqual(set(row), direct - {"attempts", "waited_seconds"} | {"batch"})

    def test_an_answer_the_checker_cannot_take_is_an_execution_error_that_says_so(self):
        with mock.patch.object(regression, "judge", side_effect=ValueError("bad rule")):
            code, _, err = self.batch()
        self.assertEqual(code, 2, err)
        rows = self.record()["runs"]
        self.assertEqual(len(rows), 8)
        for row in rows:
            self.assertEqual((row["error"], row["error_message"], row["reasons"]),
                             ("ValueError", "ValueError raised while checking the answer",
                              ["execution_error"]))

    def test_the_record_keeps_each_parts_request_counts(self):
        self.state["batch_fail_ids"] = {"row-1"}
        with mock.patch.object(batching, "PART_LINES", 3):
            self.batch()
        self.assertEqual([part["counts"] for part in self.record()["batch"]["parts"]],
                         [{"total": 3, "completed": 2, "failed": 1},
                          {"total": 3, "completed": 3, "failed": 0},
                          {"total": 2, "completed": 2, "failed": 0}])

    def test_the_input_file_is_uploaded_as_named_jsonl(self):
        uploads = []

        def before(request):
            if request.method == "POST" and request.url.path == "/v1/files":
                uploads.append(request.read())

        self.before_request = before
        self.batch()
        (body,) = uploads
        head = body.split(b"\r\n\r\n{")[0].rsplit(b"\r\n--", 1)[-1]  # the file's headers
        self.assertIn(b'name="file"; filename="regression-batch.jsonl"', head)
        self.assertIn(b"\r\nContent-Type: application/jsonl", head)

    def test_rows_collected_are_saved_every_BATCH_SAVE_ROWS(self):
        on_disk, original = [], batching.batch_row

        def row(run, index, line, batch):  # what a crash at this row would leave
            on_disk.append(saved_rows(self.out))
            return original(run, index, line, batch)

        with mock.patch.object(batching, "BATCH_SAVE_ROWS", 3), \
                mock.patch.object(batching, "batch_row", row):
            code, _, err = self.batch()
        self.assertEqual(code, 1, err)
        self.assertEqual(on_disk, [0, 0, 0, 3, 3, 3, 6, 6])


class BatchRecoveryTest(BatchHarness):

    def test_a_stop_while_waiting_is_collected_by_resume_without_a_second_batch(self):
        self.stop_at_the_first_poll()
        with self.assertRaises(KeyboardInterrupt):
            self.batch()
        saved = self.record()
        self.assertEqual(saved["runs"], [])
        self.assertTrue(saved["batch"]["parts"][0]["batch_id"])
        self.before_request = None
        code, out, err = self.resume()
        self.assertEqual(code, 1, err)
        self.assertEqual(len(self.record()["runs"]), 8)
        self.assertEqual((self.state["file_creates"], self.state["batch_creates"]), (1, 1))
        self.assertEqual(self.state["requests"], [])

    def test_a_crash_between_upload_and_create_uploads_nothing_again(self):
        with mock.patch.object(batching, "create", side_effect=OSError("killed")):
            with self.assertRaises(OSError):
                self.batch()
        part = self.record()["batch"]["parts"][0]
        self.assertTrue(part["input_file_id"])
        self.assertIsNone(part["batch_id"])
        code, _, err = self.resume()
        self.assertEqual(code, 1, err)
        self.assertEqual((self.state["file_creates"], len(self.state["batches"])), (1, 1))

    def test_a_create_whose_answer_was_lost_is_not_made_twice(self):
        self.state["batch_lose_creates"] = 1  # the batch is made; its answer never arrives
        code, _, err = self.batch()
        self.assertEqual(code, 2, err)
        self.assertIn("--resume", err)
        code, _, err = self.resume()
        self.assertEqual(code, 1, err)
        self.assertEqual(len(self.state["batches"]), 1)
        self.assertEqual(self.state["batch_creates"], 2)  # the same key: the same batch

    def test_rows_a_batch_left_unanswered_are_sent_directly_by_resume(self):
        for outcome, error in (("expired", "BatchExpired"), ("cancelled", "BatchCancelled"),
                               ("failed", "BatchFailed")):
            with self.subTest(outcome):
                self.setUp()  # a new record and a new simulated API for each outcome
                self.state["batch_outcome"] = outcome
                # Two cases, four rows: an expired or cancelled batch answers the rate-limit
                # pair and leaves the payment pair, the unsafe model's failure (exit 1).
                code, _, err = self.batch("--cases", self.cases_file("rate-limit",
                                                                "ambiguous-payment"))
                self.assertEqual(code, 2, err)
                rows = self.record()["runs"]
                missing = [row for row in rows if row["error"]]
                self.assertTrue(missing)
                self.assertTrue(all(row["error"] == error for row in missing), missing)
                [batch_id] = self.state["batches"]
                for row in missing:
                    self.assertTrue(row["error_message"].startswith(
                        f"batch {batch_id} ended {outcome} without an answer for this row"),
                        row["error_message"])
                code, _, err = quiet(regression.main, hinted(err))  # exactly as printed
                self.assertEqual(code, 1, err)
                self.assertEqual(len(self.state["requests"]), len(missing))  # sent directly
                self.assertEqual(len(self.state["batches"]), 1)  # never submitted again
                self.assertTrue(all(row["error"] is None for row in self.record()["runs"]))

    def test_a_budget_given_to_the_resume_stops_no_collection(self):
        self.stop_at_the_first_poll()
        parts = mock.patch.object(batching, "PART_LINES", 8)  # a stop would leave part 2 out
        parts.start()
        self.addCleanup(parts.stop)
        with self.assertRaises(KeyboardInterrupt):
            self.batch("--repeats", "2")
        self.before_request = None
        code, _, err = self.resume("--max-cost", "0.001")  # less than one row costs
        self.assertEqual(len(self.record()["runs"]), 16, err)  # paid for already: all kept
        self.assertEqual(code, 1, err)
        self.assertNotIn("stopped_for_budget", self.record()["execution"])
        self.assertNotIn("Stopped", err)

    def test_a_refused_upload_stops_with_a_resume_hint(self):
        self.state["batch_faults"] = [(500, [], {"error": {"message": "upload failed"}})]
        code, _, err = self.batch()
        self.assertEqual(code, 2)
        self.assertIn("upload failed", err)
        code, _, err = quiet(regression.main, hinted(err))  # exactly as printed
        self.assertEqual(code, 1, err)


class BatchStepsTest(BatchHarness):
    """A stop or a failure at a step of a batch: one line, and a resume that carries on."""

    def test_ctrl_c_during_an_upload_submits_nothing_more(self):
        def before(request):
            if request.method == "POST" and request.url.path == "/v1/files":
                os.kill(os.getpid(), signal.SIGINT)  # taken by the runner's handler

        self.before_request = before
        with mock.patch.object(batching, "PART_LINES", 3), \
                self.assertRaises(KeyboardInterrupt):
            self.batch()
        self.assertEqual((self.state["file_creates"], self.state["batch_creates"]), (1, 0))
        self.before_request = None
        code, _, err = self.resume()
        self.assertEqual(code, 1, err)
        self.assertEqual((self.state["file_creates"], len(self.state["batches"])), (3, 3))

    def test_a_failed_download_is_one_line_and_resume_collects(self):
        def before(request):
            if request.url.path.endswith("/content"):
                raise httpx.ConnectError("connection reset")

        self.before_request = before
        code, _, err = self.batch()
        self.assertEqual(code, 2)
        self.assertNotIn("Traceback", err)
        self.assertIn("cannot download the answers of batch", err)
        self.before_request = None
        code, _, err = quiet(regression.main, hinted(err))
        self.assertEqual(code, 1, err)
        self.assertEqual(len(self.record()["runs"]), 8)

    def test_a_batch_the_api_does_not_know_is_not_sent_to_resume_again(self):
        self.stop_at_the_first_poll()
        with self.assertRaises(KeyboardInterrupt):
            self.batch()
        self.state["batches"].clear()  # another organization's key, or past 30 days
        self.before_request = None
        code, _, err = self.resume()
        self.assertEqual(code, 2)
        self.assertIn("does not know batch", err)
        self.assertNotIn("--resume", err)

    def test_a_budget_is_refused_where_a_resume_would_submit_a_batch(self):
        with mock.patch.object(batching, "upload", side_effect=OSError("killed")), \
                self.assertRaises(OSError):
            self.batch()
        code, _, err = self.resume("--max-cost", "1")
        self.assertEqual(code, 2)
        self.assertIn("drop --max-cost", err)
        self.assertEqual(self.state["file_creates"], 0)

    def test_a_resumed_batch_record_holds_its_batch_once(self):
        self.stop_at_the_first_poll()
        with self.assertRaises(KeyboardInterrupt):
            self.batch()
        self.before_request = None
        code, out, err = self.resume()
        self.assertEqual(code, 1, err)
        self.assertIn("8 to collect from the Batch API", out)
        with open(self.out, encoding="utf-8") as handle:
            self.assertEqual(sum(line.startswith('"batch"') for line in handle), 1)


class BatchPollTest(BatchHarness):
    """Polls: failures the run rides out, when it stops, how long it waits."""

    def test_polls_may_fail_five_times_in_a_row(self):
        polls = self.fail_polls(range(1, POLL_FAILURES + 1))
        code, _, err = self.batch()
        self.assertEqual(code, 1, err)
        self.assertEqual(len(self.record()["runs"]), 8)
        self.assertGreater(len(polls), POLL_FAILURES)

    def test_a_sixth_failed_poll_in_a_row_stops_with_a_resume_hint(self):
        polls = self.fail_polls(range(1, POLL_FAILURES + 2))
        code, _, err = self.batch()
        self.assertEqual(code, 2, err)
        self.assertEqual(len(polls), POLL_FAILURES + 1)
        self.assertIn("cannot reach the Batch API", err)
        self.assertEqual(self.record()["runs"], [])
        code, _, err = quiet(regression.main, hinted(err))  # exactly as printed
        self.assertEqual(code, 1, err)
        self.assertEqual(self.state["batch_creates"], 1)

    def test_a_poll_that_arrives_starts_the_count_again(self):
        failing = [*range(1, POLL_FAILURES + 1), *range(POLL_FAILURES + 2, 2 * POLL_FAILURES + 2)]
        polls = self.fail_polls(failing)  # 5 fail, 1 arrives (validating -> in_progress), 5 fail
        code, _, err = self.batch()
        self.assertEqual(code, 1, err)
        self.assertEqual(len(self.record()["runs"]), 8)
        self.assertGreater(len(polls), 2 * POLL_FAILURES + 1)

    def test_polls_wait_0_2_s_then_twice_as_long_each_time_up_to_a_minute(self):
        waits = []

        class Stopped(threading.Event):
            def wait(self, timeout=None):  # the wait is counted, never slept
                waits.append(timeout)
                return self.is_set()

        class Pause(sending.Pause):
            def __init__(self):
                super().__init__()
                self.stopped = Stopped()

        self.state["batch_rows_per_poll"] = 1  # 12 rows: 14 polls, 13 waits between them
        cases = self.cases_file("rate-limit", "temporary-overload", "ambiguous-payment")
        with mock.patch.object(batching, "FIRST_POLL_SECONDS", POLLS[0]), \
                mock.patch.object(batching, "MAX_POLL_SECONDS", POLLS[1]), \
                mock.patch.object(regression, "Pause", Pause):
            code, _, err = self.batch("--repeats", "2", "--cases", cases)
        self.assertEqual(code, 1, err)
        self.assertEqual([round(wait, 6) for wait in waits],
                         [0.2, 0.4, 0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 51.2] + [60.0] * 4)

    def test_a_stopped_demo_wait_says_the_batch_ends_with_the_demo(self):
        original = batching.retrieve

        def retrieve(client, batch_id):  # Ctrl+C while the first poll is on its way
            os.kill(os.getpid(), signal.SIGINT)  # taken by the runner's handler
            return original(client, batch_id)

        err = io.StringIO()
        with mock.patch.object(regression, "Perplexity", Perplexity), \
                mock.patch.object(batching, "retrieve", side_effect=retrieve), \
                contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err), \
                self.assertRaises(KeyboardInterrupt):
            regression.main(["--demo", self.path("demo"), "--batch"])
        self.assertIn("Stopping the wait; the batch runs on, and it ends with the demo\n",
                      err.getvalue())


class BatchFlagsTest(BatchHarness):

    def test_what_cannot_be_batched_is_refused_in_one_line(self):
        for args, words, why in (
                (["--models", "chat:sonar-pro"], "chat:sonar-pro", "Agent API requests only"),
                (["--foreground"], "--foreground", "never sent plainly; drop --foreground"),
                (["--prove", "0.9"], "--prove", "one repeat at a time; drop --batch"),
                (["--max-cost", "1"], "--max-cost", "no budget can stop it; drop --max-cost")):
            with self.subTest(args=args):
                code, err = self.usage("--out", self.out, "--batch", *args)
                self.assertEqual(code, 2)
                self.assertIn(f"--batch cannot be used with {words}: ", err)
                self.assertIn(why, err)
                self.assertEqual(len(err.strip().splitlines()[-1:]), 1)
                self.assertFalse(os.path.exists(self.out))

    def test_resume_takes_batch_from_the_record(self):
        code, err = self.usage("--resume", self.out, "--batch")
        self.assertEqual(code, 2)
        self.assertIn("drop --batch", err)

    def usage(self, *args):
        with self.assertRaises(SystemExit) as raised, \
                contextlib.redirect_stderr(io.StringIO()) as err:
            regression.main(list(args))
        return raised.exception.code, err.getvalue()


class BatchPartsTest(unittest.TestCase):

    def test_parts_are_cut_by_lines_bytes_and_gaps(self):
        for sizes, lines, limit, expected in (
                ([(0, 5), (1, 5), (2, 5)], 2, 100, [(0, 2), (2, 3)]),
                ([(0, 5), (1, 5), (2, 5)], 10, 10, [(0, 2), (2, 3)]),
                ([(0, 5), (2, 5)], 10, 100, [(0, 1), (2, 3)]),
                ([(0, 50)], 10, 10, [(0, 1)])):  # one line past the limit is a part alone
            with self.subTest(sizes=sizes, lines=lines, limit=limit):
                parts = batching.parts_of(sizes, lines, limit)
                self.assertEqual([(part["start"], part["stop"]) for part in parts], expected)

    def test_the_key_names_the_record_and_the_part(self):
        part = {"start": 0, "stop": 8}
        key = batching.idempotency_key("2026-12-01T00:00:00+00:00", part)
        self.assertEqual(key, batching.idempotency_key("2026-12-01T00:00:00+00:00", dict(part)))
        self.assertNotEqual(key, batching.idempotency_key("2026-12-01T00:00:01+00:00", part))
        self.assertNotEqual(key, batching.idempotency_key("2026-12-01T00:00:00+00:00",
                                                          {"start": 0, "stop": 7}))

    def test_the_key_is_regression_and_40_hex_digits(self):
        for part in ({"start": 0, "stop": 8}, {"start": 50_000, "stop": 100_000}):
            with self.subTest(part=part):
                key = batching.idempotency_key("2026-12-01T00:00:00+00:00", part)
                self.assertRegex(key, r"\Aregression-[0-9a-f]{40}\Z")

    def test_a_part_holds_at_most_the_apis_50000_lines(self):
        self.assertEqual(simulated_api.BATCH_MAX_LINES, 50_000)  # the live API's documented limit
        for count, expected in ((50_000, [(0, 50_000)]),
                                (50_001, [(0, 50_000), (50_000, 50_001)])):
            with self.subTest(lines=count):
                parts = batching.parts_of((index, 1) for index in range(count))
                self.assertEqual([(part["start"], part["stop"]) for part in parts], expected)

    def test_a_part_holds_at_most_16_mib(self):
        for sizes, expected in (
                ([(0, (16 << 20) - 1), (1, 1)], [(0, 2)]),
                ([(0, 16 << 20), (1, 1)], [(0, 1), (1, 2)])):
            with self.subTest(bytes=sum(size for _, size in sizes)):
                parts = batching.parts_of(sizes)
                self.assertEqual([(part["start"], part["stop"]) for part in parts], expected)

    def test_a_new_part_is_saved_with_nothing_done(self):
        self.assertEqual(batching.parts_of([(4, 10), (5, 10)]),
                         [{"start": 4, "stop": 6, "input_file_id": None, "batch_id": None,
                           "status": None, "collected": False, "counts": {}}])

    def test_an_input_line_is_strict_json(self):
        self.assertEqual(batching.input_line(17, {"model": "m", "input": "q"}),
                         b'{"custom_id": "row-17", "method": "POST", "url": "/v1/responses", '
                         b'"body": {"model": "m", "input": "q"}}\n')
        for value in (float("nan"), float("inf")):
            with self.subTest(value=value), self.assertRaises(ValueError):
                batching.input_line(0, {"temperature": value})

    def test_a_custom_id_names_a_plan_index_or_nothing(self):
        for name, index in (("row-0", 0), ("row-17", 17), ("row-999999999", 999999999),
                            ("row-1000000000", None), ("row-017", None), ("row-", None),
                            ("row--1", None), ("row-1 ", None), ("Row-1", None),
                            ("x-row-1", None), (17, None), (None, None)):
            with self.subTest(name=name):
                self.assertEqual(batching.row_index(name), index)

    def test_a_downloaded_file_names_only_rows_of_its_part(self):
        def places(*names):
            return batching.line_places(io.BytesIO(b"".join(
                b'{"custom_id": "%s"}\n' % name.encode() for name in names)), 2, 4)

        self.assertEqual(places("row-2", "other", "row-3"), {2: (0, 23), 3: (46, 23)})
        for names, said in ((("row-1",), "row-1, a row its part (2-4) never had"),
                            (("row-4",), "row-4, a row its part (2-4) never had"),
                            (("row-3", "row-3"), "row-3 twice")):
            with self.subTest(names=names), self.assertRaises(UserError) as raised:
                places(*names)
            self.assertIn(said, str(raised.exception))

    def test_the_progress_line_counts_rows_answered_of_rows_submitted(self):
        for parts, total, seconds, line in (
                ([{"status": "in_progress", "counts": {"total": 5, "completed": 3, "failed": 1}},
                  {"status": "in_progress", "counts": {"total": 5, "completed": 2}}], 10, 12.4,
                 "batch: 5 of 10 rows answered, 1 failed (in_progress), 12s elapsed"),
                ([{"status": "validating", "counts": {}}, {"status": None, "counts": None},
                  {"status": None}], 9, 0.4,
                 "batch: 0 of 9 rows answered (submitted, validating), 0s elapsed"),
                ([{"status": "completed", "counts": {"completed": 8, "failed": 0}}], 8, 95.6,
                 "batch: 8 of 8 rows answered (completed), 96s elapsed")):
            with self.subTest(line=line):
                self.assertEqual(batching.counts_line(parts, total, seconds), line)


@slow("starts the runner and the simulated API as processes, and signals the runner")
class BatchProcessTest(unittest.TestCase):

    def test_sigint_while_waiting_then_the_printed_resume_collects(self):
        folder = temp_dir(self)
        server = loopback_server(self, unsafe_models=("offline/hasty",))
        hold = threading.Event()
        server.state["batch_hold"] = hold
        self.addCleanup(hold.set)
        out = os.path.join(folder, "run.json")
        env = loopback_env(server)
        runner = popen(self, "regression.py", "--batch", "--models", *MODELS, "--out", out,
                       env=env)
        wait_until(lambda: server.state["batch_polls"] > 0, what="the first poll")
        runner.send_signal(signal.SIGINT)
        stdout, stderr = runner.communicate(timeout=60)
        self.assertEqual(runner.returncode, 130, stderr)
        hint = next(line for line in stderr.splitlines() if "--resume" in line)
        command = hint.split("with: ", 1)[1]
        hold.set()
        done = subprocess.run(command, shell=True, env=env, capture_output=True, text=True,
                              timeout=120, cwd=os.path.dirname(os.path.abspath(__file__)))
        self.assertEqual(done.returncode, 1, done.stderr)
        self.assertEqual(saved_rows(out), 8)
        self.assertEqual(len(server.state["batches"]), 1)


def hinted(text):
    """The arguments of the command a message prints after "with: ", as printed."""
    words = shlex.split(text.rsplit("with: ", 1)[1].splitlines()[0])
    assert os.path.basename(words[1]) == "regression.py", words  # python, the runner, args
    return words[2:]


if __name__ == "__main__":
    unittest.main()
