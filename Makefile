# mtkit: `make demo` runs the main job, `make test` runs the tests. Both install what they need
# into .venv first.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
MIRROR ?= $(abspath ../shared/data/multi30k)

.PHONY: install test test-slow demo lint clean

$(BIN)/python:
	$(PY) -m venv $(VENV)

# The ctranslate2, serve, hf and documents extras are installed so that the export, server,
# import and document tests run rather than skip.
# Without a GPU, take the CPU build of torch (a plain `torch` requirement pulls a
# several-GB CUDA build). On this workplace's machines `pip install torch==2.13.0` finds a CPU
# wheel on local disk; elsewhere the PyTorch CPU index serves it.
install: $(BIN)/python
	@if ! $(BIN)/python -c "import torch" 2>/dev/null; then \
	  if command -v nvidia-smi >/dev/null 2>&1; then $(BIN)/pip install -q torch; \
	  else $(BIN)/pip install -q torch==2.13.0 2>/dev/null \
	    || $(BIN)/pip install -q torch --index-url https://download.pytorch.org/whl/cpu; fi; \
	fi
	$(BIN)/pip install -q -e ".[dev,ctranslate2,serve,hf,documents]"

# The fast tiers (unit and command tests); the slow tier trains tiny models until they learn.
test: install
	MTKIT_DATA_MIRROR=$${MTKIT_DATA_MIRROR:-$(MIRROR)} $(BIN)/python -m pytest -q -m "not slow" tests

test-slow: install
	MTKIT_DATA_MIRROR=$${MTKIT_DATA_MIRROR:-$(MIRROR)} $(BIN)/python -m pytest -q -m slow tests

lint: install
	$(BIN)/ruff check mtkit tests bench

demo: install
	bash bench/demo.sh

clean:
	rm -rf $(VENV) runs *.egg-info
