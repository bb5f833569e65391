# Gemma Desk — two commands: `make run` (build what is missing, open the app) and `make test`.
# Both install what they need, idempotently: system packages (apt on Linux), the pinned MLX wheel
# into .deps/, the Python reference env (tests only), npm packages, cargo crates.

SHELL := /bin/bash
.DEFAULT_GOAL := run
UNAME := $(shell uname -s)
ROOT := $(CURDIR)
DEPS := $(ROOT)/.deps
MLX_VERSION := 0.32.2
PYTHON ?= python3

ifeq ($(UNAME),Darwin)
  MLX_FLAVOR ?= metal
else
  MLX_FLAVOR ?= cpu
endif
ifeq ($(MLX_FLAVOR),cuda)
  MLX_WHEEL := mlx-cuda-13
else
  MLX_WHEEL := mlx-$(MLX_FLAVOR)
endif
export MLX_WHEEL_DIR := $(DEPS)/$(MLX_WHEEL)
export CARGO_TERM_COLOR := never

APT_PACKAGES := build-essential pkg-config curl file cmake libssl-dev libclang-dev \
  libwebkit2gtk-4.1-dev libgtk-3-dev libayatana-appindicator3-dev librsvg2-dev libxdo-dev \
  python3-venv xvfb xauth webkit2gtk-driver xdotool xclip python3-gi gir1.2-gtk-3.0 iproute2 \
  ffmpeg espeak-ng
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

APP := target/debug/gemma-desk
CLI := target/debug/gemma-desk-cli
FIXTURES := tests/out/fixtures
TAURI_DRIVER := $(DEPS)/cargo/bin/tauri-driver
PYENV := $(DEPS)/py

.PHONY: run test deps system-deps mlx-wheel ui-deps ui py-deps tauri-driver \
        fixtures build-all test-rust test-ui test-parity test-api test-e2e app lint lint-sources \
        clean-deps api-node-deps mcp-test-deps documents-corpus test-documents

# ---------------------------------------------------------------- the two commands
run: deps app
	$(APP)

test: deps ui py-deps tauri-driver
	$(MAKE) lint test-rust test-documents test-ui test-parity test-api test-e2e

# ---------------------------------------------------------------- prerequisites
deps: system-deps mlx-wheel ui-deps

system-deps:
ifeq ($(UNAME),Darwin)
	@xcode-select -p >/dev/null 2>&1 || { echo "Xcode command line tools are missing. Install them with: xcode-select --install"; exit 1; }
	@command -v cmake >/dev/null || { echo "CMake is missing (it builds libjpeg-turbo). Install it with: brew install cmake"; exit 1; }
else
	@missing=$$(for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "Installing system packages:" $$missing; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing >/dev/null; \
	fi
endif
	@command -v cargo >/dev/null || { echo "Rust is missing. Install it with: curl https://sh.rustup.rs -sSf | sh"; exit 1; }
	@command -v npm >/dev/null || { echo "Node.js 20+ is missing. Install it from https://nodejs.org (macOS: brew install node)"; exit 1; }
	@command -v $(PYTHON) >/dev/null || { echo "Python 3 is missing (needed for pip wheels)."; exit 1; }

mlx-wheel: $(MLX_WHEEL_DIR)/.installed
$(MLX_WHEEL_DIR)/.installed:
	rm -rf $(MLX_WHEEL_DIR)
	$(PYTHON) -m pip install -q --disable-pip-version-check --no-deps --target $(MLX_WHEEL_DIR) $(MLX_WHEEL)==$(MLX_VERSION)
	touch $@

ui-deps: ui/node_modules/.installed
ui/node_modules/.installed: ui/package-lock.json
	cd ui && npm ci --no-audit --no-fund
	touch $@

# Built again only when a file of ui/ changed: each build rewrites ui/dist, which the app embeds,
# so an unchanged UI built again would also compile and link the app again.
UI_SOURCES := $(shell find ui -path ui/node_modules -prune -o -path ui/dist -prune -o -type f -print)
ui: ui/dist/index.html
ui/dist/index.html: ui/node_modules/.installed $(UI_SOURCES)
	cd ui && npm run build

# The official openai Node SDK for the local API's client test (tests/api/node, its own lock file).
api-node-deps: tests/api/node/node_modules/.installed
tests/api/node/node_modules/.installed: tests/api/node/package-lock.json
	cd tests/api/node && npm ci --no-audit --no-fund
	touch $@

# Real MCP servers for the mcp crate's tests (src-tauri/crates/mcp/tests): server-everything and
# server-filesystem from npm (tests/mcp, its own lock file), mcp-server-time from PyPI (its own
# venv tests/mcp/py, every dependency pinned in tests/mcp/requirements.txt).
mcp-test-deps: tests/mcp/node_modules/.installed tests/mcp/py/.installed
tests/mcp/node_modules/.installed: tests/mcp/package-lock.json
	cd tests/mcp && npm ci --no-audit --no-fund
	touch $@
tests/mcp/py/.installed: tests/mcp/requirements.txt
	rm -rf tests/mcp/py
	$(PYTHON) -m venv tests/mcp/py
	tests/mcp/py/bin/pip install -q --disable-pip-version-check -r tests/mcp/requirements.txt
	touch $@

# The Python reference (mlx-vlm on MLX CPU) for parity tests; never used by the app.
py-deps: $(PYENV)/.installed
$(PYENV)/.installed: tests/requirements.txt tests/requirements-nodeps.txt
	rm -rf $(PYENV)
	$(PYTHON) -m venv $(PYENV)
	$(PYENV)/bin/pip install -q --disable-pip-version-check -r tests/requirements.txt
	$(PYENV)/bin/pip install -q --disable-pip-version-check --no-deps -r tests/requirements-nodeps.txt
	touch $@

# A debug build: it only relays WebDriver requests, and unoptimised it compiles faster.
tauri-driver: $(TAURI_DRIVER)
$(TAURI_DRIVER):
	cargo install -q --debug tauri-driver --version 2.1.0 --locked --root $(DEPS)/cargo

clean-deps:
	rm -rf $(DEPS) ui/node_modules

# Random-weight checkpoints in the exact mlx-community layout (regenerated when the generator changes).
fixtures: $(FIXTURES)/.stamp
$(FIXTURES)/.stamp: $(PYENV)/.installed $(wildcard tests/fixtures/*)
	rm -rf $(FIXTURES) && mkdir -p $(FIXTURES)
	for v in tiny tiny-optiq tiny-plmp-bf16 tiny-audio-e4b; do \
	  $(PYENV)/bin/python tests/fixtures/make_checkpoint.py --variant $$v --out $(FIXTURES)/$$v || exit 1; done
	$(PYENV)/bin/python tests/fixtures/make_drafter.py --target $(FIXTURES)/tiny --out $(FIXTURES)/tiny-assistant
	touch $@

# ---------------------------------------------------------------- tests
# The build of `make test` is also its clippy: the workspace's own crates are compiled by
# clippy-driver, as `cargo clippy --workspace --all-targets -- -D warnings` would check them
# (RUSTC_WORKSPACE_WRAPPER and CLIPPY_ARGS are what `cargo clippy` hands it), and the dependencies
# by rustc as in any build. A separate `cargo clippy` would check every dependency a second time.
CLIPPY_DRIVER := $(shell rustup which clippy-driver 2>/dev/null || command -v clippy-driver)
LINTED := RUSTC_WORKSPACE_WRAPPER=$(CLIPPY_DRIVER) CLIPPY_ARGS=-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__

# Every binary, example and test with one feature set (the one `cargo test --workspace` uses), so
# the later steps reuse this build instead of re-resolving features per package.
build-all: ui
	@[ -x "$(CLIPPY_DRIVER)" ] || { echo "clippy is missing. Install it with: rustup component add clippy"; exit 1; }
	$(LINTED) cargo build --workspace --all-targets

test-rust: fixtures build-all mcp-test-deps
	GEMMA_FIXTURES=$(ROOT)/$(FIXTURES) $(LINTED) cargo test --workspace --all-targets

test-ui:
	cd ui && npm test

test-parity: fixtures build-all
	$(PYENV)/bin/python tests/parity/run_all.py --cli $(CLI) --fixtures $(FIXTURES)
	$(PYENV)/bin/python tests/parity/image_parity.py --model $(FIXTURES)/tiny --preprocess target/debug/examples/preprocess
	$(PYENV)/bin/python tests/parity/audio_tower_parity.py --model $(FIXTURES)/tiny --model $(FIXTURES)/tiny-audio-e4b --bin target/debug/examples/audio_tower
	$(PYENV)/bin/python tests/parity/mtp_parity.py --cli $(CLI) --model $(FIXTURES)/tiny --drafter $(FIXTURES)/tiny-assistant
	$(PYENV)/bin/python tests/parity/audio_features_parity.py --features target/debug/examples/audio_features
	$(PYENV)/bin/python tests/parity/audio_parity.py --cli $(CLI) --model $(FIXTURES)/tiny
	$(PYENV)/bin/python tests/parity/lora_parity.py --cli $(CLI) --fixtures $(FIXTURES)
	$(PYENV)/bin/python tests/parity/hidden_parity.py --cli $(CLI) --model $(FIXTURES)/tiny

# The local API through clients nobody here wrote: the official `openai` Python SDK and
# `langchain-openai` (tests/requirements.txt), and the official `openai` Node SDK
# (tests/api/node), against `gemma-desk-cli serve` on the tiny model.
test-api: fixtures build-all api-node-deps
	$(PYENV)/bin/python tests/api/openai_client.py --cli $(CLI) --model $(FIXTURES)/tiny --node tests/api/node

# Documents nobody here wrote (PDFs and DOCX files from three PyPI sdists, the gnuplot manual from
# Debian; tests/documents/fetch_corpus.sh pins them): each is read or refused in words, and
# retrieval is measured on the manual (docs/DOCUMENTS.md).
DOCUMENTS_CORPUS := $(DEPS)/documents-corpus
documents-corpus:
	PYTHON=$(PYTHON) tests/documents/fetch_corpus.sh $(DOCUMENTS_CORPUS)

test-documents: documents-corpus build-all
	DOCUMENTS_CORPUS=$(DOCUMENTS_CORPUS) $(LINTED) cargo test -p documents --test corpus -- --ignored
	DOCUMENTS_LONG_PDF=$(DOCUMENTS_CORPUS)/gnuplot-doc/usr/share/doc/gnuplot/gnuplot.pdf \
	  $(LINTED) cargo test -p chats --test retrieval -- --ignored --nocapture

test-e2e: fixtures build-all api-node-deps
	GEMMA_FIXTURES=$(ROOT)/$(FIXTURES) tests/e2e/run.sh $(APP)

# The app alone, compiled by plain rustc: a lint a newer clippy adds never stops `make run`.
app: ui
	cargo build -p gemma-desk

# clippy is build-all (above); the checks that need no build run first.
# Every backticked code name in docs/ and README.md exists in the tree (.ci/check_doc_idents.py);
# engine and gemma have no import cycle (.ci/import_cycles.py).
lint: lint-sources build-all
lint-sources: ui-deps
	$(PYTHON) .ci/check_doc_idents.py
	$(PYTHON) .ci/import_cycles.py src-tauri/crates/engine/src src-tauri/crates/gemma/src
	cargo fmt --all --check
	$(PYTHON) .ci/check_tests.py
	cd ui && npm run lint

# ---------------------------------------------------------------- the Mac, checked from anywhere
# `make check-macos` (CI, after `make test`): the bundle config against the macOS wheel, the workspace
# checked and clippy-clean for aarch64-apple-darwin, the CLI linked into a Mach-O arm64 executable
# (docs/MACOS.md). zig from PyPI compiles and links for macOS; .ci/macos/env.sh sets it all up.
# The CLI is built as clippy checked it (the whole workspace's features, through clippy-driver),
# so the build scripts' runs (mlx-c compiled by zig among them) are shared, not repeated.
MACOS_TARGET := aarch64-apple-darwin
MACOS_TARGET_DIR := $(or $(CARGO_TARGET_DIR),target)
MACOS_WHEEL_DIR := $(DEPS)/mlx-metal
ZIG_VERSION := 0.15.2
MACOS_ENV := . .ci/macos/env.sh &&

.PHONY: check-macos macos-deps
macos-deps: system-deps $(MACOS_WHEEL_DIR)/.installed $(DEPS)/zig/.installed-$(ZIG_VERSION)
	@rustup target list --installed | grep -qx $(MACOS_TARGET) || rustup target add $(MACOS_TARGET)

# On a Mac with the default flavour this is the `mlx-wheel` rule's folder already.
ifneq ($(MLX_WHEEL_DIR),$(MACOS_WHEEL_DIR))
$(MACOS_WHEEL_DIR)/.installed:
	rm -rf $(MACOS_WHEEL_DIR)
	$(PYTHON) -m pip install -q --disable-pip-version-check --no-deps --only-binary=:all: \
	  --platform macosx_14_0_arm64 --target $(MACOS_WHEEL_DIR) mlx-metal==$(MLX_VERSION)
	touch $@
endif

$(DEPS)/zig/.installed-$(ZIG_VERSION):
	rm -rf $(DEPS)/zig
	$(PYTHON) -m pip install -q --disable-pip-version-check --target $(DEPS)/zig ziglang==$(ZIG_VERSION)
	touch $@

check-macos: macos-deps ui
	$(PYTHON) .ci/macos/check_bundle.py src-tauri/tauri.conf.json
	$(MACOS_ENV) cargo clippy --target $(MACOS_TARGET) --workspace --all-targets -- -D warnings
	$(MACOS_ENV) $(LINTED) cargo build --target $(MACOS_TARGET) --workspace --bin gemma-desk-cli
	file $(MACOS_TARGET_DIR)/$(MACOS_TARGET)/debug/gemma-desk-cli
	$(PYTHON) .ci/macos/check_link.py $(MACOS_TARGET_DIR) $(MACOS_WHEEL_DIR)/mlx/lib

# ---------------------------------------------------------------- fuzzing (not part of `make test`)
# Each cargo-fuzz target (fuzz/fuzz_targets/) runs FUZZ_SECONDS under libFuzzer on nightly Rust,
# starting from fuzz/seeds/<target>; new inputs go to fuzz/corpus/<target>, crashes to
# fuzz/artifacts/<target> (and fail the run).
FUZZ_SECONDS ?= 60
FUZZ_TARGETS := safetensors_header weights_index model_config chat_template image_decode audio_decode
CARGO_FUZZ := $(DEPS)/cargo/bin/cargo-fuzz

.PHONY: fuzz cargo-fuzz
cargo-fuzz: $(CARGO_FUZZ)
$(CARGO_FUZZ):
	cargo install -q cargo-fuzz --version 0.13.2 --locked --root $(DEPS)/cargo

fuzz: system-deps mlx-wheel cargo-fuzz
	@rustup toolchain list | grep -q '^nightly' || { echo "Fuzzing needs nightly Rust. Install it with: rustup toolchain install nightly"; exit 1; }
	cd fuzz && PATH=$(DEPS)/cargo/bin:$$PATH cargo +nightly fuzz build
	cd fuzz && for t in $(FUZZ_TARGETS); do \
	  mkdir -p corpus/$$t seeds/$$t; \
	  echo "== $$t ($(FUZZ_SECONDS) s)"; \
	  PATH=$(DEPS)/cargo/bin:$$PATH cargo +nightly fuzz run $$t corpus/$$t seeds/$$t -- \
	    -max_total_time=$(FUZZ_SECONDS) -timeout=10 -rss_limit_mb=4096 -print_final_stats=1 || exit 1; \
	done
