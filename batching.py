"""Large suites on the provider's own batch engine: regression.py --batch.

The Batch API (files and batches endpoints, in OpenAI's shape) runs Agent API
requests itself, web search included, outside the request rate limit, and
answers within 24 hours. --batch turns the plan into its input file, one JSONL
line per row:

    {"custom_id": "row-17", "method": "POST", "url": "/v1/responses", "body": {...}}

where 17 is the row's place in the saved order and the body is exactly what a
--foreground run sends for it. Each step is saved in the record's `batch`
before the next one starts:

    plan      the rows in parts of at most PART_LINES lines and PART_BYTES bytes
    upload    client.files.create: the part's input_file_id
    create    client.batches.create with an Idempotency-Key derived from the
              record and the part: a create sent again after a crash returns
              the batch the first one made, never a second batch
    wait      poll every batch until it ends, with a progress line
    collect   download its output and error files into temporary files, then
              make the rows in the saved order, with the same checker

A signal or a crash at any step leaves a record that --resume carries on from
the step it reached; it never submits a part again. The rows that a failed,
expired or cancelled batch did not answer are saved as execution errors, which
--resume then sends directly.

The whole flow lives here: run_batch submits, waits and collects, and each row
is made by batch_row and judged by the runner's own judge (run.ask.judge).
"""

import contextlib
import functools
import hashlib
import json
import re
import tempfile
import time

import record
import runs
import wire
from checker import answer_text
from sending import MESSAGE_LIMIT, redact, warn
from vocabulary import UserError

PART_LINES = 50_000  # the Batch API's most lines in one input file
PART_BYTES = 16 << 20  # the API takes 200 MB, but the SDK reads an upload whole:
                       # parts this size keep a 10,000-row run's memory flat
FIRST_POLL_SECONDS = 0.2  # then doubling: a small batch is collected within seconds
MAX_POLL_SECONDS = 60.0  # a batch may take hours; a poll a minute is plenty
POLL_FAILURES = 5  # polls in a row that may fail (a network blip) before the run stops
TERMINAL = ("completed", "failed", "expired", "cancelled")
ENDED_WITHOUT = {  # a batch's end -> the error of a row it never answered
    "completed": "BatchRowMissing",
    "failed": "BatchFailed",
    "expired": "BatchExpired",
    "cancelled": "BatchCancelled",
}
ENDPOINT = "/v1/responses"
CUSTOM_ID = re.compile(r"row-(0|[1-9][0-9]{0,8})")
COPY_BYTES = 1 << 20  # a downloaded file is copied to disk this much at a time
BATCH_SAVE_ROWS = 500  # collected rows between saves: a batch's files stay 30 days, so a
                       # crash mid-collection costs a download again, never an answer


# --------------------------------------------------------------------------
# Pure: lines, parts, keys.
# --------------------------------------------------------------------------


def custom_id(index):
    return f"row-{index}"


def row_index(name):
    """The plan index a line's custom_id names, or None."""
    match = CUSTOM_ID.fullmatch(name) if isinstance(name, str) else None
    return int(match.group(1)) if match else None


def input_line(index, body):
    """One line of an input file: the request of the row at plan index."""
    return (json.dumps({"custom_id": custom_id(index), "method": "POST", "url": ENDPOINT,
                        "body": body}, allow_nan=False) + "\n").encode()


def parts_of(sizes, lines=None, limit=None):
    """[{"start", "stop"}]: consecutive plan indexes cut into parts of at most
    `lines` lines and `limit` bytes (PART_LINES, PART_BYTES unless given).
    sizes: [(index, bytes of its line)]."""
    lines, limit = lines or PART_LINES, limit or PART_BYTES
    parts = []
    for index, size in sizes:
        part = parts[-1] if parts else None
        if (part is None or index != part["stop"] or part["stop"] - part["start"] >= lines
                or part["bytes"] + size > limit):
            parts.append({"start": index, "stop": index + 1, "bytes": size})
        else:
            part["stop"], part["bytes"] = index + 1, part["bytes"] + size
    return [{"start": part["start"], "stop": part["stop"], "input_file_id": None,
             "batch_id": None, "status": None, "collected": False, "counts": {}}
            for part in parts]


def idempotency_key(created_at, part):
    """The same key for the same part of the same record, whichever process sends it."""
    digest = hashlib.sha256(f"{created_at}|{part['start']}|{part['stop']}".encode())
    return "regression-" + digest.hexdigest()[:40]


def metadata(created_at, part):
    """What a batch says of itself: the run it belongs to (its record's
    created_at) and its part of the plan (rows start-stop)."""
    return {"run": created_at, "part": f"{part['start']}-{part['stop']}"}


def foreign_problem(batch, created_at, part):
    """Why a batch the API returns is not this part of this run, or None."""
    found = batch.get("metadata") if isinstance(batch, dict) else None
    if found != metadata(created_at, part):
        said = (f"names run {str(found.get('run'))[:40]} part {str(found.get('part'))[:20]}"
                if isinstance(found, dict) else "names no run")
        return (f"batch {str(batch.get('id'))[:80]} {said}, not this record's run "
                f"{created_at} part {part['start']}-{part['stop']}; nothing was collected: "
                "check the record's batch ids, or start a new run")
    return None


def counts_line(parts, total, elapsed):
    """The progress line while waiting: rows answered of the rows submitted."""
    done = sum((part.get("counts") or {}).get("completed", 0) for part in parts)
    failed = sum((part.get("counts") or {}).get("failed", 0) for part in parts)
    statuses = sorted({part["status"] or "submitted" for part in parts})
    return (f"batch: {done} of {total} rows answered" + (f", {failed} failed" if failed else "")
            + f" ({', '.join(statuses)}), {elapsed:.0f}s elapsed")


# --------------------------------------------------------------------------
# I/O: the Files and Batches endpoints, and the downloaded files.
# --------------------------------------------------------------------------


def as_dict(value):
    if isinstance(value, dict):
        return value
    return value.model_dump(mode="json", warnings=False)


def upload(client, data):
    """The id of a new input file holding data (JSONL bytes)."""
    made = client.files.create(file=("regression-batch.jsonl", data, "application/jsonl"),
                               purpose="batch")
    return as_dict(made)["id"]


def create(client, file_id, key, names):
    """The batch made from an input file (the same one for the same key),
    carrying names (metadata) that say which run and part it is."""
    return as_dict(client.batches.create(endpoint=ENDPOINT, input_file_id=file_id,
                                         completion_window="24h", idempotency_key=key,
                                         metadata=names))


def retrieve(client, batch_id):
    return as_dict(client.batches.retrieve(batch_id))


def download(client, file_id):
    """A temporary file (removed when closed) holding the file's content, copied
    to disk piece by piece: an output file may be far larger than one row."""
    handle = tempfile.TemporaryFile()
    try:
        with client.files.with_streaming_response.content(file_id) as response:
            for chunk in response.iter_bytes(COPY_BYTES):
                handle.write(chunk)
    except BaseException:
        handle.close()
        raise
    return handle


def line_places(handle, start, stop):
    """{plan index: (offset, length)} of the lines of a downloaded file of the
    part of rows start..stop-1; a line that names no row is skipped. ValueError
    for a row named twice, or one the part never had: that file is not this
    part's answer."""
    places, offset = {}, 0
    handle.seek(0)
    for line in handle:
        try:
            name = json.loads(line).get("custom_id")
        except (ValueError, AttributeError, RecursionError):
            name = None
        index = row_index(name)
        if index is not None and index in places:
            raise UserError(f"its answers hold {name} twice")
        if index is not None and not start <= index < stop:
            raise UserError(f"its answers hold {name}, a row its part ({start}-{stop}) "
                             "never had")
        if index is not None:
            places[index] = (offset, len(line))
        offset += len(line)
    return places


def line_at(handle, place):
    """The JSON object of one line of a downloaded file."""
    offset, length = place
    handle.seek(offset)
    try:
        line = json.loads(handle.read(length))
    except (ValueError, RecursionError):
        return None
    return line if isinstance(line, dict) else None


# --------------------------------------------------------------------------
# I/O: a run's batch flow, each step saved before the next.
# --------------------------------------------------------------------------


def batch_row(run, index, line, batch):
    """The row of plan index from its line of a batch's output or error file
    (None: the batch ended without it), judged like a direct answer."""
    repeat, case, model = run.entries[index]
    row = {"repeat": repeat, "case_id": case["id"], "model": model, "error": None,
           "error_status": None, "cost_usd": None, "response": None, "answer_text": None,
           "reasons": [], "seconds": None, "passed": False}
    answer = line.get("response") if isinstance(line, dict) else None
    answer = answer if isinstance(answer, dict) else {}
    status, body = answer.get("status_code"), answer.get("body")
    message = None
    if status == 200 and isinstance(body, dict):
        row["response"] = body
        try:
            text = answer_text(model, body)
            row["answer_text"] = "" if text is None else text
            run.ask.judge(row, case, model, run.suite)
        except Exception as exc:  # noqa: BLE001 - every failure becomes evidence
            row.update(error=type(exc).__name__, reasons=["execution_error"])
            message = f"{row['error']} raised while checking the answer"
    else:
        error = (body or {}).get("error") if isinstance(body, dict) else None
        error = error or (line.get("error") if isinstance(line, dict) else None)
        text = error.get("message") if isinstance(error, dict) else None
        if type(status) is not int:  # never run: the batch ended first
            row["error"] = ENDED_WITHOUT.get(batch["status"], "BatchRowMissing")
            text = (f"batch {batch['id']} ended {batch['status']} without an answer for "
                    f"this row{': ' + str(text) if text else ''}")
        else:
            row["error"] = "BatchRequestFailed"
            row["error_status"] = status if type(status) is int else None
        row["reasons"] = ["execution_error"]
        message = redact(str(text or "the batch answered this row with an error"),
                         run.secrets)[:MESSAGE_LIMIT]
    row["passed"] = not row["reasons"]
    row["batch"] = {"id": batch["id"], "custom_id": custom_id(index),
                    "request_id": answer.get("request_id")}
    return wire.settled(row, message, run.secrets)


def api_failures():
    """The errors of a Batch API step that was refused or failed on the way."""
    return (wire.sdk().APIError, wire.sdk().httpx.HTTPError)


def run_batch(run, client, plan, saved, started):
    """Submit what is not submitted yet, wait, and collect each batch as it ends.

    Every step is saved in the record before the next, so --resume carries on
    where a stop left off and never submits a part twice. Raises UserError
    (the record saved) when the Batch API refuses a step.
    """
    parts = run.batch["parts"]
    if not parts:  # planned once, from what is still to do, and saved before any upload
        sizes = ((index, len(batch_line(run, index))) for index, _ in run.todo())
        parts.extend(parts_of(sizes))
        run.checkpoint()
    resume = runs.command_hint("--resume", run.out)
    plan.note = ("Stopping: nothing more is uploaded or submitted; every step done is saved"
                 + ("." if run.demo else f": carry on with: {resume}"))
    if not submitted(run, client, plan, parts, resume) or plan.stopped:
        return
    total = sum(part["stop"] - part["start"] for part in parts)
    print(f"{total} row{'s' if total != 1 else ''} in {len(parts)} "
          f"batch{'es' if len(parts) > 1 else ''} of the "
          f"Batch API ({', '.join(part['batch_id'] for part in parts)}); waiting for the "
          f"answers (within 24 h). Ctrl+C stops the wait, not the batch.", flush=True)
    later = ("it ends with the demo" if run.demo else  # a demo record is never resumed
             f"{run.out} keeps its ids: collect it later with: {resume}")
    plan.note = f"Stopping the wait; the batch runs on, and {later}"
    waited(run, client, plan, saved, started, resume)
    failed = sum(1 for index, row in run.rows.items() if row["error"] and "batch" in row)
    if failed and all(part["collected"] for part in parts):
        warn(f"{failed} row{'s' if failed > 1 else ''} of the batch ended in an execution "
             "error (an error line, or never run: no verdict); "
             + ("run the demo again" if run.demo else f"send them directly with: {resume}"))


def submitted(run, client, plan, parts, resume):
    """Upload and create what is not yet, each step saved; False when a stop came first."""
    for part in parts:
        if part["collected"]:
            continue
        if plan.stopped:
            return False
        try:
            if part["input_file_id"] is None:
                data = b"".join(map(functools.partial(batch_line, run),
                                    range(part["start"], part["stop"])))
                part["input_file_id"] = arrived_id(upload(client, data), run.secrets)
                del data
                run.checkpoint()
            if plan.stopped:
                return False
            if part["batch_id"] is None:
                key = idempotency_key(run.head["created_at"], part)
                part["batch_id"] = arrived_id(create(
                    client, part["input_file_id"], key,
                    metadata(run.head["created_at"], part))["id"], run.secrets)
                run.checkpoint()
        except api_failures() as exc:
            raise UserError(f"the Batch API refused or failed a step "
                            f"({wire.api_failure(exc, run.secrets)}); the record {run.out} "
                            f"keeps every step done; carry on with: {resume}") from None
    return True


def waited(run, client, plan, saved, started, resume):
    """Poll every batch until each is collected, or a stop ends the wait."""
    parts = run.batch["parts"]
    total = sum(part["stop"] - part["start"] for part in parts)
    delay, failures, shown = FIRST_POLL_SECONDS, 0, None
    while not plan.stopped:
        for part in (part for part in parts if not part["collected"]):
            try:
                batch = retrieve(client, part["batch_id"])
            except api_failures() as exc:
                if getattr(exc, "status_code", None) == 404:
                    raise UserError(f"the Batch API does not know batch {part['batch_id']} "
                                    "(another key or organization, or older than the 30 days "
                                    "it keeps batches): its rows cannot be collected; start "
                                    "a new run") from None
                failures += 1
                if failures > POLL_FAILURES:
                    raise UserError(f"cannot reach the Batch API "
                                    f"({wire.api_failure(exc, run.secrets)}); the batch runs "
                                    f"on: collect it with: {resume}") from None
                continue
            failures = 0
            polled(run, client, plan, saved, started, resume, part, batch)
        if all(part["collected"] for part in parts):
            return
        line = counts_line(parts, total, time.monotonic() - started)
        if line.split(" (")[0] != shown:
            shown = line.split(" (")[0]
            runs.say(run, plan, line)
        plan.pause.stopped.wait(delay)  # a signal sets it: the wait ends at once
        delay = min(delay * 2, MAX_POLL_SECONDS)


def polled(run, client, plan, saved, started, resume, part, batch):
    """What one poll of a part's batch says: its progress, and its rows once it ended."""
    problem = foreign_problem(batch, run.head["created_at"], part)
    if problem:
        raise UserError(problem)
    counts = batch.get("request_counts")
    part["status"] = batch.get("status")
    part["counts"] = {name: counts.get(name) for name in ("total", "completed", "failed")
                      if type(counts.get(name)) is int} if isinstance(counts, dict) else {}
    if part["status"] in TERMINAL:
        try:
            collect(run, client, plan, saved, part, batch, started)
        except api_failures() as exc:
            raise UserError(f"cannot download the answers of batch {part['batch_id']} "
                            f"({wire.api_failure(exc, run.secrets)}); the rows saved so far "
                            f"are kept: collect the rest with: {resume}") from None


def arrived_id(value, secrets):
    """An id the Batch API gave (a file's, a batch's), or UserError: one that is
    not an id, or that holds the key, is never saved (a record keeps no key)."""
    if not record.saved_id(value):
        raise UserError("the Batch API gave an id that is not an id (a '/', a control "
                         f"character or over {record.MAX_ID_CHARS} characters); nothing "
                         "more was submitted")
    if redact(value, secrets) != value:
        raise UserError("the Batch API gave an id that holds the API key; it is not kept "
                         "and nothing more was submitted: rotate the key, then start a new run")
    return value


def collect(run, client, plan, saved, part, batch, started):
    """The rows of an ended batch, made in the saved order from its files."""
    with contextlib.ExitStack() as files:
        found = []
        for name in ("output_file_id", "error_file_id"):  # an answer beats an error line
            if isinstance(batch.get(name), str):
                handle = files.enter_context(download(client, batch[name]))
                try:
                    found.append((handle, line_places(handle, part["start"],
                                                               part["stop"])))
                except UserError as exc:
                    raise UserError(f"batch {part['batch_id']} is not this part's: {exc}; "
                                     "nothing of it was collected") from None
        for index in range(part["start"], part["stop"]):
            if index in run.rows:  # kept by a collection that a crash cut short
                continue
            line = next((line_at(handle, places[index])
                         for handle, places in found if index in places), None)
            runs.take_row(run, plan, saved, index, batch_row(run, index, line, batch), started,
                          save=(index + 1 - part["start"]) % BATCH_SAVE_ROWS == 0)
    part["collected"] = True
    run.summary = run.tally.summary(brief=True)
    run.checkpoint()


def batch_line(run, index):
    repeat, case, model = run.entries[index]
    return input_line(index, run.ask.request(case, model, run.instructions, run.suite,
                                             run.head["config"].get("tool_choice")))
