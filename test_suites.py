"""Suites: the built-in suite is one suite, any suite file runs and judges, and
every bad suite file is refused with the file and the key named, nothing sent."""

import copy
import json
import os
import unittest
from unittest import mock

import batching
import checker
import compare_runs
import record
import regression
import simulated_api
import suites
from testing import Harness, quiet, read_json, read_text, temp_dir, write_text

HERE = os.path.dirname(os.path.abspath(__file__))
HTTP_SUITE = os.path.join(HERE, "examples", "suites", "http-failures.toml")
SUPPORT_SUITE = os.path.join(HERE, "examples", "suites", "support-escalation.toml")
SHIPPED = (HTTP_SUITE, SUPPORT_SUITE)

# A small suite of another domain, as a team would write one: an integration
# advisor that names which documented endpoint to call.
SMALL = '''\
name = "integration"
instructions = """Advise which endpoint to call. Reply with JSON: endpoint, retry_safe,
attempts, source_urls. Cite https://docs.example.com/api/<page> pages your search returned,
each at most once; cite the endpoint's own page. Call web_search first."""
schema_name = "EndpointAnswer"

[answer]
endpoint = { enum = ["create_payment", "get_payment", "refund_payment"] }
retry_safe = { type = "boolean" }
attempts = { type = "integer" }
note = { type = "string" }
source_urls = { citations = true }

[sources]
url = "https://docs.example.com/api/{doc}"
hosts = ["docs.example.com"]
path = '/api/(?P<doc>[a-z-]+)/?'
general = ["errors"]

[[cases]]
id = "status-check"
question = "Ticket: the shop wants to know whether payment pay_1 went through."
expect = { endpoint = "get_payment", retry_safe = true, attempts = 3 }
cite = "payments-get"

[[cases]]
id = "money-back"
question = "Ticket: the customer returned the goods; give their money back for pay_2."
expect = { endpoint = "refund_payment", retry_safe = false }
cite = "refunds"
'''


def small_suite():
    return suites.validate_suite(__import__("tomllib").loads(SMALL), "small.toml")


def response(urls, status="completed"):
    return {"status": status, "output": [{"type": "search_results",
                                          "results": [{"url": url} for url in urls]}]}


def api_url(doc):
    return f"https://docs.example.com/api/{doc}"


class BuiltInSuiteTest(unittest.TestCase):
    def test_the_shipped_http_suite_is_the_built_in_one(self):
        self.assertEqual(suites.read_suite(HTTP_SUITE), checker.BUILTIN_SUITE)

    def test_the_built_in_suite_builds_the_published_request_parts(self):
        suite = checker.BUILTIN_SUITE
        self.assertEqual(json.dumps(suites.format_of(suite)), json.dumps(checker.FORMAT))
        self.assertEqual(json.dumps(suites.tool_of(suite)), json.dumps(checker.TOOL))
        self.assertEqual(suites.record_cases(suite), checker.CASES)

    def test_the_built_in_suite_hash_stays_what_committed_records_hold(self):
        # every record saves it; record.load refuses a record whose hash differs as edited,
        # so a new hash would make each committed baseline of the built-in suite unreadable
        self.assertEqual(suites.suite_sha256(checker.BUILTIN_SUITE),
                         "57d7ad21245a70ece7be86dc5f46a0ec1a5e8a2bbfa7701302928447d6230bfd")

    def test_the_tutorial_names_stay_importable_from_the_runner(self):
        for name in ("MODELS", "CASES", "INSTRUCTIONS", "TOOL", "FORMAT", "check",
                     "rfc_document", "approved_source", "reported_cost", "run_one", "summary"):
            with self.subTest(name=name):
                self.assertTrue(hasattr(regression, name))
        self.assertEqual(set(regression.CASES[0]), {"id", "expected", "rfc", "action",
                                                    "question"})

    def test_check_is_the_suite_checker_for_the_built_in_suite(self):
        raw = response(["https://www.rfc-editor.org/rfc/rfc9110"])
        for case in checker.CASES:
            for text in ('{"code": "503", "next_action": "wait_then_retry", "source_urls": '
                         '["https://www.rfc-editor.org/rfc/rfc9110"]}', "not json", "[]"):
                with self.subTest(case=case["id"], text=text):
                    self.assertEqual(checker.check(case, raw, text), checker.judge_answer(
                        checker.BUILTIN_SUITE, checker.suite_case(case), raw, text))


class SuiteReasonWordsTest(unittest.TestCase):
    def test_the_page_explains_each_reason_in_the_suites_own_words(self):
        import evidence_page

        table = [
            ("wrong_retry_safe", "retry safe differs from the approved value"),
            ("invalid_answer_shape", "not exactly endpoint, retry_safe, attempts, note, "
                                     "source_urls with the right kinds"),
            ("citation_not_approved", "neither the case's own nor one of the suite's general "
                                      "documents"),
            ("primary_reference_missing", "the case's own document is not cited"),
            ("missing_or_duplicate_sources", "one document cited twice"),
            ("citation_not_in_search_results", "not returned by this request's search"),
        ]
        for reason, words in table:
            with self.subTest(reason):
                self.assertIn(words, evidence_page.reason_meaning(reason, small_suite()))
        self.assertIsNone(evidence_page.reason_meaning("wrong_colour", small_suite()))
        self.assertIn("RFC 9110", evidence_page.reason_meaning("citation_not_approved",
                                                               checker.BUILTIN_SUITE))


class SuiteCheckerTest(unittest.TestCase):
    def setUp(self):
        self.suite = small_suite()
        self.case = self.suite["cases"][0]

    def answer(self, **changes):
        answer = {"endpoint": "get_payment", "retry_safe": True, "attempts": 3,
                  "note": "free text", "source_urls": [api_url("payments-get")]}
        answer.update(changes)
        return json.dumps(answer)

    def judge(self, text, urls=(api_url("payments-get"), api_url("errors"))):
        return checker.judge_answer(self.suite, self.case, response(urls), text)

    def test_a_right_answer_passes_whatever_its_free_field_says(self):
        self.assertEqual(self.judge(self.answer(note="anything at all")), [])

    def test_each_wrong_value_is_named_in_the_order_of_the_answer_fields(self):
        text = self.answer(attempts=4, endpoint="create_payment", retry_safe=False)
        self.assertEqual(self.judge(text), ["wrong_endpoint", "wrong_retry_safe",
                                            "wrong_attempts"])

    def test_a_field_of_the_wrong_kind_is_a_wrong_shape(self):
        table = [("integer as text", {"attempts": "3"}), ("bool for integer", {"attempts": True}),
                 ("integer for bool", {"retry_safe": 1}), ("number for enum", {"endpoint": 1}),
                 ("float for integer", {"attempts": 3.0}), ("url not text", {"source_urls": [1]})]
        for name, change in table:
            with self.subTest(name):
                self.assertEqual(self.judge(self.answer(**change)), ["invalid_answer_shape"])

    def test_an_enum_value_outside_its_list_never_passes(self):
        free = copy.deepcopy(self.suite)
        del free["cases"][0]["expect"]["endpoint"]  # a case that does not expect it
        table = [(self.suite, ["wrong_endpoint"]), (free, ["invalid_answer_shape"])]
        for suite, reasons in table:
            with self.subTest(expects_it=suite is self.suite):
                self.assertEqual(checker.judge_answer(
                    suite, suite["cases"][0], response([api_url("payments-get")]),
                    self.answer(endpoint="delete_everything")), reasons)

    def test_missing_or_extra_fields_are_a_wrong_shape(self):
        answer = json.loads(self.answer())
        del answer["note"]
        self.assertEqual(self.judge(json.dumps(answer)), ["invalid_answer_shape"])
        self.assertEqual(self.judge(self.answer(extra=1)), ["invalid_answer_shape"])

    def test_citations_are_receipts_by_the_suites_own_sources(self):
        table = [
            ("general doc too", [api_url("payments-get"), api_url("errors")], []),
            ("not returned", [api_url("payments-get"), api_url("refunds")],
             ["citation_not_in_search_results", "citation_not_approved"]),
            ("only general", [api_url("errors")], ["primary_reference_missing"]),
            ("same doc twice", [api_url("payments-get"), api_url("payments-get") + "/"],
             ["missing_or_duplicate_sources"]),
            ("none", [], ["missing_or_duplicate_sources", "primary_reference_missing"]),
        ]
        for name, cited, reasons in table:
            with self.subTest(name):
                self.assertEqual(self.judge(self.answer(source_urls=cited),
                                            urls=[api_url("payments-get"), api_url("errors"),
                                                  api_url("other")]), reasons)

    def test_url_rules_hold_for_any_hosts(self):
        sources = self.suite["sources"]
        good = ["https://docs.example.com/api/refunds", "https://DOCS.example.com/api/refunds/",
                "https://docs.example.com:443/api/refunds", "https://docs.example.com/api/refunds#x"]
        bad = ["http://docs.example.com/api/refunds", "https://docs.example.com:8443/api/refunds",
               "https://u:p@docs.example.com/api/refunds", "https://docs.example.com/api/refunds?x=1",
               "https://evil.example.com/api/refunds", "https://docs.example.com/api/refunds.pdf",
               "https://docs.example.com/api/ refunds", "https://docs.example.com/v2/api/refunds"]
        for url in good:
            with self.subTest(url=url):
                self.assertEqual(checker.document(sources, url), "refunds")
        for url in bad:
            with self.subTest(url=url):
                self.assertIsNone(checker.document(sources, url))

    def test_the_published_reasons_come_first_as_they_always_did(self):
        raw = response([], status="incomplete")
        self.assertEqual(checker.judge_answer(self.suite, self.case, raw, "{"),
                         ["response_not_completed", "search_not_observed", "invalid_json"])


BAD = [  # name, change to the small suite's text, words the error holds
    ("not TOML", lambda text: text + "\n[[[", "is not valid TOML"),
    ("a model with a comma", lambda text: text.replace(
        'name = "integration"', 'name = "integration"\nmodels = ["a/b,c/d"]'),
     "models: 'a/b,c/d' holds a comma; give each model as its own string: \"a/b\", \"c/d\""),
    ("a general document twice", lambda text: text.replace('general = ["errors"]',
                                                            'general = ["errors", "errors"]'),
     'sources.general names "errors" twice; give each document once'),
    ("an empty expect", lambda text: text.replace(
        'expect = { endpoint = "refund_payment", retry_safe = false }', "expect = {}"),
     "case 2 (money-back): expect is empty, so the case guards no decision"),
    ("a kind with an unknown key", lambda text: text.replace(
        'retry_safe = { type = "boolean" }', 'retry_safe = { type = "boolean", optional = true }'),
     "answer.retry_safe has the unknown key 'optional'; a field kind is exactly one of type = "
     '"string" | "integer" | "boolean"'),
    ("a value of another kind", lambda text: text.replace("attempts = 3 }", "attempts = true }"),
     "expect.attempts = true must be an integer"),
    ("citations false", lambda text: text.replace("source_urls = { citations = true }",
                                                  "source_urls = { citations = false }"),
     "answer.source_urls: citations = false is not a field kind"),
    ("a field of two kinds", lambda text: text.replace(
        'endpoint = { enum = [', 'endpoint = { type = "string", enum = ['),
     "answer.endpoint a field kind is exactly one of"),
    ("a search budget of no tokens", lambda text: text + "\n[search]\nmax_tokens = 0\n",
     "search.max_tokens must be a whole number of tokens, 1.."),
    ("a search budget as text", lambda text: text + "\n[search]\nmax_tokens_per_page = '9'\n",
     "search.max_tokens_per_page must be a whole number of tokens"),
    ("a schema name with a space", lambda text: text.replace(
        'schema_name = "EndpointAnswer"', 'schema_name = "Endpoint Answer"'),
     "schema_name must be 1..64 letters, digits, _ or -"),
    ("one question twice", lambda text: text.replace(
        "the customer returned the goods; give their money back for pay_2",
        "the shop wants to know whether payment pay_1 went through"),
     "case 2 (money-back) asks the same question as case 1 (status-check); give each case "
     "its own question"),
    ("unknown top key", lambda text: "colour = 1\n" + text, "unknown key 'colour'"),
    ("unknown field key", lambda text: text.replace('type = "integer"',
                                                    'type = "integer", max = 3'), "attempts"),
    ("unknown sources key", lambda text: text.replace("[sources]", "[sources]\nport = 1"),
     "[sources] has the unknown key 'port'"),
    ("unknown search key", lambda text: text + "\n[search]\nsize = 'medium'\n",
     "[search] has the unknown key 'size'"),
    ("unknown case key", lambda text: text.replace('cite = "refunds"',
                                                   'cite = "refunds"\nrfc = "x"'),
     "case 2 (money-back) has the unknown key 'rfc'"),
    ("missing name", lambda text: text.replace('name = "integration"\n', ""), "needs name"),
    ("missing answer", lambda text: text.replace("[answer]", "[unused]"), "unknown key"),
    ("no answer", lambda text: text.split("[answer]")[0] + "[sources]" + text.split(
        "[sources]")[1], "needs answer"),
    ("missing sources", lambda text: text.split("[sources]")[0] + "[[cases]]" + text.split(
        "[[cases]]", 1)[1], "needs sources"),
    ("no cases", lambda text: text.split("[[cases]]")[0], "needs cases"),
    ("no citations field", lambda text: text.replace("source_urls = { citations = true }\n",
                                                     ""), "exactly one field with citations"),
    ("two citations fields", lambda text: text.replace(
        "source_urls = { citations = true }", "source_urls = { citations = true }\n"
        "more_urls = { citations = true }"), "has 2"),
    ("bad field name", lambda text: text.replace("note =", "Note ="), "'Note' must match"),
    ("bad field kind", lambda text: text.replace('{ type = "string" }', '{ type = "float" }'),
     "is not a field kind"),
    ("empty enum", lambda text: text.replace(
        '{ enum = ["create_payment", "get_payment", "refund_payment"] }', "{ enum = [] }"),
     "is not a field kind"),
    ("expect names another field", lambda text: text.replace("attempts = 3 }", "tries = 3 }"),
     "expect names 'tries'"),
    ("expect names the citations", lambda text: text.replace(
        "attempts = 3 }", "attempts = 3, source_urls = [] }"), "expect names 'source_urls'"),
    ("expect outside the enum", lambda text: text.replace('"get_payment", retry_safe',
                                                          '"get_paymnt", retry_safe'),
     'expect.endpoint = "get_paymnt" must be one of'),
    ("expect of the wrong kind", lambda text: text.replace("attempts = 3 }", "attempts = '3' }"),
     'expect.attempts = "3" must be an integer'),
    ("cite not on the path", lambda text: text.replace('cite = "refunds"', 'cite = "Refunds"'),
     "cite 'Refunds'"),
    ("cite URL not on the hosts", lambda text: text.replace(
        'url = "https://docs.example.com/api/{doc}"', 'url = "https://www.example.com/api/{doc}"'),
     "is not an approved source"),
    ("path without doc group", lambda text: text.replace("(?P<doc>[a-z-]+)", "([a-z-]+)"),
     "group (?P<doc>...)"),
    ("path not a regex", lambda text: text.replace("(?P<doc>[a-z-]+)", "(?P<doc>[a-z-]+"),
     "not a valid regular expression"),
    ("duplicate case ids", lambda text: text.replace('id = "money-back"', 'id = "status-check"'),
     "repeats an earlier case"),
    ("empty question", lambda text: text.replace(
        '"Ticket: the customer returned the goods; give their money back for pay_2."', '"  "'),
     "question must be non-empty text"),
    ("general that fails", lambda text: text.replace('general = ["errors"]',
                                                     'general = ["Errors"]'),
     "sources.general 'Errors'"),
    ("general not a list", lambda text: text.replace('general = ["errors"]',
                                                     'general = "errors"'),
     "sources.general must be a list of documents"),
    ("question over 16 KiB", lambda text: text.replace(
        '"Ticket: the shop wants', '"' + "x" * (16 << 10) + ' wants'), "more than 16 KiB"),
    ("instructions over 64 KiB", lambda text: text.replace(
        'instructions = """', 'instructions = """' + "y" * (64 << 10)), "more than 64 KiB"),
    ("no instructions", lambda text: text.split('instructions = """')[0] + text.split(
        '"""', 2)[2], "has no instructions"),
]


class BadSuiteFileTest(Harness):
    def run_suite(self, text, name="bad.toml", mode="w"):
        path = self.path(name)
        with open(path, mode) as handle:
            handle.write(text)
        return self.main("--suite", path)

    def assert_refused(self, result, words):
        code, output, errors = result
        self.assertEqual(code, 2, errors)
        self.assertIn(words, errors)
        self.assertEqual(len(errors.strip().splitlines()), 1, errors)
        self.assertEqual(self.state["requests"], [])
        self.assertFalse(os.path.exists(self.out))

    def test_the_small_suite_itself_runs(self):
        self.state = simulated_api.new_state(small_suite())
        code, _, errors = self.main("--suite", self.write("small.toml", SMALL), "--models", "m1")
        self.assertEqual(code, 0, errors)

    def test_each_bad_file_is_refused_naming_the_file_and_the_key(self):
        for name, change, words in BAD:
            with self.subTest(name):
                refused = self.run_suite(change(SMALL))
                self.assert_refused(refused, words)
                self.assertIn("bad.toml", refused[2])

    def test_a_file_that_is_not_utf8_is_refused(self):
        self.assert_refused(self.run_suite(b"name = '\xff'\n", mode="wb"), "is not UTF-8")

    def test_a_file_over_16_mib_is_refused(self):
        with mock.patch.object(suites, "MAX_SUITE_BYTES", len(SMALL) - 1):
            self.assert_refused(self.run_suite(SMALL), "is more than")
        with mock.patch.object(suites, "MAX_SUITE_BYTES", len(SMALL)):  # at the limit: read
            self.assertEqual(suites.read_suite(self.path("bad.toml")), small_suite())

    def test_over_10000_cases_are_refused(self):
        with mock.patch.object(suites, "MAX_CASES", 1):
            self.assert_refused(self.run_suite(SMALL), "has 2 cases, more than 1")

    def test_a_fifo_is_refused_without_waiting_for_a_writer(self):
        fifo = self.path("suite.toml")
        os.mkfifo(fifo)
        self.assert_refused(self.main("--suite", fifo),
                            f"--suite {fifo} is not a regular file")

    def test_a_missing_file_and_a_folder_are_refused(self):
        self.assert_refused(self.main("--suite", self.path("none.toml")), "cannot read")
        self.assert_refused(self.main("--suite", self.folder), "is a folder")

    def test_suite_with_cases_is_a_usage_error(self):
        with self.assertRaises(SystemExit) as stop:
            quiet(regression.main, ["--suite", SUPPORT_SUITE, "--cases", "x.json"])
        self.assertEqual(stop.exception.code, 2)

    def test_resume_and_regrade_take_the_suite_from_the_record(self):
        for mode in ("--resume", "--regrade"):
            with self.subTest(mode), self.assertRaises(SystemExit) as stop:
                quiet(regression.main, [mode, self.out, "--suite", SUPPORT_SUITE])
            self.assertEqual(stop.exception.code, 2)


class ShippedSuitesTest(unittest.TestCase):
    def test_instructions_state_every_field_value_and_host_and_restate_no_case(self):
        for path in SHIPPED:
            suite = suites.read_suite(path)
            text = suite["instructions"]
            for name, kind in suite["answer"].items():
                for word in [name, *kind.get("enum", [])]:
                    with self.subTest(path=path, word=word):
                        self.assertIn(word, text)
            for host in suite["sources"]["hosts"]:
                with self.subTest(path=path, host=host):
                    self.assertIn(host, text)
            for case in suite["cases"]:
                with self.subTest(path=path, case=case["id"]):
                    for line in filter(str.strip, case["question"].splitlines()):
                        self.assertNotIn(line, text)

    def test_the_built_in_instructions_restate_no_case_by_example(self):
        self.assertNotIn("timed out", checker.INSTRUCTIONS)
        self.assertNotIn('"429")', checker.INSTRUCTIONS)


class SuiteRunTest(Harness):
    unsafe_models = ("offline/hasty",)

    def use(self, path):
        """A new simulated API answering the suite at path, its ids its own (as
        two servers' are): records made before and after it share none."""
        suite = suites.read_suite(path)
        used = getattr(self, "servers", 0) + 1
        self.state = simulated_api.new_state(suite, unsafe_models=self.unsafe_models)
        self.state["id_prefix"], self.servers = f"server{used}", used
        return suite

    def first_support_cases(self, count):
        """The support suite cut to its first count cases, written in the test's
        folder: its instructions, answer, sources and search budget whole."""
        parts = read_text(SUPPORT_SUITE).split("\n[[cases]]")
        self.assertGreater(len(parts), count + 1)
        return self.write("support.toml", "\n[[cases]]".join(parts[:count + 1]))

    def test_the_http_suite_file_sends_the_built_in_requests_and_gives_its_verdicts(self):
        built_in = self.main("--models", "m1", "offline/hasty")
        requests = list(self.state["requests"])
        first = self.record()
        os.remove(self.out)
        self.use(HTTP_SUITE)
        from_file = self.main("--models", "m1", "offline/hasty", "--suite", HTTP_SUITE)
        second = self.record()
        self.assertEqual(built_in[0], 1)
        self.assertEqual(from_file[0], 1)
        self.assertEqual(len(requests), 8)
        self.assertEqual(requests, self.state["requests"])
        self.assertEqual(first["config"], second["config"])
        self.assertEqual([row["reasons"] for row in first["runs"]],
                         [row["reasons"] for row in second["runs"]])
        self.assertEqual(first["suite_sha256"], second["suite_sha256"])

    def test_the_support_suite_runs_and_catches_the_guarded_decision(self):
        suite = self.use(SUPPORT_SUITE)
        code, output, _ = self.main("--suite", SUPPORT_SUITE, "--models", "m1", "offline/hasty",
                                    "--junit", self.path("j.xml"), "--html", self.path("p.html"))
        self.assertEqual(code, 1)
        saved = self.record()
        failing = [(row["model"], row["case_id"], row["reasons"]) for row in saved["runs"]
                   if not row["passed"]]
        self.assertEqual(failing, [("offline/hasty", suite["cases"][-1]["id"],
                                    ["wrong_decision"])])
        self.assertEqual(saved["suite"], suite)
        self.assertEqual(saved["suite_sha256"], suites.suite_sha256(suite))
        self.assertEqual(saved["config"]["cases"], suite["cases"])
        self.assertEqual(saved["config"]["response_format"], suites.format_of(suite))
        junit = read_text(self.path("j.xml"))
        self.assertIn(suite["cases"][-1]["id"], junit)
        self.assertIn("support-escalation.toml", junit)
        page = read_text(self.path("p.html"))
        self.assertIn("refund via", page)
        self.assertIn("suite <strong>support-escalation</strong>", page)
        self.assertIn("360012668071", page)
        self.assertIn("<code>wrong_decision</code>: decision differs from the approved value",
                      page)
        self.assertNotIn("RFC", page)  # the built-in domain's words are not this suite's

    def test_a_suite_record_is_regraded_and_resumed_without_the_suite_file(self):
        self.use(SUPPORT_SUITE)
        # Two repeats: a regrade and a resume keep the saved order of each.
        self.main("--suite", SUPPORT_SUITE, "--models", "m1", "--repeats", "2")
        saved = self.record()
        saved["runs"] = saved["runs"][:3]  # an interrupted run
        os.chmod(self.out, 0o600)
        write_text(self.out, json.dumps(saved))
        code, _, errors = self.main("--resume", self.out, out=False)
        self.assertEqual(code, 0, errors)
        self.assertEqual(len(self.record()["runs"]), 12)  # the suite's 6 cases, twice
        code, _, errors = self.main("--regrade", self.out, "--out", self.path("re.json"),
                                    out=False)
        self.assertEqual(code, 0, errors)
        self.assertEqual(read_json(self.path("re.json"))["suite"], saved["suite"])

    def test_a_suite_record_edited_after_it_was_saved_is_refused(self):
        self.use(SUPPORT_SUITE)
        self.main("--suite", SUPPORT_SUITE, "--models", "m1")
        saved = self.record()
        table = [
            ("an expect edited", lambda r: r["suite"]["cases"][0]["expect"].update(
                decision="escalate")),
            ("the hash edited", lambda r: r.update(suite_sha256="0" * 64)),
            ("config cases edited", lambda r: r["config"]["cases"][0].update(cite="1")),
        ]
        for name, edit in table:
            with self.subTest(name):
                edited = copy.deepcopy(saved)
                edit(edited)
                path = self.path(f"{name}.json")
                write_text(path, json.dumps(edited))
                with self.assertRaises(ValueError) as refused:
                    record.load(path)
                self.assertIn("edited", str(refused.exception))

    def test_records_of_different_suites_are_not_comparable(self):
        self.use(SUPPORT_SUITE)
        self.main("--suite", SUPPORT_SUITE, "--models", "m1")
        support = self.out
        self.out = self.path("http.json")
        self.state = simulated_api.new_state(checker.CASES)
        self.main("--models", "m1")
        code, output, errors = quiet(compare_runs.main, [support, self.out])
        self.assertEqual(code, 2)
        self.assertIn("different suites", output + errors)
        self.assertIn("support-escalation", output + errors)
        self.assertIn("http-failures", output + errors)

    def test_each_difference_of_two_suites_is_named(self):
        def saved(suite):
            return {"suite": suite, "suite_sha256": suites.suite_sha256(suite),
                    "config": {"cases": suites.record_cases(suite)}}

        def changed(change):
            suite = small_suite()
            change(suite)
            return suite

        extra = {**small_suite()["cases"][0], "id": "extra", "question": "Another ticket."}
        table = [
            (lambda s: s["answer"].update(note={"type": "integer"}), "the answer's fields"),
            (lambda s: s["sources"]["general"].append("limits"), "the approved sources"),
            (lambda s: s["cases"].append(extra), "cases added: extra"),
            (lambda s: s["cases"].pop(), "cases removed: money-back"),
            (lambda s: s["cases"][0].update(cite="payments"), "cite changed: status-check"),
            (lambda s: s["cases"][0].update(question="Q?"), "question changed: status-check"),
            (lambda s: s["cases"][0]["expect"].update(attempts=4),
             "expect changed: status-check"),
            (lambda s: s["cases"].reverse(), "case order changed"),
        ]
        for change, words in table:
            with self.subTest(words):
                problem = compare_runs.suite_problem(saved(small_suite()), saved(changed(change)))
                self.assertIn(f"(BEFORE integration, AFTER integration): {words}", problem)
        self.assertIsNone(compare_runs.suite_problem(saved(small_suite()), saved(small_suite())))

    def test_an_expect_changed_within_a_suite_is_named(self):
        support = self.first_support_cases(3)  # the third is ios-purchase
        self.use(support)
        self.main("--suite", support, "--models", "m1")
        text = read_text(support).replace(
            'refund_via = "ios_app_store"', 'refund_via = "none"', 1)
        self.assertIn('refund_via = "none"', text)
        changed = self.write("changed.toml", text)
        before = self.out
        self.out = self.path("after.json")
        self.use(changed)
        self.main("--suite", changed, "--models", "m1")
        code, output, errors = quiet(compare_runs.main, [before, self.out])
        self.assertEqual(code, 2)
        self.assertIn("expect changed: ios-purchase", output + errors)

    def test_the_built_in_and_the_http_suite_file_compare(self):
        self.main("--models", "m1")
        built_in = self.out
        self.out = self.path("file.json")
        self.use(HTTP_SUITE)
        self.main("--models", "m1", "--suite", HTTP_SUITE)
        code, output, errors = quiet(compare_runs.main, [built_in, self.out])
        self.assertEqual(code, 0, output + errors)

    def test_a_record_made_before_suites_reads_as_the_built_in_suite(self):
        self.main("--models", "m1", "--out", self.path("first.json"), out=False)
        saved = self.record(self.path("first.json"))
        del saved["suite"], saved["suite_sha256"]
        old = self.write("old.json", json.dumps(saved))
        self.main("--models", "m1")  # a later run, of the built-in suite
        code, output, errors = quiet(compare_runs.main, [old, self.out])
        self.assertEqual(code, 0, output + errors)

    def test_a_proof_and_a_batch_run_on_a_suite(self):
        support = self.first_support_cases(2)  # two proofs at once, each 5 requests
        self.assertEqual(len(self.use(support)["cases"]), 2)
        for patcher in (mock.patch.object(batching, "FIRST_POLL_SECONDS", 0),
                        mock.patch.object(batching, "MAX_POLL_SECONDS", 0)):
            patcher.start()  # no real-time wait between the batch's polls
            self.addCleanup(patcher.stop)
        code, _, errors = self.main("--suite", support, "--models", "m1",
                                    "--prove", "0.5", "--jobs", "4")
        self.assertEqual(code, 0, errors)
        self.assertEqual(len(self.record()["runs"]), 2 * 5)
        self.out = self.path("batch.json")
        code, _, errors = self.main("--suite", support, "--models", "m1", "--batch")
        self.assertEqual(code, 0, errors)
        self.assertEqual(len(self.record()["runs"]), 2)


if __name__ == "__main__":
    unittest.main()
