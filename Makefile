# chatids developer commands. Quick start: `make example`, then `make test`.

PYTHON_SYSTEM ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# Models and conversations live outside the repository (see README, "Data").
CHATIDS_MODELS_DIR ?= $(abspath ../shared/models)
CHATIDS_DATA_DIR ?= $(abspath ../shared/data)
export CHATIDS_MODELS_DIR CHATIDS_DATA_DIR
RESULTS := target/results
# stubtest runs outside the source tree, so `chatids` is the installed package.
STUBTEST_DIR := /tmp
# What the test targets run against: `develop` (editable, incremental build) by default;
# `make test` sets BUILD=install-wheel, so the suite tests the release wheel users install.
BUILD ?= develop
WHEEL_DIR := target/wheels
# Extra pytest arguments for test-python, e.g. PYTEST_ARGS='-m "not ray"' to leave out the Ray Data tests.
PYTEST_ARGS ?=

.PHONY: example develop docs dist install-wheel test-wheel test test-rust test-rust-build typecheck test-python bench-quick conformance-full conformance-generic bench bench-bpe bench-cli bench-serving bench-hf bench-pairs bench-text-peers bench-load bench-scaling bench-memory fuzz fuzz-encode fuzz-parse fuzz-api fuzz-build clean

# --no-compile: Python compiles a module when it is first imported, not all of Ray, transformers
# and the rest at install (a minute of CPU the tests never use).
$(VENV)/.installed: requirements-dev.txt
	$(PYTHON_SYSTEM) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet --no-compile -r requirements-dev.txt
	touch $@

## Build the extension (release) into the virtualenv.
develop: $(VENV)/.installed
	$(VENV)/bin/maturin develop --release --quiet

## The release artifacts in target/wheels: the sdist, and the abi3 manylinux2014 wheel built from
## that sdist (so the sdist is known to build) with zig, no Docker (the `ziglang` package).
dist: $(VENV)/.installed
	rm -rf $(WHEEL_DIR)
	PATH="$(abspath $(VENV))/bin:$$PATH" $(VENV)/bin/maturin build --release --zig --sdist --quiet --out $(WHEEL_DIR)

## Install the release wheel into the virtualenv (in place of `make develop`'s editable build).
install-wheel: dist
	$(PY) -m pip install --quiet --force-reinstall --no-deps $(WHEEL_DIR)/chatids-*.whl

## The wheel in a fresh virtualenv that never saw the source tree: the smoke suite (tests/wheel_smoke.py),
## wheel size and import time (target/results/wheel.json).
test-wheel: dist
	scripts/test_wheel.sh $(WHEEL_DIR) $(PY)

## Quick start 1: encode the bundled example conversations with Llama 3.1's tokenizer, or, without the
## shared models, with the Mistral 7B v0.3 tokenizer bundled in examples/ (nothing else needed).
example: develop
	scripts/example.sh $(PY)

## Quick start 2: every test (Rust units, conformance sample, edge cases, properties, the wheel in a
## fresh venv, benchmarks once), against the release wheel built once from the sdist. The parts run
## side by side (TEST_JOBS at once, each one's output printed whole when it ends): the Rust build and
## tests beside the wheel's build and the Python suite, so that no core waits for a serial step (a
## link, a pip install, a single-threaded test). TEST_JOBS=1 runs them one after the other.
TEST_JOBS ?= 3
test:
	@test -d "$(CHATIDS_MODELS_DIR)" && test -d "$(CHATIDS_DATA_DIR)" || { \
	  echo "make test needs the shared models and conversations: $(CHATIDS_MODELS_DIR) and $(CHATIDS_DATA_DIR)"; \
	  echo "(put them in ../shared, or set CHATIDS_MODELS_DIR and CHATIDS_DATA_DIR; see README, Data). make example runs without them."; \
	  exit 1; }
	$(MAKE) -j$(TEST_JOBS) --output-sync=target BUILD=install-wheel install-wheel test-rust typecheck test-python test-wheel bench-quick

## The documentation site, built offline into target/site (tests/test_docs_build.py builds it too).
docs: $(BUILD)
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --site-dir target/site

## The stubs of the compiled core against the built module (stubtest), and mypy --strict over the
## whole package (settings in pyproject.toml: the untyped optional dependencies are Any).
typecheck: $(BUILD)
	cd $(STUBTEST_DIR) && $(abspath $(PY)) -m mypy.stubtest chatids._core
	$(PY) -m mypy --strict python/chatids

## FUZZ_REPLAY_INPUTS: generated inputs the fuzz replay runs in `cargo test` (fuzz/replay.rs; 600 without make).
FUZZ_REPLAY_INPUTS ?= 120
## The tokenizer files mistral-common ships (the parse fuzz target runs on them too), when installed.
MC_DATA = $(shell $(PY) -c "import mistral_common, os; print(os.path.join(os.path.dirname(mistral_common.__file__), 'data'))" 2>/dev/null)
test-rust: fuzz-build test-rust-build $(VENV)/.installed
	CHATIDS_MISTRAL_COMMON_DATA=$(MC_DATA) CHATIDS_FUZZ_REPLAY_INPUTS=$(FUZZ_REPLAY_INPUTS) cargo test --quiet

## Build the Rust tests (it needs no virtualenv, so under `make test` it runs beside the install).
test-rust-build:
	cargo test --quiet --no-run

## Build the fuzz targets (keeps them compiling; `make fuzz` / `make fuzz-encode` run them; `cargo test`
## replays encode_messages' regressions and generated inputs, fuzz/replay.rs).
fuzz-build:
	cargo check --quiet --manifest-path fuzz/Cargo.toml

FUZZ_SECONDS ?= 1800
## Fuzz the native BPE core against the tokenizers crate (needs `cargo install cargo-fuzz`).
fuzz: develop
	$(PY) fuzz/seed.py 40
	cd fuzz && CHATIDS_MODELS_DIR=$(CHATIDS_MODELS_DIR) RUSTC_BOOTSTRAP=1 cargo fuzz run -s none native_bpe corpus/native_bpe -- \
	  -max_total_time=$(FUZZ_SECONDS) -max_len=8192 -rss_limit_mb=8000 -print_final_stats=1

## Fuzz the Rust entry point: random conversations and policies on every checkpoint (needs cargo-fuzz).
fuzz-encode:
	mkdir -p fuzz/corpus/encode_messages
	cd fuzz && CHATIDS_MODELS_DIR=$(CHATIDS_MODELS_DIR) RUSTC_BOOTSTRAP=1 cargo fuzz run -s none encode_messages corpus/encode_messages -- \
	  -max_total_time=$(FUZZ_SECONDS) -max_len=4096 -rss_limit_mb=8000 -print_final_stats=1

## Fuzz the return path: random model output on every checkpoint's grammar (needs cargo-fuzz).
fuzz-parse:
	mkdir -p fuzz/corpus/parse_completion
	cd fuzz && CHATIDS_MODELS_DIR=$(CHATIDS_MODELS_DIR) CHATIDS_MISTRAL_COMMON_DATA=$(MC_DATA) RUSTC_BOOTSTRAP=1 cargo fuzz run -s none parse_completion corpus/parse_completion -- \
	  -max_total_time=$(FUZZ_SECONDS) -max_len=2048 -rss_limit_mb=8000 -print_final_stats=1

## Fuzz the Python API (hypothesis, tests/test_fuzz_api.py) for FUZZ_SECONDS.
fuzz-api: develop
	$(PY) fuzz/fuzz_api.py $(FUZZ_SECONDS)

## pytest on tests/ as PYTEST_SHARDS processes side by side (scripts/run_pytest.py): with 2, the
## first runs PYTEST_FIRST (about half the suite's time), the second every other file;
## PYTEST_SHARDS=1 runs one process (use it with a PYTEST_ARGS='-k ...' that selects few files).
PYTEST_SHARDS ?= 2
PYTEST_FIRST := tests/test_native_bpe.py tests/test_generic.py tests/test_injection.py tests/test_malformed.py tests/test_conformance.py tests/test_masks.py tests/test_template_corpus.py tests/test_sentencepiece.py tests/test_hf.py
test-python: $(BUILD)
	mkdir -p $(RESULTS)
	CHATIDS_CONFORMANCE_REPORT=$(RESULTS)/conformance.json CHATIDS_CORPUS_REPORT=$(RESULTS)/template-corpus.json \
	  $(PY) scripts/run_pytest.py --results $(RESULTS) --shards $(PYTEST_SHARDS) --first $(PYTEST_FIRST) -- $(PYTEST_ARGS)
	$(PY) scripts/check_no_skips.py $(RESULTS)/pytest-*.xml

bench-quick: $(BUILD)
	CHATIDS_BENCH_QUICK=1 $(PY) -m pytest benches -q --benchmark-disable
	$(PY) benches/memory.py --calls 50000 --conversations 2500

## Every conversation of the corpus and many more random cases, on every route and path, with the GGUF
## cases and the heavy extremes CI samples out: each file a pytest process, two side by side, each
## taking the next file when one ends (scripts/run_files.py; several hours on this 2-core machine;
## logs, reports and a record per file in $(RESULTS)/conformance-full). The files are listed longest
## first. `make conformance-full RESUME=1` runs only the files that have not passed, without a skip, on
## the same code and tests: a run cut off goes on where it stopped, and a documentation commit keeps
## what passed.
CONFORMANCE_FILES := tests/test_native_bpe.py tests/test_generic.py tests/test_jinja.py tests/test_conformance.py \
  tests/test_masks.py tests/test_session.py tests/test_template_corpus.py tests/test_properties.py \
  tests/test_edge_cases.py tests/test_mistral_common.py tests/test_injection.py tests/test_sentencepiece.py \
  tests/test_gguf.py tests/test_fuzz_api.py tests/test_format_choice.py tests/test_malformed.py
conformance-full: develop
	mkdir -p $(RESULTS)/conformance-full
	CHATIDS_CONFORMANCE=full HYPOTHESIS_PROFILE=full $(PY) scripts/run_files.py --results $(RESULTS)/conformance-full \
	  --jobs 2 $(if $(RESUME),--resume) $(CONFORMANCE_FILES) -- -s
	CHATIDS_REQUIRE_MODELS=1 $(PY) scripts/check_no_skips.py $(RESULTS)/conformance-full/*.xml

## Only the Jinja path on every conversation of the corpus, for every shared checkpoint.
conformance-generic: develop
	mkdir -p $(RESULTS)
	CHATIDS_CONFORMANCE=full CHATIDS_CONFORMANCE_REPORT=$(RESULTS)/conformance-generic.json \
	  $(PY) -m pytest tests/test_generic.py -q -s -k test_generic_path_matches

## `chatids encode` end to end on 100,000 conversations (JSONL -> Parquet and .npy): conversations/s, tokens/s, peak RSS.
bench-cli: develop
	mkdir -p $(RESULTS)
	$(PY) -m pytest benches/test_bench_cli.py -q -s --benchmark-json=$(RESULTS)/bench-cli.json

## Peak RSS of encoding 100,000 conversations (streaming CLI and one encode_batch), and RSS flat within 5%
## over 1M calls after warm-up (exit 1 otherwise); about 3 minutes. Writes target/results/memory.json.
bench-memory: develop
	mkdir -p $(RESULTS)
	$(PY) benches/memory.py --json $(RESULTS)/memory.json

## Serving: a 20-step agent loop with tools (session vs re-encoding vs transformers) and the p50/p99
## latency of one prompt; writes the Serving section of BENCHMARKS.md (about 90 s).
bench-serving: develop
	mkdir -p $(RESULTS)
	$(PY) -m pytest benches/test_bench_serving.py -q --benchmark-json=$(RESULTS)/bench-serving.json
	$(PY) benches/report.py $(RESULTS)/bench-serving.json --update BENCHMARKS.md

## The text encoders alone (native BPE core, tokenizers crate, tiktoken); writes their tables into BENCHMARKS.md.
bench-bpe: develop
	mkdir -p $(RESULTS)
	$(PY) -m pytest benches/test_bench_bpe.py -q --benchmark-json=$(RESULTS)/bench-bpe.json
	$(PY) benches/report.py $(RESULTS)/bench-bpe.json --update BENCHMARKS.md

## chatids.hf: patched against unpatched apply_chat_template, single and batched (a markdown table; a few minutes).
bench-hf: develop
	$(PY) benches/hf_patch.py

## Text encoders side by side (one thread, CPU time, cold and warm): chatids' native core, the
## tokenizers package, fastokens, gigatoken, tiktoken; ids compared with the tokenizers package.
bench-text-peers: develop
	$(PY) -m pip install -q -r requirements-bench.txt
	$(PY) benches/text_peers.py

## Loading: from_pretrained, the compiled cache (write, read), pickled size and unpickling per shared checkpoint, each in a fresh process.
bench-load: develop
	$(PY) benches/load.py

## Scaling: encode_batch on 1 and 2 threads, and the peak memory of a batch per token.
bench-scaling: develop
	$(PY) benches/scaling.py

## Preference rows: TRL's three apply_chat_template calls per row against encode_preference(s).
bench-pairs: develop
	$(PY) benches/pairs.py

## Full benchmarks; writes the ratios into BENCHMARKS.md.
bench: develop
	mkdir -p $(RESULTS)
	$(PY) -m pytest benches -q --benchmark-json=$(RESULTS)/bench.json
	$(PY) benches/report.py $(RESULTS)/bench.json --update BENCHMARKS.md

clean:
	rm -rf target $(VENV)
