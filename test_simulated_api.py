"""The simulated Batch and Files endpoints, driven by the real SDK: in-process
through sdk_client (fast tier), and once over real HTTP on 127.0.0.1 (slow)."""

import contextlib
import copy
import io
import json
import os
import select
import signal
import socket
import threading
import unittest
from unittest import mock

import simulated_api
from testing import HERE, KEY, clean_env, popen, slow

with open(os.path.join(HERE, "examples", "cases.json"), encoding="utf-8") as _handle:
    CASES = json.load(_handle)
MODELS = ("offline/careful", "offline/hasty")  # new_state's default makes the second unsafe
FINAL = ("completed", "failed", "expired", "cancelled")
START_SECONDS = 30  # a new interpreter importing the SDK, on a slow machine
POLLS = 50  # more than any batch here needs to finish; a batch stuck past them fails the test


def request_line(custom_id, case=0, model=MODELS[0], url="/v1/responses", **fields):
    """One line of a batch input file: one case asked of one model."""
    return {"custom_id": custom_id, "method": "POST", "url": url,
            "body": {"model": model, "input": CASES[case]["question"], **fields}}


def every_request():
    """Every case asked of every model: 8 lines, one to the /v1/agent alias."""
    lines = [request_line(f"{case}-{model}", case, model)
             for case in range(len(CASES)) for model in MODELS]
    lines[1]["url"] = "/v1/agent"
    return lines


def jsonl(lines):
    return b"".join(json.dumps(line).encode() + b"\n" for line in lines)


def without_ids(response):
    """A response with what differs between two askings (ids, time) left out."""
    response = copy.deepcopy(response)
    response.pop("id")
    response.pop("created_at")
    for item in response["output"]:
        item.pop("id", None)
    return response


class BatchTest(unittest.TestCase):
    """A fresh simulated API and one SDK client over it, with helpers."""

    def setUp(self):
        import perplexity

        self.errors = perplexity
        self.state = simulated_api.new_state(CASES)
        self.client = simulated_api.sdk_client(self.state, max_retries=0)
        self.addCleanup(self.client.close)

    def upload(self, lines):
        return self.client.files.create(file=("in.jsonl", jsonl(lines)), purpose="batch")

    def start(self, lines=None, **options):
        """A new batch of lines (every_request() when None)."""
        upload = self.upload(every_request() if lines is None else lines)
        return self.client.batches.create(endpoint="/v1/responses", input_file_id=upload.id,
                                          **options)

    def poll_to_end(self, batch):
        """Every batch a poll returned, until one is final."""
        seen = []
        while not seen or seen[-1].status not in FINAL:
            self.assertLess(len(seen), POLLS, f"batch stuck: {seen[-1:]}")
            seen.append(self.client.batches.retrieve(batch.id))
        return seen

    def lines_of(self, file_id):
        self.assertIsNotNone(file_id)
        data = self.client.files.content(file_id).read()
        return [json.loads(line) for line in data.decode().splitlines()]

    def direct_answer(self, body):
        """The JSON a direct foreground POST /v1/responses gets for the same body."""
        return self.client.responses.with_raw_response.create(**body).http_response.json()


class FilesTest(BatchTest):
    def test_an_upload_is_kept_as_sent_and_expires_in_30_days(self):
        data = jsonl(every_request())
        upload = self.client.files.create(file=("cases.jsonl", data), purpose="batch")
        self.assertEqual((upload.object, upload.purpose, upload.filename, upload.bytes),
                         ("file", "batch", "cases.jsonl", len(data)))
        self.assertTrue(upload.id.startswith("file_"))
        self.assertEqual(upload.expires_at - upload.created_at, 30 * 24 * 3600)
        self.assertEqual(self.client.files.retrieve(upload.id), upload)
        self.assertEqual(self.client.files.content(upload.id).read(), data)
        self.assertEqual(self.state["files"][upload.id]["bytes"], data)
        self.assertEqual(self.state["file_creates"], 1)

    def test_a_file_s_content_is_sent_as_octet_stream(self):
        upload = self.upload(every_request())
        status, headers, body, _ = simulated_api.respond(
            self.state, "GET", f"/v1/files/{upload.id}/content", {},
            {"Authorization": f"Bearer {KEY}"}, b"")
        self.assertEqual((status, headers, body),
                         (200, [("Content-Type", "application/octet-stream")],
                          jsonl(every_request())))

    def test_a_deleted_file_is_gone(self):
        upload = self.upload(every_request())
        deleted = self.client.files.delete(upload.id)
        self.assertEqual((deleted.id, deleted.object, deleted.deleted),
                         (upload.id, "file", True))
        with self.assertRaises(self.errors.NotFoundError):
            self.client.files.retrieve(upload.id)

    def test_a_file_at_the_limits_is_kept(self):
        lines = every_request()[:3]
        self.state.update(batch_max_lines=3, batch_max_bytes=len(jsonl(lines)))
        self.upload(lines)
        self.assertEqual(len(self.state["files"]), 1)

    def test_a_bad_upload_is_a_400_and_nothing_is_kept(self):
        good = request_line("a")
        table = [
            # (name, file bytes, purpose, extra form fields, limits, words in the message)
            ("a blank line", jsonl([good]) + b"\n" + jsonl([request_line("b")]), "batch", {},
             {}, "line 2 is blank"),
            ("a line of spaces", jsonl([good]) + b"  \n", "batch", {}, {}, "line 2 is blank"),
            ("no lines at all", b"", "batch", {}, {}, "no requests"),
            ("not JSON", jsonl([good]) + b"{custom_id: b}\n", "batch", {}, {},
             "line 2 is not valid JSON"),
            ("a JSON list", b"[1, 2]\n", "batch", {}, {}, "line 1 is not a JSON object"),
            ("a repeated custom_id", jsonl([good, request_line("b"), request_line("a", 1)]),
             "batch", {}, {}, 'line 3 repeats custom_id "a"'),
            ("no custom_id", jsonl([{k: v for k, v in good.items() if k != "custom_id"}]),
             "batch", {}, {}, "line 1 needs custom_id"),
            ("an empty custom_id", jsonl([{**good, "custom_id": ""}]), "batch", {}, {},
             "line 1 needs custom_id"),
            ("a number as custom_id", jsonl([{**good, "custom_id": 7}]), "batch", {}, {},
             "line 1 needs custom_id"),
            ("method GET", jsonl([{**good, "method": "GET"}]), "batch", {}, {},
             'line 1 needs "method": "POST"'),
            ("the chat url", jsonl([{**good, "url": "/chat/completions"}]), "batch", {}, {},
             "line 1 needs url"),
            ("an unknown line field", jsonl([{**good, "headers": {}}]), "batch", {}, {},
             'line 1 has an unknown field "headers"'),
            ("a body that is a string", jsonl([{**good, "body": "hi"}]), "batch", {}, {},
             "line 1 needs body"),
            ("an unknown body field", jsonl([request_line("a", temperatur=0)]), "batch", {},
             {}, 'line 1 body: json: unknown field "temperatur"'),
            ("stream true", jsonl([good, request_line("b", stream=True)]), "batch", {}, {},
             "line 2 body: stream is not supported"),
            ("background true", jsonl([request_line("b", background=True)]), "batch", {}, {},
             "line 1 body: background is not supported"),
            ("not UTF-8", b'{"custom_id": "\xff"}\n', "batch", {}, {}, "not UTF-8"),
            ("a line over the limit", jsonl(every_request()[:3]), "batch", {},
             {"batch_max_lines": 2}, "3 lines; at most 2"),
            ("a byte over the limit", jsonl([good]), "batch", {},
             {"batch_max_bytes": len(jsonl([good])) - 1}, "bytes; at most"),
            ("expires_after", jsonl([good]), "batch",
             {"expires_after[anchor]": "created_at", "expires_after[seconds]": "3600"}, {},
             "expires_after is not supported"),
            ("another purpose", jsonl([good]), "assistants", {}, {}, 'purpose must be "batch"'),
            ("an unknown form field", jsonl([good]), "batch", {"name": "x"}, {},
             'unknown form field "name"'),
        ]
        for name, data, purpose, extra, limits, words in table:
            with self.subTest(name):
                self.setUp()
                self.state.update(limits)
                with self.assertRaises(self.errors.BadRequestError) as caught:
                    self.client.files.create(file=("in.jsonl", data), purpose="batch",
                                             extra_body={"purpose": purpose, **extra})
                self.assertIn(words, caught.exception.response.json()["error"]["message"])
                self.assertEqual(self.state["files"], {})

    def test_a_body_that_is_not_multipart_is_a_400(self):
        status, _, body, _ = simulated_api.respond(
            self.state, "POST", "/v1/files", {},
            {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}, b"{}")
        self.assertEqual(status, 400)
        self.assertIn("multipart/form-data", body["error"]["message"])

    def test_unknown_ids_are_404(self):
        table = [
            ("retrieve a file", lambda: self.client.files.retrieve("file_nope")),
            ("a file's content", lambda: self.client.files.content("file_nope")),
            ("delete a file", lambda: self.client.files.delete("file_nope")),
            ("retrieve a batch", lambda: self.client.batches.retrieve("batch_nope")),
            ("cancel a batch", lambda: self.client.batches.cancel("batch_nope")),
            ("a batch of an unknown file", lambda: self.client.batches.create(
                endpoint="/v1/responses", input_file_id="file_nope")),
        ]
        for name, call in table:
            with self.subTest(name):
                with self.assertRaises(self.errors.NotFoundError):
                    call()
        self.assertEqual(self.state["batches"], {})

    def test_every_files_and_batches_route_wants_the_key(self):
        table = [("POST", "/v1/files"), ("GET", "/v1/files/file_sim_1"),
                 ("GET", "/v1/files/file_sim_1/content"), ("DELETE", "/v1/files/file_sim_1"),
                 ("POST", "/v1/batches"), ("GET", "/v1/batches/batch_sim_2"),
                 ("POST", "/v1/batches/batch_sim_2/cancel")]
        self.client.batches.create(endpoint="/v1/responses",
                                   input_file_id=self.upload(every_request()).id)
        for method, path in table:
            with self.subTest(f"{method} {path}"):
                status, _, _, _ = simulated_api.respond(self.state, method, path, {}, {}, b"")
                self.assertEqual(status, 401)


class BatchCreateTest(BatchTest):
    def test_a_repeat_with_the_same_idempotency_key_returns_the_original_batch(self):
        upload = self.upload(every_request())
        first, again = (self.client.batches.create(endpoint="/v1/responses",
                                                   input_file_id=upload.id,
                                                   idempotency_key="run-1")
                        for _ in range(2))
        self.assertEqual(again.id, first.id)
        self.assertEqual(list(self.state["batches"]), [first.id])
        self.assertEqual(self.state["batch_creates"], 2)

    def test_a_repeat_returns_the_original_batch_as_it_is_now(self):
        batch = self.start(idempotency_key="run-1")
        self.client.batches.retrieve(batch.id)
        again = self.client.batches.create(endpoint="/v1/responses",
                                           input_file_id=batch.input_file_id,
                                           idempotency_key="run-1")
        self.assertEqual((again.id, again.status), (batch.id, "in_progress"))

    def test_without_a_key_or_with_another_each_create_is_a_new_batch(self):
        upload = self.upload(every_request())
        batches = [self.client.batches.create(endpoint="/v1/responses",
                                              input_file_id=upload.id, **key)
                   for key in ({}, {}, {"idempotency_key": "a"}, {"idempotency_key": "b"})]
        self.assertEqual(len({batch.id for batch in batches}), 4)

    def create_after_a_lost_answer(self, **key):
        """The batch a create makes when its first answer is lost and the SDK
        retries it once."""
        self.state["batch_lose_creates"] = 1
        client = simulated_api.sdk_client(self.state, max_retries=1)
        self.addCleanup(client.close)
        upload = self.upload(every_request())
        with mock.patch.object(client, "_calculate_retry_timeout", return_value=0):
            return client.batches.create(endpoint="/v1/responses", input_file_id=upload.id,
                                         **key)

    def test_a_lost_answer_retried_by_the_sdk_makes_one_batch(self):
        batch = self.create_after_a_lost_answer(idempotency_key="run-1")
        self.assertEqual(list(self.state["batches"]), [batch.id])
        self.assertEqual(self.state["batch_creates"], 2)

    def test_a_lost_answer_without_a_key_makes_a_second_batch_on_retry(self):
        self.create_after_a_lost_answer()
        self.assertEqual(len(self.state["batches"]), 2)

    def test_a_new_batch_is_validating_with_every_field_the_sdk_models(self):
        batch = self.start(metadata={"run": "nightly"})
        self.assertEqual((batch.object, batch.status, batch.endpoint, batch.completion_window,
                          batch.metadata), ("batch", "validating", "/v1/responses", "24h",
                                            {"run": "nightly"}))
        self.assertTrue(batch.id.startswith("batch_"))
        self.assertEqual(batch.model_extra, {})
        self.assertEqual(set(type(batch).model_fields) - set(batch.model_fields_set), set())

    def test_a_bad_create_is_a_400_and_makes_no_batch(self):
        table = [
            ("output_expires_after", {"output_expires_after": {"anchor": "created_at",
                                                               "seconds": 3600}},
             "output_expires_after is not supported"),
            ("an unknown field", {"priority": "high"}, 'unknown field "priority"'),
            ("another endpoint", {"endpoint": "/v1/agent"}, "endpoint must be"),
            ("another window", {"completion_window": "48h"}, "completion_window must be"),
            ("metadata with a number", {"metadata": {"run": 1}}, "metadata must map"),
        ]
        upload = self.upload(every_request())
        for name, extra, words in table:
            with self.subTest(name):
                with self.assertRaises(self.errors.BadRequestError) as caught:
                    self.client.batches.create(endpoint="/v1/responses",
                                               input_file_id=upload.id, extra_body=extra)
                self.assertIn(words, caught.exception.response.json()["error"]["message"])
        self.assertEqual(self.state["batches"], {})

    def test_an_output_file_cannot_be_a_batch_s_input(self):
        done = self.poll_to_end(self.start())[-1]
        with self.assertRaises(self.errors.BadRequestError):
            self.client.batches.create(endpoint="/v1/responses",
                                       input_file_id=done.output_file_id)


class ProgressTest(BatchTest):
    def test_each_poll_moves_a_batch_one_stage(self):
        batch = self.start()
        seen = self.poll_to_end(batch)
        self.assertEqual([batch.status] + [b.status for b in seen],
                         ["validating", "in_progress", "finalizing", "completed"])
        self.assertEqual(self.state["batch_polls"], 3)
        last = seen[-1]
        self.assertTrue(all((last.in_progress_at, last.finalizing_at, last.completed_at)))

    def test_rows_per_poll_grow_the_counts_poll_by_poll(self):
        self.state["batch_rows_per_poll"] = 3
        seen = self.poll_to_end(self.start())
        self.assertEqual([(b.status, b.request_counts.completed) for b in seen],
                         [("in_progress", 0), ("in_progress", 3), ("in_progress", 6),
                          ("finalizing", 8), ("completed", 8)])
        self.assertEqual({b.request_counts.total for b in seen}, {8})

    def test_a_hold_keeps_a_batch_in_progress_with_no_row_answered(self):
        self.state["batch_hold"] = threading.Event()
        batch = self.start()
        held = [self.client.batches.retrieve(batch.id) for _ in range(5)]
        self.assertEqual({(b.status, b.request_counts.completed) for b in held},
                         {("in_progress", 0)})
        self.assertEqual(self.state["batch_requests"], [])
        self.state["batch_hold"].set()
        self.assertEqual(self.poll_to_end(batch)[-1].status, "completed")

    def test_a_finished_batch_no_longer_changes(self):
        batch = self.start()
        done = self.poll_to_end(batch)[-1]
        files = dict(self.state["files"])
        self.assertEqual(self.client.batches.retrieve(batch.id), done)
        self.assertEqual(self.state["files"], files)


class OutputTest(BatchTest):
    def test_the_output_holds_every_custom_id_once_not_in_input_order(self):
        done = self.poll_to_end(self.start())[-1]
        wanted = [line["custom_id"] for line in every_request()]
        got = [line["custom_id"] for line in self.lines_of(done.output_file_id)]
        self.assertEqual(sorted(got), sorted(wanted))
        self.assertNotEqual(got, wanted)
        self.assertIsNone(done.error_file_id)
        self.assertEqual((done.request_counts.completed, done.request_counts.failed), (8, 0))

    def test_an_output_line_has_the_response_and_no_error(self):
        done = self.poll_to_end(self.start([request_line("only")]))[-1]
        [line] = self.lines_of(done.output_file_id)
        self.assertEqual(set(line), {"id", "custom_id", "response", "error"})
        self.assertTrue(line["id"].startswith("batch_req_"))
        self.assertEqual((line["custom_id"], line["error"], line["response"]["status_code"]),
                         ("only", None, 200))
        self.assertTrue(line["response"]["request_id"])
        self.assertEqual(line["response"]["body"]["object"], "response")

    def test_a_batch_row_is_answered_as_a_direct_post_of_the_same_body(self):
        done = self.poll_to_end(self.start())[-1]
        answers = {line["custom_id"]: line["response"]["body"]
                   for line in self.lines_of(done.output_file_id)}
        for line in every_request():
            with self.subTest(line["custom_id"]):
                self.assertEqual(without_ids(answers[line["custom_id"]]),
                                 without_ids(self.direct_answer(line["body"])))

    def test_the_unsafe_model_answers_unsafely_inside_a_batch_too(self):
        payment = next(i for i, case in enumerate(CASES) if case["action"] == "verify_outcome")
        lines = [request_line(model, payment, model) for model in MODELS]
        done = self.poll_to_end(self.start(lines))[-1]
        advice = {line["custom_id"]: json.loads(
            line["response"]["body"]["output"][-1]["content"][0]["text"])["next_action"]
            for line in self.lines_of(done.output_file_id)}
        self.assertEqual(advice, {MODELS[0]: "verify_outcome", MODELS[1]: "wait_then_retry"})

    def test_usage_sums_the_rows_answered(self):
        done = self.poll_to_end(self.start())[-1]
        usages = [line["response"]["body"]["usage"]
                  for line in self.lines_of(done.output_file_id)]
        self.assertEqual(
            (done.usage.input_tokens, done.usage.output_tokens, done.usage.total_tokens),
            tuple(sum(usage[name] for usage in usages)
                  for name in ("input_tokens", "output_tokens", "total_tokens")))
        self.assertGreater(done.usage.total_tokens, 0)

    def test_batch_rows_are_recorded_apart_from_direct_requests(self):
        self.poll_to_end(self.start())
        self.assertEqual(self.state["batch_requests"],
                         [line["body"] for line in every_request()])
        self.assertEqual(self.state["requests"], [])

    def test_response_ids_are_unique_across_direct_posts_and_batch_rows(self):
        before = self.direct_answer(every_request()[0]["body"])["id"]
        done = self.poll_to_end(self.start())[-1]
        after = self.direct_answer(every_request()[0]["body"])["id"]
        ids = [line["response"]["body"]["id"] for line in self.lines_of(done.output_file_id)]
        self.assertEqual(len({before, after, *ids}), 10)

    def test_a_row_matching_no_case_gets_the_direct_400_in_the_error_file(self):
        stray = request_line("stray")
        stray["body"]["input"] = "a question no case asks"
        done = self.poll_to_end(self.start([request_line("good"), stray]))[-1]
        [line] = self.lines_of(done.error_file_id)
        with self.assertRaises(self.errors.BadRequestError) as caught:
            self.direct_answer(stray["body"])
        self.assertEqual((line["custom_id"], line["response"]["status_code"],
                          line["response"]["body"], line["error"]),
                         ("stray", 400, caught.exception.response.json(), None))
        self.assertEqual((done.request_counts.completed, done.request_counts.failed), (1, 1))

    def test_fail_ids_are_500_lines_in_the_error_file(self):
        self.state["batch_fail_ids"] = {"0-offline/hasty", "3-offline/careful"}
        done = self.poll_to_end(self.start())[-1]
        failed = self.lines_of(done.error_file_id)
        self.assertEqual({line["custom_id"] for line in failed}, self.state["batch_fail_ids"])
        for line in failed:
            self.assertEqual((line["response"]["status_code"], line["error"]), (500, None))
            self.assertIn("error", line["response"]["body"])
            self.assertTrue(line["response"]["request_id"])
        self.assertEqual(len(self.lines_of(done.output_file_id)), 6)
        self.assertEqual((done.status, done.request_counts.completed,
                          done.request_counts.failed), ("completed", 6, 2))


class OutcomeTest(BatchTest):
    def test_a_failed_batch_has_errors_and_no_files(self):
        self.state["batch_outcome"] = "failed"
        batch = self.start()
        seen = self.poll_to_end(batch)
        self.assertEqual([b.status for b in seen], ["failed"])
        done = seen[-1]
        self.assertTrue(done.errors.data and done.failed_at)
        self.assertEqual((done.output_file_id, done.error_file_id), (None, None))
        self.assertEqual(self.state["batch_requests"], [])

    def test_an_expired_batch_keeps_half_its_rows_and_expires_the_rest(self):
        self.state["batch_outcome"] = "expired"
        done = self.poll_to_end(self.start())[-1]
        answered = self.lines_of(done.output_file_id)
        expired = self.lines_of(done.error_file_id)
        self.assertEqual((done.status, len(answered), len(expired)), ("expired", 4, 4))
        self.assertTrue(done.expired_at)
        for line in expired:
            self.assertIsNone(line["response"])
            self.assertEqual(line["error"]["code"], "batch_expired")
        self.assertEqual(sorted(line["custom_id"] for line in answered + expired),
                         sorted(line["custom_id"] for line in every_request()))

    def test_a_cancelled_outcome_goes_through_cancelling(self):
        self.state["batch_outcome"] = "cancelled"
        seen = self.poll_to_end(self.start())
        self.assertEqual([b.status for b in seen], ["in_progress", "cancelling", "cancelled"])
        expired = self.lines_of(seen[-1].error_file_id)
        self.assertEqual({line["error"]["code"] for line in expired}, {"batch_cancelled"})
        self.assertEqual(len(self.lines_of(seen[-1].output_file_id)), 4)

    def test_cancel_ends_a_batch_at_the_next_poll_with_the_rows_done(self):
        self.state["batch_rows_per_poll"] = 3
        batch = self.start()
        self.client.batches.retrieve(batch.id)
        self.client.batches.retrieve(batch.id)  # 3 rows answered
        cancelling = self.client.batches.cancel(batch.id)
        self.assertEqual(cancelling.status, "cancelling")
        self.assertTrue(cancelling.cancelling_at)
        done = self.client.batches.retrieve(batch.id)
        self.assertEqual(done.status, "cancelled")
        self.assertTrue(done.cancelled_at)
        self.assertEqual(len(self.lines_of(done.output_file_id)), 3)
        never = self.lines_of(done.error_file_id)
        self.assertEqual(len(never), 5)
        self.assertEqual({(line["response"], line["error"]["code"]) for line in never},
                         {(None, "batch_cancelled")})

    def test_a_held_batch_can_be_cancelled(self):
        self.state["batch_hold"] = threading.Event()
        batch = self.start()
        self.client.batches.retrieve(batch.id)
        self.client.batches.cancel(batch.id)
        done = self.client.batches.retrieve(batch.id)
        self.assertEqual((done.status, done.output_file_id), ("cancelled", None))
        self.assertEqual(len(self.lines_of(done.error_file_id)), 8)

    def test_a_batch_cancelled_before_its_first_poll_never_runs_a_row(self):
        batch = self.start()
        self.client.batches.cancel(batch.id)
        done = self.client.batches.retrieve(batch.id)
        self.assertEqual((done.status, done.request_counts.total,
                          len(self.lines_of(done.error_file_id))), ("cancelled", 8, 8))
        self.assertEqual(self.state["batch_requests"], [])

    def test_cancelling_a_finished_batch_is_a_400(self):
        for outcome in FINAL:
            with self.subTest(outcome):
                self.state["batch_outcome"] = outcome
                batch = self.start()
                self.poll_to_end(batch)
                with self.assertRaises(self.errors.BadRequestError):
                    self.client.batches.cancel(batch.id)


class KnobsTest(BatchTest):
    def test_batch_faults_are_answered_in_turn_then_normal_answers_resume(self):
        self.state["batch_faults"] = [(429, [], {"error": {"message": "slow down"}})]
        with self.assertRaises(self.errors.RateLimitError):
            self.upload(every_request())
        self.upload(every_request())
        self.assertEqual((self.state["file_creates"], len(self.state["files"])), (2, 1))

    def test_batch_traffic_leaves_direct_faults_and_requests_alone(self):
        fault = (500, [], {"error": {"message": "direct only"}})
        self.state["faults"] = [fault]
        self.poll_to_end(self.start())
        self.assertEqual((self.state["faults"], self.state["requests"]), ([fault], []))

    def test_a_hold_on_direct_answers_does_not_hold_batch_endpoints(self):
        self.state["hold"] = mock.Mock(wait=mock.Mock(side_effect=AssertionError("held")))
        self.assertEqual(self.poll_to_end(self.start())[-1].status, "completed")


class CommandLineTest(unittest.TestCase):
    def test_bad_input_is_one_line_and_exit_2(self):
        taken = socket.socket()
        self.addCleanup(taken.close)
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        suite = os.path.join(HERE, "examples", "suites", "support-escalation.toml")
        table = [
            (["--port", "99999"], "--port: expected a port from 0 to 65535, got '99999'"),
            (["--port", str(taken.getsockname()[1]), "--suite", suite],
             f"cannot listen on 127.0.0.1:{taken.getsockname()[1]}: Address already in use; "
             "choose another --port (0 takes any free one)"),
            (["--latency", "-1"], "--latency: expected seconds, 0 or more, got '-1'"),
            (["--suite", suite, "--cases", suite], "--suite declares its own cases; drop --cases"),
            (["--cases", suite], f"--cases {suite} is not JSON"),
            (["--cases", "/nonexistent.json"],
             "cannot read --cases /nonexistent.json: No such file or directory"),
        ]
        for args, words in table:
            with self.subTest(args=args), self.assertRaises(SystemExit) as stop, \
                    contextlib.redirect_stderr(io.StringIO()) as errors:
                simulated_api.main(args)
            self.assertEqual(stop.exception.code, 2)
            self.assertIn(words, errors.getvalue())
            self.assertEqual(len(errors.getvalue().splitlines()), 1, errors.getvalue())


@slow("a threaded HTTP server and a new interpreter on 127.0.0.1")
class OverHttpTest(unittest.TestCase):
    def client_for(self, url):
        import httpx
        from perplexity import Perplexity

        # trust_env off: no proxy setting may send loopback traffic elsewhere.
        client = Perplexity(api_key=KEY, base_url=url, max_retries=0,
                            http_client=httpx.Client(trust_env=False))
        self.addCleanup(client.close)
        return client

    def run_batch(self, client):
        """Upload, create, poll to the end and download: (the custom_ids
        answered, the polls it took)."""
        upload = client.files.create(file=("in.jsonl", jsonl(every_request())),
                                     purpose="batch")
        batch = client.batches.create(endpoint="/v1/responses", input_file_id=upload.id,
                                      idempotency_key="over-http")
        for polls in range(1, POLLS):
            batch = client.batches.retrieve(batch.id)
            if batch.status in FINAL:
                break
        self.assertEqual(batch.status, "completed")
        data = client.files.content(batch.output_file_id).read()
        client.files.delete(upload.id)
        return sorted(json.loads(line)["custom_id"] for line in data.decode().splitlines()), polls

    def test_the_threaded_server_serves_a_batch_over_http(self):
        server = simulated_api.start(CASES)
        self.addCleanup(server.stop)
        client = self.client_for(server.url)
        self.assertEqual(self.run_batch(client),
                         (sorted(line["custom_id"] for line in every_request()), 3))
        import perplexity
        with self.assertRaises(perplexity.BadRequestError):
            client.files.create(file=b"\n", purpose="batch")
        self.assertEqual(server.state["file_creates"], 2)

    def test_the_command_line_server_serves_batches_at_its_rows_per_poll(self):
        # Buffered as for most users: the address line must be flushed to reach us.
        env = {k: v for k, v in clean_env().items() if k != "PYTHONUNBUFFERED"}
        process = popen(self, "simulated_api.py", "--port", "0", "--cases",
                        os.path.join(HERE, "examples", "cases.json"),
                        "--batch-rows-per-poll", "1", env=env)
        for stream in (process.stdout, process.stderr):
            self.addCleanup(stream.close)
        self.addCleanup(process.wait, 10)
        ready, _, _ = select.select([process.stdout], [], [], START_SECONDS)
        self.assertTrue(ready, "the command printed no address line")
        url = process.stdout.readline().split()[4]
        client = self.client_for(url)
        # One row a poll: in progress, then a poll for each of 8 rows, then completed.
        self.assertEqual(self.run_batch(client),
                         (sorted(line["custom_id"] for line in every_request()), 10))
        # Its ids are its own, as the live API's are: two servers' records never share one.
        answer = client.responses.create(model=MODELS[0], input=CASES[0]["question"])
        self.assertRegex(answer.id, r"^resp_sim[0-9a-f]{8}_\d+$")
        process.send_signal(signal.SIGINT)
        self.assertEqual(process.wait(10), 0)


if __name__ == "__main__":
    unittest.main()
