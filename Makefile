# make test: the offline suite; make test-fast: its in-process tier (seconds);
# make demo: the runner and the comparison, offline, with their evidence pages.
# Each creates .venv from requirements.txt when it is missing or out of date.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PROCESS_TESTS := test_hardening test_action  # each in a process of its own, beside the rest
IN_PROCESS := test_regression test_record test_compare_runs test_reports test_evidence_page \
	test_sending test_signals test_simulated_api test_batch
FAST := $(IN_PROCESS) test_action  # its decisions and comment text run in-process

.PHONY: test test-fast demo bench clean

$(STAMP): requirements.txt requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements.txt -r requirements-dev.txt
	@# Byte-compiled once: where PYTHONDONTWRITEBYTECODE is set, every start would
	@# otherwise compile the SDK again (about 1.5 s of each test run and each CLI call).
	$(PY) -m compileall -q $(VENV)/lib >/dev/null
	touch $(STAMP)

# Side by side: most of the process tests' time is starting Python and importing
# the SDK, or waiting on a simulated answer, which the other tests need not wait for.
test: $(STAMP)
	@for tests in $(PROCESS_TESTS); do \
	  ($(PY) -W error -m unittest -v $$tests > .test-$$tests.log 2>&1; \
	   echo $$? > .test-$$tests.rc) & \
	done; \
	$(PY) -W error -m unittest -v $(IN_PROCESS); rc=$$?; wait; \
	for tests in $(PROCESS_TESTS); do \
	  cat .test-$$tests.log; [ "$$(cat .test-$$tests.rc)" = 0 ] || rc=1; \
	done; \
	rm -f .test-*.log .test-*.rc; exit $$rc

test-fast: $(STAMP)
	TEST_TIER=fast $(PY) -W error -m unittest $(FAST)

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
