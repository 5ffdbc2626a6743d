"""Attacks on receipts: each test makes the attack, on a record on disk or
against the simulated API, and watches it fail.

A receipt (a response id) belongs to one row; a fetched answer must be the one
its receipt names; a verdict needs the answer's own receipt; every agent-run
status has a way forward; ids and secrets are checked where they arrive.
"""

import copy
import json
import os
import unittest
from unittest import mock

import functools

import httpx
from perplexity import Perplexity

import checker
import compare_runs
import evidence_page
import record
import regression
import runs
import wire
import sending
import simulated_api
from test_batch import BatchHarness
from testing import KEY, Harness, quiet, read_json, read_text


class SavedRecordAttackTest(Harness):
    """Records edited on disk: every reader refuses them, or gives no pass."""

    unsafe_models = ("openai/gpt-5.6-sol",)

    def setUp(self):
        super().setUp()
        # Two models on row 0's rate-limit case and the payment case (the unsafe model's
        # failure) are all the attacks take: runs 1-4, the payment rows runs 3 and 4.
        self.main("--models", "openai/gpt-5.6-sol", "m2",
                  "--cases", self.cases_file("rate-limit", "ambiguous-payment"))
        self.saved = self.record()

    def edited(self, change, name="edited.json"):
        saved = copy.deepcopy(self.saved)
        change(saved)
        return self.write(name, json.dumps(saved))

    def readers(self, path):
        """(exit code, stdout + stderr) of resume, regrade, compare and the page."""
        found = {}
        code, output, errors = self.main("--resume", path, out=False)
        found["resume"] = (code, output + errors)
        code, output, errors = self.main("--regrade", path, "--out", self.path(
            f"re{len(os.listdir(self.folder))}.json"), out=False)
        found["regrade"] = (code, output + errors)
        code, output, errors = quiet(compare_runs.main, [self.out, path])
        found["compare"] = (code, output + errors)
        try:
            evidence_page.run_page(record.load(path))
            found["page"] = (0, "")
        except ValueError as exc:
            found["page"] = (2, str(exc))
        return found

    def test_two_rows_with_one_response_id_are_refused_naming_both(self):
        def replay(saved):  # the passing payment row's receipt copied onto the failing one
            rows = {(r["model"], r["case_id"]): r for r in saved["runs"]}
            good, bad = rows[("m2", "ambiguous-payment")], rows[
                ("openai/gpt-5.6-sol", "ambiguous-payment")]
            bad.update({k: copy.deepcopy(good[k]) for k in (
                "response", "answer_text", "reasons", "passed", "cost_usd")})
            bad["response"]["model"] = bad["answered_model"] = "openai/gpt-5.6-sol"

        for reader, (code, text) in self.readers(self.edited(replay)).items():
            with self.subTest(reader):
                self.assertEqual(code, 2, text)
                self.assertIn("hold the same response id", text)
                self.assertIn("run 3", text)
                self.assertIn("run 4", text)

    def test_a_pending_receipt_pointed_at_another_rows_response_is_refused(self):
        def point(saved):
            passing = next(r for r in saved["runs"] if r["passed"])
            dropped = saved["runs"].pop()  # the failing payment row, now "pending"
            saved["pending"] = {"3": {"id": passing["response"]["id"], "model": dropped["model"],
                                      "case_id": dropped["case_id"], "repeat": 0}}

        for reader, (code, text) in self.readers(self.edited(point)).items():
            with self.subTest(reader):
                self.assertEqual(code, 2, text)
                self.assertIn("pending receipt 3", text)
                self.assertEqual(self.state["requests"][4:], [])

    def test_an_answer_outside_its_response_never_passes(self):
        def unreceipt(saved):  # the message item removed, answer_text made right
            for row in saved["runs"]:
                row["response"]["output"] = [item for item in row["response"]["output"]
                                             if item["type"] != "message"]
            row = next(r for r in saved["runs"] if not r["passed"])
            row.update(passed=True, reasons=[], answer_text=json.dumps(
                {"code": "unknown", "next_action": "verify_outcome",
                 "source_urls": ["https://www.rfc-editor.org/rfc/rfc9110"]}))

        for reader, (code, text) in self.readers(self.edited(unreceipt)).items():
            with self.subTest(reader):  # this checker's own record: plainly edited
                self.assertEqual(code, 2, text)
        def foreign(saved):  # judged by another checker: its rows now have no verdict
            unreceipt(saved)
            saved["checker_sha256"] = "0" * 64

        path = self.edited(foreign, "foreign.json")
        code, output, errors = self.main("--regrade", path, "--out", self.path("r2.json"),
                                         out=False)
        self.assertEqual(code, 2, output + errors)
        regraded = read_json(self.path("r2.json"))
        self.assertFalse(any(row["passed"] for row in regraded["runs"]))
        self.assertTrue(all(row["error"] == checker.NO_ANSWER for row in regraded["runs"]))
        code, output, errors = quiet(compare_runs.main, [self.out, path])
        self.assertEqual(code, 2, output + errors)
        self.assertIn("AnswerNotInResponse", output + errors)
        page = evidence_page.run_page(record.load(path))
        self.assertNotIn('class="verdict pass"', page)

    def test_an_edited_answer_text_is_an_edited_record(self):
        def edit(saved):
            saved["runs"][0]["answer_text"] = saved["runs"][0]["answer_text"].replace(
                "429", "430")
            saved["checker_sha256"] = "0" * 64  # even for another checker's record

        with self.assertRaises(ValueError) as refused:
            record.load(self.edited(edit))
        self.assertIn("its saved answer_text is not the answer its saved response holds",
                      str(refused.exception))


class ProofRecordAttackTest(Harness):
    """A proof record edited on disk: a run of its own, without the default plan's."""

    def test_proof_rows_copied_under_new_repeat_numbers_are_refused(self):
        # Two cases: a replayed row's copies are apart, with the other case's between.
        self.main("--models", "m2", "--prove", "0.5",
                  "--cases", self.cases_file("rate-limit", "temporary-overload"))
        proof = self.record()

        def stretch(saved):  # one real pass, replayed as every repeat
            first = [r for r in saved["runs"] if r["repeat"] == 0]
            saved["runs"] = [dict(r, repeat=n) for n in range(saved["config"]["repeats"])
                             for r in first]

        path = self.write("stretched.json", json.dumps(proof))
        stretched = copy.deepcopy(proof)
        stretch(stretched)
        path = self.write("stretched.json", json.dumps(stretched))
        with self.assertRaises(ValueError) as refused:
            record.load(path)
        self.assertIn("hold the same response id", str(refused.exception))


class ReceiptOnTheWireTest(Harness):
    """Receipts the API gives: fetched answers must be the receipt's, dead
    runs are sent again, running ones are waited for, bad ids are refused."""

    def interrupted_with_a_receipt(self):
        """A run stopped after row 0's receipt was saved, before its answer."""
        self.state["drop_streams"] = 1
        self.before_request = lambda request: (
            request.method == "GET" and (_ for _ in ()).throw(KeyboardInterrupt))
        with self.assertRaises(KeyboardInterrupt):  # row 0, and a row 1 after it
            self.main("--models", regression.MODELS[0],
                      "--cases", self.cases_file("rate-limit", "temporary-overload"))
        self.before_request = None
        self.assertEqual(self.record()["pending"]["0"]["id"], "resp_sim_1")
        return self.state["stored"]["resp_sim_1"]

    def test_a_fetched_answer_with_another_id_is_not_saved_as_the_row(self):
        kept = self.interrupted_with_a_receipt()
        kept["response"] = {**kept["response"], "id": "resp_sim_999"}
        code, output, errors = self.main("--resume", self.out, out=False)
        self.assertEqual(code, 0, output + errors)
        row = self.record()["runs"][0]
        self.assertNotEqual(row["response"]["id"], "resp_sim_999")
        self.assertIn("may have been paid twice", row["recovered"])
        self.assertIn("may have been paid twice", errors)
        self.assertEqual(len(self.state["requests"]), 3)  # row 0 sent again, counted; row 1 once

    def test_a_dead_agent_run_is_sent_again_on_resume(self):
        for status in ("failed", "cancelled", "requires_action"):
            with self.subTest(status):
                self.setUp()
                kept = self.interrupted_with_a_receipt()
                kept["response"] = {**kept["response"], "status": status}
                code, output, errors = self.main("--resume", self.out, out=False)
                self.assertEqual(code, 0, output + errors)
                row = self.record()["runs"][0]
                self.assertIn(f"ended {status}", row["recovered"])
                self.assertEqual(len(self.state["requests"]), 3)  # row 0 twice, row 1 once

    def test_a_running_status_is_waited_for_by_its_id(self):
        case = regression.CASES[0]
        done = simulated_api.agent_response(1, case, "m", ())
        for status in ("queued", "in_progress", "cancelling", "thinking_harder"):
            with self.subTest(status):
                seen = []

                def answer(request):
                    seen.append(request.method)
                    if request.method == "POST":
                        return httpx.Response(200, json={**done, "status": status,
                                                         "output": []})
                    return httpx.Response(200, json=done)

                client = Perplexity(api_key=KEY, max_retries=0, http_client=httpx.Client(
                    transport=httpx.MockTransport(answer)))
                sender = sending.RetryingClient(
                    client, 0, sending.Pause(), [], "m rate-limit", 10,
                    functools.partial(wire.finished, client, on_receipt=lambda i: None),
                    functools.partial(wire.fetched, client))
                row = regression.run_one(sender, case, "m", background=True)
                self.assertEqual((row["reasons"], seen), ([], ["POST", "GET"]))

    def test_an_id_that_is_not_an_id_is_refused_where_it_arrives(self):
        for bad in ("resp/../../x", "resp\x1b[2J", "r" * 257):
            with self.subTest(bad=bad[:20]):
                run = mock.Mock(secrets=[KEY], pending={})
                with self.assertRaises(ValueError):
                    runs.Run.received(run, 0, bad)
                run.keep.assert_not_called()

    def test_a_receipt_holding_the_key_is_dropped(self):
        run = mock.Mock(secrets=[KEY], pending={})
        with self.assertRaises(ValueError) as refused:
            runs.Run.received(run, 0, f"resp_{KEY}")
        self.assertIn("sent again", str(refused.exception))
        run.keep.assert_not_called()

    def test_a_refused_receipt_stops_the_run_with_exit_2_and_it_resumes(self):
        original = runs.Run.received
        calls = []

        def refuse_first(run, index, response_id):
            calls.append(index)
            if len(calls) == 1:
                raise ValueError("refused")
            return original(run, index, response_id)

        with mock.patch.object(runs.Run, "received", refuse_first):  # row 1 is not sent
            code, output, errors = self.main("--models", regression.MODELS[0], "--cases",
                                             self.cases_file("rate-limit", "temporary-overload"))
        self.assertEqual(code, 2)
        self.assertIn("ReceiptNotKept", output)
        self.assertEqual(len(self.state["requests"]), 1)
        code, _, _ = self.main("--resume", self.out, out=False)
        self.assertEqual(code, 0)

    def test_a_failed_save_of_a_receipt_stops_the_run(self):
        original = record.RecordFile.save
        saves = []

        def full_disk(saved, tail, final=False, durable=True):
            if tail.get("pending") and any(e["id"] for e in tail["pending"].values()):
                saves.append(1)
                raise OSError(28, "No space left on device")
            return original(saved, tail, final, durable)

        with mock.patch.object(record.RecordFile, "save", full_disk), \
                self.assertRaises(OSError):  # __main__ turns it into exit 2, "cannot save"
            quiet(regression.main, ["--out", self.out])
        self.assertEqual(len(self.state["requests"]), 1)  # nothing more was sent
        self.assertTrue(saves)

    def test_an_all_digit_key_in_a_cost_does_not_crash_the_run(self):
        key = "00420000"
        with mock.patch.dict(os.environ, {"PERPLEXITY_API_KEY": key}):
            self.state["unsafe_models"] = set()
            with mock.patch.object(regression, "reported_cost", lambda raw: "0.004200001"):
                code, output, errors = self.main("--models", "m1",
                                                 "--cases", self.cases_file("rate-limit"))
        self.assertIn(code, (0, 2), errors)
        self.assertNotIn("Traceback", errors)
        self.assertTrue(all(row["cost_usd"] is None for row in self.record()["runs"]))


if __name__ == "__main__":
    unittest.main()


class BatchAttackTest(BatchHarness):
    """A batch belongs to its run and its part: anything else is not collected."""

    def stopped_batch(self):
        self.stop_at_the_first_poll()
        with self.assertRaises(KeyboardInterrupt):
            self.batch()
        self.before_request = None
        part = self.record()["batch"]["parts"][0]
        return self.state["batches"][part["batch_id"]]

    def test_a_batch_names_its_run_and_part(self):
        batch = self.stopped_batch()
        self.assertEqual(batch["metadata"], {"run": self.record()["created_at"],
                                             "part": "0-8"})

    def test_a_batch_of_another_run_or_part_is_refused(self):
        for name, names in (("another run", {"run": "2026-01-01T00:00:00+00:00",
                                             "part": "0-8"}),
                            ("another part", None), ("no names", None)):
            with self.subTest(name):
                self.setUp()
                batch = self.stopped_batch()
                batch["metadata"] = (names if name == "another run" else
                                     {**batch["metadata"], "part": "0-4"}
                                     if name == "another part" else None)
                code, _, errors = self.resume()
                self.assertEqual(code, 2, errors)
                self.assertIn("not this record's run", errors)
                self.assertEqual(self.record()["runs"], [])

    def tampered_output(self, change):
        """Resume a stopped batch whose output file is changed before its download."""
        self.stopped_batch()

        def before(request):
            if request.method == "GET" and request.url.path.endswith("/content"):
                kept = self.state["files"][request.url.path.split("/")[-2]]
                kept["bytes"] = change(kept["bytes"].splitlines(keepends=True))

        self.before_request = before
        return self.resume()

    def test_an_output_naming_a_row_twice_is_refused(self):
        code, _, errors = self.tampered_output(lambda lines: b"".join(lines + lines[:1]))
        self.assertEqual(code, 2, errors)
        self.assertIn("twice", errors)
        self.assertEqual(self.record()["runs"], [])

    def test_an_output_naming_a_row_the_plan_never_had_is_refused(self):
        def stranger(lines):
            line = json.loads(lines[0])
            line["custom_id"] = "row-99"
            return b"".join(lines + [json.dumps(line).encode() + b"\n"])

        code, _, errors = self.tampered_output(stranger)
        self.assertEqual(code, 2, errors)
        self.assertIn("row-99", errors)
        self.assertEqual(self.record()["runs"], [])


class BatchIdTest(BatchHarness):
    def test_a_batch_id_holding_the_key_or_not_an_id_is_never_saved(self):
        import batching

        for name, given in (("the key", f"batch_{KEY}"), ("a slash", "batch/../x")):
            with self.subTest(name):
                self.setUp()
                with mock.patch.object(batching, "create", return_value={"id": given}):
                    code, _, errors = self.batch()
                self.assertEqual(code, 2, errors)
                self.assertNotIn(KEY, read_text(self.out))
                self.assertIsNone(self.record()["batch"]["parts"][0]["batch_id"])


class TheApiAsDocumentedTest(Harness):
    def test_force_search_sends_the_documented_tool_choice_and_records_it(self):
        code, _, errors = self.main("--models", "m1", "--force-search",
                                    "--cases", self.cases_file("rate-limit"))
        self.assertEqual(code, 0, errors)
        self.assertTrue(all(body["tool_choice"] == {"type": "web_search"}
                            for body in self.state["requests"]))
        self.assertEqual(self.record()["config"]["tool_choice"], {"type": "web_search"})

    def test_the_default_request_forces_nothing(self):
        self.main("--models", "m1", "--cases", self.cases_file("rate-limit"))
        self.assertTrue(self.state["requests"])
        self.assertFalse(any("tool_choice" in body for body in self.state["requests"]))
        self.assertNotIn("tool_choice", self.record()["config"])

    def test_a_resume_keeps_forced_search(self):
        self.before_request = lambda request: (
            request.method == "POST" and len(self.state["requests"]) == 2
            and (_ for _ in ()).throw(KeyboardInterrupt))
        with self.assertRaises(KeyboardInterrupt):
            self.main("--models", "m1", "--force-search")
        self.before_request = None
        code, _, errors = self.main("--resume", self.out, out=False)
        self.assertEqual(code, 0, errors)
        self.assertTrue(all(body.get("tool_choice") == {"type": "web_search"}
                            for body in self.state["requests"]))

    def test_forced_and_unforced_runs_are_not_compared(self):
        cases = self.cases_file("rate-limit")
        self.main("--models", "m1", "--force-search", "--cases", cases)
        forced = self.out
        self.out = self.path("plain.json")
        self.main("--models", "m1", "--cases", cases)
        code, output, errors = quiet(compare_runs.main, [forced, self.out])
        self.assertEqual(code, 2)
        self.assertIn("tool_choice", output + errors)

    def test_check_models_stops_before_anything_is_sent_for_an_unlisted_model(self):
        code, _, errors = self.main("--models", "openai/gpt-5.6-sl", "--check-models")
        self.assertEqual(code, 2)
        self.assertIn("openai/gpt-5.6-sl is not in the API's model list", errors)
        self.assertIn("closest listed: openai/gpt-5.6-sol", errors)
        self.assertEqual(self.state["requests"], [])
        self.assertFalse(os.path.exists(self.out))

    def test_check_models_takes_a_dated_snapshot_and_skips_chat_models(self):
        self.state["models"] = ["openai/gpt-5.6-sol-2026-08-14"]
        code, _, errors = self.main("--models", "openai/gpt-5.6-sol", "--check-models",
                                    "--cases", self.cases_file("rate-limit"))
        self.assertEqual(code, 0, errors)

    def test_an_unusable_model_list_is_said_in_one_line_and_the_run_goes_on(self):
        for name, change in (("empty", lambda: self.state.update(models=[])),):
            with self.subTest(name):
                change()
                code, _, errors = self.main("--models", "m1", "--check-models",
                                            "--cases", self.cases_file("rate-limit"))
                self.assertEqual(code, 0, errors)
                self.assertIn("going on without checking the models", errors)

    def test_a_refused_or_malformed_model_list_is_no_list(self):
        for name, reply in (("401", httpx.Response(401, json={"error": {"message": "no"}})),
                            ("not a list", httpx.Response(200, json={"data": "x"})),
                            ("no ids", httpx.Response(200, json={"data": [{"x": 1}]}))):
            with self.subTest(name):
                client = Perplexity(api_key=KEY, max_retries=0, http_client=httpx.Client(
                    transport=httpx.MockTransport(lambda request, reply=reply: reply)))
                names, why_not = wire.listed_models(client, [KEY])
                self.assertIsNone(names)
                self.assertTrue(why_not)


class ConnectionErrorTest(Harness):
    def test_a_connection_error_names_where_it_tried_without_secrets(self):
        def refuse(request):
            raise httpx.ConnectError("connection refused", request=request)

        self.before_request = refuse
        code, output, errors = self.main("--models", "m1", "--retries", "0")
        self.assertEqual(code, 2)
        message = self.record()["runs"][0]["error_message"]
        self.assertIn("(tried https://api.perplexity.ai/", message)
        self.assertNotIn(KEY, message + output + errors)


class StreamTest(unittest.TestCase):
    def test_a_stream_closed_before_its_first_event_says_it_may_be_paid(self):
        with self.assertRaises(sending.StreamEnded) as ended:
            sending.receive(iter([]), reconnect=None)
        self.assertIn("closed before its first event (the request may have been paid for)",
                      str(ended.exception))

    def test_a_stream_naming_another_response_after_its_receipt_is_refused(self):
        events = iter([{"type": "response.created", "response": {"id": "resp_a"}},
                       {"type": "response.completed", "response": {"id": "resp_b"}}])
        with self.assertRaises(sending.ReceiptMismatch):
            sending.receive(events, reconnect=None, on_receipt=lambda found: None)


class OneIdForEveryAnswerTest(Harness):
    def test_a_run_never_refuses_the_answers_its_own_requests_got(self):
        original = simulated_api.foreground_answer

        def same_id(state, number, body):  # a mocked API: every answer under one id
            status, headers, response = original(state, number, body)
            return status, headers, {**response, "id": "resp_mock"} if status == 200 else response

        with mock.patch.object(simulated_api, "foreground_answer", same_id):
            code, output, errors = self.main("--models", "m1", "--foreground")
        self.assertEqual(code, 0, output + errors)
        self.assertEqual(len(self.record()["runs"]), 4)
        with self.assertRaises(ValueError) as refused:  # a reader of the record does refuse
            record.load(self.out)
        self.assertIn("hold the same response id 'resp_mock'", str(refused.exception))
