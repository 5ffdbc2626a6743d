# make test: the offline suite; make test-fast: its in-process tier (seconds);
# make demo: the runner and the comparison, offline, with their evidence pages.
# Each creates .venv from requirements.txt when it is missing or out of date.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# make test runs the modules that mostly start processes each in a process of its
# own, beside the rest: much of their time is starting Python or waiting on a
# simulated answer (2 cores; a fourth process made the whole slower).
BESIDE := test_hardening test_action
# make test-fast: the in-process tier in two processes about equal in work.
FAST_A := test_regression test_record test_sending test_signals
FAST_B := test_proof test_compare_runs test_reports test_evidence_page test_simulated_api \
	test_batch test_action  # test_action: its decisions and comment text run in-process

.PHONY: test test-fast demo bench clean

$(STAMP): requirements.txt requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements.txt -r requirements-dev.txt
	@# Byte-compiled once: where PYTHONDONTWRITEBYTECODE is set, every start would
	@# otherwise compile the SDK again (about 1.5 s of each test run and each CLI call).
	$(PY) -m compileall -q $(VENV)/lib >/dev/null
	touch $(STAMP)

test: $(STAMP)
	@n=0; for tests in $(BESIDE); do n=$$((n + 1)); \
	  ($(PY) -W error -m unittest -v $$tests > .test-$$n.log 2>&1; echo $$? > .test-$$n.rc) & \
	done; \
	$(PY) -W error -m unittest -v $(FAST_A) $(filter-out $(BESIDE),$(FAST_B)); rc=$$?; wait; \
	for log in .test-*.log; do \
	  cat $$log; [ "$$(cat $${log%.log}.rc)" = 0 ] || rc=1; \
	done; \
	rm -f .test-*.log .test-*.rc; exit $$rc

test-fast: $(STAMP)
	@TEST_TIER=fast $(PY) -W error -m unittest $(FAST_B) > .test-fast-b.log 2>&1 & other=$$!; \
	TEST_TIER=fast $(PY) -W error -m unittest $(FAST_A); rc=$$?; \
	wait $$other || rc=1; cat .test-fast-b.log; rm -f .test-fast-b.log; exit $$rc

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
