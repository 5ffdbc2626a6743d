"""Suites: a whole domain in one TOML file, read, checked and turned into requests.

A suite declares what makes a domain: the instructions, the JSON answer's
fields (exact values, one field of citations), the approved sources (hosts, a
path pattern naming the document, its canonical URL, general documents), the
search budget, and the cases. The runner builds its request from a suite and
the checker (checker.judge_answer) judges every answer by it:

    python regression.py --suite examples/suites/support-escalation.toml --plan
    python regression.py --suite examples/suites/support-escalation.toml --out run.json

    suite = read_suite("my-suite.toml")      # ValueError naming the file and the key
    tool, answer_format = tool_of(suite), format_of(suite)
    suite_sha256(suite)                      # the parts that judge: answer, sources, cases

Without --suite the runner runs the built-in suite (checker.BUILTIN_SUITE),
whose cases keep the published shape in records (record_cases). Pure: no SDK,
no network; read_suite reads one file.
"""

import hashlib
import json
import os
import re
import stat
import tomllib

import checker
from vocabulary import UserError

MAX_SUITE_BYTES = 16 << 20  # a suite of 10,000 cases of a page each fits; more is no suite
MAX_CASES = 10_000  # cases in one suite: each is a paid request per model and repeat
MAX_QUESTION_BYTES = 16 << 10  # one case's text: a ticket or a log excerpt, not a book
MAX_INSTRUCTIONS_BYTES = 64 << 10  # the instructions are a page of rules
MAX_NAME_CHARS = 64  # a suite's name, shown in every view
MAX_SEARCH_TOKENS = 1_000_000  # far above any budget the API takes per request
CASE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")  # safe in lines, XML, Markdown
SUITE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")  # same: it names files and views
FIELD_NAME = re.compile(r"[a-z][a-z0-9_]{0,39}")
SCHEMA_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")  # what a JSON schema name may be
HOST = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,62}\.)*[A-Za-z0-9-]{1,63}")
DEFAULT_SCHEMA_NAME = "Answer"
TOP_KEYS = ("name", "instructions", "models", "schema_name", "answer", "sources", "search",
            "cases")
SOURCE_KEYS = ("url", "hosts", "path", "general")
SEARCH_KEYS = ("domains", "max_tokens", "max_tokens_per_page")
CASE_KEYS = ("id", "question", "expect", "cite")
SCHEMA_TYPES = {"string": "string", "integer": "integer", "boolean": "boolean"}

# --------------------------------------------------------------------------
# Pure: validating a suite, and what is built from one.
# --------------------------------------------------------------------------


class SuiteError(UserError):
    """A suite that cannot be run; the message names the file and the key."""


def unknown_keys(table, allowed, where, source):
    """SuiteError naming the first key of table that is not allowed."""
    if not isinstance(table, dict):
        raise SuiteError(f"{source}: {where} must be a table")
    unknown = sorted(set(table) - set(allowed), key=str)
    if unknown:
        raise SuiteError(f"{source}: {where} has the unknown key {str(unknown[0])[:40]!r}; "
                         f"it takes {', '.join(allowed)}")


def text_of(value, where, source, limit):
    """A non-empty, UTF-8-encodable string of at most limit bytes, or SuiteError."""
    if not isinstance(value, str) or not value.strip():
        raise SuiteError(f"{source}: {where} must be non-empty text")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise SuiteError(f"{source}: {where} is not UTF-8 text (a lone surrogate)") from None
    if size > limit:
        raise SuiteError(f"{source}: {where} is {size:,} bytes, more than {limit >> 10} KiB")
    return value


def field_kind(name, kind, source):
    """SuiteError unless kind is one field's kind: a type, an enum, or citations."""
    where = f"answer.{name}"
    if not FIELD_NAME.fullmatch(name):
        raise SuiteError(f"{source}: answer field {name[:40]!r} must match "
                         "[a-z][a-z0-9_]{0,39}")
    if not isinstance(kind, dict) or len(kind) != 1:
        extra = sorted(set(kind) - {"type", "enum", "citations"}) if isinstance(kind, dict) else []
        raise SuiteError(f"{source}: {where} "
                         + (f"has the unknown key {extra[0]!r}; " if extra else "")
                         + "a field kind is exactly one of type = \"string\" | \"integer\" | "
                         "\"boolean\", enum = [distinct strings], or citations = true (every "
                         "field is required)")
    (key, value), = kind.items()
    if key == "type" and value in checker.KINDS:
        return
    if key == "enum" and isinstance(value, list) and value and all(
            isinstance(item, str) and item for item in value) and len(set(value)) == len(value):
        return
    if key == "citations" and value is True:
        return
    raise SuiteError(f"{source}: {where}: {key} = {toml_text(value)} is not a field kind; "
                     "use type = \"string\" | \"integer\" | \"boolean\", enum = [distinct "
                     "strings], or citations = true")


def toml_text(value):
    """A value as a suite's TOML spells it (true, "text", 3), cut to 40 characters."""
    text = json.dumps(value, ensure_ascii=False) if isinstance(value, (bool, str, int, float,
                                                                        list)) else str(value)
    return text if len(text) <= 40 else text[:39] + "…"


def value_fits(kind, value):
    """Whether an expected value is of its field's kind (and in its enum)."""
    if "enum" in kind:
        return value in kind["enum"]
    wanted = checker.KINDS[kind["type"]]
    return isinstance(value, wanted) and (wanted is bool or not isinstance(value, bool))


def check_sources(sources, source):
    """SuiteError unless sources holds a canonical URL, hosts, a path pattern
    with a `doc` group and general documents."""
    unknown_keys(sources, SOURCE_KEYS, "[sources]", source)
    for key in ("url", "hosts", "path"):
        if key not in sources:
            raise SuiteError(f"{source}: [sources] needs {key}")
    url, hosts, path = sources["url"], sources["hosts"], sources["path"]
    if not isinstance(url, str) or url.count("{doc}") != 1 or not url.startswith("https://"):
        raise SuiteError(f"{source}: sources.url must be an https URL holding {{doc}} once, "
                         "e.g. \"https://help.example.com/articles/{doc}\"")
    if (not isinstance(hosts, list) or not hosts
            or not all(isinstance(h, str) and HOST.fullmatch(h) for h in hosts)):
        raise SuiteError(f"{source}: sources.hosts must be a non-empty list of host names")
    try:
        pattern = re.compile(path) if isinstance(path, str) else None
    except re.error as exc:
        raise SuiteError(f"{source}: sources.path is not a valid regular expression "
                         f"({exc})") from None
    if pattern is None or "doc" not in pattern.groupindex:
        raise SuiteError(f"{source}: sources.path must be a regular expression with a "
                         "group (?P<doc>...) that names the document")
    general = sources.get("general", [])
    if not isinstance(general, list):
        raise SuiteError(f"{source}: sources.general must be a list of documents")
    for doc in general:
        problem = document_problem(sources, doc)
        if problem:
            raise SuiteError(f"{source}: sources.general {str(doc)[:40]!r}: {problem}")


def document_problem(sources, doc):
    """Why a document name does not round-trip: its canonical URL must be on a
    host of the suite and its path must name the same document; or None."""
    if not isinstance(doc, str) or not doc or not doc.isprintable():
        return "must be a document name"
    url = sources["url"].replace("{doc}", doc)
    found = checker.document({**sources, "hosts": sources["hosts"]}, url)
    if found != doc:
        return (f"its canonical URL {url[:120]} is not an approved source that names "
                f"{doc[:40]} (https, a host in sources.hosts, a path matching "
                "sources.path whose doc group is the document)")
    return None


def check_search(search, hosts, source):
    """The search budget with its defaults filled in, or SuiteError."""
    unknown_keys(search, SEARCH_KEYS, "[search]", source)
    domains = search.get("domains", hosts)
    if (not isinstance(domains, list) or not domains
            or not all(isinstance(d, str) and HOST.fullmatch(d) for d in domains)):
        raise SuiteError(f"{source}: search.domains must be a non-empty list of host names")
    budget = {"domains": domains}
    for key, default in (("max_tokens", checker.SEARCH_TOKENS),
                         ("max_tokens_per_page", checker.SEARCH_TOKENS_PER_PAGE)):
        value = search.get(key, default)
        if type(value) is not int or not 1 <= value <= MAX_SEARCH_TOKENS:
            raise SuiteError(f"{source}: search.{key} must be a whole number of tokens, "
                             f"1..{MAX_SEARCH_TOKENS:,}")
        budget[key] = value
    return budget


def check_case(number, case, answer, sources, source, builtin):
    """SuiteError naming the case and the key at fault, or None."""
    where = f"case {number}"
    if isinstance(case, dict) and isinstance(case.get("id"), str) and CASE_ID.fullmatch(
            case["id"]):
        where += f" ({case['id']})"
    unknown_keys(case, CASE_KEYS, where, source)
    for key in CASE_KEYS:
        if key not in case:
            raise SuiteError(f"{source}: {where} needs {key}")
    if not isinstance(case["id"], str) or not CASE_ID.fullmatch(case["id"]):
        raise SuiteError(f"{source}: {where}: id must be letters, digits, . _ - "
                         "(at most 64, starting with a letter or digit)")
    text_of(case["question"], f"{where}: question", source, MAX_QUESTION_BYTES)
    expect = case["expect"]
    if not isinstance(expect, dict):
        raise SuiteError(f"{source}: {where}: expect must be a table of answer fields")
    for name, value in expect.items():
        kind = answer.get(name)
        if kind is None or kind.get("citations"):
            plain = [n for n, k in answer.items() if not k.get("citations")]
            raise SuiteError(f"{source}: {where}: expect names {str(name)[:40]!r}, which is "
                             f"not an exact-value field of [answer] ({', '.join(plain)})")
        if not value_fits(kind, value):
            wanted = ("one of " + ", ".join(kind["enum"]) if "enum" in kind
                      else {"integer": "an integer"}.get(kind["type"], f"a {kind['type']}"))
            raise SuiteError(f"{source}: {where}: expect.{name} = {toml_text(value)} must "
                             f"be {wanted}")
    if builtin and set(expect) != {"code", "next_action"}:
        raise SuiteError(f"{source}: {where}: a case of the built-in domain expects both "
                         "code and next_action")
    problem = document_problem(sources, case["cite"])
    if problem:
        raise SuiteError(f"{source}: {where}: cite {str(case['cite'])[:40]!r}: {problem}")


def validate_suite(data, source):
    """The suite in data (parsed TOML, or a record's saved suite) with its
    defaults filled in, or SuiteError naming source and the key at fault."""
    unknown_keys(data, TOP_KEYS, "the top level", source)
    for key in ("name", "answer", "sources", "cases"):
        if key not in data:
            raise SuiteError(f"{source}: needs {key} (a suite has name, [answer], "
                             "[sources] and [[cases]])")
    name = data["name"]
    if not isinstance(name, str) or not SUITE_NAME.fullmatch(name):
        raise SuiteError(f"{source}: name must be letters, digits, . _ - (at most "
                         f"{MAX_NAME_CHARS}), e.g. \"support-escalation\"")
    instructions = data.get("instructions")
    if instructions is not None:
        text_of(instructions, "instructions", source, MAX_INSTRUCTIONS_BYTES)
    models = data.get("models")
    if models is not None and (not isinstance(models, list) or not models or not all(
            isinstance(m, str) and m.strip() == m and m and m.isprintable()
            and len(m) <= 200 for m in models) or len(set(models)) != len(models)):
        raise SuiteError(f"{source}: models must be a non-empty list of distinct model names")
    schema_name = data.get("schema_name", DEFAULT_SCHEMA_NAME)
    if not isinstance(schema_name, str) or not SCHEMA_NAME.fullmatch(schema_name):
        raise SuiteError(f"{source}: schema_name must be 1..64 letters, digits, _ or -")
    answer = data["answer"]
    if not isinstance(answer, dict) or not answer:
        raise SuiteError(f"{source}: [answer] must list the answer's fields")
    for field, kind in answer.items():
        field_kind(field, kind, source)
    cited = [field for field, kind in answer.items() if kind.get("citations")]
    if len(cited) != 1:
        raise SuiteError(f"{source}: [answer] must have exactly one field with "
                         f"citations = true, has {len(cited)}")
    sources = data["sources"]
    check_sources(sources, source)
    sources = {"url": sources["url"], "hosts": sources["hosts"], "path": sources["path"],
               "general": sources.get("general", [])}
    search = check_search(data.get("search", {}), sources["hosts"], source)
    cases = data["cases"]
    if not isinstance(cases, list) or not cases:
        raise SuiteError(f"{source}: needs at least one [[cases]] table")
    if len(cases) > MAX_CASES:
        raise SuiteError(f"{source}: has {len(cases):,} cases, more than {MAX_CASES:,}")
    builtin = answer == checker.BUILTIN_SUITE["answer"] and (
        sources == checker.BUILTIN_SUITE["sources"])
    seen = set()
    for number, case in enumerate(cases, 1):
        check_case(number, case, answer, sources, source, builtin)
        if case["id"] in seen:
            raise SuiteError(f"{source}: case {number}: id {case['id']} repeats an "
                             "earlier case")
        seen.add(case["id"])
    suite = {"name": name}
    if instructions is not None:
        suite["instructions"] = instructions
    if models is not None:
        suite["models"] = models
    suite.update({"schema_name": schema_name, "answer": answer, "sources": sources,
                  "search": search,
                  "cases": [{key: case[key] for key in CASE_KEYS} for case in cases]})
    return suite


def suite_sha256(suite):
    """The hash of what judges: the answer's fields in order, the sources and
    the cases. Instructions, models and the search budget are in config."""
    judging = {"answer": [[name, kind] for name, kind in suite["answer"].items()],
               "sources": suite["sources"], "cases": suite["cases"]}
    text = json.dumps(judging, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def record_cases(suite):
    """The cases as a record's config.cases holds them: the published shape for
    the built-in domain (so its config stays as published), else the suite's."""
    if not checker.is_builtin_domain(suite):
        return suite["cases"]
    return [{"id": case["id"], "expected": case["expect"]["code"], "rfc": case["cite"],
             "action": case["expect"]["next_action"], "question": case["question"]}
            for case in suite["cases"]]


def format_of(suite):
    """The response_format: a JSON schema of exactly the suite's answer fields."""
    properties = {}
    for name, kind in suite["answer"].items():
        if kind.get("citations"):
            properties[name] = {"type": "array", "items": {"type": "string"}}
        elif "enum" in kind:
            properties[name] = {"type": "string", "enum": list(kind["enum"])}
        else:
            properties[name] = {"type": SCHEMA_TYPES[kind["type"]]}
    return {"type": "json_schema",
            "json_schema": {"name": suite["schema_name"],
                            "schema": {"type": "object", "properties": properties,
                                       "required": list(suite["answer"]),
                                       "additionalProperties": False}}}


def tool_of(suite):
    """The web_search tool: the suite's domain filter and search budget in tokens."""
    search = suite["search"]
    return {"type": "web_search", "max_tokens": search["max_tokens"],
            "max_tokens_per_page": search["max_tokens_per_page"],
            "filters": {"search_domain_filter": list(search["domains"])}}


def with_cases(suite, cases):
    """The suite with other cases (published or suite shape): --cases."""
    return {**suite, "cases": [checker.suite_case(case) for case in cases]}


# --------------------------------------------------------------------------
# I/O: one suite file.
# --------------------------------------------------------------------------


def read_suite(path):
    """The suite in a TOML file, validated; SuiteError naming the file and the key."""
    if os.path.isdir(path):
        raise SuiteError(f"--suite {path} is a folder; give a .toml file")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO must not hang us
        with os.fdopen(fd, "rb") as handle:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise SuiteError(f"--suite {path} is not a regular file")
            data = handle.read(MAX_SUITE_BYTES + 1)
    except OSError as exc:
        raise SuiteError(f"cannot read --suite {path}: {exc.strerror or exc}") from None
    if len(data) > MAX_SUITE_BYTES:
        raise SuiteError(f"{path}: is more than {MAX_SUITE_BYTES >> 20} MiB; a suite is "
                         "at most that")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SuiteError(f"{path}: is not UTF-8 text (byte {exc.start})") from None
    try:
        parsed = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SuiteError(f"{path}: is not valid TOML ({exc})") from None
    suite = validate_suite(parsed, path)
    problem = file_problem(suite)
    if problem:
        raise SuiteError(f"{path}: {problem}")
    return suite


def file_problem(suite):
    """What a suite file may not say although a saved suite may (records keep
    what they were made with): a model name holding a comma, a general document
    twice, a case that expects nothing, one question in two cases; or None."""
    comma = next((model for model in suite.get("models") or () if "," in model), None)
    if comma is not None:
        return (f"models: {comma!r} holds a comma; give each model as its own string: "
                + ", ".join(json.dumps(part) for part in comma.split(",") if part))
    general = suite["sources"]["general"]
    twice = next((doc for number, doc in enumerate(general) if doc in general[:number]), None)
    if twice is not None:
        return f"sources.general names {toml_text(twice)} twice; give each document once"
    for number, case in enumerate(suite["cases"], 1):
        if not case["expect"]:
            return (f"case {number} ({case['id']}): expect is empty, so the case guards no "
                    "decision; give the approved value of at least one answer field")
    return repeated_question(suite["cases"])


def repeated_question(cases):
    """Why two cases cannot both be asked (one question twice: a model sees the
    same input, so no answer can meet two expects), or None. Checked where a
    file is read, not in records: a record keeps the cases it was made with."""
    first = {}
    for number, case in enumerate(cases, 1):
        earlier = first.setdefault(case["question"], (number, case["id"]))
        if earlier[0] != number:
            return (f"case {number} ({case['id']}) asks the same question as case "
                    f"{earlier[0]} ({earlier[1]}); give each case its own question")
    return None
