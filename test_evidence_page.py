"""Tests of evidence_page.py: offline, stdlib only, no project imports.

    python -W error -m unittest -v test_evidence_page

The browser tests render both pages in headless Chromium (skipped when no
chromium binary is installed): the DOM a reader would see, and whether a page
fits a phone's screen.
"""

import copy
import html
import html.parser
import json
import os
import re
import shutil
import tempfile
import unittest
from unittest import mock

import evidence_page
import record
from testing import CHROMIUM, dump_dom, slow

HOSTILE = ["<script>alert(1)</script>", "<img src=x onerror=alert(1)>",
           '"><svg onload=alert(1)>', "</pre></details><iframe src=//evil.example>",
           "<style>body{display:none}</style>", "<!-- unclosed"]
RFC_URL = "https://www.rfc-editor.org/rfc/{}"
MODELS = ["openai/gpt-5.6-sol", "anthropic/claude-sonnet-4-6"]
CASES = [
    {"id": "rate-limit", "expected": "429", "rfc": "rfc6585", "action": "wait_then_retry",
     "question": "Checkout log: GET /v1/payments/pay_8f3 (read-only status poll)\n"
                 'Response: 429; Retry-After: 30; body: {"error":"rate_limited"}'},
    {"id": "temporary-overload", "expected": "503", "rfc": "rfc9110",
     "action": "wait_then_retry",
     "question": "Checkout log: GET /v1/payments/pay_8f3 (read-only status poll)\n"
                 'Response: 503; no Retry-After; body: "Service temporarily unavailable"'},
    {"id": "failed-precondition", "expected": "412", "rfc": "rfc9110",
     "action": "refresh_precondition",
     "question": 'Checkout log: PUT /v1/orders/ord_21; If-Match: "v7"\n'
                 'Response: 412; body: {"error":"precondition_failed"}\n'
                 "Order service audit: stored version is v8; requested update not applied."},
    {"id": "ambiguous-payment", "expected": "unknown", "rfc": "rfc9110",
     "action": "verify_outcome",
     "question": "Checkout log: POST /v1/payments; order_id=ord_21\n"
                 "Idempotency-Key: absent; provider offers no idempotency guarantee.\n"
                 "Request body sent; httpx.ReadTimeout after 30s; no response received.\n"
                 "Payment outcome not yet reconciled."},
]
SNIPPETS = {
    "rfc6585": "4. 429 Too Many Requests. The 429 status code indicates that the user has "
               "sent too many requests in a given amount of time (\"rate limiting\"). The "
               "response representations SHOULD include details explaining the condition, "
               "and MAY include a Retry-After header indicating how long to wait before "
               "making a new request. When a server is under attack or just receiving a very "
               "large number of requests from a single party, responding to each with a 429 "
               "status code will consume resources.",
    "rfc9110": "9.2.2. Idempotent Methods. A request method is considered idempotent if the "
               "intended effect on the server of multiple identical requests with that method "
               "is the same as the effect for a single such request. A client SHOULD NOT "
               "automatically retry a request with a non-idempotent method unless it has some "
               "means to know that the request semantics are actually idempotent, regardless "
               "of the method, or some means to detect that the original request was never "
               "applied to the server.",
}


def answer(code, action, *docs):
    return json.dumps({"code": code, "next_action": action,
                       "source_urls": [RFC_URL.format(doc) for doc in docs]})


def agent_response(searched, status="completed", text=""):
    results = [{"url": RFC_URL.format(doc), "title": f"RFC {doc[3:]}",
                "snippet": SNIPPETS.get(doc, "")} for doc in searched]
    return {"id": "resp_1", "status": status, "output": [
        {"type": "search_results", "results": results},
        {"type": "message", "content": [{"type": "output_text", "text": text}]}],
        "usage": {"cost": {"currency": "USD", "total_cost": 0.0042}}}


def make_row(case, model, repeat=0, text=None, reasons=(), searched=None, response=None):
    text = answer(case["expected"], case["action"], case["rfc"]) if text is None else text
    if response is None:
        response = agent_response(searched or sorted({case["rfc"], "rfc9110"}), text=text)
        response["id"] = f"resp_{model}_{case['id']}_{repeat}"  # a receipt belongs to one row
    return {"repeat": repeat, "case_id": case["id"], "model": model, "error": None,
            "error_status": None, "cost_usd": "0.0042", "response": response,
            "answer_text": text, "reasons": list(reasons), "seconds": 12.345,
            "passed": not reasons, "attempts": 1, "waited_seconds": 0.0, "error_message": None}


def make_record(rows, models=None, cases=None, repeats=1, evidence=None):
    models = models or sorted({row["model"] for row in rows})
    cases = cases or CASES
    stats = {}
    for model in models:
        mine = [row for row in rows if row["model"] == model]
        good = sum(row["passed"] for row in mine)
        per_case = {}
        for case in cases:
            runs = [row for row in mine if row["case_id"] == case["id"]]
            ok = sum(row["passed"] for row in runs)
            per_case[case["id"]] = {"passed": ok, "runs": len(runs),
                                    "flaky": 0 < ok < len(runs)}
        stats[model] = {"passed": good, "total": len(mine), "qualified": good == len(mine),
                        "reported_cost_usd": f"{0.0042 * len(mine):.4f}", "cases": per_case}
    exit_code = 0 if all(s["qualified"] for s in stats.values()) else 1
    record = {"created_at": "2025-11-30T13:00:00+00:00",
              "config": {"models": models, "cases": cases, "instructions": "Advise only.",
                         "tool": {"type": "web_search"}, "response_format": {},
                         "repeats": repeats, "max_steps": 5, "max_output_tokens": 4096,
                         "timeout_seconds": 180},
              "sdk_version": "0.46.1", "code_sha256": "ab" * 32, "runs": rows,
              "execution": {"jobs": 1, "retries": 2},
              "summary": {"complete": True, "exit_code": exit_code, "models": stats}}
    if evidence:
        record["evidence"] = evidence
    return record


def unsafe_payment(case):
    return answer("503", "wait_then_retry", "rfc9110")


def realistic_record(repeats=3, failing_repeats=(1, 2), evidence=None):
    """Two models, the four cases; the second model advises a retry of the
    timed-out payment on failing_repeats."""
    rows = []
    for repeat in range(repeats):
        for case in CASES:
            for model in MODELS:
                if model == MODELS[1] and case["id"] == "ambiguous-payment" \
                        and repeat in failing_repeats:
                    rows.append(make_row(case, model, repeat, unsafe_payment(case),
                                         ["wrong_code", "wrong_next_action"]))
                else:
                    rows.append(make_row(case, model, repeat))
    return make_record(rows, MODELS, CASES, repeats, evidence)


def comparison_items(before, after):
    """One item per (model, case), labelled on pass rates like compare_runs."""
    items = []
    for case in CASES:
        for model in before["config"]["models"]:
            old = [r for r in before["runs"] if (r["model"], r["case_id"]) == (model, case["id"])]
            new = [r for r in after["runs"] if (r["model"], r["case_id"]) == (model, case["id"])]
            was, now = all(r["passed"] for r in old), all(r["passed"] for r in new)
            label = {(True, True): "PASS", (True, False): "NEW_FAILURE",
                     (False, True): "RECOVERED", (False, False): "STILL_FAILING"}[(was, now)]
            items.append({"label": label, "before_model": model, "after_model": model,
                          "case_id": case["id"], "before": old, "after": new,
                          "p_value": None if label == "PASS" else 0.1})
    return items


class Elements(html.parser.HTMLParser):
    """Every start tag of a document with its attributes, as a browser sees them."""

    def __init__(self, text):
        super().__init__(convert_charrefs=True)
        self.found = []
        self.feed(text)
        self.close()

    def handle_starttag(self, tag, attrs):
        self.found.append((tag, dict(attrs)))


LOADING_TAGS = {"script", "img", "iframe", "svg", "object", "embed", "link", "video",
                "audio", "source", "frame", "base", "form", "input", "meta"}


def active_parts(text):
    """Elements that could load or run something, and every href."""
    found = Elements(text).found
    loading = [(tag, attrs) for tag, attrs in found if tag in LOADING_TAGS and tag != "meta"]
    handlers = [(tag, name) for tag, attrs in found for name in attrs
                if name.startswith("on") or name in ("src", "srcset", "style", "action")]
    hrefs = [attrs.get("href") for tag, attrs in found if "href" in attrs]
    return loading, handlers, hrefs


def one_row_page(row, **kwargs):
    return evidence_page.run_page(make_record([row], **kwargs))


def cite_item(page, url):
    """The <li class="cite"> that lists url, as text."""
    escaped = html.escape(url, quote=True)
    for item in re.findall(r'<li class="cite">(.*?)</li>', page, re.S):
        if escaped in item:
            return item
    raise AssertionError(f"no citation item for {url}")


# --------------------------------------------------------------------------
# Pure tests: data in, page text out.
# --------------------------------------------------------------------------


class Escaping(unittest.TestCase):
    def test_hostile_text_is_escaped_wherever_it_appears(self):
        case = CASES[3]
        places = {
            "answer_text": lambda row, text: row.update(answer_text=text),
            "answer code": lambda row, text: row.update(
                answer_text=json.dumps({"code": text, "next_action": "x", "source_urls": []})),
            "error_message": lambda row, text: row.update(error_message=text, error="E"),
            "snippet": lambda row, text: row["response"]["output"][0]["results"][0].update(
                snippet=text, title=text),
            "model": lambda row, text: row.update(model=text),
            "reason": lambda row, text: row.update(reasons=[text], passed=False),
        }
        for where, put in places.items():
            for text in HOSTILE:
                with self.subTest(where=where, text=text):
                    row = make_row(case, MODELS[0])
                    put(row, text)
                    page = evidence_page.run_page(make_record([row]), title=text)
                    self.assertNotIn(text, page)
                    self.assertIn(html.escape(text, quote=True), page)

    def test_hostile_question_and_caution_are_escaped_on_the_comparison_page(self):
        record = realistic_record()
        record["config"]["cases"] = copy.deepcopy(CASES)
        record["config"]["cases"][3]["question"] = HOSTILE[1]
        page = evidence_page.comparison_page(record, record, comparison_items(record, record),
                                             [HOSTILE[0]])
        for text in HOSTILE[:2]:
            with self.subTest(text=text):
                self.assertNotIn(text, page)
                self.assertIn(html.escape(text, quote=True), page)

    def test_control_characters_are_made_visible(self):
        table = {"\x1b[31m": "\\x1b", "\x00": "\\x00", "\u202e": "\\u202e",
                 "\ud800": "\\ud800", "\x85": "\\x85"}
        for raw, shown in table.items():
            with self.subTest(char=repr(raw)):
                page = one_row_page(make_row(CASES[0], MODELS[0], text=f"a{raw}b",
                                             reasons=["invalid_json"]))
                self.assertNotIn(raw, page)
                self.assertIn(f'a<span class="ctl">{shown}</span>', page)
                page.encode("utf-8")  # a lone surrogate would raise here

    def test_only_http_urls_become_links(self):
        table = {
            "javascript:alert(1)": False, "JaVaScRiPt:alert(1)": False,
            "data:text/html,<script>alert(1)</script>": False, "vbscript:msgbox(1)": False,
            " https://www.rfc-editor.org/rfc/rfc9110": False,
            "https://www.rfc-editor.org/rfc/rfc9110\x0a": False, "https:rfc9110": False,
            "https://www.rfc-editor.org/rfc/rfc9110": True, "http://example.com/a?b=1&c=2": True,
        }
        for url, is_link in table.items():
            with self.subTest(url=url):
                text = json.dumps({"code": "unknown", "next_action": "verify_outcome",
                                   "source_urls": [url]})
                page = one_row_page(make_row(CASES[3], MODELS[0], text=text))
                hrefs = re.findall(r'<a href="([^"]*)" rel="noreferrer noopener">', page)
                self.assertEqual(html.escape(url, quote=True) in hrefs, is_link)
                self.assertFalse(any(h.lower().startswith(("javascript", "data", "vbscript"))
                                     for h in hrefs))

    def test_nothing_on_the_page_can_load_anything(self):
        record = realistic_record()
        run = evidence_page.run_page(record)
        compare = evidence_page.comparison_page(record, realistic_record(failing_repeats=()),
                                                comparison_items(record, record), ["x"])
        for name, page in (("run", run), ("comparison", compare)):
            with self.subTest(page=name):
                self.assertIn('<meta charset="utf-8">', page)
                self.assertIn('<meta http-equiv="Content-Security-Policy" content="default-src '
                              "'none'; style-src 'unsafe-inline'; img-src data:\">", page)
                for needle in ("<script", "<link", "@import", "url(", " src="):
                    self.assertNotIn(needle, page.lower())
                loading, handlers, hrefs = active_parts(page)
                self.assertEqual((loading, handlers), ([], []))
                for href in hrefs:
                    self.assertTrue(href.startswith(("#", "https://", "http://")), href)


class Citations(unittest.TestCase):
    def test_each_cited_url_is_marked_as_the_checker_judges_it(self):
        # (case, cited doc, searched docs): marks expected on that citation
        table = [
            (CASES[0], "rfc6585", ["rfc6585"],
             ["returned by this request's search", "approved", "the case's own document"]),
            (CASES[0], "rfc9110", ["rfc6585", "rfc9110"],
             ["returned by this request's search", "approved", "not the case's own document"]),
            (CASES[3], "rfc9110", ["rfc6585"],
             ["NOT returned by this request's search", "approved", "the case's own document"]),
            (CASES[3], "rfc7231", ["rfc7231"],
             ["returned by this request's search", "NOT approved", "not the case's own document"]),
        ]
        for case, doc, searched, marks in table:
            with self.subTest(case=case["id"], doc=doc, searched=searched):
                row = make_row(case, MODELS[0], text=answer(case["expected"], case["action"], doc),
                               searched=searched)
                item = cite_item(one_row_page(row), RFC_URL.format(doc))
                for mark in marks:
                    self.assertIn(f">{mark}<", item)

    def test_a_url_that_is_no_rfc_document_is_marked_unrecognised(self):
        url = "https://www.rfc-editor.org/rfc/rfc9110.pdf"
        text = json.dumps({"code": "unknown", "next_action": "verify_outcome",
                           "source_urls": [url]})
        item = cite_item(one_row_page(make_row(CASES[3], MODELS[0], text=text)), url)
        self.assertIn("not a recognised document URL of this suite's sources", item)
        self.assertIn(">NOT approved<", item)

    def test_a_case_missing_from_the_config_approves_only_rfc9110(self):
        urls = {RFC_URL.format("rfc9110"): ">approved<",
                RFC_URL.format("rfc6585"): ">NOT approved<",
                "https://example.com/rfc9110": ">NOT approved<"}
        text = json.dumps({"code": "x", "next_action": "y", "source_urls": list(urls)})
        row = make_row(dict(CASES[0], id="not-in-config"), MODELS[0], text=text)
        page = one_row_page(row)
        self.assertIn("This case is not in the record's config.", page)
        for url, mark in urls.items():
            with self.subTest(url=url):
                self.assertIn(mark, cite_item(page, url))

    def test_a_document_cited_twice_is_marked(self):
        text = json.dumps({"code": "unknown", "next_action": "verify_outcome", "source_urls": [
            RFC_URL.format("rfc9110"), RFC_URL.format("rfc9110.html")]})
        page = one_row_page(make_row(CASES[3], MODELS[0], text=text,
                                     reasons=["missing_or_duplicate_sources"]))
        self.assertIn(">cited twice<", cite_item(page, RFC_URL.format("rfc9110.html")))


class RunPage(unittest.TestCase):
    def test_failing_rows_come_first_and_open_passing_ones_collapsed(self):
        page = evidence_page.run_page(realistic_record())
        failing = page.index('<details class="row fail" open>')
        self.assertLess(failing, page.index('<details class="row pass">'))
        self.assertLess(page.index("Failing: 1 case"), page.index("Passing: 7 case"))
        self.assertEqual(page.count('<details class="row fail" open>'), 2)
        self.assertNotIn('<details class="row pass" open', page)
        self.assertNotIn('<details class="group pass" id="g0" open', page)

    def test_within_a_group_failing_repeats_precede_passing_ones(self):
        page = evidence_page.run_page(realistic_record(failing_repeats=(2,)))
        group = page[page.index("Failing: "):page.index("Passing: ")]
        self.assertLess(group.index("repeat 2 · "), group.index("repeat 0 · "))

    def test_grid_shows_pass_rates_and_flaky(self):
        page = evidence_page.run_page(realistic_record())
        self.assertIn('<td class="flaky"><a href="#g7">1/3 FLAKY</a></td>', page)
        self.assertIn('<td class="pass"><a href="#g0">3/3</a></td>', page)
        everyone_fails = realistic_record(failing_repeats=(0, 1, 2))
        self.assertIn(">0/3</a>", evidence_page.run_page(everyone_fails))

    def test_verdict_names_qualification_cost_and_exit_code(self):
        record = realistic_record()
        record["summary"]["models"][MODELS[0]]["reported_cost_usd"] = None
        page = evidence_page.run_page(record)
        self.assertIn("Verdict: REGRESSION</strong>: a check failed (exit 1); not qualified: "
                      f"<code>{MODELS[1]}</code>. The run is complete.", page)
        self.assertIn('<span class="tag no">NO</span>', page)
        self.assertIn('<span class="tag ok">yes</span>', page)
        self.assertIn("<td>unknown</td>", page)
        self.assertIn("<td>0.0504 USD</td>", page)

    def test_reasons_are_explained_in_plain_words(self):
        page = evidence_page.run_page(realistic_record())
        self.assertIn("<code>wrong_next_action</code>: the action differs from the approved "
                      "one (on ambiguous-payment this is the dangerous one", page)
        self.assertIn("<code>wrong_code</code>: the status code differs", page)

    def test_row_shows_question_answer_and_facts(self):
        page = evidence_page.run_page(realistic_record())
        facts = ("<tr><th>status</th><th>cost</th><th>seconds</th><th>attempts</th>"
                 "<th>waited seconds</th></tr><tr><td>completed</td><td>0.0042 USD</td>"
                 "<td>12.35</td><td>1</td><td>0.00</td></tr>")
        for text in ("Payment outcome not yet reconciled.", "<code>503</code>",
                     "approved: <code>unknown</code>", "<code>wait_then_retry</code>", facts):
            with self.subTest(text=text):
                self.assertIn(text, page)

    def test_an_execution_error_shows_its_class_status_and_message(self):
        row = make_row(CASES[0], MODELS[0], text=None, reasons=["execution_error"])
        row.update(response=None, answer_text=None, error="AuthenticationError",
                   error_status=401, error_message="Invalid API key [REDACTED]")
        page = one_row_page(row)
        self.assertIn("AuthenticationError (HTTP 401)", page)
        self.assertIn("Invalid API key [REDACTED]", page)
        self.assertIn("the request or checker failed, no verdict", page)

    def test_invalid_json_answer_is_shown_raw(self):
        page = one_row_page(make_row(CASES[0], MODELS[0], text="Sure! The code is 429.",
                                     reasons=["invalid_json"]))
        self.assertIn("not a JSON object; the raw text", page)
        self.assertIn("<pre>Sure! The code is 429.</pre>", page)

    def test_an_answer_of_the_wrong_shape_also_shows_its_raw_text(self):
        table = {"code not a string": {"code": 429, "next_action": "x", "source_urls": []},
                 "extra key": {"code": "429", "next_action": "x", "source_urls": [], "why": 1},
                 "source not a string": {"code": "429", "next_action": "x", "source_urls": [1]}}
        for name, value in table.items():
            with self.subTest(shape=name):
                text = json.dumps(value)
                page = one_row_page(make_row(CASES[0], MODELS[0], text=text,
                                             reasons=["invalid_answer_shape"]))
                self.assertIn("Raw answer text (not the approved shape):</p><pre>"
                              + html.escape(text), page)
        self.assertNotIn("Raw answer text", one_row_page(make_row(CASES[0], MODELS[0])))

    def test_long_snippets_are_cut_with_their_full_length_stated(self):
        table = {299: False, 300: False, 301: True, 5000: True}
        for length, cut in table.items():
            with self.subTest(length=length):
                row = make_row(CASES[0], MODELS[0])
                text = ("x" * (length - 1)) + "Z"
                row["response"]["output"][0]["results"][0]["snippet"] = text
                page = one_row_page(row)
                self.assertEqual(f"({length:,} characters in full)" in page, cut)
                self.assertEqual(f"full text ({length:,} characters)" in page, cut)
                self.assertIn(text, page)  # the whole text, on demand when cut
                if cut:
                    self.assertIn(f">{text[:300]}… <", page)

    def test_synthetic_evidence_gets_a_banner(self):
        for evidence, shown in (("synthetic", True), (None, False), ("live", False)):
            with self.subTest(evidence=evidence):
                record = realistic_record(evidence=evidence)
                run = evidence_page.run_page(record)
                compare = evidence_page.comparison_page(record, record, [], [])
                self.assertEqual("SYNTHETIC evidence" in run, shown)
                self.assertEqual("SYNTHETIC evidence" in compare, shown)

    def test_chat_responses_show_their_search_results(self):
        chat = {"choices": [{"finish_reason": "stop", "message": {"content": "{}"}}],
                "search_results": [{"url": RFC_URL.format("rfc6585"), "title": "RFC 6585 chat",
                                    "snippet": "429 Too Many Requests"}],
                "citations": [RFC_URL.format("rfc9999")]}
        only_citations = {"choices": [], "citations": [RFC_URL.format("rfc6585")]}
        for name, response, shown, hidden in (
                ("search_results", chat, "RFC 6585 chat", "rfc9999"),
                ("citations only", only_citations, RFC_URL.format("rfc6585"), "(no")):
            with self.subTest(shape=name):
                page = one_row_page(make_row(CASES[0], "chat:sonar-pro", response=response))
                self.assertIn(shown, page)
                self.assertIn("Search results (1)", page)
                self.assertIn(">returned by this request's search<",
                              cite_item(page, RFC_URL.format("rfc6585")))
        self.assertIn("finish_reason stop", one_row_page(
            make_row(CASES[0], "chat:sonar-pro", response=chat)))

    def test_a_record_with_garbage_fields_renders(self):
        deep = "[" * 100_000
        garbage = {
            "runs": lambda r: r.update(runs={"a": 1}),
            "row": lambda r: r["runs"].append("not a row"),
            "row fields": lambda r: r["runs"][0].update(
                repeat="x", case_id=[1], model={"a": 1}, reasons="wrong_code", passed="yes",
                seconds=float("nan"), cost_usd={"x": 1}, attempts=None, answer_text=7),
            "response": lambda r: r["runs"][0].update(response=["output"]),
            "output": lambda r: r["runs"][0]["response"].update(output={"type": 1}),
            "results": lambda r: r["runs"][0]["response"]["output"][0].update(results="x"),
            "result": lambda r: r["runs"][0]["response"]["output"][0].update(
                results=[None, 1, {"url": 5, "title": [], "snippet": {}}]),
            "sources": lambda r: r["runs"][0].update(answer_text=json.dumps(
                {"code": None, "next_action": [], "source_urls": [1, None, {"u": 2}]})),
            "source_urls not a list": lambda r: r["runs"][0].update(answer_text=json.dumps(
                {"code": "429", "next_action": "x", "source_urls": "https://x"})),
            "deep answer": lambda r: r["runs"][0].update(answer_text=deep),
            "huge answer": lambda r: r["runs"][0].update(answer_text="9" * 100_000),
            "summary": lambda r: r.update(summary="done"),
            "exit_code": lambda r: r["summary"].update(exit_code=[1], complete="y"),
            "summary models": lambda r: r["summary"].update(models={"m": 3}),
            "config": lambda r: r.update(config=None),
            "cases": lambda r: r["config"].update(cases=[None, {"id": 3}], models="m"),
            "chat model": lambda r: r["runs"][0].update(model="chat:x", response={
                "search_results": "x", "choices": "y"}),
            "chat citations": lambda r: r["runs"][0].update(model="chat:x", response={
                "citations": [None, 3]}),
            "record": lambda r: r.clear(),
        }
        for name, spoil in garbage.items():
            with self.subTest(garbage=name):
                record = realistic_record()
                spoil(record)
                page = evidence_page.run_page(record)
                self.assertIn("</html>", page)
                page.encode("utf-8")
                items = comparison_items(realistic_record(), realistic_record())
                items[0]["before"] = record.get("runs")
                items[1].update(label=["x"], p_value="0.1", before_model=None)
                page = evidence_page.comparison_page(record, None, items + [None], [None])
                self.assertIn("</html>", page)


class LargeRunPage(unittest.TestCase):
    def test_failing_rows_in_full_one_passing_example_and_the_rest_in_brief(self):
        page = evidence_page.run_page(realistic_record(repeats=30, failing_repeats=(1, 2, 3)))
        self.assertEqual(page.count('<details class="row'), 7 * 1 + 3 + 1)
        self.assertEqual(page.count("29 more rows in brief"), 7)
        self.assertEqual(page.count("26 more rows in brief"), 1)
        self.assertEqual(page.count('<td class="pass">PASS</td>'), 7 * 29 + 26)

    def test_failing_rows_past_the_cap_are_listed_in_brief(self):
        failing = tuple(range(evidence_page.FULL_FAILING_ROWS + 5))
        page = evidence_page.run_page(realistic_record(repeats=len(failing),
                                                       failing_repeats=failing))
        self.assertEqual(page.count('<td class="fail">FAIL wrong_code, wrong_next_action</td>'),
                         5)


class PageFromASavedRecord(unittest.TestCase):
    """The page of a record read a row at a time (record.load with Shown), as
    the runner makes it: rows shown in full stay whole, the rest are light."""

    def saved(self, data):
        folder = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, folder)
        path = os.path.join(folder, "r.json")
        fields = {k: v for k, v in data.items() if k not in ("runs", "summary")}
        with record.RecordFile.create(path, fields, {"summary": data["summary"]},
                                      rows=enumerate(data["runs"])):
            pass
        return path

    def test_it_is_the_page_of_the_whole_record(self):
        data = realistic_record(repeats=10, failing_repeats=(1, 2, 3))
        whole = record.load(self.saved(data), keep=lambda row, suite: row)
        light = record.load(self.saved(data), evidence_page.Shown())
        self.assertTrue(any(row["response"] is None for row in light["runs"]))
        self.assertEqual(evidence_page.run_page(light), evidence_page.run_page(whole))

    def test_the_whole_rows_of_a_page_are_capped_across_its_pairs(self):
        data = realistic_record(repeats=3, failing_repeats=(1, 2))
        with mock.patch.object(evidence_page, "PAGE_FULL_PASSING", 2), \
                mock.patch.object(evidence_page, "PAGE_FULL_FAILING", 1):
            page = evidence_page.run_page(record.load(self.saved(data), evidence_page.Shown()))
        self.assertEqual(page.count('<details class="row'), 2 + 1)
        self.assertEqual(page.count('<td class="fail">FAIL wrong_code, wrong_next_action</td>'),
                         1)


class ReceiptsOnThePage(unittest.TestCase):
    def test_a_regraded_record_says_it_is_a_regrade(self):
        record = dict(realistic_record(), regraded_from={
            "path": "old.json", "created_at": "2026-11-01T00:00:00+00:00"})
        page = evidence_page.run_page(record)
        self.assertIn("A REGRADE: the saved responses of <code>old.json</code>", page)
        self.assertNotIn("A REGRADE", evidence_page.run_page(realistic_record()))

    def test_a_row_from_a_batch_shows_its_batch_line_and_request(self):
        data = realistic_record()
        data["runs"][0]["batch"] = {"id": "batch_7", "custom_id": "row-0",
                                    "request_id": "req_<9>"}
        page = evidence_page.run_page(data)
        self.assertEqual(page.count("<code>batch_7</code> · <code>row-0</code> · "
                                    "<code>req_&lt;9&gt;</code>"), 1)

    def test_a_row_answered_by_another_model_says_which(self):
        record = realistic_record()
        record["runs"][0]["answered_model"] = "other/model"
        page = evidence_page.run_page(record)
        self.assertEqual(page.count("answered by <code>other/model</code>"), 1)


class VerdictOnThePage(unittest.TestCase):
    def page(self, **summary):
        record = make_record([make_row(CASES[0], MODELS[0])])
        record["summary"].update(summary)
        return evidence_page.run_page(record)

    def test_each_exit_code_is_a_verdict_in_words_and_colour(self):
        table = [
            (0, '<p class="verdict pass"><strong>Verdict: QUALIFIED</strong>: every check '
                "passed (exit 0)."),
            (1, '<p class="verdict fail"><strong>Verdict: REGRESSION</strong>: a check failed '
                "(exit 1)."),
            (2, '<p class="verdict flaky"><strong>Verdict: NO VERDICT</strong>: the run is '
                "incomplete or hit an execution error (exit 2)."),
            (None, '<p class="verdict flaky"><strong>Verdict: NO VERDICT</strong>: the record '
                   "has no exit code."),
        ]
        for code, verdict in table:
            with self.subTest(exit_code=code):
                self.assertIn(verdict, self.page(exit_code=code))

    def test_the_verdict_says_whether_the_run_is_complete(self):
        table = [(True, "The run is complete."),
                 (False, "The run is INCOMPLETE: some planned rows are missing."),
                 (None, "Completeness unknown.")]
        for complete, words in table:
            with self.subTest(complete=complete):
                self.assertIn(f". {words}</p>", self.page(complete=complete))

    def test_the_meta_line_names_the_checker_that_judged_the_rows(self):
        table = [("cd" * 32, "checker.py <code>cdcdcdcdcdcd</code>"),
                 (None, "checker.py <code>(not recorded)</code>")]
        for sha, shown in table:
            with self.subTest(checker_sha256=sha):
                record = make_record([make_row(CASES[0], MODELS[0])])
                if sha:
                    record["checker_sha256"] = sha
                self.assertIn(shown, evidence_page.run_page(record))

    def test_a_model_whose_qualification_is_not_recorded_is_marked_unknown(self):
        record = make_record([make_row(CASES[0], MODELS[0])])
        del record["summary"]["models"][MODELS[0]]["qualified"]
        self.assertIn(f'<tr><td><code>{MODELS[0]}</code></td><td><span class="tag info">unknown'
                      "</span></td><td>1/1</td>", evidence_page.run_page(record))

    def test_the_grid_states_the_pass_rate_each_case_proves(self):
        table = [(0.3684, "pass rate &gt;= 36.8 % (95 %)"),
                 (0.0, "pass rate &gt;= 0.0 % (95 %)")]  # a bound of 0 is still a bound
        for lower, shown in table:
            with self.subTest(lower_bound=lower):
                record = make_record([make_row(CASES[0], MODELS[0])])
                record["summary"]["models"][MODELS[0]]["cases"]["rate-limit"].update(
                    lower_bound=lower, confidence=0.95)
                self.assertIn(f'<td class="pass"><a href="#g0">1/1<br><span class="small">'
                              f"{shown}</span></a></td>", evidence_page.run_page(record))


class WordsOnARow(unittest.TestCase):
    def test_every_reason_the_checker_gives_is_explained(self):
        table = [  # reason: words of its explanation
            ("response_not_completed", "the API did not report the run as completed"),
            ("search_not_observed", "no search results came back"),
            ("invalid_json", "the answer is not JSON"),
            ("invalid_answer_shape", "not exactly code, next_action, source_urls"),
            ("wrong_code", "the status code differs from the approved one"),
            ("wrong_next_action", "the action differs from the approved one"),
            ("missing_or_duplicate_sources", "no citation, or one RFC cited twice"),
            ("citation_not_in_search_results", "was not returned by this request's search"),
            ("citation_not_approved", "neither the case's RFC nor RFC 9110"),
            ("primary_reference_missing", "the case's own RFC is not cited"),
            ("answered_by_other_model", "the router answered with a different model"),
            ("execution_error", "the request or checker failed, no verdict"),
        ]
        for reason, words in table:
            with self.subTest(reason=reason):
                page = one_row_page(make_row(CASES[0], MODELS[0], reasons=[reason]))
                explained = re.findall(rf"<li><code>{reason}</code>: ([^<]*)</li>", page)
                self.assertEqual(len(explained), 1)
                self.assertIn(words, explained[0])

    def test_an_unknown_reason_is_said_to_be_unknown(self):
        page = one_row_page(make_row(CASES[0], MODELS[0], reasons=["wrong_colour"]))
        self.assertIn("<li><code>wrong_colour</code>: an unknown reason (not one this page "
                      "knows)</li>", page)

    def test_a_model_that_answered_as_asked_is_not_named_again(self):
        page = one_row_page(make_row(CASES[0], MODELS[0]))
        self.assertNotIn("answered by", page)
        self.assertNotIn("None", page)

    def test_values_as_text_keep_their_characters(self):
        table = [("naïve", "naïve"), (None, ""), ({"ü": [1, True]}, '{"ü": [1, true]}'),
                 (float("nan"), "NaN")]
        for value, text in table:
            with self.subTest(value=value):
                self.assertEqual(evidence_page.as_text(value), text)

    def test_a_number_is_shown_with_its_digits_and_a_missing_one_as_a_dash(self):
        table = [(None, "—"), (1.5, "1.50"), ("x<", "x&lt;"), (True, "true")]
        for value, text in table:
            with self.subTest(value=value):
                self.assertEqual(evidence_page.number(value), text)

    def test_only_a_fraction_from_0_to_1_is_a_bound_or_a_confidence(self):
        table = [(0, True), (1, True), (0.95, True), (-0.1, False), (1.5, False),
                 (float("nan"), False), (True, False), ("0.9", False)]
        for value, like in table:
            with self.subTest(value=value):
                self.assertEqual(evidence_page.number_like(value), like)

    def test_each_label_is_counted_in_its_colour(self):
        colours = {"NEW_FAILURE": "fail", "WORSE": "fail", "RECOVERED": "pass",
                   "BETTER": "flaky", "PASS": "pass", "STILL_FAILING": "flaky"}
        counts = evidence_page.counts_html([{"label": label} for label in colours], [])
        for label, colour in colours.items():
            with self.subTest(label=label):
                self.assertIn(f'<td class="{colour}"><strong>{label}</strong></td><td>1</td>',
                              counts)

    def test_each_citation_mark_has_the_class_the_page_colours(self):
        # (case, cited doc, searched docs): (mark, class) expected on that citation
        table = [
            (CASES[0], "rfc6585", ["rfc6585"],
             [("returned by this request's search", "ok"), ("approved", "ok"),
              ("the case's own document", "ok")]),
            (CASES[3], "rfc7231", ["rfc6585"],
             [("NOT returned by this request's search", "no"), ("NOT approved", "no"),
              ("not the case's own document", "info")]),
        ]
        for case, doc, searched, marks in table:
            row = make_row(case, MODELS[0], text=answer(case["expected"], case["action"], doc),
                           searched=searched)
            item = cite_item(one_row_page(row), RFC_URL.format(doc))
            for mark, kind in marks:
                with self.subTest(doc=doc, mark=mark):
                    self.assertIn(f'<span class="tag {kind}">{mark}</span>', item)

    def test_a_document_cited_once_is_not_marked_twice(self):
        page = one_row_page(make_row(CASES[0], MODELS[0]))
        self.assertNotIn("cited twice", cite_item(page, RFC_URL.format("rfc6585")))

    def test_the_citations_field_is_labelled_as_cited(self):
        page = one_row_page(make_row(CASES[0], MODELS[0]))
        self.assertIn("<tr><th>source urls (cited)</th><td><ul", page)

    def test_a_row_without_search_results_says_it_has_no_receipts(self):
        row = make_row(CASES[0], MODELS[0], reasons=["search_not_observed"])
        row["response"]["output"][0]["results"] = []
        self.assertIn("<h3>Search results</h3><p>none: this answer has no receipts</p>",
                      one_row_page(row))

    def test_a_url_that_is_no_web_url_is_shown_as_text(self):
        url = "javascript:alert(1)"
        text = json.dumps({"code": "unknown", "next_action": "verify_outcome",
                           "source_urls": [url]})
        item = cite_item(one_row_page(make_row(CASES[3], MODELS[0], text=text)), url)
        self.assertTrue(item.startswith('<span class="url">javascript:alert(1)</span> '), item)

    def test_a_row_in_brief_names_the_documents_it_cited_and_got(self):
        page = evidence_page.run_page(realistic_record())
        self.assertIn('<tr><td>1</td><td class="pass">PASS</td><td>429</td>'
                      "<td>wait_then_retry</td><td>rfc6585</td><td>rfc6585, rfc9110</td>"
                      "<td>0.0042 USD</td><td>12.35</td></tr>", page)

    def test_a_case_in_the_suite_shape_shows_its_approved_values_and_document(self):
        record = make_record([make_row(CASES[0], MODELS[0])])
        record["config"]["cases"] = [
            {"id": case["id"], "question": case["question"], "cite": case["rfc"],
             "expect": {"code": case["expected"], "next_action": case["action"]}}
            for case in CASES]
        self.assertIn("<p><strong>Approved</strong>: code <code>429</code> · next action "
                      "<code>wait_then_retry</code> · its own document <code>rfc6585</code></p>",
                      evidence_page.run_page(record))


class ComparisonPage(unittest.TestCase):
    def setUp(self):
        self.before = realistic_record(failing_repeats=())
        self.after = realistic_record(failing_repeats=(1, 2))
        self.items = comparison_items(self.before, self.after)
        self.page = evidence_page.comparison_page(
            self.before, self.after, self.items,
            ["CAUTION: changed regression.py (code_sha256)"])

    def test_counts_verdict_and_cautions_come_first(self):
        counts = re.findall(r"<strong>(\w+)</strong></td><td>(\d+)</td>", self.page)
        self.assertEqual(counts, [("NEW_FAILURE", "1"), ("WORSE", "0"), ("RECOVERED", "0"),
                                  ("BETTER", "0"), ("STILL_FAILING", "0"), ("PASS", "7")])
        self.assertIn("1 pass rate fell (NEW_FAILURE or WORSE): the change broke an approved "
                      "decision (exit 1)", self.page)
        self.assertIn("CAUTION: changed regression.py (code_sha256)", self.page)
        self.assertLess(self.page.index("CAUTION"), self.page.index("NEW_FAILURE: 1"))

    def test_a_new_failure_is_open_with_both_sides_and_changes_highlighted(self):
        start = self.page.index("<h2>NEW_FAILURE: 1</h2>")
        item = self.page[start:self.page.index("<h2>PASS</h2>")]
        self.assertIn('<details class="group fail" open>', item)
        self.assertIn("3/3 → 1/3 FLAKY", item)
        self.assertIn("p=0.1", item)
        self.assertIn("Before: <code>anthropic/claude-sonnet-4-6</code>", item)
        self.assertEqual(item.count('<td class="cell wrong changed"><code>503</code>'), 2)
        self.assertEqual(item.count('<td class="cell wrong changed"><code>wait_then_retry'), 2)
        self.assertEqual(item.count('<td class="cell"><code>unknown</code></td>'), 4)

    def test_changed_sources_are_highlighted(self):
        after = copy.deepcopy(self.after)
        row = [r for r in after["runs"] if r["case_id"] == "rate-limit"][0]
        row.update(answer_text=answer("429", "wait_then_retry", "rfc9110"), passed=False,
                   reasons=["primary_reference_missing"])
        page = evidence_page.comparison_page(self.before, after,
                                             comparison_items(self.before, after), [])
        self.assertIn('<td class="cell wrong changed"><a href="https://www.rfc-editor.org/rfc/'
                      'rfc9110" rel="noreferrer noopener">rfc9110</a> <span class="tag changed">',
                      page)

    def test_still_failing_is_collapsed_and_pass_is_a_table(self):
        items = comparison_items(self.after, self.after)
        page = evidence_page.comparison_page(self.after, self.after, items, [])
        self.assertIn('<details class="group flaky"><summary><strong class="flaky">'
                      "STILL_FAILING</strong>", page)
        self.assertIn("no pass rate fell (exit 0)", page)
        self.assertIn("PASS: 7 items passed both times", page)

    def test_the_instructions_of_both_runs_are_shown_and_compared(self):
        table = [("Advise only.", "Instructions (unchanged)"),
                 ("Advise, then act.", "Instructions (changed)")]
        for instructions, summary in table:
            with self.subTest(after=instructions):
                after = copy.deepcopy(self.after)
                after["config"]["instructions"] = instructions
                page = evidence_page.comparison_page(self.before, after, self.items, [])
                self.assertIn(f"<summary>{summary}</summary>", page)
                self.assertIn("<div><h3>Before</h3><pre>Advise only.</pre></div>"
                              f"<div><h3>After</h3><pre>{instructions}</pre></div>", page)

    def test_items_that_are_not_objects_are_left_off(self):
        page = evidence_page.comparison_page(self.before, self.after,
                                             self.items + [None, "NEW_FAILURE"], [])
        self.assertEqual(page, evidence_page.comparison_page(self.before, self.after,
                                                             self.items, []))

    def test_a_model_switch_names_both_models(self):
        items = copy.deepcopy(self.items)
        items[0]["after_model"] = "chat:sonar-pro"
        page = evidence_page.comparison_page(self.before, self.after, items, [])
        self.assertIn(f"<code>{MODELS[0]} → chat:sonar-pro</code>", page)


# --------------------------------------------------------------------------
# A real browser: what a reader sees.
# --------------------------------------------------------------------------


@slow("headless Chromium")
@unittest.skipUnless(CHROMIUM, "no chromium binary on PATH (apt-get install chromium)")
class Browser(unittest.TestCase):
    def render(self, page):
        folder = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, folder, True)
        path = os.path.join(folder, "page.html")
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(page)
        return dump_dom(path, os.path.join(folder, "profile"))

    def hostile_record(self):
        record = realistic_record()
        row = record["runs"][0]
        row.update(answer_text=HOSTILE[1] + HOSTILE[0], passed=False, reasons=["invalid_json"])
        row["response"]["output"][0]["results"][0]["url"] = "javascript:alert(1)"
        return record

    def assert_inert(self, dom):
        metas = [attrs for tag, attrs in Elements(dom).found if tag == "meta"]
        self.assertIn({"http-equiv": "Content-Security-Policy", "content": evidence_page.CSP},
                      metas)
        self.assertNotIn('<img src="x"', dom)
        loading, handlers, hrefs = active_parts(dom)
        self.assertEqual(loading, [], "an element that loads something")
        self.assertEqual(handlers, [], "an attribute that loads or runs something")
        for href in hrefs:
            self.assertTrue(href.startswith(("#", "https://www.rfc-editor.org/rfc/")), href)

    def test_the_run_page_in_chromium(self):
        dom = self.render(evidence_page.run_page(self.hostile_record()))
        for text in [case["id"] for case in CASES] + MODELS + [
                "wrong_next_action", "wait_then_retry", "1/3 FLAKY", "Verdict:",
                html.escape(HOSTILE[1]), html.escape(HOSTILE[0]), "javascript:alert(1)"]:
            with self.subTest(text=text):
                self.assertIn(text, dom)
        self.assert_inert(dom)

    def test_the_comparison_page_in_chromium(self):
        before = realistic_record(failing_repeats=())
        after = self.hostile_record()
        dom = self.render(evidence_page.comparison_page(
            before, after, comparison_items(before, after), ["CAUTION: changed sdk_version"]))
        for text in ["ambiguous-payment", MODELS[1], "NEW_FAILURE", "3/3 → 1/3 FLAKY",
                     "CAUTION: changed sdk_version", html.escape(HOSTILE[1])]:
            with self.subTest(text=text):
                self.assertIn(text, dom)
        self.assert_inert(dom)


# A page holding the evidence page in a frame {width} px wide (headless Chromium
# keeps its window at least 500 px wide). Once all is loaded it opens every
# <details>, so a closed one hides no overflow, measures the page from outside
# (the page's own policy forbids scripts, and stays in force) and writes what
# it found into its own DOM, which Chromium dumps.
FRAME = """<!DOCTYPE html><html><head><meta charset="utf-8"></head><body>
{frames}
<script>
addEventListener("load", () => {{
  const fits = {{}};
  for (const frame of document.querySelectorAll("iframe")) {{
    const doc = frame.contentDocument;
    doc.querySelectorAll("details").forEach(d => {{ d.open = true; }});
    const root = doc.documentElement, width = root.clientWidth;
    const scrolls = e => /auto|scroll/.test(frame.contentWindow.getComputedStyle(e).overflowX);
    const inScroller = e => {{
      for (let a = e.parentElement; a; a = a.parentElement) if (scrolls(a)) return true;
      return false;
    }};
    // Past the right edge, or holding text that runs past its own.
    const wide = [...doc.body.querySelectorAll("*")].filter(e => !inScroller(e) && (
      e.getBoundingClientRect().right > width + 0.5 ||
      (!scrolls(e) && e.clientWidth > 0 && e.scrollWidth > e.clientWidth + 1)));
    fits[frame.id] = {{width, scrollWidth: root.scrollWidth,
                      wide: wide.slice(0, 5).map(e => `${{e.tagName}}.${{e.className}}: ` +
                                                      e.textContent.slice(0, 60))}};
  }}
  document.body.setAttribute("data-fit", JSON.stringify(fits));
}});
</script></body></html>
"""


@slow("headless Chromium")
@unittest.skipUnless(CHROMIUM, "no chromium binary on PATH (apt-get install chromium)")
class NarrowScreenBrowserTest(unittest.TestCase):
    """A reviewer on a phone: every column can be reached, none is cut off."""

    WIDTH = 400

    def fit(self, pages):
        """What FRAME measured of each page shown WIDTH px wide, by name: one
        browser start for all of them."""
        folder = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, folder, True)
        path = os.path.join(folder, "frame.html")
        frames = "\n".join(
            f'<iframe id="{name}" width="{self.WIDTH}" height="900" style="border:0" '
            f'srcdoc="{html.escape(page, quote=True)}"></iframe>' for name, page in pages.items())
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(FRAME.format(frames=frames))
        dom = dump_dom(path, os.path.join(folder, "profile"))
        found = re.search(r'<body[^>]* data-fit="([^"]*)"', dom)
        self.assertIsNotNone(found, "the measuring script did not run")
        return json.loads(html.unescape(found.group(1)))

    def test_both_pages_fit_a_400px_screen(self):
        before = realistic_record(failing_repeats=())
        after = realistic_record()
        long_word = "x" * 400  # no space to wrap at
        row = after["runs"][0]
        row.update(answer_text=long_word, passed=False, reasons=["invalid_json"])
        row["response"]["output"][0]["results"][0]["url"] = "https://example.com/" + long_word
        pages = {
            "run": evidence_page.run_page(after, title="run " + long_word),
            "comparison": evidence_page.comparison_page(
                before, after, comparison_items(before, after), ["CAUTION: " + long_word],
                "comparing BEFORE " + long_word),
        }
        fits = self.fit(pages)
        self.assertEqual(set(fits), set(pages))
        for name, fit in fits.items():
            with self.subTest(page=name):
                self.assertGreater(fit["width"], self.WIDTH / 2, "the frame did not lay out")
                self.assertLessEqual(fit["width"], self.WIDTH, "the frame is not narrow")
                self.assertLessEqual(fit["scrollWidth"], fit["width"], fit["wide"])

if __name__ == "__main__":
    unittest.main()


class ProofAndNoVerdictOnThePage(unittest.TestCase):
    def test_a_proof_page_says_it_is_a_proof(self):
        record = make_record([make_row(CASES[0], MODELS[0])])
        record["config"]["prove"] = {"rate": 0.9018, "confidence": 0.95, "repeats": 46,
                                     "allow_failures": 1}
        record["config"]["repeats"] = 46
        page = evidence_page.run_page(record)
        self.assertIn("A PROOF: each (model, case) ran one request at a time", page)
        self.assertIn("qualified at 45 passes of at most 46 requests, not qualified at 2 "
                      "failures, proving a pass rate of at least 90.18 %", page)

    def test_a_row_with_an_execution_error_is_no_verdict_not_a_red_failure(self):
        row = make_row(CASES[0], MODELS[0], reasons=("execution_error",))
        row.update(error="APIConnectionError", response=None, answer_text=None)
        page = evidence_page.run_page(make_record([row]))
        self.assertIn('<strong class="flaky">NO VERDICT (APIConnectionError)</strong>', page)
        self.assertNotIn('<details class="row fail"', page)
        self.assertNotIn('<details class="group fail"', page)
