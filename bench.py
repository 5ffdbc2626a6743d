"""Measure the runner's local overhead and its concurrency, offline.

    .venv/bin/python bench.py            # about a minute; prints two tables

1. Local overhead per row: the whole runner (real SDK, checker, checkpoint
   after every row) over httpx.MockTransport, zero latency, ~10 KB responses,
   at 24, 240 and 2,400 rows. Flat means a long run costs no more per row.
2. Wall time of 24 requests against the loopback simulated API at a fixed
   latency, for --jobs 1, 4, 8 and 16, next to the ideal ceil(24/J) x latency.
"""

import contextlib
import io
import math
import os
import shutil
import tempfile
import time
from unittest import mock

import httpx
from perplexity import Perplexity

import regression
import simulated_api

LATENCY = 0.5  # seconds per simulated request in the concurrency table
PADDING = 10_000  # bytes of search snippet, so each saved response is ~10 KB


def padded_state():
    state = simulated_api.new_state(regression.CASES, unsafe_models=())
    original = simulated_api.agent_response

    def big_response(*args):
        response = original(*args)
        response["output"][0]["results"][0]["snippet"] = "x" * PADDING
        return response

    return state, big_response


def run(args, client_factory):
    folder = tempfile.mkdtemp()
    try:
        with mock.patch.dict(os.environ, {"PERPLEXITY_API_KEY": "bench-key"}), \
                mock.patch.object(regression, "Perplexity", client_factory), \
                contextlib.redirect_stdout(io.StringIO()), \
                contextlib.redirect_stderr(io.StringIO()):
            code = regression.main([*args, "--out", os.path.join(folder, "r.json")])
        size = os.path.getsize(os.path.join(folder, "r.json"))
    finally:
        shutil.rmtree(folder)
    assert code == 0, f"bench run failed with exit {code}"
    return size


def overhead_per_row(rows):
    """Seconds of local work per row, from the first request to main's return."""
    models = [f"bench/model-{n}" for n in range(max(1, rows // 40))]
    repeats = rows // (4 * len(models))
    state, big_response = padded_state()
    transport = simulated_api.mock_transport(state)
    first = []

    def handle(request):
        first or first.append(time.perf_counter())
        return transport.handle_request(request)

    def factory(**kwargs):
        return Perplexity(api_key="bench-key", http_client=httpx.Client(
            transport=httpx.MockTransport(handle)), **kwargs)

    with mock.patch.object(simulated_api, "agent_response", big_response):
        size = run(["--models", *models, "--repeats", str(repeats)], factory)
    elapsed = time.perf_counter() - first[0]
    return len(models) * 4 * repeats, elapsed / (len(models) * 4 * repeats), size


def concurrent_wall_time(jobs):
    server = simulated_api.start(regression.CASES, unsafe_models=())
    server.state["latency"] = LATENCY
    try:
        def factory(**kwargs):
            return Perplexity(api_key="bench-key", base_url=server.url,
                              http_client=httpx.Client(trust_env=False), **kwargs)

        started = time.perf_counter()
        run(["--models", "bench/a", "bench/b", "--repeats", "3", "--jobs", str(jobs)], factory)
        return time.perf_counter() - started
    finally:
        server.stop()


def main():
    print("Local overhead per row (zero latency, ~10 KB responses)")
    print(f"{'rows':>6} {'ms/row':>8} {'vs 24 rows':>10} {'record MB':>10}")
    baseline = None
    for rows in (24, 240, 2400):
        count, per_row, size = overhead_per_row(rows)
        baseline = baseline or per_row
        print(f"{count:>6} {per_row * 1000:>8.2f} {per_row / baseline:>9.2f}x "
              f"{size / 1e6:>10.1f}")
    print()
    print(f"24 requests at {LATENCY} s simulated latency")
    print(f"{'jobs':>5} {'wall s':>7} {'ideal s':>8} {'of ideal speed-up':>18}")
    serial = None
    for jobs in (1, 4, 8, 16):
        wall = concurrent_wall_time(jobs)
        serial = serial or wall
        ideal = math.ceil(24 / jobs) * LATENCY
        efficiency = (serial / wall) / (24 * LATENCY / ideal)
        print(f"{jobs:>5} {wall:>7.2f} {ideal:>8.2f} {efficiency:>17.0%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
