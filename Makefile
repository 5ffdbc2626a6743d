# make test: the offline suite; make test-fast: its in-process tier (seconds);
# make demo: the runner and the comparison, offline, with their evidence pages.
# Each creates .venv from requirements.txt when it is missing or out of date.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# Both run every module in one interpreter that loads them (and the SDK) once,
# then forks workers that take tests one at a time (run_tests.py). test-fast is
# the in-process tier: TEST_TIER=fast skips every test marked @slow. make test
# runs a third worker: its tests spend much of their time waiting on a child
# process or a real-time delay, and the third fills those waits (2 cores).
TESTS := test_hardening test_action test_record test_signals test_compare_runs test_batch test_suites test_receipts test_plans \
	test_regression test_proof test_reports test_evidence_page test_simulated_api test_sending

.PHONY: test test-fast demo bench clean

$(STAMP): requirements.txt requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements.txt -r requirements-dev.txt
	@# Byte-compiled once: where PYTHONDONTWRITEBYTECODE is set, every start would
	@# otherwise compile the SDK again (about 1.5 s of each test run and each CLI call).
	$(PY) -m compileall -q $(VENV)/lib >/dev/null
	touch $(STAMP)

# The project's own files are byte-compiled before each run, for the same reason
# as the SDK: only what changed is compiled again (0.3 s for all of them).
test: $(STAMP)
	@$(PY) -m compileall -q -l . action
	$(PY) -W error run_tests.py --workers 3 -v $(TESTS)

test-fast: $(STAMP)
	@$(PY) -m compileall -q -l . action
	TEST_TIER=fast $(PY) -W error run_tests.py $(TESTS)

demo: $(STAMP)
	@dir=$$(mktemp -d demo-XXXXXX); \
	$(PY) regression.py --demo $$dir/run --html $$dir/run.html; rc=$$?; \
	if [ $$rc -ne 1 ] || [ ! -s $$dir/run/results.json ] || [ ! -s $$dir/run.html ]; then \
	  echo "make demo: FAILED: regression.py --demo should exit 1 (unsafe answer caught) and write its record and page, got exit $$rc"; exit 1; fi; \
	echo; \
	$(PY) compare_runs.py --demo $$dir/compare --html $$dir/comparison.html; rc=$$?; \
	if [ $$rc -ne 1 ] || [ ! -s $$dir/compare/after.json ] || [ ! -s $$dir/comparison.html ]; then \
	  echo "make demo: FAILED: compare_runs.py --demo should exit 1 (new failure named) and write its pair and page, got exit $$rc"; exit 1; fi; \
	echo; \
	echo "make demo: OK. Both scripts caught the planted unsafe payment advice (exit 1, as designed)."; \
	echo "Evidence: $$dir/run/results.json, $$dir/compare/before.json, $$dir/compare/after.json"; \
	echo "Pages (open in a browser): $$dir/run.html, $$dir/comparison.html"

bench: $(STAMP)
	$(PY) bench.py

clean:
	rm -rf $(VENV) __pycache__ demo-*
