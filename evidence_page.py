"""The evidence page: one self-contained HTML file for a run or a comparison.

Pure functions turn a saved record (or two) into a page a reviewer can open
from a CI artifact: the verdict first, then every answer with its receipts.
Nothing on the page loads anything: inline CSS, no script, and a
Content-Security-Policy that forbids every fetch, so a hostile answer escaped
wrongly would still be inert. Every string from a record is escaped.

    import evidence_page
    page = evidence_page.run_page(record)
    page = evidence_page.comparison_page(before, after, items, cautions, files)

The rows it shows are the callers' validated rows, whose verdicts were
derived from their saved responses by the checker; each citation's facts
(returned by this request's search, approved, the primary RFC) come from the
checker's own citation_facts(), so the page can never judge a citation
differently from the verdict. It imports neither the runner nor the SDK.
"""

import html
import json
import math
import urllib.parse

import checker
import suites
import record
import reports  # the one set of control characters, and the mark of our pages
from vocabulary import BY_CONCERN as LABELS  # changes first
from vocabulary import GATING, MEANINGS, NEW_FAILURE, PASS, RECOVERED, p_text

SNIPPET_CHARS = 300  # characters of a search snippet shown before "full text"
MAX_SHOWN_CHARS = 20_000  # characters of one value on the page; the record keeps all
MAX_RESULTS_SHOWN = 50  # search results listed per row; the API returns at most 5
FULL_PASSING_ROWS = 1  # passing rows of a (case, model) shown in full: one example
FULL_FAILING_ROWS = 25  # failing rows of a (case, model) shown in full; more are listed
# in brief, so a page of 10,000 rows stays a page a browser opens (the record keeps all)
PAGE_FULL_PASSING = 20  # passing examples on a page read from a record: a large suite
PAGE_FULL_FAILING = 250  # has a thousand pairs, and each row in full weighs ~10 KB
MAX_URL_CHARS = 2_048  # longer "URLs" are shown as text, never made links
CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
CITATION_REASONS = {"missing_or_duplicate_sources", "citation_not_in_search_results",
                    "citation_not_approved", "primary_reference_missing"}
REASONS = {
    "response_not_completed": "the API did not report the run as completed",
    "search_not_observed": "no search results came back, so the answer has no receipts",
    "invalid_json": "the answer is not JSON",
    "invalid_answer_shape": "not exactly code, next_action, source_urls with the right types",
    "wrong_code": "the status code differs from the approved one",
    "wrong_next_action": "the action differs from the approved one (on ambiguous-payment "
                         "this is the dangerous one: a retry can charge twice)",
    "missing_or_duplicate_sources": "no citation, or one RFC cited twice",
    "citation_not_in_search_results": "a cited document was not returned by this "
                                      "request's search",
    "citation_not_approved": "a cited RFC is neither the case's RFC nor RFC 9110",
    "primary_reference_missing": "the case's own RFC is not cited",
    "answered_by_other_model": "the response names another model than the one asked: "
                               "the router answered with a different model",
    "execution_error": "the request or checker failed, no verdict",
}
SUITE_REASONS = {  # the reasons whose built-in words name RFCs, for any other suite
    "missing_or_duplicate_sources": "no citation, or one document cited twice",
    "citation_not_approved": "a cited document is neither the case's own nor one of the "
                             "suite's general documents",
    "primary_reference_missing": "the case's own document is not cited",
}
LABEL_KINDS = {NEW_FAILURE: "fail", "WORSE": "fail", RECOVERED: "pass", "BETTER": "flaky",
               "STILL_FAILING": "flaky", PASS: "pass"}  # the colour of each label
EXIT_WORDS = {
    0: ("QUALIFIED", "every check passed (exit 0)"),
    1: ("REGRESSION", "a check failed (exit 1)"),
    2: ("NO VERDICT", "the run is incomplete or hit an execution error (exit 2)"),
}
# Tables scroll in their own box and long words wrap, so a 400 px phone screen
# shows every column of a page, never a cut-off one.
STYLE = """
:root{--pass:#1a7f37;--pass-bg:#dafbe1;--fail:#cf222e;--fail-bg:#ffebe9;
--flaky:#9a6700;--flaky-bg:#fff8c5;--line:#d0d7de;--muted:#57606a;--soft:#f6f8fa}
*{box-sizing:border-box}
body{font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1f2328;
margin:0 auto;padding:20px 28px 60px;max-width:1400px;background:#fff;
overflow-wrap:break-word}
h1{font-size:1.6em;margin:0 0 4px}h2{font-size:1.2em;margin:28px 0 10px;
border-bottom:1px solid var(--line);padding-bottom:4px}h3{font-size:1em;margin:12px 0 6px}
.meta{color:var(--muted);margin:0 0 12px}.meta code{font-size:.9em}
.banner{background:var(--flaky-bg);border:2px solid var(--flaky);color:#4d2d00;
padding:8px 12px;border-radius:6px;font-weight:600}
.verdict{font-size:1.15em;padding:10px 14px;border-radius:6px;border:1px solid}
table{border-collapse:collapse;margin:6px 0 12px;display:block;max-width:100%;
overflow-x:auto}
th,td{border:1px solid var(--line);padding:4px 9px;text-align:left;vertical-align:top}
th{background:var(--soft);font-weight:600}
.grid td{text-align:center;font-weight:600;min-width:120px}
.grid td a{color:inherit;text-decoration:none;display:block}
.pass:not(details){color:var(--pass);background:var(--pass-bg);border-color:var(--pass)}
.fail:not(details){color:var(--fail);background:var(--fail-bg);border-color:var(--fail)}
.flaky:not(details){color:var(--flaky);background:var(--flaky-bg);border-color:var(--flaky)}
summary strong.pass,summary strong.fail,summary strong.flaky{padding:0 6px;border-radius:4px}
.none{color:var(--muted)}
.error{color:var(--fail);font-weight:600}
.tag{display:inline-block;padding:0 7px;border-radius:10px;font-size:.8em;font-weight:600;
border:1px solid;margin:1px 3px 1px 0;white-space:nowrap}
.tag.no{color:var(--fail);background:var(--fail-bg)}
.tag.ok{color:var(--pass);background:var(--pass-bg)}
.tag.info{color:var(--muted);background:var(--soft)}
.tag.changed{color:#8250df;background:#fbefff}
details{border:1px solid var(--line);border-radius:6px;margin:6px 0;background:#fff}
details>summary{cursor:pointer;padding:6px 10px;background:var(--soft);border-radius:6px}
details[open]>summary{border-bottom:1px solid var(--line);border-radius:6px 6px 0 0}
details.group.fail{border-left:5px solid var(--fail)}
details.group.flaky{border-left:5px solid var(--flaky)}
details.group.pass{border-left:5px solid var(--pass)}
.body{padding:6px 12px 10px}
details details{margin:6px 0}details details>summary{background:#fff}
details.row.fail>summary{background:var(--fail-bg)}
pre{white-space:pre-wrap;word-break:break-word;background:var(--soft);padding:8px 10px;
border-radius:6px;margin:4px 0;font-size:.88em}
a{color:#0969da;word-break:break-all}.url{word-break:break-all;font-family:monospace}
code,.mono{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
.ctl{background:#ffd8b5;color:#7a2e00;border-radius:3px;font-family:monospace;padding:0 2px}
ul.plain{list-style:none;padding:0;margin:4px 0}ul.plain>li{margin:4px 0}
.results li{border-top:1px dashed var(--line);padding-top:4px}
.snippet{color:#424a53;font-size:.92em}
.pair{display:grid;grid-template-columns:minmax(0,1fr);gap:14px}
.cell.wrong{background:var(--fail-bg);color:var(--fail);font-weight:600}
.cell.changed{outline:2px solid #8250df;outline-offset:-2px}
.small{font-size:.85em;color:var(--muted)}
@media (max-width:900px){body{padding:12px}}
"""


# --------------------------------------------------------------------------
# Safe text: everything from a record goes through esc() or link().
# --------------------------------------------------------------------------


def as_text(value):
    """Any JSON value as text: strings as they are, the rest as JSON."""
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        return repr(type(value))


def esc(value, limit=MAX_SHOWN_CHARS):
    """HTML-escaped text with invisible characters made visible, capped."""
    text = as_text(value)
    note = ""
    if len(text) > limit:
        note = f" [first {limit:,} of {len(text):,} characters shown; the record keeps all]"
        text = text[:limit]
    escaped = html.escape(text, quote=True)
    if reports.CONTROL.search(escaped):
        escaped = reports.CONTROL.sub(visible_code, escaped)
    return escaped + note


def visible_code(match):
    return f'<span class="ctl">{reports.control_code(match)}</span>'


def web_url(url):
    """True for a plain http(s) URL a reader may follow; anything else is text."""
    if not isinstance(url, str) or len(url) > MAX_URL_CHARS:
        return False
    if reports.CONTROL.search(url) or any(char.isspace() for char in url):
        return False
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return False
    return parts.scheme.lower() in ("http", "https") and bool(parts.netloc)


def link(url, text=None):
    """A link for a web URL, plain text for anything else (javascript:, data:).

    text replaces the URL as the visible words: the comparison's narrow
    columns name the RFC; the run page always shows the whole URL.
    """
    if web_url(url):
        safe = html.escape(url, quote=True)
        return f'<a href="{safe}" rel="noreferrer noopener">{esc(text) if text else safe}</a>'
    return f'<span class="url">{esc(url)}</span>'


def tag(text, kind):
    """A small badge; text and kind come from this module, never a record."""
    return f'<span class="tag {kind}">{text}</span>'


def number(value, digits=2):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "—" if value is None else esc(value)
    return f"{value:.{digits}f}" if math.isfinite(value) else esc(str(value))


def cost(value):
    return "unknown" if value is None else f"{esc(value)} USD"


def page(title, body):
    return (
        f"{reports.HTML_START}\n"  # first: only a file that begins so is replaced
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">\n'
        '<meta name="referrer" content="no-referrer">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{esc(title)}</title>\n<style>{STYLE}</style></head>\n"
        f"<body>\n<h1>{esc(title)}</h1>\n{body}\n</body></html>\n"
    )


# --------------------------------------------------------------------------
# Reading untrusted records: every accessor tolerates any type.
# --------------------------------------------------------------------------


def field(value, key, default=None):
    return value.get(key, default) if isinstance(value, dict) else default


def listed(value):
    return value if isinstance(value, list) else []


def page_suite(record):
    """The suite a record's rows were judged by (record.load checked its hash);
    the built-in suite for a record that has none, or a broken one."""
    saved = field(record, "suite")
    if isinstance(saved, dict):
        try:
            return suites.validate_suite(saved, "the record's suite")
        except ValueError:
            pass  # the page still shows such a record, judged as the built-in domain
    return checker.BUILTIN_SUITE


def page_case(case):
    """A case of the config as a suite states it (id, question, expect, cite);
    the parts that are missing or malformed are left empty."""
    if isinstance(case.get("expect"), dict):
        return {"id": case["id"], "question": case.get("question"),
                "expect": case["expect"], "cite": case.get("cite")}
    expect = {name: case[key] for name, key in (("code", "expected"), ("next_action", "action"))
              if key in case}
    return {"id": case["id"], "question": case.get("question"), "expect": expect,
            "cite": case.get("rfc")}


def config_cases(record):
    """{case id: case in the suite's shape} in config order; anything malformed
    is skipped."""
    cases = {}
    for case in listed(field(field(record, "config"), "cases")):
        if isinstance(case, dict) and isinstance(case.get("id"), str):
            cases.setdefault(case["id"], page_case(case))
    return cases


def plain_fields(suite):
    """The answer fields judged by exact value, in the suite's order."""
    return [name for name, kind in suite["answer"].items() if not kind.get("citations")]


def is_chat(row):
    model = field(row, "model")
    return isinstance(model, str) and model.startswith("chat:")


def search_results(row):
    """The search results of a row's response, as [{url, title, snippet}].

    An Agent API response keeps them in `output` items of type
    search_results; a chat response at the top level, or only as
    `citations` when search_results is absent (the same rule as the checker).
    """
    response = field(row, "response")
    if is_chat(row):
        if field(response, "search_results") is not None:
            return [r for r in listed(response["search_results"]) if isinstance(r, dict)]
        return [{"url": url} for url in listed(field(response, "citations"))]
    found = []
    for item in listed(field(response, "output")):
        if field(item, "type") == "search_results":
            found += [r for r in listed(item.get("results")) if isinstance(r, dict)]
    return found


def response_status(row):
    response = field(row, "response")
    if is_chat(row):
        choices = listed(field(response, "choices"))
        return f"finish_reason {as_text(field(choices[0] if choices else None, 'finish_reason'))}"
    return as_text(field(response, "status"))


def parse_answer(text):
    """The answer as a dict, or None when it is not a JSON object."""
    if not isinstance(text, str):
        return None
    try:
        value = checker.parse_answer(text)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def document(suite, url):
    return checker.document(suite["sources"], url) if isinstance(url, str) else None


def plural_rows(count):
    return f"{count:,} row{'' if count == 1 else 's'}"


def number_like(value):
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value) and 0 <= value <= 1)


def passed(row):
    return field(row, "passed") is True


def rate(rows):
    return sum(1 for row in rows if passed(row)), len(rows)


def rate_class(good, runs):
    if not runs:
        return "none"
    return "pass" if good == runs else "fail" if good == 0 else "flaky"


def rate_text(good, runs):
    if not runs:
        return "not run"
    return f"{good}/{runs}" + (" FLAKY" if 0 < good < runs else "")


def repeat_key(row):
    repeat = field(row, "repeat")
    return repeat if isinstance(repeat, int) and not isinstance(repeat, bool) else 1 << 62


# --------------------------------------------------------------------------
# One row: the answer, its citations, the search results, the reasons.
# --------------------------------------------------------------------------


def citation_marks(url, suite, case, searched, cited_docs):
    """Badges for one cited URL: the checker's own facts about it."""
    facts = checker.citation_facts(suite, case or {"expect": {}, "cite": None}, url, searched)
    doc = facts["document"]
    if doc is None:
        marks = [tag("not a recognised document URL of this suite's sources", "no")]
    elif facts["returned"]:
        marks = [tag("returned by this request's search", "ok")]
    else:
        marks = [tag("NOT returned by this request's search", "no")]
    if doc is not None and cited_docs.count(doc) > 1:
        marks.append(tag("cited twice", "no"))
    marks.append(tag("approved", "ok") if facts["approved"] else tag("NOT approved", "no"))
    marks.append(tag("the case's own document", "ok") if facts["primary"]
                 else tag("not the case's own document", "info"))
    label = f'<span class="mono">{esc(doc)}</span> ' if doc else ""
    return f'<li class="cite">{link(url)} {label}{" ".join(marks)}</li>'


def expected_cell(value, expected):
    if expected is None:
        return esc(value)
    if value == expected:
        return f"<code>{esc(value)}</code> {tag('as approved', 'ok')}"
    return (f"<code>{esc(value)}</code> {tag('differs', 'no')} "
            f'<span class="small">approved: <code>{esc(expected)}</code></span>')


def answer_html(row, suite, case, searched):
    """The answer field by field in the suite's order, each exact value against
    the approved one, each citation with the checker's facts about it."""
    text = field(row, "answer_text")
    answer = parse_answer(text)
    if answer is None:
        why = "no answer text" if text is None else "not a JSON object; the raw text"
        return f"<h3>Answer ({why})</h3>" + ("" if text is None else f"<pre>{esc(text)}</pre>")
    expect = field(case, "expect", {})
    parts = ["<h3>Answer</h3><table>"]
    for name, kind in suite["answer"].items():
        if kind.get("citations"):
            urls = listed(answer.get(name))
            docs = [document(suite, url) for url in urls]
            cell = '<ul class="plain cites">' + ("".join(
                citation_marks(url, suite, case, searched, docs) for url in urls)
                or "<li>none</li>") + "</ul>"
            name = f"{name} (cited)"
        else:
            cell = expected_cell(answer.get(name), expect.get(name))
        parts.append(f"<tr><th>{esc(name.replace('_', ' '))}</th><td>{cell}</td></tr>")
    parts.append("</table>")
    if not checker.shape_ok(suite, answer, expect):
        parts.append(f"<p>Raw answer text (not the approved shape):</p><pre>{esc(text)}</pre>")
    return "".join(parts)


def snippet_html(snippet):
    text = as_text(snippet)
    if len(text) <= SNIPPET_CHARS:
        return f'<div class="snippet">{esc(text)}</div>' if text else ""
    return (f'<div class="snippet">{esc(text[:SNIPPET_CHARS])}… '
            f'<span class="small">({len(text):,} characters in full)</span></div>'
            f"<details><summary>full text ({len(text):,} characters)</summary>"
            f'<div class="body snippet">{esc(text)}</div></details>')


def results_html(results, suite):
    if not results:
        return "<h3>Search results</h3><p>none: this answer has no receipts</p>"
    items = []
    for result in results[:MAX_RESULTS_SHOWN]:
        doc = document(suite, result.get("url"))
        title = as_text(result.get("title")) or "(no title)"
        items.append(f"<li><strong>{esc(title)}</strong> "
                     + (f'<span class="mono">{esc(doc)}</span>' if doc else "")
                     + f"<br>{link(result.get('url'))}{snippet_html(result.get('snippet'))}</li>")
    more = len(results) - MAX_RESULTS_SHOWN
    tail = f"<p>{more:,} more results not shown; the record keeps all.</p>" if more > 0 else ""
    return (f"<h3>Search results ({len(results)})</h3>"
            f'<ul class="plain results">{"".join(items)}</ul>{tail}')


def reason_meaning(reason, suite):
    """What a reason means, in the words of the suite's own fields and documents
    (the built-in domain keeps its own), or None for a reason not known."""
    if not isinstance(reason, str):
        return None
    if checker.is_builtin_domain(suite):
        return REASONS.get(reason)
    if reason == "invalid_answer_shape":
        return (f"not exactly {', '.join(suite['answer'])} with the right kinds (an enum "
                "field the case does not expect: one of its values)")
    if reason.startswith("wrong_") and reason[len("wrong_"):] in suite["answer"]:
        return f"{reason[len('wrong_'):].replace('_', ' ')} differs from the approved value"
    return SUITE_REASONS.get(reason) or REASONS.get(reason)


def reasons_html(reasons, suite):
    if not reasons:
        return ""
    items = []
    for reason in reasons:
        meaning = reason_meaning(reason, suite)
        items.append(f"<li><code>{esc(reason)}</code>: "
                     + (meaning or "an unknown reason (not one this page knows)") + "</li>")
    return f"<h3>Why it failed</h3><ul>{''.join(items)}</ul>"


def facts_html(row):
    facts = [("status", esc(response_status(row)) or "—"),
             ("cost", cost(field(row, "cost_usd"))),
             ("seconds", number(field(row, "seconds"))),
             ("attempts", esc(field(row, "attempts")) or "—"),
             ("waited seconds", number(field(row, "waited_seconds")))]
    batch = field(row, "batch")
    if isinstance(batch, dict):  # answered in a batch of the Batch API: its receipts
        facts.append(("batch", " · ".join(f"<code>{esc(field(batch, name))}</code>"
                                          for name in ("id", "custom_id", "request_id")
                                          if field(batch, name) is not None) or "—"))
    table = ("<table><tr>" + "".join(f"<th>{name}</th>" for name, _ in facts) + "</tr><tr>"
             + "".join(f"<td>{value}</td>" for _, value in facts) + "</tr></table>")
    if field(row, "error") is None and field(row, "error_message") is None:
        return table
    status = field(row, "error_status")
    return (f'{table}<p class="error">Error: {esc(field(row, "error"))}'
            + (f" (HTTP {esc(status)})" if status is not None else "")
            + f'</p><pre>{esc(field(row, "error_message"))}</pre>')


def answered_by(row):
    """" · answered by X" when the response names another model than the one asked."""
    named, model = field(row, "answered_model"), field(row, "model")
    if not isinstance(named, str) or not isinstance(model, str) or checker.same_model(model,
                                                                                    named):
        return ""
    return f" · answered by <code>{esc(named)}</code>"


def row_html(row, suite, case):
    """One row in a <details>: open when it failed, collapsed when it passed."""
    results = search_results(row)
    searched = {document(suite, r.get("url")) for r in results} - {None}
    reasons = listed(field(row, "reasons"))
    ok = passed(row)
    kind = "pass" if ok else "flaky" if field(row, "error") else "fail"  # no verdict: amber
    verdict = ("PASS" if ok else f"NO VERDICT ({esc(field(row, 'error'))})" if kind == "flaky"
               else "FAIL " + ", ".join(esc(r) for r in reasons))
    return (f'<details class="row {kind}"{"" if ok else " open"}>'
            f"<summary>repeat {esc(field(row, 'repeat'))} · "
            f'<strong class="{kind}">{verdict}</strong>{answered_by(row)}'
            f'</summary><div class="body">{reasons_html(reasons, suite)}'
            f"{answer_html(row, suite, case, searched)}{facts_html(row)}"
            f"{results_html(results, suite)}</div></details>")


# --------------------------------------------------------------------------
# The run page.
# --------------------------------------------------------------------------


def grouped(record):
    """([(case id, model, rows)], case ids, models): by case, then model.

    Config order first; a case or model seen only in rows comes after, so no
    row is ever left off the page.
    """
    config = field(record, "config")
    case_ids = list(config_cases(record))
    models = [m for m in listed(field(config, "models")) if isinstance(m, str)]
    groups = {}
    for row in listed(field(record, "runs")):
        key = (as_text(field(row, "case_id")), as_text(field(row, "model")))
        groups.setdefault(key, []).append(row)
        for name, known in zip(key, (case_ids, models)):
            if name not in known:
                known.append(name)
    ordered = [(c, m, groups[(c, m)]) for c in case_ids for m in models if (c, m) in groups]
    return ordered, case_ids, models


def verdict_html(record):
    """The run's verdict in plain words, then one line per model."""
    summary = field(record, "summary")
    code = field(summary, "exit_code")
    if not isinstance(code, int) or isinstance(code, bool) or code not in EXIT_WORDS:
        code = None  # also keeps an unhashable value out of the lookups
    headline, words = EXIT_WORDS.get(code, ("NO VERDICT", "the record has no exit code"))
    stats = field(summary, "models")
    stats = stats if isinstance(stats, dict) else {}
    failed = [esc(m) for m, entry in stats.items() if field(entry, "qualified") is False]
    if failed:
        words += "; not qualified: " + ", ".join(f"<code>{m}</code>" for m in failed)
    complete = field(summary, "complete")
    state = ("The run is complete." if complete is True
             else "The run is INCOMPLETE: some planned rows are missing." if complete is False
             else "Completeness unknown.")
    kind = {0: "pass", 1: "fail"}.get(code, "flaky")
    return (f'<p class="verdict {kind}"><strong>Verdict: {headline}</strong>: {words}. '
            f"{state}</p>{models_table(record, stats)}")


def models_table(record, stats):
    models = [m for m in listed(field(field(record, "config"), "models")) if isinstance(m, str)]
    models += [m for m in stats if m not in models]
    rows = []
    for model in models:
        entry = field(stats, model)
        qualified = field(entry, "qualified")
        mark = (tag("yes", "ok") if qualified is True else tag("NO", "no") if qualified is False
                else tag("unknown", "info"))
        rows.append(f"<tr><td><code>{esc(model)}</code></td><td>{mark}</td>"
                    f"<td>{esc(field(entry, 'passed'))}/{esc(field(entry, 'total'))}</td>"
                    f"<td>{cost(field(entry, 'reported_cost_usd'))}</td></tr>")
    return ("<table><tr><th>model</th><th>qualified</th><th>passed/total</th>"
            f"<th>reported cost</th></tr>{''.join(rows)}</table>")


def meta_html(record):
    config = field(record, "config")
    sha = as_text(field(record, "code_sha256"))[:12]
    judged = as_text(field(record, "checker_sha256"))[:12] or "(not recorded)"
    source = field(record, "regraded_from")
    regrade = ("" if not isinstance(source, dict) else
               f'<p class="banner">A REGRADE: the saved responses of '
               f"<code>{esc(field(source, 'path'))}</code> (made "
               f"{esc(field(source, 'created_at'))}) judged again by this checker; "
               "nothing was sent.</p>")
    prove, runs = field(config, "prove"), field(config, "repeats")
    allowed = field(prove, "allow_failures", 0)
    proof = ("" if not isinstance(prove, dict) or not number_like(field(prove, "rate"))
             or not number_like(field(prove, "confidence")) or type(runs) is not int
             or type(allowed) is not int else
             f'<p class="banner">A PROOF: each (model, case) ran one request at a time until '
             f"its plan decided it: qualified at {runs - allowed} passes of at most {runs} "
             f"requests, not qualified at {allowed + 1} failures, proving a pass rate of at "
             f"least {checker.given_percent(prove['rate'])} % at "
             f"{checker.given_percent(prove['confidence'])} % confidence.</p>")
    return (f'{regrade}{proof}<p class="meta">suite '
            f'<strong>{esc(page_suite(record)["name"])}</strong> · '
            f'created {esc(field(record, "created_at"))} · '
            f"repeats {esc(field(config, 'repeats'))} · "
            f"{plural_rows(len(listed(field(record, 'runs'))))} · "
            f"SDK {esc(field(record, 'sdk_version'))} · "
            f"regression.py <code>{esc(sha)}</code> · "
            f"checker.py <code>{esc(judged)}</code> · "
            f"evidence {esc(field(record, 'evidence', 'live'))}</p>")


def synthetic_banner(*records):
    if any(field(record, "evidence") == "synthetic" for record in records):
        return ('<p class="banner">SYNTHETIC evidence: demo data from a simulated API, '
                "not answers from a live model.</p>")
    return ""


def grid_html(groups, case_ids, models, summary=None):
    """The case x model grid of pass rates, each with the rate its passes prove."""
    by_key = {(c, m): rows for c, m, rows in groups}
    anchors = {(c, m): f"g{index}" for index, (c, m, _) in enumerate(groups)}
    head = "".join(f"<th><code>{esc(m)}</code></th>" for m in models)
    lines = []
    for case_id in case_ids:
        cells = []
        for model in models:
            good, runs = rate(by_key.get((case_id, model), []))
            text = rate_text(good, runs)
            stats = field(field(field(field(summary, "models"), model), "cases"), case_id)
            lower, confidence = field(stats, "lower_bound"), field(stats, "confidence")
            if runs and number_like(lower) and number_like(confidence):
                text += f'<br><span class="small">{esc(checker.bound_text(lower, confidence))}</span>'
            if (case_id, model) in anchors:
                text = f'<a href="#{anchors[(case_id, model)]}">{text}</a>'
            cells.append(f'<td class="{rate_class(good, runs)}">{text}</td>')
        lines.append(f"<tr><th><code>{esc(case_id)}</code></th>{''.join(cells)}</tr>")
    return (f'<h2>Pass rates: case × model</h2><table class="grid"><tr><th>case</th>{head}</tr>'
            f"{''.join(lines)}</table>")


def case_html(case):
    if not case:
        return "<p>This case is not in the record's config.</p>"
    approved = " · ".join(f"{esc(name.replace('_', ' '))} <code>{esc(value)}</code>"
                          for name, value in case["expect"].items())
    return (f"<p><strong>Approved</strong>: {approved or 'no exact values'} · its own document "
            f"<code>{esc(case.get('cite'))}</code></p>"
            f"<p>Question (what the model sees):</p><pre>{esc(case.get('question'))}</pre>")


def group_html(index, case_id, model, rows, suite, case):
    """One (case, model): failing rows in full, one passing row in full as an
    example, and every other row in brief, one line each."""
    good, runs = rate(rows)
    kind = rate_class(good, runs)
    if kind == "fail" and all(field(row, "error") for row in rows if not passed(row)):
        kind = "flaky"  # nothing failed a check: the rows that did not pass have no verdict
    failing = sorted((row for row in rows if not passed(row)), key=repeat_key)
    passing = sorted((row for row in rows if passed(row)), key=repeat_key)
    # Only a whole row is shown in full: a light one (record.light) has no receipts.
    full = ([row for row in failing if not field(row, "light")][:FULL_FAILING_ROWS]
            + [row for row in passing if not field(row, "light")][:FULL_PASSING_ROWS])
    brief = [row for row in failing + passing if not any(row is shown for shown in full)]
    body = "".join(row_html(row, suite, case) for row in full) + brief_html(brief, suite)
    return (f'<details class="group {kind}" id="g{index}"{"" if kind == "pass" else " open"}>'
            f"<summary><code>{esc(case_id)}</code> · <code>{esc(model)}</code> · "
            f'<strong class="{kind}">{rate_text(good, runs)}</strong></summary>'
            f'<div class="body">{case_html(case)}{body}</div></details>')


class Shown:
    """record.load's keep for a run page: as a record is read in saved order
    (each pair's repeats in order), the rows the page shows in full stay whole:
    the first FULL_FAILING_ROWS failing and FULL_PASSING_ROWS passing of each
    (case, model), at most PAGE_FULL_FAILING and PAGE_FULL_PASSING in all. The
    rest are kept light, as their brief lines need them: reuse {key: light
    row} spares a second copy of rows the caller holds light already."""

    def __init__(self, reuse=None):
        self.counts, self.reuse = {}, reuse or {}

    def __call__(self, row, suite):
        ok = passed(row)
        pair, everywhere = (row["model"], row["case_id"], ok), ok
        if (self.counts.get(pair, 0) < (FULL_PASSING_ROWS if ok else FULL_FAILING_ROWS)
                and self.counts.get(everywhere, 0) < (PAGE_FULL_PASSING if ok
                                                      else PAGE_FULL_FAILING)):
            for key in (pair, everywhere):
                self.counts[key] = self.counts.get(key, 0) + 1
            return row
        kept = self.reuse.get((row["model"], row["case_id"], row["repeat"]))
        light = record.light(row, suite)
        return kept if kept is not None and kept == light else light


def brief_html(rows, suite):
    """Rows in brief: verdict, answer, cited and returned documents, cost, seconds."""
    if not rows:
        return ""
    plain, cited_field = plain_fields(suite), checker.citations_field(suite)
    lines = []
    for row in rows:
        answer = parse_answer(field(row, "answer_text")) or {}
        cited = sorted({as_text(document(suite, url) or url)
                        for url in listed(answer.get(cited_field))})
        returned = row["returned"] if field(row, "light") else sorted(
            {doc for doc in (document(suite, r.get("url")) for r in search_results(row))
             if doc})
        ok = passed(row)
        verdict = "PASS" if ok else "FAIL " + ", ".join(esc(r) for r in
                                                       listed(field(row, "reasons")))
        values = "".join(f"<td>{esc(answer.get(name))}</td>" for name in plain)
        lines.append(f"<tr><td>{esc(field(row, 'repeat'))}</td>"
                     f'<td class="{"pass" if ok else "fail"}">{verdict}</td>{values}'
                     f"<td>{esc(', '.join(cited))}</td><td>{esc(', '.join(returned))}</td>"
                     f"<td>{cost(field(row, 'cost_usd'))}</td>"
                     f"<td>{number(field(row, 'seconds'))}</td></tr>")
    heads = "".join(f"<th>{esc(name.replace('_', ' '))}</th>" for name in plain)
    return (f"<details><summary>{len(rows):,} more row{'' if len(rows) == 1 else 's'} in brief "
            "(the record keeps each "
            f"whole response)</summary><table><tr><th>repeat</th><th>verdict</th>{heads}"
            "<th>cited</th><th>search returned</th><th>cost</th>"
            f"<th>seconds</th></tr>{''.join(lines)}</table></details>")


def run_page(record, title=None):
    """The whole HTML page of one saved run (a validated record)."""
    groups, case_ids, models = grouped(record)
    cases, suite = config_cases(record), page_suite(record)
    failing = [(i, g) for i, g in enumerate(groups) if rate(g[2])[0] < len(g[2])]
    passing = [(i, g) for i, g in enumerate(groups) if rate(g[2])[0] == len(g[2])]
    sections = []
    for heading, chosen in (("Failing", failing), ("Passing", passing)):
        if chosen:
            sections.append(f"<h2>{heading}: {len(chosen)} case × model groups, "
                            f"{sum(len(g[2]) for _, g in chosen):,} rows</h2>")
            sections += [group_html(i, c, m, rows, suite, cases.get(c))
                         for i, (c, m, rows) in chosen]
    if not groups:
        sections.append("<h2>Rows</h2><p>The record holds no rows.</p>")
    body = (synthetic_banner(record) + meta_html(record) + verdict_html(record)
            + grid_html(groups, case_ids, models, field(record, "summary"))
            + "".join(sections))
    return page(title or "Agent regression run", body)


# --------------------------------------------------------------------------
# The comparison page.
# --------------------------------------------------------------------------


def sources_key(suite, answer):
    """Cited documents, order-free; an unrecognised URL stands for itself."""
    urls = listed(field(answer, checker.citations_field(suite)))
    return sorted(as_text(document(suite, url) or url) for url in urls)


def compare_cell(value, first, approved):
    """One table cell: red when it differs from the approved value (None: not
    known), outlined when it changed from before's first repeat."""
    classes = ["cell"]
    notes = []
    if approved is not None and value != approved:
        classes.append("wrong")
        notes.append(f'<span class="small">approved: {esc(approved)}</span>')
    if value != first:
        classes.append("changed")
        notes.append(tag("changed", "changed"))
    notes = "".join(" " + note for note in notes)
    return f'<td class="{" ".join(classes)}"><code>{esc(value)}</code>{notes}</td>'


def answer_cells(row, first, suite, case):
    """The exact values and the sources of one repeat, compared with before's first."""
    text = field(row, "answer_text")
    answer = parse_answer(text)
    plain = plain_fields(suite)
    if answer is None:
        shown = ("no answer" if text is None
                 else f"not a JSON object: <code>{esc(text, SNIPPET_CHARS)}</code>")
        return f'<td class="cell wrong" colspan="{len(plain) + 1}">{shown}</td>'
    reasons = {r for r in listed(field(row, "reasons")) if isinstance(r, str)}
    sources = "<br>".join(link(url, document(suite, url)) for url in listed(
        answer.get(checker.citations_field(suite)))) or "none"
    same_sources = sources_key(suite, answer) == sources_key(suite, first)
    source_class = "cell wrong" if reasons & CITATION_REASONS else "cell"
    expect = field(case, "expect", {})
    return ("".join(compare_cell(answer.get(name), field(first, name), expect.get(name))
                    for name in plain)
            + f'<td class="{source_class}{"" if same_sources else " changed"}">{sources}'
            + ("" if same_sources else " " + tag("changed", "changed")) + "</td>")


def side_html(which, model, rows, first, suite, case, p_value, level=None):
    good, runs = rate(rows)
    p_shown = f" · p={p_text(p_value)}" if isinstance(p_value, (int, float)) and not isinstance(
        p_value, bool) and math.isfinite(p_value) else ""
    lines = []
    for row in sorted(rows, key=repeat_key):
        ok = passed(row)
        reasons = ", ".join(esc(r) for r in listed(field(row, "reasons")))
        lines.append(f"<tr><td>{esc(field(row, 'repeat'))}</td>"
                     f'<td class="{"pass" if ok else "fail"}">{"PASS" if ok else "FAIL"}</td>'
                     f"{answer_cells(row, first, suite, case)}"
                     f'<td class="small">{reasons}</td></tr>')
    proved = (checker.bound_text(checker.lower_bound(good, runs, level), level)
              if runs and number_like(level) else None)
    bound = f' · <span class="small">{esc(proved)}</span>' if proved else ""
    return (f"<div><h3>{which}: <code>{esc(model)}</code> · "
            f'<span class="{rate_class(good, runs)}">{rate_text(good, runs)}</span>{p_shown}'
            f"{bound}</h3>"
            "<table><tr><th>repeat</th><th>verdict</th>"
            + "".join(f"<th>{esc(name.replace('_', ' '))}</th>" for name in plain_fields(suite))
            + f"<th>sources</th><th>reasons</th></tr>{''.join(lines)}</table></div>")


def models_text(item):
    old, new = field(item, "before_model"), field(item, "after_model")
    return esc(old) if old == new else f"{esc(old)} → {esc(new)}"


def item_html(item, suite, cases):
    label = as_text(field(item, "label"))
    before_rows = [r for r in listed(field(item, "before")) if isinstance(r, dict)]
    after_rows = [r for r in listed(field(item, "after")) if isinstance(r, dict)]
    case = cases.get(as_text(field(item, "case_id")))
    ordered = sorted(before_rows, key=repeat_key)
    first = parse_answer(field(ordered[0], "answer_text")) if ordered else None
    old, new = field(item, "before_model"), field(item, "after_model")
    good_b, runs_b = rate(before_rows)
    good_a, runs_a = rate(after_rows)
    kind = LABEL_KINDS.get(label, "flaky")
    p_value = field(item, "p_value")
    levels = field(item, "before_confidence", field(item, "confidence")), field(item, "confidence")
    return (f'<details class="group {kind}"{" open" if label in GATING else ""}>'
            f'<summary><strong class="{kind}">{esc(label)}</strong> · '
            f"<code>{esc(field(item, 'case_id'))}</code> · <code>{models_text(item)}</code> · "
            f"{rate_text(good_b, runs_b)} → {rate_text(good_a, runs_a)}</summary>"
            f'<div class="body"><details><summary>The case</summary><div class="body">'
            f'{case_html(case)}</div></details><div class="pair">'
            f"{side_html('Before', old, before_rows, first, suite, case, None, levels[0])}"
            f"{side_html('After', new, after_rows, first, suite, case, p_value, levels[1])}"
            "</div></div></details>")


def counts_html(items, cautions):
    counts = {label: 0 for label in LABELS}
    for item in items:
        label = as_text(field(item, "label"))
        if label in counts:
            counts[label] += 1
    rows = "".join(f'<tr><td class="{LABEL_KINDS[label] if counts[label] else "none"}">'
                   f"<strong>{label}</strong></td><td>{counts[label]}</td>"
                   f"<td>{MEANINGS[label]}</td></tr>" for label in LABELS)
    fell = sum(counts[label] for label in GATING)
    verdict = (f'<p class="verdict fail"><strong>Verdict:</strong> {fell} pass rate'
               f'{" fell" if fell == 1 else "s fell"} (NEW_FAILURE or WORSE): the change '
               "broke an approved decision (exit 1).</p>"
               if fell else '<p class="verdict pass"><strong>Verdict:</strong> '
               "no pass rate fell (exit 0).</p>")
    notes = "".join(f'<p class="banner">{esc(line)}</p>' for line in cautions)
    return (f"{verdict}{notes}<table><tr><th>label</th><th>items</th><th>meaning</th></tr>"
            f"{rows}</table>")


def runs_html(before, after):
    lines = []
    for which, record in (("Before", before), ("After", after)):
        sha = as_text(field(record, "code_sha256"))[:12]
        lines.append(f"<tr><th>{which}</th><td>{esc(field(record, 'created_at'))}</td>"
                     f"<td>{esc(field(record, 'sdk_version'))}</td>"
                     f"<td><code>{esc(sha)}</code></td>"
                     f"<td>{esc(field(record, 'evidence', 'live'))}</td></tr>")
    old = field(field(before, "config"), "instructions")
    new = field(field(after, "config"), "instructions")
    changed = "changed" if old != new else "unchanged"
    return (f'<p class="meta">suite <strong>{esc(page_suite(after)["name"])}</strong></p>'
            "<table><tr><th>run</th><th>created</th><th>SDK</th><th>regression.py</th>"
            f"<th>evidence</th></tr>{''.join(lines)}</table>"
            f"<details><summary>Instructions ({changed})</summary><div class=\"pair body\">"
            f"<div><h3>Before</h3><pre>{esc(old)}</pre></div>"
            f"<div><h3>After</h3><pre>{esc(new)}</pre></div></div></details>")


def pass_table(items):
    rows = "".join(f"<tr><td><code>{esc(field(item, 'case_id'))}</code></td>"
                   f"<td><code>{models_text(item)}</code></td>"
                   f"<td>{rate_text(*rate(listed(field(item, 'before'))))}</td>"
                   f"<td>{rate_text(*rate(listed(field(item, 'after'))))}</td></tr>"
                   for item in items)
    return (f"<details><summary>PASS: {len(items)} items passed both times</summary>"
            '<div class="body"><table><tr><th>case</th><th>model</th><th>before</th>'
            f"<th>after</th></tr>{rows}</table></div></details>")


def comparison_page(before, after, items, cautions, files=None, title=None):
    """The whole HTML page of a comparison of two validated records; files: the
    line that names the files compared."""
    items = [item for item in listed(items) if isinstance(item, dict)]
    cautions = listed(cautions)
    cases = config_cases(before)
    cases.update(config_cases(after))
    suite = page_suite(after)
    sections = []
    for label in LABELS:
        chosen = [item for item in items if field(item, "label") == label]
        if chosen and label != PASS:
            sections.append(f"<h2>{label}: {len(chosen)}</h2>")
            sections += [item_html(item, suite, cases) for item in chosen]
    others = [item for item in items if field(item, "label") not in LABELS]
    if others:
        sections.append(f"<h2>Other labels: {len(others)}</h2>")
        sections += [item_html(item, suite, cases) for item in others]
    passing = [item for item in items if field(item, "label") == "PASS"]
    if passing:
        sections.append("<h2>PASS</h2>" + pass_table(passing))
    named = f'<p class="meta">{esc(files)}</p>' if files else ""
    body = (synthetic_banner(before, after) + named + counts_html(items, cautions)
            + runs_html(before, after) + "".join(sections))
    return page(title or "Agent regression comparison", body)
