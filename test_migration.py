"""Sonar chat-completions models beside Agent API models (issue 6). Offline."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
from unittest import mock

import httpx
from perplexity import Perplexity
from perplexity.generated.api import ApiChatCompletionsRequestInput

import regression
import simulated_api

HERE = os.path.dirname(os.path.abspath(__file__))
PAYMENT = regression.CASES[3]
RFC9110 = "https://www.rfc-editor.org/rfc/rfc9110"


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
        self.assertEqual(regression.chat_answer_text(raw), '{"a": 1}')
        for broken in (None, {}, {"choices": []}, {"choices": [None]}, {"usage": 3}):
            with self.subTest(broken=broken):
                normal = regression.chat_as_agent(broken)
                self.assertNotEqual(normal["status"], "completed")
                self.assertIsNone(regression.reported_cost(normal))
                self.assertIsNone(regression.chat_answer_text(broken))


class SideBySideTest(unittest.TestCase):
    def test_chat_and_agent_models_in_one_run(self):
        folder = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, folder, True)
        server = simulated_api.start(regression.CASES, unsafe_models=("sonar-pro",))
        self.addCleanup(server.stop)
        out = os.path.join(folder, "r.json")
        env = {**{k: v for k, v in os.environ.items() if not k.startswith("PERPLEXITY")},
               "PERPLEXITY_API_KEY": "test-key-0123", "PERPLEXITY_BASE_URL": server.url,
               "NO_PROXY": "127.0.0.1"}
        result = subprocess.run(
            [sys.executable, "-W", "error", os.path.join(HERE, "regression.py"),
             "--models", "chat:sonar-pro", "openai/gpt-5.6-sol", "--out", out],
            env=env, capture_output=True, text=True, timeout=120)
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
        config = regression.prepare(args)["head"]["config"]
        self.assertEqual(list(config), ["models", "cases", "instructions", "tool",
                                        "response_format", "repeats", "max_steps",
                                        "max_output_tokens", "timeout_seconds"])


if __name__ == "__main__":
    unittest.main()
