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

Only pure helpers and the few API calls live here; regression.py makes the rows.
"""

import hashlib
import json
import re
import tempfile

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
