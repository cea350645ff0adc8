# Two commands for a fresh machine: `make demo` and `make test`.
# Each creates .venv when it is missing. The dev extra includes the [torch] extra (the tests
# compare the ONNX vectors with PyTorch's): torch is installed first from its CPU build
# (pinned below; pip finds the +cpu wheel locally on these machines) so that resolving
# sentence-transformers never pulls the multi-GB CUDA wheels. Elsewhere, point
# TORCH_CPU at your platform's CPU build, e.g. `make test TORCH_CPU="torch==2.13.0+cpu"`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
TORCH_CPU ?= torch==2.13.0
STAMP  := $(VENV)/.installed

export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

# The browser test (tests/test_browser.py) drives Debian's chromium with Playwright (no browser
# download): installed here when missing. If apt cannot install it, the test fails and says so.
CHROMIUM := /usr/bin/chromium
SUDO   := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: demo test bench install clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH_CPU)"
	$(PY) -m pip install -q -e ".[dev]"
	touch $(STAMP)

$(CHROMIUM):
	$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y chromium \
	  || ($(SUDO) apt-get update && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y chromium) \
	  || echo "chromium could not be installed: tests/test_browser.py will fail"

install: $(STAMP) $(CHROMIUM)

demo: $(STAMP)
	$(VENV)/bin/hiqa demo

# The suite includes the type checker (tests/test_type_ratchet.py: mypy --strict, errors per
# file held by tools/type_baseline.json). Fewer errors: lower the baseline with
# `$(PY) tools/type_ratchet.py --update` and commit it.
test: $(STAMP) $(CHROMIUM)
	$(PY) -m pytest -q

bench: $(STAMP)
	$(PY) benchmarks/run_all.py

clean:
	rm -rf $(VENV) .pytest_cache
