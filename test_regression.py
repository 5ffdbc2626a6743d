"""The checker, cost, summary and the runner end to end (SPEC A1-A5, A7). Offline."""

import contextlib
import io
import json
import os
import stat
import tempfile
import unittest
from unittest import mock


import regression
import simulated_api

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


def temp_dir(test):
    folder = tempfile.mkdtemp()
    test.addCleanup(lambda: __import__("shutil").rmtree(folder, ignore_errors=True))
    return folder


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


def row(model, case_id, repeat, passed=True, cost="0.1", error=None):
    return {"model": model, "case_id": case_id, "repeat": repeat, "passed": passed,
            "reasons": [] if passed else ["wrong_code"], "cost_usd": cost, "error": error}


def full_rows(models, repeats):
    return [row(m, c["id"], r) for r in range(1, repeats + 1)
            for c in regression.CASES for m in models]


class SummaryTest(unittest.TestCase):
    models = ["a", "b"]

    def test_all_passed_is_exit_0_and_qualified(self):
        result = regression.summary(full_rows(self.models, 2), self.models, 2)
        self.assertEqual(result["exit_code"], 0)
        self.assertTrue(result["complete"])
        rates = {c["id"]: {"passed": 2, "runs": 2, "flaky": False} for c in regression.CASES}
        self.assertEqual(result["models"]["a"], {"passed": 8, "total": 8, "qualified": True,
                                                 "reported_cost_usd": "0.8", "cases": rates})

    def test_a_failed_row_is_exit_1_and_disqualifies_only_its_model(self):
        rows = full_rows(self.models, 1)
        rows[3] = row("b", rows[3]["case_id"], 1, passed=False)
        result = regression.summary(rows, self.models, 1)
        self.assertEqual(result["exit_code"], 1)
        self.assertFalse(result["models"]["b"]["qualified"])
        self.assertTrue(result["models"]["a"]["qualified"])

    def test_an_error_row_is_exit_2(self):
        rows = full_rows(self.models, 1)
        rows[0] = row("a", rows[0]["case_id"], 1, passed=False, error="APIStatusError")
        self.assertEqual(regression.summary(rows, self.models, 1)["exit_code"], 2)

    def test_incomplete_duplicate_or_extra_rows_are_exit_2(self):
        rows = full_rows(self.models, 1)
        table = [
            ("missing", rows[:-1]),
            ("duplicate", rows + [rows[0]]),
            ("extra model", rows + [row("c", "rate-limit", 1)]),
            ("extra repeat", rows + [row("a", "rate-limit", 2)]),
            ("none", []),
        ]
        for name, candidate in table:
            with self.subTest(name):
                result = regression.summary(candidate, self.models, 1)
                self.assertFalse(result["complete"])
                self.assertEqual(result["exit_code"], 2)
                self.assertFalse(any(m["qualified"] for m in result["models"].values()))

    def test_costs_sum_as_decimals_and_unknown_cost_makes_total_unknown(self):
        rows = full_rows(["a"], 1)
        for r, cost in zip(rows, ["0.1", "0.2", "0.0000001", "1E-7"]):
            r["cost_usd"] = cost
        self.assertEqual(regression.summary(rows, ["a"], 1)["models"]["a"]["reported_cost_usd"],
                         "0.3000002")
        rows[1]["cost_usd"] = None
        self.assertIsNone(regression.summary(rows, ["a"], 1)["models"]["a"]["reported_cost_usd"])


# ---------------------------------------------------------------------------
# Through the real SDK: requests, main end to end, evidence on disk.
# ---------------------------------------------------------------------------


def sdk_client(state, before_request=None):
    return simulated_api.sdk_client(state, before_request, api_key="test-key",
                                    max_retries=0, timeout=180)


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


class MainTest(unittest.TestCase):
    def setUp(self):
        self.folder = temp_dir(self)
        self.out = os.path.join(self.folder, "results.json")
        self.state = simulated_api.new_state(regression.CASES, unsafe_models=())
        self.client_kwargs = []
        self.before_request = None
        patcher = mock.patch.object(regression, "Perplexity", self.fake_perplexity)
        patcher.start()
        self.addCleanup(patcher.stop)
        env = mock.patch.dict(os.environ, {"PERPLEXITY_API_KEY": "test-key"})
        env.start()
        self.addCleanup(env.stop)

    def fake_perplexity(self, **kwargs):
        self.client_kwargs.append(kwargs)
        return sdk_client(self.state, lambda request: self.before_request
                          and self.before_request(request))

    def run_main(self, *args):
        output, errors = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(output), contextlib.redirect_stderr(errors):
            code = regression.main(["--out", self.out, *args])
        self.stderr = errors.getvalue()
        return code, output.getvalue()

    def record(self):
        with open(self.out, encoding="utf-8") as handle:
            return json.load(handle)

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
        expected = [(1, c["id"], m) for c in regression.CASES for m in (second, first)]
        expected += [(2, c["id"], m) for c in regression.CASES for m in (first, second)]
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
        self.assertEqual(record["code_sha256"], regression.code_sha256())
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
        self.assertEqual(os.listdir(self.folder), ["results.json"])


if __name__ == "__main__":
    unittest.main()
