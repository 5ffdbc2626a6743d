"""The runner in-process: checker, cost, summary, requests, main, concurrency,
retries, resume, case files, budgets and the trust rules.

Everything runs offline through the real SDK over httpx.MockTransport.
"""

import contextlib
import functools
import hashlib
import io
import itertools
import json
import os
import random
import shlex
import shutil
import ssl
import stat
import sys
import threading
import time
import types
import unittest
import warnings
import xml.etree.ElementTree as ET
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from email.utils import format_datetime
from unittest import mock

import httpx
from perplexity import Perplexity
from perplexity.generated.api import ApiChatCompletionsRequestInput

import batching
import checker
import record
import regression
import runs
import sending
import simulated_api
import wire

regression_hash, runner_hash = record.code_sha256, record.runner_sha256  # names shadowed below
from testing import KEY, Harness, cli, quiet, read_json, read_text, slow, temp_dir, write_text

CASE = {case["id"]: case for case in regression.CASES}
PAYMENT = CASE["ambiguous-payment"]
RFC9110 = "https://www.rfc-editor.org/rfc/rfc9110"
RFC6585 = "https://www.rfc-editor.org/rfc/rfc6585"


def raw_response(search_urls, status="completed", cost=0.0042):
    """A plain-dict Agent API response whose search returned search_urls."""
    return {
        "status": status,
        "output": [
            {"type": "search_results",
             "results": [{"id": i, "url": url, "title": "t", "snippet": "s"}
                         for i, url in enumerate(search_urls, 1)]},
            {"type": "message", "role": "assistant", "content": []},
        ],
        "usage": {"cost": {"currency": "USD", "total_cost": cost}},
    }


def answer(code, action, urls):
    return json.dumps({"code": code, "next_action": action, "source_urls": urls})


def right_answer(case):
    return answer(case["expected"], case["action"],
                  [f"https://www.rfc-editor.org/rfc/{case['rfc']}"])


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


def row(model, case_id, repeat, passed=True, cost="0.1", error=None):
    return {"model": model, "case_id": case_id, "repeat": repeat, "passed": passed,
            "reasons": [] if passed else ["wrong_code"], "cost_usd": cost, "error": error}


def full_rows(models, repeats):
    return [row(m, c["id"], r) for r in range(repeats)
            for c in regression.CASES for m in models]


# Most runs below test what happens to a row, a record or a report, not how many
# there are: they ask fewer pairs (about 2 ms of CPU a request), and keep both
# models, the four cases or the repeats where the assertion needs them.
ONE_MODEL = ("--models", regression.MODELS[0])


def sdk_client(state, before_request=None):
    return simulated_api.sdk_client(state, before_request, api_key="test-key",
                                    max_retries=0, timeout=180)


def chat_body(**change):
    """A chat-completions response for the payment case, with changes."""
    body = simulated_api.chat_response(1, PAYMENT, "sonar-pro", ())
    body.update(change)
    return {k: v for k, v in body.items() if v is not None}


def run_chat(body):
    """run_one for chat:sonar-pro against a canned chat response; (row, request)."""
    captured = []

    def handle(request):
        captured.append(request)
        return httpx.Response(200, json=body)

    client = Perplexity(api_key="test-key-0123", max_retries=0, http_client=httpx.Client(
        transport=httpx.MockTransport(handle)))
    return regression.run_one(client, PAYMENT, "chat:sonar-pro"), captured[0]


class CheckTest(unittest.TestCase):
    def test_every_right_answer_passes(self):
        for case in regression.CASES:
            with self.subTest(case=case["id"]):
                raw = raw_response([f"https://www.rfc-editor.org/rfc/{case['rfc']}", RFC9110])
                self.assertEqual(regression.check(case, raw, right_answer(case)), [])

    def test_unsafe_payment_advice_gets_wrong_code_and_wrong_action(self):
        reasons = regression.check(PAYMENT, raw_response([RFC9110]),
                                   answer("503", "wait_then_retry", [RFC9110]))
        self.assertEqual(reasons, ["wrong_code", "wrong_next_action"])

    def test_each_reason_fires(self):
        rate = CASE["rate-limit"]
        table = [
            ("response_not_completed", PAYMENT, raw_response([RFC9110], status="failed"),
             right_answer(PAYMENT), ["response_not_completed"]),
            ("search_not_observed", PAYMENT, raw_response([]), right_answer(PAYMENT),
             ["search_not_observed", "citation_not_in_search_results"]),
            ("invalid_json", PAYMENT, raw_response([RFC9110]), "{not json", ["invalid_json"]),
            ("invalid_json for None", PAYMENT, raw_response([RFC9110]), None, ["invalid_json"]),
            ("invalid_json for a name given twice, the safe value last", PAYMENT,
             raw_response([RFC9110]),
             '{"code": "unknown", "next_action": "wait_then_retry", "next_action": '
             f'"verify_outcome", "source_urls": ["{RFC9110}"]}}', ["invalid_json"]),
            ("invalid_json for a name given twice deeper", PAYMENT, raw_response([RFC9110]),
             '{"code": "unknown", "next_action": "verify_outcome", "source_urls": '
             f'["{RFC9110}"], "x": {{"a": 1, "a": 2}}}}', ["invalid_json"]),
            ("invalid_answer_shape extra key", PAYMENT, raw_response([RFC9110]),
             json.dumps({"code": "unknown", "next_action": "verify_outcome",
                         "source_urls": [RFC9110], "why": "x"}), ["invalid_answer_shape"]),
            ("invalid_answer_shape list", PAYMENT, raw_response([RFC9110]), "[]",
             ["invalid_answer_shape"]),
            ("invalid_answer_shape url type", PAYMENT, raw_response([RFC9110]),
             answer("unknown", "verify_outcome", [7]), ["invalid_answer_shape"]),
            ("invalid_answer_shape code type", PAYMENT, raw_response([RFC9110]),
             json.dumps({"code": 503, "next_action": "verify_outcome", "source_urls": []}),
             ["invalid_answer_shape"]),
            ("wrong_code", PAYMENT, raw_response([RFC9110]),
             answer("504", "verify_outcome", [RFC9110]), ["wrong_code"]),
            ("wrong_next_action", PAYMENT, raw_response([RFC9110]),
             answer("unknown", "wait_then_retry", [RFC9110]), ["wrong_next_action"]),
            ("missing sources", PAYMENT, raw_response([RFC9110]),
             answer("unknown", "verify_outcome", []),
             ["missing_or_duplicate_sources", "primary_reference_missing"]),
            ("duplicate document", PAYMENT, raw_response([RFC9110]),
             answer("unknown", "verify_outcome", [RFC9110, RFC9110 + ".html"]),
             ["missing_or_duplicate_sources"]),
            ("same url twice", PAYMENT, raw_response([RFC9110]),
             answer("unknown", "verify_outcome", [RFC9110, RFC9110]),
             ["missing_or_duplicate_sources"]),
            ("citation_not_in_search_results", rate, raw_response([RFC9110]),
             answer("429", "wait_then_retry", [RFC6585]),
             ["citation_not_in_search_results"]),
            ("citation_not_approved", PAYMENT,
             raw_response([RFC9110, "https://www.rfc-editor.org/rfc/rfc7231"]),
             answer("unknown", "verify_outcome",
                    [RFC9110, "https://www.rfc-editor.org/rfc/rfc7231"]),
             ["citation_not_approved"]),
            ("primary_reference_missing", rate, raw_response([RFC9110, RFC6585]),
             answer("429", "wait_then_retry", [RFC9110]), ["primary_reference_missing"]),
        ]
        for name, case, raw, text, expected in table:
            with self.subTest(name):
                self.assertEqual(regression.check(case, raw, text), expected)

    def test_reasons_come_in_spec_order(self):
        raw = raw_response([], status="in_progress")
        text = answer("200", "wait_then_retry", ["https://example.com/rfc9110"])
        self.assertEqual(regression.check(CASE["rate-limit"], raw, text), [
            "response_not_completed", "search_not_observed", "wrong_code",
            "citation_not_in_search_results", "citation_not_approved",
            "primary_reference_missing"])

    def test_search_urls_that_are_not_strings_are_no_receipt(self):
        raw = raw_response([])
        raw["output"][0]["results"] = [{"url": None}, {"url": 5}, "x"]
        self.assertIn("search_not_observed", regression.check(PAYMENT, raw, right_answer(PAYMENT)))

    def test_approved_url_variants_are_recognised(self):
        for url in [
            "https://www.rfc-editor.org/rfc/rfc9110",
            "https://rfc-editor.org/rfc/rfc9110",
            "https://www.rfc-editor.org/rfc/rfc9110.html",
            "https://www.rfc-editor.org/rfc/rfc9110.txt",
            "https://www.rfc-editor.org/rfc/rfc9110/",
            "https://WWW.RFC-Editor.ORG/rfc/rfc9110",
            "https://www.rfc-editor.org:443/rfc/rfc9110",
            "https://www.rfc-editor.org/rfc/rfc9110.html#section-9.2.2",
        ]:
            with self.subTest(url=url):
                self.assertEqual(regression.rfc_document(url), "rfc9110")
                self.assertTrue(regression.approved_source(url, "rfc9110"))
                raw = raw_response([url])
                text = answer("unknown", "verify_outcome", [url])
                self.assertEqual(regression.check(PAYMENT, raw, text), [])

    def test_unapproved_urls_fail_even_when_search_returned_them(self):
        for url in [
            "http://www.rfc-editor.org/rfc/rfc9110",
            "https://www.rfc-editor.org/rfc/rfc9110.pdf",
            "https://www.rfc-editor.org/info/rfc9110",
            "https://www.rfc-editor.org/rfc/rfc9110?utm=1",
            "https://www.rfc-editor.org/rfc/rfc9110?",
            "https://user:pw@www.rfc-editor.org/rfc/rfc9110",
            "https://www.rfc-editor.org:8443/rfc/rfc9110",
            "https://www.rfc-editor.org.evil.example/rfc/rfc9110",
            "https://datatracker.ietf.org/doc/html/rfc9110",
            "https://www.rfc-editor.org/rfc/rfc9110 ",
            "\x00https://www.rfc-editor.org/rfc/rfc9110",
            "https://www.rfc-editor.org/rfc/RFC9110",
            "https://www.rfc-editor.org/rfc/rfc9110/extra",
            "https://www.rfc-editor.org/rfc/rfc%39110",
            "https://[www.rfc-editor.org/rfc/rfc9110",
        ]:
            with self.subTest(url=url):
                self.assertIsNone(regression.rfc_document(url))
                self.assertFalse(regression.approved_source(url, "rfc9110"))
                raw = raw_response([url])
                reasons = regression.check(PAYMENT, raw, answer("unknown", "verify_outcome", [url]))
                self.assertIn("citation_not_in_search_results", reasons)

    def test_rfc_document_of_non_strings_is_none(self):
        for value in (None, 9110, b"https://www.rfc-editor.org/rfc/rfc9110", ["x"]):
            with self.subTest(value=value):
                self.assertIsNone(regression.rfc_document(value))


class CostTest(unittest.TestCase):
    def test_cost_edge_cases(self):
        def usage(cost):
            return {"usage": {"cost": cost}}

        table = [
            ("float keeps its decimal text", usage({"currency": "USD", "total_cost": 0.01}), "0.01"),
            ("zero", usage({"currency": "USD", "total_cost": 0}), "0"),
            ("int", usage({"currency": "USD", "total_cost": 2}), "2"),
            ("negative zero is zero", usage({"currency": "USD", "total_cost": -0.0}), "0.0"),
            ("NaN", usage({"currency": "USD", "total_cost": float("nan")}), None),
            ("infinity", usage({"currency": "USD", "total_cost": float("inf")}), None),
            ("negative", usage({"currency": "USD", "total_cost": -0.5}), None),
            ("other currency", usage({"currency": "EUR", "total_cost": 0.01}), None),
            ("no currency", usage({"total_cost": 0.01}), None),
            ("string", usage({"currency": "USD", "total_cost": "0.01"}), None),
            ("bool", usage({"currency": "USD", "total_cost": True}), None),
            ("no cost", {"usage": {}}, None),
            ("no usage", {}, None),
            ("usage null", {"usage": None}, None),
            ("not a dict", [], None),
        ]
        for name, raw, expected in table:
            with self.subTest(name):
                self.assertEqual(regression.reported_cost(raw), expected)


class SummaryTest(unittest.TestCase):
    models = ["a", "b"]

    def test_all_passed_is_exit_0_and_qualified(self):
        result = regression.summary(full_rows(self.models, 2), self.models, 2)
        self.assertEqual(result["exit_code"], 0)
        self.assertTrue(result["complete"])
        rates = {c["id"]: {"passed": 2, "runs": 2, "flaky": False, "lower_bound": 0.223606,
                           "confidence": 0.95} for c in regression.CASES}
        self.assertEqual(result["models"]["a"], {"passed": 8, "total": 8, "qualified": True,
                                                 "reported_cost_usd": "0.8", "cases": rates})

    def test_a_failed_row_is_exit_1_and_disqualifies_only_its_model(self):
        rows = full_rows(self.models, 1)
        rows[3] = row("b", rows[3]["case_id"], 0, passed=False)
        result = regression.summary(rows, self.models, 1)
        self.assertEqual(result["exit_code"], 1)
        self.assertFalse(result["models"]["b"]["qualified"])
        self.assertTrue(result["models"]["a"]["qualified"])

    def test_an_error_row_is_exit_2(self):
        rows = full_rows(self.models, 1)
        rows[0] = row("a", rows[0]["case_id"], 0, passed=False, error="APIStatusError")
        self.assertEqual(regression.summary(rows, self.models, 1)["exit_code"], 2)

    def test_incomplete_duplicate_or_extra_rows_are_exit_2(self):
        rows = full_rows(self.models, 1)
        table = [
            ("missing", rows[:-1]),
            ("duplicate", rows + [rows[0]]),
            ("extra model", rows + [row("c", "rate-limit", 0)]),
            ("extra repeat", rows + [row("a", "rate-limit", 1)]),
            ("repeats from 1", [dict(r, repeat=1) for r in rows]),
            ("a repeat that is no number", rows + [dict(rows[0], repeat=[0])]),
            ("none", []),
        ]
        for name, candidate in table:
            with self.subTest(name):
                result = regression.summary(candidate, self.models, 1)
                self.assertFalse(result["complete"])
                self.assertEqual(result["exit_code"], 2)
                self.assertFalse(any(m["qualified"] for m in result["models"].values()))

    def test_a_saved_response_without_an_answer_gives_its_row_no_verdict(self):
        response = {**raw_response([RFC9110]), "model": "other/model"}
        response["output"] = response["output"][:1]  # the message item gone
        saved = {"model": "a/b", "case_id": PAYMENT["id"], "repeat": 0, "error": None,
                 "response": response, "answer_text": "{}", "answered_model": None,
                 "cost_usd": None, "reasons": [], "passed": True}
        judged = checker.derived(PAYMENT, saved)
        self.assertEqual({key: judged[key] for key in ("error", "answer_text", "answered_model",
                                                        "cost_usd", "reasons", "passed")},
                         {"error": checker.NO_ANSWER, "answer_text": None,
                          "answered_model": "other/model", "cost_usd": "0.0042",
                          "reasons": ["execution_error"], "passed": False})
        self.assertIn("resume the record to send it again", judged["error_message"])

    def test_the_verdict_line_names_who_qualified_and_who_did_not(self):
        models = ["a", "b", "c", "d"]
        rows = [r if r["model"] not in ("c", "d") or r["case_id"] != "rate-limit"
                else row(r["model"], "rate-limit", 0, passed=False)
                for r in full_rows(models, 1)]
        self.assertEqual(checker.verdict_line(regression.summary(rows, models, 1)),
                         "REGRESSION; qualified: a, b; not qualified: c (3/4 passed), "
                         "d (3/4 passed)")
        self.assertEqual(checker.verdict_line(regression.summary(full_rows(self.models, 1),
                                                                 self.models, 1)),
                         "QUALIFIED: every model")

    def test_costs_sum_as_decimals_and_unknown_cost_makes_total_unknown(self):
        rows = full_rows(["a"], 1)
        for r, cost in zip(rows, ["0.1", "0.2", "0.0000001", "1E-7"]):
            r["cost_usd"] = cost
        self.assertEqual(regression.summary(rows, ["a"], 1)["models"]["a"]["reported_cost_usd"],
                         "0.3000002")
        rows[1]["cost_usd"] = None
        self.assertIsNone(regression.summary(rows, ["a"], 1)["models"]["a"]["reported_cost_usd"])


class RequestTest(unittest.TestCase):
    def test_outgoing_request_has_the_contract_and_no_expected_answer(self):
        captured = []
        state = simulated_api.new_state(regression.CASES)
        client = sdk_client(state, captured.append)
        result = regression.run_one(client, PAYMENT, "openai/gpt-5.6-sol")
        self.assertTrue(result["passed"], result["reasons"])
        (request,) = captured
        self.assertEqual((request.method, request.url.path), ("POST", "/v1/responses"))
        self.assertEqual(request.headers["Authorization"], "Bearer test-key")
        self.assertEqual(request.headers["x-stainless-retry-count"], "0")
        body = json.loads(request.content)
        self.assertEqual(body, {
            "model": "openai/gpt-5.6-sol",
            "instructions": regression.INSTRUCTIONS,
            "input": PAYMENT["question"],
            "tools": [regression.TOOL],
            "response_format": regression.FORMAT,
            "max_steps": 5,
            "max_output_tokens": 4096,
        })
        self.assertNotIn("verify_outcome", body["input"])
        for leaked in ("expected", "action", "rfc"):
            self.assertNotIn(leaked, body)

    def test_row_has_every_field_and_the_evidence(self):
        state = simulated_api.new_state(regression.CASES)
        result = regression.run_one(sdk_client(state), PAYMENT, "m")
        self.assertEqual(list(result), ["case_id", "model", "error", "error_status",
                                        "cost_usd", "response", "answer_text", "reasons",
                                        "seconds", "passed"])
        self.assertEqual(result["cost_usd"], "0.0042")
        self.assertEqual(result["response"]["output"][0]["type"], "search_results")
        self.assertEqual(json.loads(result["answer_text"])["code"], "unknown")
        self.assertIsInstance(result["seconds"], float)

    def test_http_error_becomes_execution_error_with_status(self):
        state = simulated_api.new_state(regression.CASES)
        state["faults"].append(simulated_api.error(401, "invalid api key"))
        result = regression.run_one(sdk_client(state), PAYMENT, "m")
        self.assertEqual((result["error"], result["error_status"], result["reasons"],
                          result["passed"]),
                         ("AuthenticationError", 401, ["execution_error"], False))

    def test_checker_crash_keeps_response_and_cost(self):
        state = simulated_api.new_state(regression.CASES)
        with mock.patch.object(regression, "check", side_effect=RuntimeError("boom")):
            result = regression.run_one(sdk_client(state), PAYMENT, "m")
        self.assertEqual(result["error"], "RuntimeError")
        self.assertEqual(result["reasons"], ["execution_error"])
        self.assertEqual(result["cost_usd"], "0.0042")
        self.assertEqual(result["response"]["status"], "completed")
        self.assertIsNotNone(result["answer_text"])

    def test_keyboard_interrupt_propagates(self):
        client = mock.Mock()
        client.responses.create.side_effect = KeyboardInterrupt
        with self.assertRaises(KeyboardInterrupt):
            regression.run_one(client, PAYMENT, "m")


class ChatRequestTest(unittest.TestCase):
    def test_exact_request_body_with_only_known_fields(self):
        row, request = run_chat(chat_body())
        self.assertEqual((request.method, request.url.path), ("POST", "/chat/completions"))
        body = json.loads(request.content)
        self.assertEqual(body, {
            "model": "sonar-pro",
            "messages": [{"role": "system", "content": regression.INSTRUCTIONS},
                         {"role": "user", "content": PAYMENT["question"]}],
            "search_domain_filter": ["rfc-editor.org"],
            "web_search_options": {"search_context_size": "medium"},
            "num_search_results": 5,
            "response_format": regression.FORMAT,
            "max_tokens": 4096,
        })
        known = {field.alias or name for name, field in
                 ApiChatCompletionsRequestInput.model_fields.items()}
        self.assertLessEqual(set(body), known)
        self.assertLessEqual(set(body), simulated_api.CHAT_FIELDS)
        for leaked in ("expected", "action", "rfc"):
            self.assertNotIn(leaked, body)
        self.assertNotIn("verify_outcome", body["messages"][1]["content"])


class ChatCheckTest(unittest.TestCase):
    def test_a_right_chat_answer_passes_and_keeps_the_raw_response(self):
        row, _ = run_chat(chat_body())
        self.assertEqual((row["reasons"], row["passed"], row["cost_usd"]), ([], True, "0.0042"))
        self.assertEqual(row["response"]["object"], "chat.completion")
        self.assertIn("choices", row["response"])
        self.assertEqual(json.loads(row["answer_text"])["code"], "unknown")

    def test_receipts(self):
        table = [
            ("citations when search_results is absent",
             chat_body(search_results=None, citations=[RFC9110]), []),
            ("no fallback when search_results is present but empty",
             chat_body(search_results=[], citations=[RFC9110]),
             ["search_not_observed", "citation_not_in_search_results"]),
            ("no receipt at all", chat_body(search_results=None, citations=None),
             ["search_not_observed", "citation_not_in_search_results"]),
            ("a receipt for another document",
             chat_body(search_results=[{"title": "x", "url": "https://www.rfc-editor.org/rfc/rfc6585"}]),
             ["citation_not_in_search_results"]),
        ]
        for name, body, reasons in table:
            with self.subTest(name):
                self.assertEqual(run_chat(body)[0]["reasons"], reasons)

    def test_truncated_answer_is_not_completed(self):
        body = chat_body()
        body["choices"][0]["finish_reason"] = "length"
        self.assertEqual(run_chat(body)[0]["reasons"], ["response_not_completed"])

    def test_unsafe_chat_answer_is_caught(self):
        body = simulated_api.chat_response(1, PAYMENT, "sonar-pro", {"sonar-pro"})
        self.assertEqual(run_chat(body)[0]["reasons"], ["wrong_code", "wrong_next_action"])

    def test_normalising(self):
        raw = chat_body()
        raw["choices"][0]["message"]["content"] = [{"type": "text", "text": "{\"a\""},
                                                   {"type": "text", "text": ": 1}"}]
        self.assertEqual(checker.chat_answer_text(raw), '{"a": 1}')
        for broken in (None, {}, {"choices": []}, {"choices": [None]}, {"usage": 3}):
            with self.subTest(broken=broken):
                normal = checker.chat_as_agent(broken)
                self.assertNotEqual(normal["status"], "completed")
                self.assertIsNone(regression.reported_cost(normal))
                self.assertIsNone(checker.chat_answer_text(broken))


class MainTest(Harness):
    def run_main(self, *args):
        code, output, self.stderr = self.main(*args)
        return code, output

    def assert_out_refused_and_left(self, code, text):
        """The run was refused, sent nothing and left the file at --out holding text."""
        self.assertEqual(code, 2)
        self.assertIn(f"{self.out} already exists; choose a new --out path (nothing was sent, "
                      "the file is untouched)", self.stderr)
        self.assertEqual((read_text(self.out), self.state["requests"]), (text, []))

    def test_an_existing_out_is_refused_and_left_as_it_was(self):
        self.write("r.json", "kept")
        self.assert_out_refused_and_left(self.run_main()[0], "kept")

    def test_an_out_made_by_another_run_after_the_check_is_left_as_it_was(self):
        create = record.RecordFile.create.__func__

        def racing(cls, path, *args, **kwargs):
            write_text(path, "theirs")  # another run took the name after the check
            return create(cls, path, *args, **kwargs)

        with mock.patch.object(record.RecordFile, "create", classmethod(racing)):
            code, _ = self.run_main()
        self.assert_out_refused_and_left(code, "theirs")

    def test_all_correct_three_repeats_exit_0_with_24_rows(self):
        code, output = self.run_main("--repeats", "3")
        record = self.record()
        self.assertEqual(code, 0)
        self.assertEqual(len(record["runs"]), 24)
        self.assertEqual(record["summary"]["exit_code"], 0)
        self.assertEqual(self.client_kwargs, [{"max_retries": 0, "timeout": 180}])
        self.assertIn('"exit_code": 0', output)

    def test_unsafe_model_three_repeats_exit_1_with_24_rows(self):
        self.state["unsafe_models"] = {regression.MODELS[0]}
        code, _ = self.run_main("--repeats", "3")
        record = self.record()
        self.assertEqual(code, 1)
        self.assertEqual(len(record["runs"]), 24)
        failing = [(r["model"], r["case_id"], r["reasons"]) for r in record["runs"]
                   if not r["passed"]]
        self.assertEqual(failing, [(regression.MODELS[0], "ambiguous-payment",
                                    ["wrong_code", "wrong_next_action"])] * 3)
        self.assertFalse(record["summary"]["models"][regression.MODELS[0]]["qualified"])
        self.assertTrue(record["summary"]["models"][regression.MODELS[1]]["qualified"])

    def test_401_stops_after_one_row_exit_2(self):
        self.state["faults"].append(simulated_api.error(401, "invalid api key"))
        code, _ = self.run_main("--repeats", "3")
        record = self.record()
        self.assertEqual(code, 2)
        self.assertEqual(len(record["runs"]), 1)
        self.assertEqual(record["runs"][0]["error_status"], 401)
        self.assertEqual(len(self.state["requests"]), 1)

    def test_saved_order_reverses_models_on_odd_repeats(self):
        self.run_main("--repeats", "2")
        keys = [(r["repeat"], r["case_id"], r["model"]) for r in self.record()["runs"]]
        first, second = regression.MODELS
        expected = [(0, c["id"], m) for c in regression.CASES for m in (first, second)]
        expected += [(1, c["id"], m) for c in regression.CASES for m in (second, first)]
        self.assertEqual(keys, expected)

    def test_record_fields(self):
        self.run_main()
        record = self.record()
        self.assertEqual(list(record)[:4], ["created_at", "config", "sdk_version", "code_sha256"])
        self.assertEqual(record["config"], {
            "models": regression.MODELS, "cases": regression.CASES,
            "instructions": regression.INSTRUCTIONS, "tool": regression.TOOL,
            "response_format": regression.FORMAT, "repeats": 1, "max_steps": 5,
            "max_output_tokens": 4096, "timeout_seconds": 180})
        self.assertEqual(record["sdk_version"], "0.46.1")
        self.assertEqual(record["code_sha256"], regression_hash())
        self.assertEqual(record["runner_sha256"], runner_hash())
        self.assertTrue(record["created_at"].endswith("+00:00"))
        self.assertNotIn("evidence", record)

    def test_file_holds_n_rows_when_request_n_plus_1_starts(self):
        seen = []
        self.before_request = lambda request: seen.append(len(self.record()["runs"]))
        self.run_main()
        self.assertEqual(seen, list(range(8)))

    def test_ctrl_c_inside_a_request_keeps_a_0600_record_with_exit_2(self):
        def interrupt_third(request):
            if len(self.state["requests"]) == 2:
                raise KeyboardInterrupt

        self.before_request = interrupt_third
        old_umask = os.umask(0)
        self.addCleanup(os.umask, old_umask)
        with self.assertRaises(KeyboardInterrupt):
            self.run_main()
        record = self.record()
        self.assertEqual(len(record["runs"]), 2)
        self.assertEqual(record["summary"]["exit_code"], 2)
        self.assertFalse(record["summary"]["complete"])
        self.assertEqual(stat.S_IMODE(os.stat(self.out).st_mode), 0o600)

    def test_no_temporary_files_are_left_beside_the_record(self):
        self.run_main()
        self.assertEqual(os.listdir(self.folder), ["r.json"])


class JobsTest(Harness):
    def setUp(self):
        super().setUp()
        self.delay = lambda number: 0.0
        self.arrivals = []
        self.lock = threading.Lock()
        self.before_request = self.arrive

    def arrive(self, request):
        with self.lock:
            self.arrivals.append(json.loads(request.content)["model"])
            number = len(self.arrivals)
        time.sleep(self.delay(number))  # answers finish in a chosen order

    def run_main(self, *args):
        out = self.path(f"run{len(os.listdir(self.folder))}.json")
        code, _, _ = quiet(regression.main, ["--out", out, *args])
        return code, read_json(out)

    def keys(self, record):
        return [(r["repeat"], r["case_id"], r["model"]) for r in record["runs"]]

    @slow("answers arrive after chosen real-time delays")
    def test_jobs_1_and_8_save_the_same_order_when_answers_arrive_out_of_order(self):
        # Later requests answer first: 8 in flight finish in reverse order.
        self.delay = lambda number: 0.01 * (8 - number % 8)
        code1, sequential = self.run_main("--repeats", "2", "--jobs", "1")
        code8, concurrent = self.run_main("--repeats", "2", "--jobs", "8")
        self.assertEqual((code1, code8), (0, 0))
        expected = [(r, c["id"], m) for r, c, m in
                    regression.run_order(regression.MODELS, regression.CASES, 2)]
        self.assertEqual(self.keys(sequential), expected)
        self.assertEqual(self.keys(concurrent), expected)
        strip = lambda record: [{k: v for k, v in r.items() if k not in ("seconds", "response")}
                                for r in record["runs"]]
        self.assertEqual(strip(sequential), strip(concurrent))

    @slow("answers held back in real time")
    def test_no_new_request_after_an_error_and_in_flight_rows_are_saved(self):
        # The first request to arrive fails at once; the other three in flight
        # are slow, and must still be saved. Nothing new may start.
        self.state["faults"].append(simulated_api.error(401, "invalid api key"))
        self.delay = lambda number: 0.0 if number == 1 else 0.2
        code, record = self.run_main("--repeats", "3", "--jobs", "4")
        self.assertEqual(code, 2)
        self.assertEqual(len(self.arrivals), 4)
        self.assertEqual(len(record["runs"]), 4)
        self.assertEqual(sum(1 for r in record["runs"] if r["error"]), 1)
        self.assertEqual(record["summary"]["exit_code"], 2)

    def test_jobs_live_in_execution_not_config(self):
        _, record = self.run_main("--jobs", "3", *ONE_MODEL)  # 4 rows: more than 3 jobs
        self.assertEqual(record["execution"]["jobs"], 3)
        self.assertNotIn("jobs", record["config"])

    def test_jobs_out_of_range_is_a_usage_error(self):
        for jobs in ("0", "33"):
            with self.subTest(jobs=jobs), self.assertRaises(SystemExit) as raised, \
                    contextlib.redirect_stderr(io.StringIO()):
                regression.main(["--jobs", jobs, "--out", self.path("x")])
            self.assertEqual(raised.exception.code, 2)
        self.assertEqual(self.arrivals, [])

    def test_record_stays_valid_when_a_checkpoint_write_fails_midway(self):
        real_write_all, real_add = regression.record.write_all, regression.record.RecordFile.add
        added = []

        def counting_add(saved, index, row):
            added.append(index)
            real_add(saved, index, row)

        def failing_write_all(fd, data, offset):
            if len(added) >= 2:  # the disk fills up while the second row is saved
                real_write_all(fd, data[: len(data) // 2], offset)
                raise OSError(28, "No space left on device")
            real_write_all(fd, data, offset)

        out = self.path("r.json")
        with mock.patch.object(regression.record, "write_all", failing_write_all), \
                mock.patch.object(regression.record.RecordFile, "add", counting_add), \
                contextlib.redirect_stdout(io.StringIO()), self.assertRaises(OSError):
            regression.main(["--out", out])
        with open(out, encoding="utf-8") as handle:
            record = json.load(handle)  # the last complete checkpoint, not a torn one
        self.assertEqual(len(record["runs"]), 1)
        self.assertEqual(record["summary"]["exit_code"], 2)


class PureTest(unittest.TestCase):
    now = datetime(2026, 11, 30, 12, 0, 0, tzinfo=timezone.utc)

    def test_retry_after_seconds(self):
        table = [
            ("seconds", "7", 7.0),
            ("capped", "86400", 120.0),
            ("zero", "0", 0.0),
            ("http date", format_datetime(self.now + timedelta(seconds=30), usegmt=True), 30.0),
            ("date in the past", format_datetime(self.now - timedelta(seconds=30), usegmt=True),
             0.0),
            ("negative", "-5", None),
            ("garbage", "soon", None),
            ("empty", "", None),
            ("absent", None, None),
        ]
        for name, value, expected in table:
            with self.subTest(name):
                self.assertEqual(sending.retry_after_seconds(value, self.now), expected)

    def test_backoff_is_bounded_and_jittered(self):
        rng = random.Random(7)
        for attempt in range(1, 12):
            ceiling = min(sending.BACKOFF_CAP, sending.BACKOFF_BASE * 2 ** (attempt - 1))
            with self.subTest(attempt=attempt):
                wait = sending.backoff_seconds(attempt, rng)
                self.assertTrue(ceiling / 2 <= wait <= ceiling, wait)

    def test_redact(self):
        table = [
            ("the key", f"key {KEY} echoed", [KEY], "key [REDACTED] echoed"),
            ("a bearer token", "Authorization: Bearer abc.def-123", [], "Authorization: Bearer [REDACTED]"),
            ("another pplx key", "saw pplx-Zz09_-x here", [], "saw [REDACTED] here"),
            ("short keys are not redacted", "a b c", ["b"], "a b c"),
            ("nothing secret", "invalid request body", [KEY], "invalid request body"),
        ]
        for name, text, secrets, expected in table:
            with self.subTest(name):
                self.assertEqual(sending.redact(text, secrets), expected)

    def test_error_message_prefers_the_api_words_and_is_bounded(self):
        request = httpx.Request("POST", "http://127.0.0.1/v1/responses")
        response = httpx.Response(400, request=request)
        from perplexity import BadRequestError
        exc = BadRequestError("Error code: 400", response=response,
                              body={"error": {"message": "x" * 900 + KEY}})
        message = sending.error_message(exc, [KEY])
        self.assertEqual(message, "x" * 500)
        exc = BadRequestError("Error code: 400", response=response,
                              body={"error": {"message": 'json: unknown field "X"'}})
        self.assertEqual(sending.error_message(exc, [KEY]), 'json: unknown field "X"')


class RetryTest(unittest.TestCase):
    """RetryingClient through the real SDK: only the API's own 429 and 503."""

    def setUp(self):
        self.state = simulated_api.new_state(regression.CASES, unsafe_models=())
        self.raise_in_transport = None
        sleep = mock.patch.object(sending.Pause, "sleep", return_value=False)
        self.sleep = sleep.start()  # waits are counted, not slept
        self.addCleanup(sleep.stop)

    def client(self):
        def before_request(request):
            if self.raise_in_transport:
                raise self.raise_in_transport(request)

        return simulated_api.sdk_client(self.state, before_request, api_key=KEY, max_retries=0)

    def send(self, retries=2):
        pause = sending.Pause()
        sender = sending.RetryingClient(self.client(), retries, pause, [KEY], "m rate-limit", 180)
        row, _, self.stderr = quiet(regression.run_one, sender, regression.CASES[0], "m")
        return row, sender, pause

    def test_429_and_503_are_retried_with_the_advertised_wait(self):
        for status in (429, 503):
            with self.subTest(status=status):
                self.state["faults"] = [simulated_api.error(status, "slow down",
                                                            [("Retry-After", "3")])]
                row, stats, _ = self.send()
                self.assertTrue(row["passed"], row)
                self.assertEqual((stats.attempts, stats.waited_seconds), (2, 3.0))

    def test_429_pauses_new_starts_but_503_does_not(self):
        self.state["faults"] = [simulated_api.error(429, "slow", [("Retry-After", "5")])]
        _, _, pause = self.send()
        self.assertGreater(pause.until, time.monotonic() + 4)
        self.state["faults"] = [simulated_api.error(503, "busy", [("Retry-After", "5")])]
        _, _, pause = self.send()
        self.assertEqual(pause.until, 0.0)

    def test_without_retry_after_the_wait_is_backoff(self):
        self.state["faults"] = [simulated_api.error(503, "busy")]
        with mock.patch.object(sending, "backoff_seconds", return_value=0.75) as backoff:
            row, stats, _ = self.send()
        self.assertTrue(row["passed"])
        backoff.assert_called_once_with(1)
        self.assertEqual(stats.waited_seconds, 0.75)

    def test_other_failures_are_never_retried(self):
        table = [
            ("500", simulated_api.error(500, "internal"), None, "InternalServerError"),
            ("400", simulated_api.error(400, "bad"), None, "BadRequestError"),
            ("timeout", None, lambda request: httpx.ReadTimeout("t", request=request),
             "APITimeoutError"),
            ("dropped", None, lambda request: httpx.RemoteProtocolError("x", request=request),
             "APIConnectionError"),
        ]
        for name, fault, raiser, error in table:
            with self.subTest(name):
                self.state["faults"] = [fault] if fault else []
                self.raise_in_transport = raiser
                row, stats, _ = self.send()
                self.assertEqual((row["error"], stats.attempts), (error, 1))
                self.assertTrue(stats.error_message)
                self.sleep.assert_not_called()

    def test_retries_are_bounded(self):
        for retries in (0, 2):
            with self.subTest(retries=retries):
                self.state["faults"] = [simulated_api.error(429, "slow", [("Retry-After", "1")])
                                        for _ in range(5)]
                row, stats, _ = self.send(retries)
                self.assertEqual((row["error_status"], stats.attempts), (429, retries + 1))


class ResumeTest(Harness):
    def setUp(self):
        super().setUp()
        self.arrivals = []
        self.before_request = lambda request: self.arrivals.append(time.monotonic())

    def main(self, *args):
        return super().main(*args, out=False)

    @slow("waits out a real Retry-After")
    def test_a_429_holds_every_new_start_until_its_wait_is_over(self):
        self.state["faults"] = [simulated_api.error(429, "slow", [("Retry-After", "1")])]
        self.state["latency"] = 0.2  # every answer, the 429 too, comes back after 0.2 s
        code, _, errors = self.main("--out", self.out, "--jobs", "4")
        self.assertEqual(code, 0)
        offsets = sorted(t - self.arrivals[0] for t in self.arrivals)
        # The first request meets the 429, answered 0.2 s after it arrived; its
        # 1 s wait holds every new start until 1.2 s, although 3 jobs are free
        # from 0.2 s on. (A loaded machine only makes the fifth start later.)
        self.assertGreaterEqual(offsets[4], 1.15, offsets)
        self.assertEqual(len(self.arrivals), 9)
        self.assertIn("waiting 1.0s: the API answered 429", errors)
        rows = read_json(self.out)["runs"]
        self.assertEqual(sum(r["attempts"] for r in rows), 9)
        self.assertEqual(read_json(self.out)["execution"]["retries"], 2)

    def test_resume_reruns_error_rows_and_missing_rows_only(self):
        self.state["faults"] = [simulated_api.error(401, "bad key")]
        self.state["faults"][0:0] = []
        first_code, _, _ = self.main("--out", self.out, *ONE_MODEL)  # 1 error, 3 missing
        self.assertEqual(first_code, 2)
        self.assertEqual(len(read_json(self.out)["runs"]), 1)
        before = len(self.state["requests"])
        code, output, _ = self.main("--resume", self.out)
        self.assertEqual(code, 0)
        self.assertEqual(len(self.state["requests"]) - before, 4)
        record = read_json(self.out)
        self.assertEqual(len(record["runs"]), 4)
        self.assertFalse(any(r["error"] for r in record["runs"]))
        self.assertEqual(record["execution"]["resumed"], 1)
        self.assertEqual(os.listdir(self.folder), ["r.json"])

    def test_each_resume_is_counted_and_a_count_that_is_no_number_starts_again(self):
        self.main("--out", self.out, *ONE_MODEL, "--cases", self.cases_file("rate-limit"))
        for saved_count, counted in ((None, 1), (1, 2), ("x", 1), (True, 1)):
            with self.subTest(saved=saved_count):
                saved = read_json(self.out)
                saved["execution"].pop("resumed", None)
                if saved_count is not None:
                    saved["execution"]["resumed"] = saved_count
                os.chmod(self.out, 0o600)
                write_text(self.out, json.dumps(saved))
                code, _, errors = self.main("--resume", self.out)
                self.assertEqual(code, 0, errors)
                self.assertEqual(read_json(self.out)["execution"]["resumed"], counted)

    def test_a_resume_keeps_saved_jobs_and_retries_only_within_their_ranges(self):
        self.main("--out", self.out, *ONE_MODEL, "--cases", self.cases_file("rate-limit"))
        table = [(("jobs", 1), 1), (("jobs", 32), 32), (("jobs", 0), 1), (("jobs", 33), 1),
                 (("jobs", "4"), 1), (("retries", 0), 0), (("retries", 10), 10),
                 (("retries", -1), 2), (("retries", 11), 2), (("retries", True), 2)]
        for (name, saved_value), resumed in table:
            with self.subTest(name=name, saved=saved_value):
                saved = read_json(self.out)
                saved["execution"].update(jobs=1, retries=2)
                saved["execution"][name] = saved_value
                write_text(self.out, json.dumps(saved))
                code, _, errors = self.main("--resume", self.out)
                self.assertEqual(code, 0, errors)
                self.assertEqual(read_json(self.out)["execution"][name], resumed)

    def test_a_resumed_record_holds_each_member_once(self):
        def stop_at_the_third(request, seen=[]):
            self.arrivals.append(time.monotonic())
            seen.append(1)
            if len(seen) == 3:
                raise KeyboardInterrupt  # a receipt pending, its row not saved

        self.before_request = stop_at_the_third
        with self.assertRaises(KeyboardInterrupt):
            self.main("--out", self.out, *ONE_MODEL)
        self.assertIn("pending", read_json(self.out))
        self.main("--resume", self.out)

        def once(pairs):
            names = [name for name, _ in pairs]
            self.assertEqual(len(names), len(set(names)), names)
            return dict(pairs)

        saved = json.loads(read_text(self.out), object_pairs_hook=once)
        self.assertEqual(len(saved["runs"]), 4)
        self.assertNotIn("pending", saved)  # every receipt became its row

    def test_resume_keeps_good_rows_without_sending_them_again(self):
        cases = regression.CASES[:2]
        self.main("--out", self.out, "--cases", self.cases_file(*(case["id"] for case in cases)))
        record = read_json(self.out)
        del record["runs"][1:3]  # a gap across both models and both cases
        with open(self.out, "w", encoding="utf-8") as handle:
            json.dump(record, handle)
        kept = [json.dumps(r, sort_keys=True) for r in record["runs"]]
        before = len(self.state["requests"])
        code, output, _ = self.main("--resume", self.out)
        self.assertEqual(code, 0)
        self.assertEqual(len(self.state["requests"]) - before, 2)
        self.assertIn("2 of 4 rows kept", output)
        resumed = read_json(self.out)
        self.assertEqual([(r["repeat"], r["case_id"], r["model"]) for r in resumed["runs"]],
                         [(r, c["id"], m) for r, c, m in regression.run_order(
                             regression.MODELS, cases, 1)])
        self.assertTrue(set(kept) <= {json.dumps(r, sort_keys=True) for r in resumed["runs"]})
        self.assertEqual(resumed["created_at"], record["created_at"])

    def test_a_resume_of_a_record_with_an_early_gap_ends_in_plan_order(self):
        # Two repeats: the second asks the models in the other order, which the
        # record must keep once its waiting rows are written out of order.
        self.main("--out", self.out, "--repeats", "2")
        saved = read_json(self.out)
        del saved["runs"][0]  # every kept row waits for the first
        with open(self.out, "w", encoding="utf-8") as handle:
            json.dump(saved, handle)
        # A row is about 1.3 kB: 4 rows' worth, passed by the 15 kept rows.
        with mock.patch.object(record, "PENDING_BYTES", 5_000):
            code, _, err = self.main("--resume", self.out)
        self.assertEqual(code, 0, err)
        self.assertEqual([(r["repeat"], r["case_id"], r["model"]) for r in self.record()["runs"]],
                         [(r, c["id"], m) for r, c, m in regression.run_order(
                             regression.MODELS, regression.CASES, 2)])

    def test_resume_refusals_name_the_problem_and_touch_nothing(self):
        self.main("--out", self.out, *ONE_MODEL, "--cases", self.cases_file("rate-limit"))
        original = read_json(self.out)

        def variant(change):
            record = json.loads(json.dumps(original))
            change(record)
            path = os.path.join(self.folder, f"v{len(os.listdir(self.folder))}.json")
            with open(path, "w", encoding="utf-8") as handle:
                json.dump(record, handle)
            return path

        table = [
            ("instructions not text", variant(lambda r: r["config"].update(instructions=7)),
             "instructions"),
            ("tool", variant(lambda r: r["config"]["tool"].update(max_results=9)), "tool"),
            ("code", variant(lambda r: r.update(runner_sha256="0" * 64)), "runner_sha256"),
            ("sdk", variant(lambda r: r.update(sdk_version="0.1.0")), "perplexityai"),
            ("foreign row", variant(lambda r: r["runs"].append(dict(r["runs"][0], repeat=5))),
             "not one of the record's planned requests"),
            ("not a record", variant(lambda r: r.pop("config")), "no config object"),
            ("row model a list", variant(lambda r: r["runs"][0].update(model=["x"])),
             "no valid model"),
            ("row passed disagrees", variant(lambda r: r["runs"][0].update(passed=False)),
             "disagree"),
            ("row cost not a number", variant(lambda r: r["runs"][0].update(cost_usd="cheap")),
             "cost_usd must be null or a non-negative decimal"),
            ("missing", os.path.join(self.folder, "none.json"), "No such file"),
        ]
        for name, path, words in table:
            with self.subTest(name):
                before = read_text(path) if os.path.exists(path) else None
                sent = len(self.state["requests"])
                code, _, errors = self.main("--resume", path)
                self.assertEqual(code, 2)
                self.assertIn(words, errors)
                self.assertEqual(len(errors.splitlines()), 1)
                self.assertEqual(len(self.state["requests"]), sent)
                if before is not None:
                    self.assertEqual(read_text(path), before)

    def test_resume_with_run_flags_is_a_usage_error(self):
        for flags in (["--models", "a"], ["--repeats", "2"], ["--out", "x.json"]):
            with self.subTest(flags=flags), self.assertRaises(SystemExit) as raised:
                self.main("--resume", self.out, *flags)
            self.assertEqual(raised.exception.code, 2)


class CasesFileTest(Harness):
    def setUp(self):
        super().setUp()
        self.state["cases"] = regression.CASES + [INCIDENT]

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
            ("one question twice", json.dumps([INCIDENT, {**INCIDENT, "id": "again"}]),
             "case 2 (again) asks the same question as case 1"),
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

    def test_a_case_breaking_the_domains_citation_rule_names_case_field_and_value(self):
        case = {"id": "slow-down", "expected": "429", "rfc": "rfc9110",
                "action": "wait_then_retry", "question": "Response: 429"}
        for name, change, words in (
                ("429 with rfc9110", {}, "case 1 (slow-down): field rfc is rfc9110, but status "
                 "429 is cited with rfc6585 (the built-in instructions' rule); give rfc "
                 "'rfc6585'"),
                ("503 with rfc6585", {"expected": "503", "rfc": "rfc6585"}, "give rfc 'rfc9110'"),
                ("an integer status", {"expected": 429}, 'field expected must be text in quotes, '
                 'like "429", not the number 429')):
            with self.subTest(name):
                path = self.write("c.json", json.dumps([{**case, **change}]))
                code, _, errors = self.main("--cases", path)
                self.assertEqual(code, 2)
                self.assertIn(words, errors)
                self.assertEqual(self.state["requests"], [])
        fine = self.write("ok.json", json.dumps([{**case, "expected": "451", "rfc": "rfc7725",
                                                  "question": "Response: 451"}]))
        self.assertEqual(runs.load_cases(fine)[0]["rfc"], "rfc7725")  # its own defining RFC

    def test_missing_case_file_exits_2(self):
        code, _, errors = self.main("--cases", self.path("none.json"))
        self.assertEqual(code, 2)
        self.assertIn("none.json", errors)


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

        with mock.patch.object(simulated_api, "agent_response", no_cost):  # 4 rows, 1 warning
            code, output, errors = self.main("--max-cost", "1", *ONE_MODEL)
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
        self.assertEqual(lines[0], "Plan: 1 repeat of 8 pairs (2 models x 4 cases): 8 requests. "
                                   f"1 request at a time; 8 still to send; record: {self.out}.")
        self.assertTrue(lines[1].startswith("[1/8] repeat 0 "))
        self.assertTrue(lines[8].startswith("[8/8] repeat 0 "))
        self.assertRegex(lines[8], r"\| \d+\.\ds elapsed, \$0\.0336 so far$")
        self.assertEqual(json.loads(lines[9])["exit_code"], 0)
        self.assertTrue(lines[-2].startswith("QUALIFIED"))  # the verdict stays in view
        self.assertEqual(lines[-1], f"Record: {self.out}")

    def test_settings_that_cannot_change_answers_live_in_execution(self):
        self.main("--junit", self.path("j.xml"), "--summary-md", self.path("s.md"),
                  "--max-cost", "5", *ONE_MODEL, "--cases", self.cases_file("rate-limit"))
        record = self.record()
        self.assertEqual(record["execution"]["junit"], "j.xml")  # beside the record
        self.assertEqual(record["execution"]["summary_md"], "s.md")
        self.assertEqual(record["execution"]["max_cost"], "5")
        for key in ("junit", "summary_md", "max_cost", "jobs", "retries"):
            self.assertNotIn(key, record["config"])


class MovedRecordTest(Harness):
    """A record keeps its report paths relative to its own folder: moved with its
    reports (a CI artifact), it finds them; their folder gone, they go beside it."""

    def interrupted(self, *reports):
        """A run of one model stopped at its 4th and last request."""
        self.before_request = lambda request: (
            request.method == "POST" and len(self.state["requests"]) == 3
            and (_ for _ in ()).throw(KeyboardInterrupt))
        with self.assertRaises(KeyboardInterrupt):
            self.main(*ONE_MODEL, *reports)
        self.before_request = None

    def test_a_moved_record_writes_its_reports_where_it_is_now(self):
        os.mkdir(self.path("ci"))
        self.out = self.path("ci/r.json")
        self.interrupted("--junit", self.path("ci/junit.xml"))
        moved = self.path("next-job")
        os.rename(self.path("ci"), moved)
        code, _, errors = self.main("--resume", os.path.join(moved, "r.json"), out=False)
        self.assertEqual(code, 0, errors)
        self.assertIn("<testsuites", read_text(os.path.join(moved, "junit.xml")))

    def test_a_report_whose_folder_is_gone_is_written_beside_the_record(self):
        os.mkdir(self.path("reports"))
        self.interrupted("--html", self.path("reports/page.html"))
        shutil.rmtree(self.path("reports"))
        code, _, errors = self.main("--resume", self.out, out=False)
        self.assertEqual(code, 0, errors)
        self.assertIn("is written beside the record instead", errors)
        self.assertIn("<!DOCTYPE html>", read_text(self.path("page.html")))

    def test_a_report_given_to_resume_replaces_the_saved_one(self):
        self.interrupted("--junit", self.path("old.xml"))
        os.remove(self.path("old.xml"))  # written on the way out of the interrupted run
        code, _, _ = self.main("--resume", self.out, "--junit", self.path("new.xml"), out=False)
        self.assertEqual(code, 0)
        self.assertTrue(os.path.exists(self.path("new.xml")))
        self.assertFalse(os.path.exists(self.path("old.xml")))
        self.assertEqual(self.record()["execution"]["junit"], "new.xml")

    def test_a_copy_resumed_beside_its_original_leaves_the_originals_reports(self):
        self.interrupted("--junit", self.path("r.xml"), "--html", self.path("r.html"))
        before = {name: read_text(self.path(name)) for name in ("r.xml", "r.html")}
        copy = self.path("copy.json")
        shutil.copyfile(self.out, copy)
        code, _, errors = self.main("--resume", copy, out=False)
        self.assertEqual(code, 0, errors)
        self.assertEqual({name: read_text(self.path(name)) for name in before}, before)
        self.assertIn(f"{copy} was saved as r.json, and its reports are that record's: "
                      "--junit r.xml, --html r.html not written from this one", errors)
        saved = self.record(copy)["execution"]
        self.assertEqual((saved["junit"], saved["html"], saved["record_name"]),
                         (None, None, "copy.json"))
        code, _, errors = self.main("--resume", self.out, out=False)  # the original's own
        self.assertEqual(code, 0, errors)
        self.assertNotEqual(read_text(self.path("r.html")), before["r.html"])


def hinted_args(text, marker):
    """The arguments of the command printed after marker, checked to run this
    interpreter and this regression.py exactly as printed."""
    command = shlex.split(text.rsplit(marker, 1)[1].splitlines()[0])
    python, script = command[:2]
    assert os.path.samefile(python, sys.executable), command
    assert os.path.samefile(script, regression.__file__), command
    return command[2:]


class TrustTest(Harness):
    """Every verdict true, every paid answer kept, the key never written."""

    def test_an_agent_run_the_api_reports_as_failed_is_an_execution_error(self):
        failed = {"id": "r", "object": "response", "created_at": 1, "model": "m",
                  "status": "failed", "output": [],
                  "error": {"code": "agent_error", "message": "the agent crashed"}}
        self.state["faults"] = [(200, [], failed)]
        code, output, errors = self.main(*ONE_MODEL, "--cases", self.cases_file("rate-limit"))
        self.assertEqual(code, 2)
        row = self.record()["runs"][0]
        self.assertEqual((row["error"], row["reasons"]), ("AgentRunFailed", ["execution_error"]))
        self.assertEqual(row["error_message"], "the agent crashed")
        self.assertEqual(row["response"]["status"], "failed")  # kept as evidence
        self.assertIn("the agent crashed", output.splitlines()[1])
        code, _, _ = self.main("--resume", self.out, out=False)
        self.assertEqual(code, 0)  # the resume sent it again
        self.assertEqual(len(self.state["requests"]), 2)

    def test_a_200_that_is_not_a_json_object_is_an_execution_error(self):
        self.state["faults"] = [(200, [], ["not", "an", "object"])]
        code, output, _ = self.main()
        self.assertEqual(code, 2)
        row = self.record()["runs"][0]
        self.assertEqual(row["reasons"], ["execution_error"])
        self.assertIn("could not be read as a JSON object", row["error_message"])

    def test_a_stop_ends_a_retry_wait_at_once_and_sends_no_retry(self):
        self.state["faults"] = [simulated_api.error(429, "slow", [("Retry-After", "100")])]
        pause = sending.Pause()  # its sleep is real here: the stop must end it
        pause.stopped.set()  # the run was told to stop
        client = simulated_api.sdk_client(self.state, api_key=KEY, max_retries=0)
        sender = sending.RetryingClient(client, 2, pause, [KEY], "m rate-limit", 180)
        row, _, _ = quiet(regression.run_one, sender, regression.CASES[0], "m")
        self.assertEqual((row["error_status"], sender.attempts), (429, 1))
        self.assertIn("not retried: stopping", sender.error_message)
        self.assertEqual(len(self.state["requests"]), 1)

    @slow("waits out a 0.2 s deadline")
    def test_a_request_past_its_total_deadline_is_an_execution_error(self):
        release = threading.Event()
        self.addCleanup(release.set)
        self.before_request = lambda request: release.wait(30)  # a server that never ends
        with mock.patch.object(regression, "TIMEOUT_SECONDS", 0.2):
            code, output, _ = self.main()
        self.assertEqual(code, 2)
        row = self.record()["runs"][0]
        self.assertEqual(row["error"], "DeadlineExceeded")
        self.assertIn("no complete answer within 0.2 s", row["error_message"])
        self.assertIn("DeadlineExceeded", output)

    def key_in_every_answer(self, key, escaped=0):
        """The key in every answer's sources; its first `escaped` characters as
        JSON \\u escapes, which any JSON reader decodes back to the key."""
        original = simulated_api.answer_for
        spelled = "".join(f"\\u{ord(char):04x}" for char in key[:escaped]) + key[escaped:]

        def echoing(case, model, unsafe, *suite):
            answer = json.loads(original(case, model, unsafe, *suite))
            answer["source_urls"].append(f"https://example.com/?k={key}")
            return json.dumps(answer).replace(key, spelled)

        return mock.patch.object(simulated_api, "answer_for", echoing)

    def test_the_key_echoed_in_any_form_reaches_no_view(self):
        paths = {"--junit": self.path("j.xml"), "--summary-md": self.path("s.md"),
                 "--html": self.path("page.html")}
        one_row = [*ONE_MODEL, "--cases", self.cases_file("rate-limit")]  # its answer echoes it
        for name, echoed, escaped in (("as sent", KEY, 0), ("upper case", KEY.upper(), 0),
                                      ("in JSON escapes", KEY, len(KEY)),
                                      ("partly escaped", KEY.upper(), 3)):
            with self.subTest(name), self.key_in_every_answer(echoed, escaped):
                for path in [self.out, *paths.values()]:
                    if os.path.exists(path):
                        os.remove(path)
                code, output, errors = self.main(*one_row,
                                                 *[x for pair in paths.items() for x in pair])
                self.assertEqual(code, 1)
                for where, text in [("record", read_text(self.out)), ("stdout", output),
                                    ("stderr", errors),
                                    *[(flag, read_text(path)) for flag, path in paths.items()]]:
                    decoded = sending.plainly(text.replace("\\\\", "\\")).lower()
                    self.assertTrue(KEY.lower() not in decoded, f"the key is in {where}")
                self.assertIn("[REDACTED]", read_text(self.out))

    def test_an_all_digit_key_leaves_the_record_valid_json(self):
        key = "12345678901234"
        original = simulated_api.agent_response

        def with_numbers(*args):
            response = original(*args)
            response["usage"].update(input_tokens=int(key), total_tokens=float(key) + 0.5)
            return response

        with mock.patch.dict(os.environ, {"PERPLEXITY_API_KEY": " " + key}), \
                self.key_in_every_answer(key), \
                mock.patch.object(simulated_api, "agent_response", with_numbers):
            self.main(*ONE_MODEL, "--cases", self.cases_file("rate-limit"))
        text = read_text(self.out)
        json.loads(text)
        self.assertNotIn(key, text)

    def test_non_standard_numbers_are_never_written(self):
        original = simulated_api.agent_response

        def with_nan(*args):
            response = original(*args)
            response["usage"]["cost"]["total_cost"] = float("nan")
            return response

        with mock.patch.object(simulated_api, "agent_response", with_nan):
            self.main(*ONE_MODEL, "--cases", self.cases_file("rate-limit"))

        def refuse(constant):
            raise ValueError(f"non-standard JSON: {constant}")

        saved = json.loads(read_text(self.out), parse_constant=refuse)
        self.assertEqual(saved["runs"][0]["response"]["usage"]["cost"]["total_cost"], "NaN")
        self.assertIsNone(saved["runs"][0]["cost_usd"])

    def test_a_record_of_another_writer_holding_nan_is_read_and_rewritten(self):
        self.main(*ONE_MODEL, "--cases", self.cases_file("rate-limit"))
        saved = self.record()
        saved["checker_sha256"] = "0" * 64  # another runner's record, judged again here
        saved["created_at"] = float("nan")  # json.dump writes NaN and Infinity as is
        saved["runs"][0]["response"]["usage"]["cost"]["total_cost"] = float("inf")
        other = self.write("other.json", json.dumps(saved))
        code, _, errors = self.main("--regrade", other, "--out", self.path("re.json"),
                                    out=False)
        self.assertEqual(code, 0, errors)  # a verdict, not a crash
        regraded = json.loads(read_text(self.path("re.json")),
                              parse_constant=lambda constant: self.fail(constant))
        self.assertEqual(regraded["regraded_from"]["created_at"], "NaN")
        self.assertEqual(regraded["runs"][0]["response"]["usage"]["cost"]["total_cost"],
                         "Infinity")

    def test_control_characters_in_an_answer_are_escaped_in_every_view(self):
        original = simulated_api.answer_for
        hostile = "\x1b[2J\x00<b>\x07\ufffe\uffff"
        with mock.patch.object(simulated_api, "answer_for",
                               lambda *args: original(*args) + hostile):
            code, output, _ = self.main("--junit", self.path("j.xml"), *ONE_MODEL,
                                        "--cases", self.cases_file("rate-limit"))
        self.assertEqual(code, 1)  # the answer is no longer JSON: invalid_json
        ET.parse(self.path("j.xml"))  # still well-formed XML
        self.assertNotIn("\x1b", output)
        self.assertIn("\\x1b", read_text(self.path("j.xml")))

    def test_a_second_writer_of_one_record_is_refused(self):
        self.state["faults"] = [simulated_api.error(401, "bad key")]
        self.main()
        lock_path, fd = regression.record.take_lock(os.path.realpath(self.out))  # a run holds it
        self.addCleanup(os.close, fd)
        sent = len(self.state["requests"])
        code, _, errors = self.main("--resume", self.out, out=False)
        self.assertEqual(code, 2)
        self.assertIn("being written by another run", errors)
        self.assertEqual(len(self.state["requests"]), sent)

    def test_resume_uses_the_record_cases_and_instructions_and_its_hint_runs(self):
        cases = self.write("c.json", json.dumps([INCIDENT]))
        advisor = self.write("advisor.txt", "Advise, never execute.\n")
        self.state["cases"] = regression.CASES + [INCIDENT]
        self.state["faults"] = [simulated_api.error(401, "bad key")]
        code, _, errors = self.main("--cases", cases, "--instructions", advisor)
        self.assertEqual(code, 2)
        os.remove(cases)
        os.remove(advisor)  # the record alone must be enough
        code, _, errors = quiet(regression.main, hinted_args(errors, "then: "))
        self.assertEqual(code, 0, errors)
        sent = self.state["requests"][-1]
        self.assertEqual((sent["input"], sent["instructions"]),
                         (INCIDENT["question"], "Advise, never execute.\n"))
        self.assertEqual(self.record()["config"]["instructions"], "Advise, never execute.\n")

    def test_resume_refuses_a_verdict_without_evidence(self):
        self.main("--cases", self.cases_file("rate-limit"))  # 2 rows: one edited, one dropped
        saved = self.record()
        table = [("no response", dict(response=None, reasons=["wrong_next_action"],
                                      passed=False), "no saved response"),
                 ("an empty error", dict(error="", reasons=["execution_error"], passed=False),
                  "execution_error but no error")]
        for name, change, reason in table:
            with self.subTest(name):
                edited = json.loads(json.dumps(saved))
                edited["runs"][0].update(change)
                edited["runs"].pop()  # something left to resume
                path = self.write(f"{name}.json", json.dumps(edited))
                sent = len(self.state["requests"])
                code, _, errors = self.main("--resume", path, out=False)
                self.assertEqual(code, 2)
                self.assertIn(reason, errors)
                self.assertEqual(len(self.state["requests"]), sent)

    def test_resume_takes_the_lock_before_it_reads_the_record(self):
        self.state["faults"] = [simulated_api.error(401, "bad key")]
        self.main(*ONE_MODEL, "--cases", self.cases_file("rate-limit"))
        real_read = regression.record.load
        held = []

        def read_while_checking_the_lock(path, *args):
            try:  # another writer trying now must be refused
                regression.record.release_lock(regression.record.take_lock(path))
                held.append(False)
            except regression.record.RecordBusy:
                held.append(True)
            return real_read(path, *args)

        with mock.patch.object(regression.record, "load", read_while_checking_the_lock):
            code, _, _ = self.main("--resume", self.out, out=False)
        self.assertEqual((code, held), (0, [True]))

    def test_resume_refuses_a_row_edited_to_pass(self):
        self.state["unsafe_models"] = {regression.MODELS[0]}
        self.state["faults"] = [None] * 0
        # The unsafe row first, the safe one dropped.
        self.main("--cases", self.cases_file("ambiguous-payment"))
        saved = self.record()
        unsafe = next(r for r in saved["runs"] if not r["passed"])
        unsafe.update(passed=True, reasons=[])
        saved["runs"].pop()  # something left to resume
        write_text = self.write("edited.json", json.dumps(saved))
        code, _, errors = self.main("--resume", write_text, out=False)
        self.assertEqual(code, 2)
        self.assertIn(f"{unsafe['model']} ambiguous-payment 0", errors)
        self.assertIn("does not match its saved response", errors)

    def test_resume_refreshes_the_reports_of_the_record(self):
        self.state["faults"] = [simulated_api.error(401, "bad key")]
        self.main("--junit", self.path("j.xml"), "--summary-md", self.path("s.md"),
                  "--cases", self.cases_file("rate-limit"))  # 2 rows: an error, one skipped
        self.assertIn("<skipped", read_text(self.path("j.xml")))
        before = read_text(self.path("s.md"))
        code, _, _ = self.main("--resume", self.out, out=False)
        self.assertEqual(code, 0)
        self.assertNotIn("<skipped", read_text(self.path("j.xml")))
        # A path that is appended to is never taken from a file: only when given.
        self.assertEqual(read_text(self.path("s.md")), before)
        self.assertIsNone(self.record()["execution"]["summary_md"])

    def test_a_record_past_its_size_limit_starts_no_new_request(self):
        with mock.patch.object(regression.record, "FULL_RECORD_BYTES", 20_000):
            code, _, errors = self.main("--repeats", "3")
        self.assertEqual(code, 2)
        self.assertIn("no new request starts", errors)
        saved = len(self.record()["runs"])
        self.assertEqual(saved, len(self.state["requests"]))
        self.assertLess(saved, 24)

    def test_a_record_exactly_at_its_size_limit_goes_on(self):
        save = record.RecordFile.save

        def at_the_limit(saved, *args, **kwargs):
            result = save(saved, *args, **kwargs)
            record.FULL_RECORD_BYTES = saved.size  # the limit is never passed, only met
            return result

        with mock.patch.object(record, "FULL_RECORD_BYTES", record.FULL_RECORD_BYTES), \
                mock.patch.object(record.RecordFile, "save", at_the_limit):
            code, _, errors = self.main(*ONE_MODEL)  # met after each of 4 rows
        self.assertEqual(code, 0, errors)
        self.assertEqual(len(self.record()["runs"]), 4)

    def test_a_report_name_as_long_as_its_folder_allows_is_written(self):
        page = self.path("p" * 245 + ".html")
        code, _, errors = self.main("--html", page, *ONE_MODEL,
                                    "--cases", self.cases_file("rate-limit"))
        self.assertEqual(code, 0, errors)
        self.assertIn("<!DOCTYPE html>", read_text(page))

    def test_markdown_views_make_no_link_image_or_html_from_a_model_name(self):
        model = "<img src=x onerror=alert(1)>![x](https://example.com/t.png)"
        code, output, _ = self.main("--models", model, "--summary-md", self.path("s.md"),
                                    "--cases", self.cases_file("rate-limit"))
        self.assertEqual(code, 0, output)
        text = read_text(self.path("s.md"))
        self.assertNotRegex(text, r"(?<!\\)<img")  # a \< shows as text, starts no tag
        self.assertNotRegex(text, r"(?<!\\)!(?<!\\)\[x")
        self.assertIn("\\<img", text)

    def test_every_output_path_is_checked_before_the_first_request(self):
        record_path = self.write("old.json", '{"runs": []}')
        pom = self.write("pom.xml", "<?xml version='1.0'?><project/>")
        empty = self.write("empty.xml", "")
        page = self.write("page.html", "<html>mine</html>")
        table = [
            ("--summary-md", "", "path is empty"),
            ("--junit", "", "path is empty"),
            ("--html", "", "path is empty"),
            ("--junit", pom, "not a JUnit report"),
            ("--junit", empty, "not a JUnit report"),
            ("--summary-md", record_path, "JSON or XML"),
            ("--summary-md", self.write("notes.py", "print(1)\n"), "named like code"),
            ("--html", page, "not a report page"),
            ("--html", self.path("no/page.html"), "does not exist"),
        ]
        for flag, path, words in table:
            with self.subTest(flag=flag, path=path):
                before = read_text(path) if os.path.isfile(path) else None
                code, _, errors = self.main(flag, path)
                self.assertEqual(code, 2)
                self.assertIn(words, errors)
                self.assertEqual(len(errors.splitlines()), 1)
                self.assertEqual(self.state["requests"], [])
                self.assertFalse(os.path.exists(self.out))
                if before is not None:
                    self.assertEqual(read_text(path), before)

    def test_the_budget_stop_is_said_once_and_its_hint_sends_the_next_request(self):
        # Eight in flight when 0.01 is reached: $0.0336 is spent, more than twice
        # the budget, so a hint that only doubled the budget would send nothing.
        gate, first = threading.Barrier(8, timeout=30), iter(range(8))
        self.before_request = lambda request: next(first, None) is not None and gate.wait()
        # 24 rows: 8 in flight, then 16, more than --jobs 8 sends at once, for the hint.
        code, _, errors = self.main("--max-cost", "0.01", "--jobs", "8", "--repeats", "3")
        self.before_request = None
        self.assertEqual(code, 2)
        self.assertEqual(errors.count("Stopped: the reported cost"), 1)
        saved = self.record()
        spent = sum(Decimal(row["cost_usd"]) for row in saved["runs"])
        self.assertGreater(spent, 2 * Decimal("0.01"))  # so doubling would send nothing
        code, _, errors = quiet(regression.main, hinted_args(errors, "larger budget: "))
        self.assertEqual(code, 0, errors)  # raised for what is missing: it finishes
        self.assertEqual(len(self.record()["runs"]), 24)

    def test_the_budget_stop_counts_the_requests_still_in_flight(self):
        for jobs, words in (("1", "no new request starts.\n"),
                            ("2", "no new request starts; 1 request in flight finishes and is "
                                  "saved.\n")):
            with self.subTest(jobs=jobs):
                gate, first = threading.Barrier(int(jobs), timeout=30), iter(range(int(jobs)))
                self.before_request = lambda request: (next(first, None) is not None
                                                       and gate.wait())
                code, _, errors = self.main("--max-cost", "0.004", "--jobs", jobs,
                                            "--out", self.path(f"j{jobs}.json"), out=False)
                self.assertEqual(code, 2)
                self.assertIn(f"reached --max-cost $0.004; {words}", errors)

    def test_a_report_that_cannot_be_written_exits_2_and_its_hint_writes_it(self):
        folder = self.path("reports")
        os.mkdir(folder)
        junit = os.path.join(folder, "j.xml")

        def lose_the_folder(request):  # the reports' folder vanishes during the run
            if len(self.state["requests"]) == 3:  # at the last of 4 requests
                os.rmdir(folder)

        self.before_request = lose_the_folder
        code, output, errors = self.main("--junit", junit, *ONE_MODEL)
        self.assertEqual(code, 2)
        self.assertIn("cannot write the report", errors)
        self.assertNotIn("JUnit report:", output)  # never announced when not written
        self.before_request = None
        os.mkdir(folder)
        code, _, _ = quiet(regression.main, hinted_args(errors, "write the reports again with: "))
        self.assertEqual(code, 0)
        self.assertEqual(len(ET.parse(junit).getroot().findall("testsuite/testcase")), 4)

    def test_a_refused_request_says_to_start_a_new_run_not_to_resume(self):
        self.state["faults"] = [simulated_api.error(400, "unknown model")]
        code, _, errors = self.main()
        self.assertEqual(code, 2)
        self.assertIn("start a new run with --out", errors)
        self.assertNotIn("--resume", errors)

    def test_resume_keeps_the_record_budget_unless_a_new_one_is_given(self):
        self.state["faults"] = [simulated_api.error(401, "bad key")]
        self.main("--max-cost", "5", *ONE_MODEL, "--cases", self.cases_file("rate-limit"))
        self.main("--resume", self.out, out=False)
        self.assertEqual(self.record()["execution"]["max_cost"], "5")

    def test_a_missing_or_blank_key_is_one_line_and_nothing_is_sent(self):
        for key, words in (("", "PERPLEXITY_API_KEY is not set; export your API key"),
                           (" \t", "PERPLEXITY_API_KEY holds only whitespace; export your "
                                   "real API key")):
            with self.subTest(key=key), mock.patch.dict(os.environ, {"PERPLEXITY_API_KEY": key}):
                with self.assertRaises(SystemExit) as raised, \
                        contextlib.redirect_stderr(io.StringIO()) as errors:
                    regression.main(["--out", self.out])
                self.assertEqual(raised.exception.code, 2)
                self.assertIn(words, errors.getvalue())
                self.assertEqual((self.state["requests"], os.path.exists(self.out)), ([], False))

    @slow("runs the printed demo command in a new interpreter")
    def test_the_missing_key_hint_runs_the_demo(self):
        with mock.patch.dict(os.environ, {"PERPLEXITY_API_KEY": ""}):
            with self.assertRaises(SystemExit), contextlib.redirect_stderr(io.StringIO()) as err:
                regression.main(["--out", self.out])
        args = hinted_args(err.getvalue(), "offline demo: ")
        self.assertEqual(args, ["--demo", "demo-run"])
        ran = cli("regression.py", *args, cwd=self.folder)  # a fresh interpreter, no key
        self.assertEqual(ran.returncode, 1, ran.stderr)
        self.assertIn("Record: demo-run/results.json", ran.stdout)



class InstructionsAndRegradeTest(Harness):
    def test_instructions_from_a_file_are_sent_and_recorded(self):
        text = "You are a careful advisor.\nNever execute anything.\n"
        code, _, _ = self.main("--instructions", self.write("advisor.txt", text), *ONE_MODEL)
        self.assertEqual(code, 0)
        self.assertTrue(all(body["instructions"] == text for body in self.state["requests"]))
        self.assertEqual(self.record()["config"]["instructions"], text)

    def test_unreadable_instruction_files_are_refused_before_sending(self):
        fifo = self.path("fifo")
        os.mkfifo(fifo)
        table = [("missing", self.path("none.txt"), "cannot read"),
                 ("empty", self.write("empty.txt", " \n"), "is empty"),
                 ("not UTF-8", self.path("bin.txt"), "not UTF-8"),
                 ("a FIFO", fifo, "regular file")]
        with open(self.path("bin.txt"), "wb") as handle:
            handle.write(b"\xff\xfe")
        for name, path, words in table:
            with self.subTest(name):
                code, _, errors = self.main("--instructions", path)
                self.assertEqual(code, 2)
                self.assertIn(words, errors)
                self.assertEqual(self.state["requests"], [])

    def test_regrade_rechecks_saved_answers_with_this_checker_and_sends_nothing(self):
        # Both models, two repeats (the second asks them in the other order, which
        # the regrade keeps): the stricter checker fails each one's rate-limit rows.
        self.main("--repeats", "2", "--cases", self.cases_file("rate-limit", "ambiguous-payment"))
        sent = len(self.state["requests"])
        original = self.record()
        new = self.path("regraded.json")
        strict = lambda suite, case, raw, text: (["wrong_code"] if case["id"] == "rate-limit"
                                                 else [])
        no_client = mock.patch.object(regression, "Perplexity",
                                      side_effect=AssertionError("a regrade needs no client"))
        # A checker edited since the run: another check(), another checker_sha256.
        with mock.patch.object(checker, "judge_answer", strict), no_client, \
                mock.patch.object(record, "checker_sha256", lambda: "0" * 64), \
                mock.patch.dict(os.environ, {"PERPLEXITY_API_KEY": ""}):
            code, output, _ = self.main("--regrade", self.out, "--out", new, out=False)
        self.assertEqual(code, 1)
        self.assertEqual(len(self.state["requests"]), sent)
        regraded = self.record(new)
        self.assertEqual(regraded["config"], original["config"])
        self.assertEqual(regraded["regraded_from"]["path"], self.out)
        self.assertEqual(regraded["regraded_from"]["code_sha256"], original["code_sha256"])
        self.assertEqual(regraded["code_sha256"], regression_hash())
        failing = {(r["model"], r["case_id"]) for r in regraded["runs"] if not r["passed"]}
        self.assertEqual(failing, {(m, "rate-limit") for m in regression.MODELS})
        self.assertEqual([r["response"] for r in regraded["runs"]],
                         [r["response"] for r in original["runs"]])
        self.assertTrue(output.splitlines()[-1].startswith("Record: "))

    def test_regrading_an_unfinished_record_names_the_command_that_finishes_it(self):
        self.state["faults"] = [simulated_api.error(401, "bad key")]
        self.main("--cases", self.cases_file("rate-limit"))  # an error and a row never sent
        code, output, _ = self.main("--regrade", self.out, "--out", self.path("g.json"),
                                    out=False)
        self.assertEqual(code, 2)
        code, _, errors = quiet(regression.main, hinted_args(output, "finished with: "))
        self.assertEqual(code, 0, errors)
        self.assertTrue(self.record()["summary"]["complete"])

    def test_regrade_keeps_execution_errors_as_they_were(self):
        self.state["faults"] = [simulated_api.error(401, "bad key")]
        self.main()
        code, _, _ = self.main("--regrade", self.out, "--out", self.path("g.json"), out=False)
        self.assertEqual(code, 2)
        self.assertEqual(self.record(self.path("g.json"))["runs"], self.record()["runs"])


if __name__ == "__main__":
    unittest.main()


class EvidenceTest(Harness):
    """Every reader derives the verdict from the saved response; edits are refused."""

    unsafe_models = (regression.MODELS[0],)

    def edited(self, change, name="edited.json", drop_last=True):
        """A copy of the run's record with change(record) applied, saved as name."""
        saved = self.record()
        change(saved)
        if drop_last:
            saved["runs"].pop()  # something left to resume
        return self.write(name, json.dumps(saved))

    def readers(self, path, *run_flags):
        """(exit code, output) of every reader of a record: resume, regrade, compare;
        run_flags: the record's own, so that compare meets another run of its suite."""
        done = self.path("done.json")
        if not os.path.exists(done):
            self.main("--out", done, *run_flags, out=False)
        results = {}
        with mock.patch.dict(os.environ, {"PERPLEXITY_API_KEY": KEY}):
            code, output, errors = self.main("--resume", path, out=False)
            results["resume"] = (code, errors)
            code, output, errors = self.main("--regrade", path, "--out",
                                             self.path(f"g{len(os.listdir(self.folder))}.json"),
                                             out=False)
            results["regrade"] = (code, errors)
        import compare_runs

        code, output, _ = quiet(compare_runs.main, [done, path])
        results["compare"] = (code, output)
        return results

    def test_every_reader_refuses_a_failing_row_edited_to_pass(self):
        # The case the unsafe model fails, on both models.
        payment = ("--cases", self.cases_file("ambiguous-payment"))
        self.main(*payment)

        def to_pass(saved):
            row = next(r for r in saved["runs"] if not r["passed"])
            row.update(passed=True, reasons=[], answer_text=json.dumps(
                {"code": "unknown", "next_action": "verify_outcome",
                 "source_urls": ["https://www.rfc-editor.org/rfc/rfc9110"]}))

        path = self.edited(to_pass, drop_last=False)
        for reader, (code, text) in self.readers(path, *payment).items():
            with self.subTest(reader):
                self.assertEqual(code, 2, text)
                self.assertIn(f"{regression.MODELS[0]} ambiguous-payment 0", text)
                self.assertIn("the record was edited after it was saved", text)
                self.assertEqual(len(text.strip().splitlines()), 1, text)

    def test_every_reader_refuses_a_failing_row_moved_onto_the_other_model(self):
        # The case the unsafe model fails, on both models.
        payment = ("--cases", self.cases_file("ambiguous-payment"))
        self.main(*payment)
        safe, unsafe = regression.MODELS[1], regression.MODELS[0]

        def swap(saved):  # the unsafe answer now filed under the safe model, and back
            for row in saved["runs"]:
                if row["case_id"] == "ambiguous-payment":
                    row["model"] = safe if row["model"] == unsafe else unsafe

        path = self.edited(swap, drop_last=False)
        for reader, (code, text) in self.readers(path, *payment).items():
            with self.subTest(reader):
                self.assertEqual(code, 2, text)
                self.assertIn("does not match its saved response", text)

    def test_a_moved_row_of_an_older_checker_fails_as_answered_by_another_model(self):
        # The case the unsafe model fails, on both models.
        self.main("--cases", self.cases_file("ambiguous-payment"))
        safe, unsafe = regression.MODELS[1], regression.MODELS[0]

        def swap(saved):
            del saved["checker_sha256"]  # made before checker_sha256: judged again
            for row in saved["runs"]:
                if row["case_id"] == "ambiguous-payment":
                    row["model"] = safe if row["model"] == unsafe else unsafe

        path = self.edited(swap, drop_last=False)
        code, output, _ = self.main("--regrade", path, "--out", self.path("g.json"), out=False)
        self.assertEqual(code, 1)
        self.assertIn("judged by a version of the checker that left no checker_sha256", output)
        failing = {(row["model"], tuple(row["reasons"])) for row in self.record(
            self.path("g.json"))["runs"] if not row["passed"]}
        self.assertEqual(failing, {
            (safe, ("wrong_code", "wrong_next_action", "answered_by_other_model")),
            (unsafe, ("answered_by_other_model",))})

    def test_resume_of_a_record_made_by_another_checker_judges_it_again_and_says_so(self):
        self.state["unsafe_models"] = set()
        # 2 rows: one kept, one left to resume.
        self.main("--cases", self.cases_file("ambiguous-payment"))
        path = self.edited(lambda saved: saved.update(checker_sha256="0" * 64))
        code, output, _ = self.main("--resume", path, out=False)
        self.assertEqual(code, 0)
        self.assertIn(f"CAUTION: {path} was judged by another version of checker.py", output)
        self.assertEqual(self.record(path)["checker_sha256"], record.checker_sha256())

    def test_resume_refuses_an_edited_cost_and_a_demo_record(self):
        # 2 rows: the first edited, the last dropped.
        self.main("--cases", self.cases_file("ambiguous-payment"))
        for name, edit, words in (
                ("an edited cost", lambda saved: saved["runs"][0].update(cost_usd="0"),
                 "its saved cost_usd does not match its saved response"),
                ("a demo record", lambda saved: saved.update(evidence="synthetic"),
                 "synthetic demo data")):
            with self.subTest(name):
                path = self.edited(edit)
                sent = len(self.state["requests"])
                code, _, errors = self.main("--resume", path, out=False)
                self.assertEqual(code, 2)
                self.assertIn(words, errors)
                self.assertEqual(len(self.state["requests"]), sent)

    def test_a_row_missing_any_field_is_one_line_and_exit_2(self):
        # 2 rows: the first edited, the last dropped.
        self.main("--cases", self.cases_file("ambiguous-payment"))
        for field in record.ROW_FIELDS:  # the one validator every reader uses
            with self.subTest(field):
                saved = self.record()
                saved["runs"][0].pop(field)
                with self.assertRaisesRegex(ValueError, f"run 1 has no field {field} "):
                    record.validate_record(saved, complete=False, errors=True)
        path = self.edited(lambda saved: saved["runs"][0].pop("cost_usd"))  # once a crash
        code, _, errors = self.main("--resume", path, out=False)
        self.assertEqual(code, 2)
        self.assertIn("has no field cost_usd", errors)
        self.assertEqual(len(errors.splitlines()), 1, errors)

    def test_statuses_without_an_answer_are_execution_errors(self):
        original = simulated_api.agent_response
        for status, error in (("cancelled", "AgentRunCancelled"),
                              ("requires_action", "AgentRunNeedsAction"),
                              ("queued", "AgentRunUnfinished"),
                              ("in_progress", "AgentRunUnfinished"),
                              ("failed", "AgentRunFailed")):
            with self.subTest(status), mock.patch.object(
                    simulated_api, "agent_response",
                    lambda *args, status=status: {**original(*args), "status": status}):
                code, _, errors = self.main("--out", self.path(f"{status}.json"), out=False)
                self.assertEqual(code, 2)  # no verdict, never a model failure
                row = self.record(self.path(f"{status}.json"))["runs"][0]
                self.assertEqual((row["error"], row["reasons"]), (error, ["execution_error"]))

    def test_a_response_over_the_limit_keeps_its_id_size_and_first_characters(self):
        with mock.patch.object(wire, "MAX_RESPONSE_CHARS", 100), \
                mock.patch.object(wire, "RESPONSE_HEAD_CHARS", 50):
            # The unsafe model's payment row: its resume, sent whole, is a failure.
            code, _, _ = self.main(*ONE_MODEL, "--cases", self.cases_file("ambiguous-payment"))
        self.assertEqual(code, 2)
        row = self.record()["runs"][0]
        self.assertEqual(row["error"], "ResponseTooLarge")
        self.assertEqual(row["response"]["id"], "resp_sim_1")
        self.assertGreater(row["response"]["characters"], 100)
        self.assertEqual(len(row["response"]["head"]), 50)
        code, _, errors = self.main("--resume", self.out, out=False)  # sent again, whole
        self.assertEqual(code, 1, errors)

    def test_a_deeply_nested_answer_is_invalid_json_not_an_execution_error(self):
        with mock.patch.object(simulated_api, "answer_for", lambda *args: "[" * 100_000):
            code, _, _ = self.main(*ONE_MODEL, "--cases", self.cases_file("rate-limit"))
        self.assertEqual(code, 1)
        row = self.record()["runs"][0]
        self.assertIsNone(row["error"])
        self.assertIn("invalid_json", row["reasons"])

    def test_a_lone_surrogate_in_the_cases_is_refused_before_any_request(self):
        cases = json.dumps([{**regression.CASES[0], "question": "log \ud800"}])
        code, _, errors = self.main("--cases", self.write("c.json", cases))
        self.assertEqual(code, 2)
        self.assertIn("no lone surrogate", errors)
        self.assertEqual(self.state["requests"], [])

    def test_a_folder_given_as_a_file_is_named_a_folder(self):
        for flag in ("--cases", "--instructions"):
            with self.subTest(flag):
                code, _, errors = self.main(flag, self.folder)
                self.assertEqual(code, 2)
                self.assertIn("is a folder", errors)
                self.assertNotIn("save", errors)


class SmallThingsTest(Harness):
    def test_a_run_holds_its_saved_rows_without_their_responses(self):
        held = []
        finish = regression.finish

        def finishing(run, interrupted):
            held.extend(run.rows.values())
            return finish(run, interrupted)

        with mock.patch.object(regression, "finish", finishing):
            code, _, _ = self.main("--html", self.path("page.html"), *ONE_MODEL)
        self.assertEqual(code, 0)
        self.assertEqual(len(held), 4)
        self.assertTrue(all(row["response"] is None and row["light"] for row in held))
        self.assertTrue(all(row["response"] for row in self.record()["runs"]))  # the record: whole

    def test_help_is_printed_with_exit_0(self):
        import compare_runs

        for main in (regression.main, compare_runs.main):
            with self.subTest(main.__module__), self.assertRaises(SystemExit) as raised, \
                    contextlib.redirect_stdout(io.StringIO()) as out:
                main(["--help"])
            self.assertEqual(raised.exception.code, 0)
            self.assertIn("usage:", out.getvalue())
            if main is regression.main:
                self.assertIn("K=0 needs 29 passes in a row", " ".join(out.getvalue().split()))

    def usage_error(self, *args):
        with self.assertRaises(SystemExit) as raised, \
                contextlib.redirect_stderr(io.StringIO()) as errors:
            regression.main(["--out", self.out, *args])
        self.assertEqual(raised.exception.code, 2)
        return errors.getvalue()

    def test_a_place_for_the_record_that_will_not_do_is_named_as_the_flag_given(self):
        os.mkdir(self.path("folder"))
        code, _, errors = self.main("--out", self.path("folder"), out=False)
        self.assertEqual(code, 2)
        self.assertIn(f"--out {self.path('folder')} is a folder; give the path of a new file "
                      f"in it, e.g. {self.path('folder/results.json')}", errors)
        with self.assertRaises(SystemExit), \
                contextlib.redirect_stderr(io.StringIO()) as errors:
            regression.main(["--demo", ""])
        self.assertIn("--demo needs the name of a new folder, e.g. --demo demo-run",
                      errors.getvalue())
        demo = os.path.join(self.write("a-file", ""), "demo")  # under a file: cannot be made
        with mock.patch.object(regression, "Perplexity", Perplexity):  # the demo's own client
            code, _, errors = quiet(regression.main, ["--demo", demo])
        self.assertEqual(code, 2)
        self.assertIn(f"cannot make the --demo folder {demo}: Not a directory; nothing was "
                      "sent, name a new folder where you can write", errors)

    def test_each_budget_problem_gets_its_own_reason(self):
        for value, reason in (("1e999", "at most a trillion USD"), ("Infinity", "finite"),
                              ("0", "more than 0 USD"), ("1e-99", "at least a trillionth"),
                              ("lots", "not a number of USD")):
            with self.subTest(value):
                self.assertIn(reason, self.usage_error("--max-cost", value))

    def test_models_separated_by_a_comma_are_told_to_use_spaces(self):
        errors = self.usage_error("--models", "a/x,b/y")
        self.assertIn("separate models with spaces: --models a/x b/y", errors)

    def test_a_failed_demo_leaves_no_folder(self):
        folder = self.path("demo")
        with mock.patch.object(record.RecordFile, "create", side_effect=OSError(28, "No space")), \
                mock.patch.object(regression, "Perplexity", Perplexity):  # the demo's own
            code, _, errors = self.main("--demo", folder, out=False)
        self.assertEqual(code, 2, errors)
        self.assertFalse(os.path.exists(folder))

    def test_a_row_answered_by_another_model_fails_and_says_which(self):
        original = simulated_api.agent_response
        with mock.patch.object(simulated_api, "agent_response",
                               lambda *args: {**original(*args), "model": "other/model"}):
            code, output, _ = self.main("--models", "openai/gpt-5.6-sol",
                                        "--cases", self.cases_file("rate-limit"))
        self.assertEqual(code, 1)
        self.assertIn("rate-limit FAIL answered_by_other_model (answered by other/model)", output)
        row = self.record()["runs"][0]
        self.assertEqual((row["answered_model"], row["reasons"]),
                         ("other/model", ["answered_by_other_model"]))
        self.assertIn("REGRESSION", output)

    def test_the_same_model_by_another_name_is_the_model_asked(self):
        for asked, named in (("openai/gpt-5.6-sol", "OpenAI/GPT-5.6-Sol"),
                             ("openai/gpt-5.6-sol", "openai/gpt-5.6-sol-2026-08-14"),
                             ("openai/gpt-5.6-sol", "gpt-5.6-sol"),
                             ("anthropic/claude-sonnet-4-6", "claude-sonnet-4-6@20261001"),
                             ("openai/gpt-5.6-sol-2026-08-14", "openai/gpt-5.6-sol-20260814"),
                             ("openai/gpt-5.6-sol-2026-08-14", "openai/gpt-5.6-sol"),
                             ("chat:sonar-pro", "sonar-pro")):
            with self.subTest(named):
                self.assertTrue(checker.same_model(asked, named))
        for asked, named in (("openai/gpt-5.6-sol", "openai/gpt-5.6-mini"),
                             ("openai/gpt-5.6-sol", "other/gpt-5.6-sol"),
                             ("chat:sonar-pro", "sonar"),
                             ("openai/gpt-5.6-sol-2026-08-14", "openai/gpt-5.6-sol-2024-01-01"),
                             ("anthropic/claude-sonnet-4-6@20261001",
                              "claude-sonnet-4-6@20250101")):
            with self.subTest(named):
                self.assertFalse(checker.same_model(asked, named))


class ReceiptTest(Harness):
    """Every paid answer gets a receipt (its id in the record) before it arrives."""

    def posts(self):
        return len(self.state["requests"])

    def stop_at(self, method, number=1):
        """A before_request that raises Ctrl+C at the number-th request of method."""
        seen = []

        def interrupt(request):
            if request.method == method:
                seen.append(request)
                if len(seen) == number:
                    raise KeyboardInterrupt
        return interrupt

    def test_agent_requests_go_out_in_background_and_are_streamed(self):
        code, _, _ = self.main(*ONE_MODEL)
        self.assertEqual(code, 0)
        self.assertEqual(self.posts(), 4)  # one POST per row, and no other request
        self.assertEqual(self.state["fetches"], [])
        self.assertTrue(all(body["background"] is True and body["stream"] is True
                            for body in self.state["requests"]))
        saved = self.record()
        self.assertNotIn("pending", saved)  # every receipt was spent on its row
        self.assertEqual(saved["execution"]["foreground"], False)

    def test_the_id_is_saved_before_the_answer_and_a_dropped_stream_is_fetched(self):
        self.state["drop_streams"] = 1  # the first stream breaks after its receipt
        pending = []
        self.before_request = lambda request: request.method == "GET" and pending.append(
            self.record().get("pending"))
        code, _, _ = self.main(*ONE_MODEL)
        self.assertEqual(code, 0)
        self.assertEqual(pending, [{"0": {"id": "resp_sim_1", "model": regression.MODELS[0],
                                          "case_id": "rate-limit", "repeat": 0}}])
        self.assertEqual(self.state["fetches"], [("resp_sim_1", {"stream": "true",
                                                                  "starting_after": "0"})])
        self.assertEqual(self.posts(), 4)  # fetched, never sent again
        self.assertEqual(len(self.record()["runs"]), 4)

    def test_resume_fetches_a_saved_id_instead_of_paying_again(self):
        self.state["drop_streams"] = 1
        self.before_request = self.stop_at("GET")  # the process stops mid-answer
        with self.assertRaises(KeyboardInterrupt):
            self.main(*ONE_MODEL)
        self.before_request = None
        saved = self.record()
        self.assertEqual(saved["pending"]["0"]["id"], "resp_sim_1")
        code, output, _ = self.main("--resume", self.out, out=False)
        self.assertEqual(code, 0)
        self.assertIn("1 to fetch by their saved ids", output)
        self.assertEqual(self.posts(), 4)  # the first request was paid once
        row = self.record()["runs"][0]
        self.assertEqual(row["response"]["id"], "resp_sim_1")
        self.assertIn("fetched by its id resp_sim_1", row["recovered"])

    def test_an_id_the_api_no_longer_has_is_sent_again_and_the_row_says_so(self):
        self.state["drop_streams"] = 1
        self.before_request = self.stop_at("GET")
        with self.assertRaises(KeyboardInterrupt):
            self.main(*ONE_MODEL)
        self.before_request = None
        self.state["stored"].clear()  # expired at the API
        code, _, _ = self.main("--resume", self.out, out=False)
        self.assertEqual(code, 0)
        self.assertEqual(self.posts(), 5)
        self.assertIn("sent again: the API no longer had resp_sim_1",
                      self.record()["runs"][0]["recovered"])

    def test_a_request_stopped_before_its_id_came_back_is_counted_on_resume(self):
        self.before_request = self.stop_at("POST", 2)
        with self.assertRaises(KeyboardInterrupt):
            self.main(*ONE_MODEL)
        self.before_request = None
        self.assertEqual(self.record()["pending"]["1"]["id"], None)
        code, output, _ = self.main("--resume", self.out, out=False)
        self.assertEqual(code, 0)
        self.assertIn("1 of those to send may have been paid for already", output)

    def test_a_complete_json_answer_to_a_stream_request_is_the_answer(self):
        counted = []

        def answer(request):
            counted.append(request)
            case = regression.CASES[3]
            body = simulated_api.agent_response(1, case, "m", ())
            return httpx.Response(200, json=body)

        client = Perplexity(api_key=KEY, max_retries=0, http_client=httpx.Client(
            transport=httpx.MockTransport(answer)))
        row = regression.run_one(client, regression.CASES[3], "m", background=True)
        self.assertEqual((row["passed"], len(counted)), (True, 1), row["reasons"])
        self.assertTrue(json.loads(counted[0].content)["stream"])

    def test_foreground_sends_plainly_and_a_resume_keeps_it(self):
        self.state["faults"] = [simulated_api.error(401, "bad key")]
        self.main("--foreground", *ONE_MODEL, "--cases", self.cases_file("rate-limit"))
        self.main("--resume", self.out, out=False)  # sends that row again
        self.assertFalse(any("background" in body for body in self.state["requests"]))
        self.assertTrue(self.record()["execution"]["foreground"])

    def test_a_foreground_answer_whose_id_is_not_an_id_is_an_execution_error(self):
        original = simulated_api.agent_response

        def slashed(*args):
            return dict(original(*args), id="resp/../other")

        with mock.patch.object(simulated_api, "agent_response", slashed):
            code, _, _ = self.main("--foreground", *ONE_MODEL,
                                   "--cases", self.cases_file("rate-limit"))
        self.assertEqual(code, 2)
        row = self.record()["runs"][0]
        self.assertEqual((row["error"], row["reasons"]), ("BadResponseId", ["execution_error"]))
        self.assertIn("a response id that is not an id", row["error_message"])

    def test_a_refusal_of_background_mode_says_to_use_foreground(self):
        self.state["no_background"] = True
        code, _, errors = self.main()
        self.assertEqual(code, 2)
        self.assertIn("start a new run with --foreground", errors)

    def test_the_retired_sonar_chat_api_is_named_and_nothing_more_is_sent_to_it(self):
        code, _, errors = self.main("--models", "chat:sonar-pro", "openai/gpt-5.6-sol",
                                    "--jobs", "1")
        self.assertEqual(code, 2)
        row = self.record()["runs"][0]
        self.assertEqual((row["error"], row["error_status"]), ("SonarRetired", 403))
        self.assertIn("retired on 2026-09-27", row["error_message"])
        self.assertIn("--switch chat:sonar-pro=perplexity/sonar", errors)
        self.assertIn("--resume would meet the same 403", errors)
        self.assertEqual(self.posts(), 1)

    def test_a_queued_answer_is_waited_for_by_its_id_not_sent_again(self):
        case = regression.CASES[0]
        done = simulated_api.agent_response(1, case, "m", ())
        seen = []

        def answer(request):
            seen.append((request.method, request.url.path))
            if request.method == "POST":  # the API answers at once, still queued
                return httpx.Response(200, json={**done, "status": "queued", "output": []})
            return httpx.Response(200, json=done)

        client = Perplexity(api_key=KEY, max_retries=0, http_client=httpx.Client(
            transport=httpx.MockTransport(answer)))
        receipts = []
        sender = sending.RetryingClient(
            client, 0, sending.Pause(), [], "m rate-limit", 10,
            functools.partial(wire.finished, client, on_receipt=receipts.append),
            functools.partial(wire.fetched, client))
        row = regression.run_one(sender, case, "m", background=True)
        self.assertEqual(row["reasons"], [])
        self.assertEqual(receipts, ["resp_sim_1"])
        self.assertEqual(seen, [("POST", "/v1/responses"), ("GET", "/v1/responses/resp_sim_1")])

    def test_a_receipt_outlives_a_row_whose_answer_never_came(self):
        self.state["drop_streams"] = 1
        self.before_request = lambda request: request.method == "GET" and (
            (_ for _ in ()).throw(httpx.ConnectError("the network is gone")))
        # The stream breaks and its fetch fails: an execution error.
        code, _, _ = self.main(*ONE_MODEL)
        self.assertEqual(code, 2)
        self.assertEqual(self.record()["pending"]["0"]["id"], "resp_sim_1")
        self.before_request = None
        code, _, _ = self.main("--resume", self.out, out=False)
        self.assertEqual(code, 0)
        self.assertEqual(self.posts(), 4)  # fetched, never paid twice


def unknown_fields(model, where="$"):
    """Every field a validated SDK model kept as extra (its models allow any), by path."""
    import pydantic

    found = [f"{where}.{name}" for name in (model.model_extra or {})]
    for name in type(model).model_fields:
        value = getattr(model, name)
        for number, item in enumerate(value if isinstance(value, list) else [value]):
            if isinstance(item, pydantic.BaseModel):
                found += unknown_fields(item, f"{where}.{name}[{number}]")
    return found


class TypedRequestTest(unittest.TestCase):
    """Every request body the runner sends fits the SDK's own typed request models,
    nested fields included, with unknown fields forbidden: a strict API answers 400."""

    def bodies(self, *args):
        captured = []
        state = simulated_api.new_state(regression.CASES)
        state["legacy_chat"] = True
        client = sdk_client(state, captured.append)
        regression.run_one(client, PAYMENT, *args)
        return [json.loads(request.content) for request in captured]

    def test_agent_requests_plain_and_in_background(self):
        from perplexity.generated.api import ResponsesRequestInput

        for background in (False, True):
            with self.subTest(background=background):
                (body,) = self.bodies("openai/gpt-5.6-sol", regression.INSTRUCTIONS, background)
                self.assertEqual(unknown_fields(ResponsesRequestInput.model_validate(body)), [])
                self.assertEqual(body["tools"], [checker.TOOL])

    def test_a_batch_line_holds_the_plain_request(self):
        from perplexity.generated.api import ResponsesRequestInput

        (plain,) = self.bodies("openai/gpt-5.6-sol", regression.INSTRUCTIONS, False)
        line = json.loads(batching.input_line(
            7, regression.agent_request(PAYMENT, "openai/gpt-5.6-sol")))
        self.assertEqual({key: line[key] for key in ("custom_id", "method", "url")},
                         {"custom_id": "row-7", "method": "POST", "url": "/v1/responses"})
        self.assertEqual(line["body"], plain)  # no background, no stream
        self.assertEqual(unknown_fields(ResponsesRequestInput.model_validate(line["body"])), [])

    def test_the_published_tool_would_be_refused(self):
        from perplexity.generated.api import ResponsesRequestInput

        body = {"input": "x", "tools": [checker.PUBLISHED_TOOL]}
        self.assertEqual(unknown_fields(ResponsesRequestInput.model_validate(body)),
                         ["$.tools[0].max_results"])

    def test_chat_requests(self):
        (body,) = self.bodies("chat:sonar-pro")
        self.assertEqual(unknown_fields(ApiChatCompletionsRequestInput.model_validate(body)), [])

    def test_the_search_budget_is_pinned_in_tokens(self):
        self.assertEqual((checker.TOOL["max_tokens"], checker.TOOL["max_tokens_per_page"]),
                         (1000, 1000))
        self.assertNotIn("search_context_size", checker.TOOL)  # a name resolves to a default


class ProgressTest(Harness):
    """While answers are pending: a status line on a terminal, a line at most
    every 10 s in a log, never in stdout or the record."""

    class Stream(io.StringIO):
        def __init__(self, tty):
            super().__init__()
            self.tty = tty

        def isatty(self):
            return self.tty

    def progress(self, tty, now):
        run = mock.Mock(entries=[0] * 8, dropped=set(), tally=checker.Tally(["m"], 2))
        plan = mock.Mock(in_flight=3)
        stream = self.Stream(tty)
        return runs.Progress(run, plan, stream, clock=lambda: now[0]), stream

    def test_a_terminal_gets_one_line_redrawn_in_place(self):
        now = [100.0]
        progress, stream = self.progress(True, now)
        progress.tick()
        now[0] += 5
        progress.tick()
        self.assertEqual(stream.getvalue().count("\r"), 2)
        self.assertNotIn("\n", stream.getvalue())
        self.assertTrue(stream.getvalue().endswith("0/8 answered, 0 passed, 0 failed or no "
                                                   "verdict, 3 in flight, $0 so far, 5s "
                                                   "elapsed\x1b[K"), stream.getvalue())
        progress.clear()
        self.assertTrue(stream.getvalue().endswith("\r\x1b[K"))
        drawn = stream.getvalue()
        progress.clear()  # nothing drawn since: nothing to take away
        self.assertEqual(stream.getvalue(), drawn)

    def test_a_log_gets_a_plain_line_at_most_every_10_seconds(self):
        now = [100.0]
        progress, stream = self.progress(False, now)
        for step in (3, 6, 2, 9, 1):  # 3, 9, 11, 20, 21 s
            now[0] += step
            progress.tick()
        self.assertEqual(stream.getvalue().splitlines(), [
            "waiting: 0/8 answered, 0 passed, 0 failed or no verdict, 3 in flight, $0 so far, "
            "11s elapsed",
            "waiting: 0/8 answered, 0 passed, 0 failed or no verdict, 3 in flight, $0 so far, "
            "21s elapsed"])
        self.assertNotIn("\r", stream.getvalue())

    def test_a_run_keeps_progress_out_of_stdout_and_the_record(self):
        code, output, errors = self.main("--jobs", "4", *ONE_MODEL)  # its 4 rows at once
        self.assertEqual(code, 0)
        self.assertNotIn("in flight", output)
        self.assertNotIn("in flight", read_text(self.out))


class UsageBoundaryTest(Harness):
    """The limits of the command line, with the words a user reads."""

    def usage_error(self, *args):
        with self.assertRaises(SystemExit) as raised, \
                contextlib.redirect_stderr(io.StringIO()) as errors:
            regression.parse_args(list(args))
        self.assertEqual(raised.exception.code, 2)
        return errors.getvalue().strip().splitlines()[-1]

    def test_the_largest_repeats_and_retries_are_accepted(self):
        for args in (("--repeats", "10"), ("--retries", "10"), ("--retries", "0")):
            with self.subTest(args):
                parsed = regression.parse_args(list(args))
                self.assertEqual(getattr(parsed, args[0][2:]), int(args[1]))

    def test_one_past_each_limit_is_refused_with_its_range(self):
        for args, words in ((("--repeats", "11"), "--repeats must be 1..10, got 11"),
                            (("--retries", "11"), "--retries must be 0..10, got 11"),
                            (("--retries", "-1"), "--retries must be 0..10, got -1")):
            with self.subTest(args):
                self.assertEqual(self.usage_error(*args), f"regression.py: error: {words}")

    def test_a_flag_given_twice_is_named(self):
        self.assertEqual(self.usage_error("--jobs", "2", "--jobs=3"),
                         "regression.py: error: --jobs is given twice; give it once")

    def test_a_baseline_without_a_plan_is_refused(self):
        self.assertIn("--baseline prices a plan; give --plan too",
                      self.usage_error("--baseline", self.path("b.json")))

    def test_flags_a_record_decides_are_refused_with_resume_and_regrade(self):
        for args, words in (
                (("--regrade", "r.json", "--models", "a/b"),
                 "--regrade re-checks the record's own models, cases, instructions and "
                 "repeats; drop --models"),
                (("--resume", "r.json", "--prove", "0.9", "--allow-failures", "1"),
                 "--resume finishes the record in place with its own models, cases, "
                 "instructions and repeats; drop --allow-failures --prove"),
                (("--resume", "r.json", "--prove", "0.9"),
                 "--resume finishes the record in place with its own models, cases, "
                 "instructions and repeats; drop --prove")):
            with self.subTest(args):
                self.assertEqual(self.usage_error(*args), f"regression.py: error: {words}")

    def test_help_names_each_value_and_what_the_demo_writes(self):
        with self.assertRaises(SystemExit), contextlib.redirect_stdout(io.StringIO()) as out:
            regression.parse_args(["--help"])
        text = " ".join(out.getvalue().split())
        for words in ("--repeats N", "--confidence C", "--demo NEW_DIR run offline against a "
                      "simulated API and write NEW_DIR/results.json (no key needed, data is "
                      "synthetic)"):
            with self.subTest(words):
                self.assertIn(words, text)

    def test_every_flag_says_what_it_does_and_names_its_value(self):
        import compare_runs
        import history

        for parser in (regression.command_line(), compare_runs.command_line(),
                       history.command_line()):
            self.assertTrue(parser.epilog.startswith("Exit codes: 0 "), parser.epilog)
            for action in parser._actions:
                with self.subTest(parser.prog, flag=action.dest):
                    self.assertTrue(action.help)
                    if action.nargs != 0:  # a flag that takes a value: --jobs N, --cases FILE
                        self.assertTrue(action.metavar)


class DemoClockTest(unittest.TestCase):
    def test_under_a_fixed_demo_clock_every_row_takes_0_seconds(self):
        ticks = itertools.count()  # the runner's clock: a second a look, so no row takes 0 s
        folder = os.path.join(temp_dir(self), "demo")
        with mock.patch.dict(os.environ, {"SOURCE_DATE_EPOCH": "1700000000"}), \
                mock.patch.object(regression, "time",
                                  types.SimpleNamespace(monotonic=lambda: next(ticks))):
            code, _, errors = quiet(regression.main, ["--demo", folder])
        self.assertEqual(code, 1, errors)
        rows = read_json(os.path.join(folder, "results.json"))["runs"]
        self.assertEqual({row["seconds"] for row in rows}, {0.0})


class DemoClientTest(unittest.TestCase):
    """The demo's SDK client: its own loopback API, which it stops, and nothing else."""

    def test_the_demo_talks_only_to_its_own_server_and_stops_it(self):
        server = mock.Mock(url="http://127.0.0.1:1/v1", state={})
        made = []

        def client(**options):
            made.append(options)
            return mock.sentinel.client

        run = mock.Mock(regrade=False, demo="folder", suite=checker.BUILTIN_SUITE,
                        head={"created_at": "2026-12-02T00:00:00+00:00"})
        with mock.patch.object(simulated_api, "start", return_value=server), \
                mock.patch.object(regression, "Perplexity", client):
            with regression.api_client(run) as given:
                self.assertIs(given, mock.sentinel.client)
                server.stop.assert_not_called()
        server.stop.assert_called_once_with()
        options = made[0]
        self.assertEqual((options["api_key"], options["base_url"], options["max_retries"]),
                         (regression.DEMO_KEY, server.url, 0))
        self.assertFalse(options["http_client"].trust_env)  # no proxy ever sees loopback
        # Plain HTTP: its TLS context loads no certificate, and would refuse any.
        tls = options["http_client"]._transport._pool._ssl_context
        self.assertEqual((tls.verify_mode, tls.check_hostname, tls.cert_store_stats()["x509_ca"]),
                         (ssl.CERT_REQUIRED, True, 0))
        options["http_client"].close()
        # ids of this demo run alone: its start time names them
        self.assertEqual(server.state["id_prefix"],
                         hashlib.sha256(run.head["created_at"].encode()).hexdigest()[:8])


class CitationRuleTest(unittest.TestCase):
    def test_each_status_defined_outside_rfc_9110_may_cite_its_own_rfc(self):
        for status, rfc in (("429", "rfc6585"), ("428", "rfc6585"), ("431", "rfc6585"),
                            ("511", "rfc6585"), ("451", "rfc7725"), ("103", "rfc8297"),
                            ("425", "rfc8470"), ("207", "rfc4918"), ("423", "rfc4918"),
                            ("424", "rfc4918"), ("507", "rfc4918"), ("208", "rfc5842"),
                            ("508", "rfc5842"), ("226", "rfc3229"), ("510", "rfc2774")):
            with self.subTest(status):
                self.assertIsNone(runs.citation_rule_problem({"expected": status, "rfc": rfc}))

    def test_a_wrong_rfc_is_told_which_to_give(self):
        self.assertEqual(runs.citation_rule_problem({"expected": "510", "rfc": "rfc6585"}),
                         "field rfc is rfc6585, but status 510 is cited with rfc9110 or "
                         "rfc2774 (the built-in instructions' rule); give rfc 'rfc9110'")


class CommandHintTest(unittest.TestCase):
    def test_an_interpreter_in_the_current_folder_is_run_as_dot_slash(self):
        folder, name = os.path.split(sys.executable)
        with contextlib.chdir(folder):
            words = shlex.split(runs.command_hint("--demo", "d"))
        self.assertEqual(words[0], "." + os.sep + name)
        self.assertEqual(words[2:], ["--demo", "d"])


class CrashExitTest(unittest.TestCase):
    def test_a_crash_is_exit_2_with_the_key_redacted_and_the_traceback_saved(self):
        folder = temp_dir(self)
        with mock.patch.dict(os.environ, {"PERPLEXITY_API_KEY": KEY}), \
                mock.patch.object(regression, "CRASH_FOLDER", [folder]):
            try:
                raise ValueError(f"boom {KEY}")
            except ValueError as exc:
                code, _, errors = quiet(regression.crash_exit, exc)
        self.assertEqual(code, 2)
        self.assertNotIn(KEY, errors)
        self.assertTrue(errors.startswith("regression.py: error: internal error: ValueError: "
                                          "boom "), errors)
        saved = [os.path.join(folder, name) for name in os.listdir(folder)]
        self.assertEqual(len(saved), 1)
        self.assertIn(f"the traceback is in {saved[0]}: please report it", errors)
        self.assertNotIn(KEY, read_text(saved[0]))

    def test_crashes_within_one_second_each_keep_their_own_report(self):
        import vocabulary

        folder, epoch = temp_dir(self), time.gmtime(0)
        with mock.patch.object(vocabulary.time, "gmtime", lambda: epoch):
            paths = [vocabulary.crash_report("regression.py", folder, f"crash {n}")
                     for n in range(3)]
        self.assertEqual([os.path.basename(path) for path in paths],
                         ["regression.py-crash-19700101T000000.txt",
                          "regression.py-crash-19700101T000000-2.txt",
                          "regression.py-crash-19700101T000000-3.txt"])
        self.assertEqual([read_text(path) for path in paths], ["crash 0", "crash 1", "crash 2"])


class RowLineTest(unittest.TestCase):
    def line(self, **change):
        base = {"repeat": 0, "model": "a/b", "case_id": "c", "passed": True, "reasons": [],
                "cost_usd": "0.0042", "seconds": 1.5, "error": None}
        return runs.row_line({**base, **change})

    def test_the_cost_is_in_dollars_or_said_to_be_unknown(self):
        for cost, words in (("0.0042", "repeat 0 a/b c PASS $0.0042 1.5s"),
                            (None, "repeat 0 a/b c PASS cost unknown 1.5s")):
            with self.subTest(cost):
                self.assertEqual(self.line(cost_usd=cost), words)


class DumpResponseTest(unittest.TestCase):
    def test_a_response_is_saved_as_the_api_sent_it_without_nulls(self):
        client = simulated_api.sdk_client(simulated_api.new_state(regression.CASES))
        response = client.responses.create(model=regression.MODELS[0], input=PAYMENT["question"])
        self.assertIsNone(response.error)  # the SDK model has fields the API left out
        dumped = wire.dump_response(response)

        def values(data):
            if isinstance(data, dict):
                for value in data.values():
                    yield from values(value)
            elif isinstance(data, list):
                for value in data:
                    yield from values(value)
            else:
                yield data

        self.assertNotIn(None, list(values(dumped)))
        self.assertEqual(dumped["id"], response.id)
        json.dumps(dumped, allow_nan=False)  # plain JSON data

    def test_an_output_item_the_sdk_does_not_know_is_kept_without_a_warning(self):
        original, item = simulated_api.agent_response, {"type": "new_kind", "id": "x1"}

        def with_new_item(*args):
            response = original(*args)
            response["output"].insert(0, item)
            return response

        client = simulated_api.sdk_client(simulated_api.new_state(regression.CASES))
        with mock.patch.object(simulated_api, "agent_response", with_new_item):
            response = client.responses.create(model=regression.MODELS[0],
                                                input=PAYMENT["question"])
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # the SDK's serializer warns on it by default
            self.assertEqual(wire.dump_response(response)["output"][0], item)


class WirePureTest(unittest.TestCase):
    def test_only_a_status_outside_the_final_ones_is_still_running(self):
        for response, running in (({"status": "queued"}, True), ({"status": "in_progress"}, True),
                                  ({"status": "completed"}, False), ({"status": "failed"}, False),
                                  ({}, False), ("queued", False)):
            with self.subTest(response):
                self.assertIs(wire.still_running(response), running)

    def test_a_response_too_large_keeps_its_id_size_head_and_no_cost(self):
        response = {"id": "resp_1", "pad": "x" * 5000}
        row = wire.too_large({"response": response, "cost_usd": "0.5", "error": None,
                              "model": "a/b"}, 17 << 20)
        self.assertEqual(row["cost_usd"], None)
        self.assertEqual(row["error"], "ResponseTooLarge")
        self.assertEqual(row["response"], {"id": "resp_1", "characters": 17 << 20,
                                           "head": record.dumps(response)[:4096]})
        self.assertEqual(row["error_message"], "the response is 17,825,792 characters, more "
                         "than the 16 Mi a record keeps of one answer; its id, size and first "
                         "characters are kept")

    def test_nulls_inside_lists_are_dropped_too(self):
        self.assertEqual(wire.without_nulls({"a": [{"b": None, "c": 1}, 2], "d": None}),
                         {"a": [{"c": 1}, 2]})

    def test_each_retired_sonar_kind_is_recognised(self):
        for kind in ("agent_api_migration_required", "chat_completions_not_available"):
            with self.subTest(kind):
                sender = mock.Mock(error_kind=kind, error_message="forbidden")
                self.assertTrue(wire.retired({"error_status": 403}, sender, "chat:sonar-pro"))
        sender = mock.Mock(error_kind="other", error_message="forbidden")
        self.assertFalse(wire.retired({"error_status": 403}, sender, "chat:sonar-pro"))

    def test_an_error_event_of_a_stream_is_wrapped_as_an_error(self):
        stream = mock.MagicMock()
        stream.response.iter_lines.return_value = [
            "event: error", 'data: {"code": "overloaded"}', 'data: {"type": "done"}']
        self.assertEqual(list(wire.events_of(stream)), [
            {"type": "error", "message": {"code": "overloaded"}}, {"type": "done"}])

    def test_a_response_exactly_at_the_size_limit_is_kept_whole(self):
        response = {"id": "resp_1", "status": "failed"}
        size = len(record.dumps(response))
        base = {"model": "a/b", "case_id": "c", "error": "APIError", "error_status": 500,
                "cost_usd": None, "reasons": ["execution_error"], "passed": False,
                "answer_text": None}
        for limit, kept in ((size, True), (size - 1, False)):
            with self.subTest(limit=limit), mock.patch.object(wire, "MAX_RESPONSE_CHARS", limit):
                row = wire.settled({**base, "response": dict(response)}, "boom", [KEY])
                self.assertEqual(row["response"] == response, kept)


class ListedModelsTest(unittest.TestCase):
    class Listed:
        def __init__(self, data):
            self.data = data

        def model_dump(self, **kwargs):
            return {"data": self.data}

    def client(self, data):
        return mock.Mock(models=mock.Mock(list=mock.Mock(return_value=self.Listed(data))))

    def test_the_names_of_an_sdk_model_list_are_read(self):
        names, why = wire.listed_models(self.client([{"id": "a/b"}, {"id": ""}, "x"]), [])
        self.assertEqual((names, why), (["a/b"], None))

    def test_an_empty_list_is_said_once_and_the_run_goes_on(self):
        run = mock.Mock(regrade=False, secrets=[], models=["a/b"])
        problem, _, errors = quiet(wire.checked_models, run, self.client([]))
        self.assertIsNone(problem)
        self.assertEqual(errors.strip().splitlines(), [
            "--check-models: the API's model list is empty or not a list of models; going "
            "on without checking the models"])


class ProofOutputTest(Harness):
    def test_a_proof_counts_what_it_sent_against_what_its_plan_allows(self):
        code, output, _ = self.main("--prove", "0.5", "--models", "a/b")
        self.assertEqual(code, 0)
        self.assertIn("\nSent 20 requests in this run; 20 verdict rows of at most 20 the plan "
                      "allows.\n", output)

    def test_the_summary_is_printed_as_one_json_line(self):
        code, output, _ = self.main("--models", "a/b", "--cases", self.cases_file("rate-limit"))
        self.assertEqual(code, 0)
        lines = [line for line in output.splitlines() if line.startswith("{")]
        self.assertEqual([json.loads(line) for line in lines], [self.record()["summary"]])


class ResumedSettingsTest(Harness):
    def execution(self, previous):
        args = regression.parse_args(["--out", self.out])
        return runs.execution_of(args, self.out, previous)

    def test_saved_jobs_and_retries_are_kept_only_within_their_ranges(self):
        for previous, kept in (({"jobs": 32, "retries": 10}, (32, 10)),
                               ({"jobs": 33, "retries": 11}, (1, 2)),
                               ({"jobs": 0, "retries": -1}, (1, 2)),
                               ({"jobs": "4", "retries": 3.0}, (1, 2))):
            with self.subTest(previous):
                execution = self.execution(previous)
                self.assertEqual((execution["jobs"], execution["retries"]), kept)


class RegradeHeadTest(Harness):
    def regrade(self):
        code, _, _ = self.main("--models", "a/b", "--cases", self.cases_file("rate-limit"))
        self.assertEqual(code, 0)
        new = self.path("regraded.json")
        with mock.patch.object(record, "checker_sha256", lambda: "0" * 64), \
                mock.patch.dict(os.environ, {"PERPLEXITY_API_KEY": ""}):
            code, _, _ = self.main("--regrade", self.out, "--out", new, out=False)
        self.assertEqual(code, 0)
        return self.record(), self.record(new)

    def test_a_regraded_record_names_the_checker_that_judged_it(self):
        _, regraded = self.regrade()
        self.assertEqual(regraded["checker_sha256"], "0" * 64)

    def test_a_regraded_record_keeps_every_hash_of_its_source(self):
        original, regraded = self.regrade()
        self.assertEqual(regraded["regraded_from"], {
            "path": self.out, "code_sha256": original["code_sha256"],
            "runner_sha256": original["runner_sha256"],
            "checker_sha256": original["checker_sha256"], "created_at": original["created_at"]})


class ClosedProgressTest(unittest.TestCase):
    def test_a_closed_stream_stops_the_status_line_instead_of_the_run(self):
        now = [100.0]
        run = mock.Mock(entries=[0] * 8, dropped=set(), tally=checker.Tally(["m"], 2))
        stream = io.StringIO()
        stream.close()
        progress = runs.Progress(run, mock.Mock(in_flight=1), stream, clock=lambda: now[0])
        now[0] += 11
        progress.tick()
        self.assertTrue(progress.done.is_set())
