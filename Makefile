# alallo: `make run` installs what is missing, builds and starts the service;
# `make test` runs the whole suite. See README.md.
BUILD ?= build
JOBS ?= $(shell nproc)
PORT ?= 8080
DATA ?= var
# Warnings as errors (-DALALLO_WERROR): on for the test targets, and so for
# `make test` and CI; a plain `make` or `make run` leaves the build folder's
# choice as it is (off in a new one).
WERROR ?=
cmake_werror = $(if $(WERROR),-DALALLO_WERROR=$(WERROR))

.PHONY: all build deps deps-test run test unit integration integration-pg e2e gpu-emu asan fuzz bench clean node-deps layers

all: build

deps:
	@scripts/deps.sh build

deps-test:
	@scripts/deps.sh test

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo $(cmake_werror) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

run: build
	@scripts/run.sh $(BUILD)/alallo $(DATA) $(PORT)

node-deps: deps-test
	@scripts/node-deps.sh

# Every #include follows the arrows between the folders of src/
# (scripts/check-layers.sh), and no files of src/control, src/api or
# src/cli include each other in a circle (scripts/check-circles.py), each
# check with its self-test in ctest (layers/*; docs/architecture.md).
layers:
	@scripts/check-layers.sh
	@scripts/check-circles.py

unit integration integration-pg e2e gpu-emu asan: WERROR = ON

# (The emulator's race checks, label emu_race, run in gpu-emu.)
unit: layers build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS) -LE emu_race

# Every file on SQLite, then a subset on a throwaway PostgreSQL (service_*,
# sched_*, kill -9 of serve, remote workers, the take-over of a standby).
integration: build node-deps
	@scripts/integration.sh $(BUILD)/alallo
	@scripts/integration.sh $(BUILD)/alallo postgresql

integration-pg: build node-deps
	@scripts/integration.sh $(BUILD)/alallo postgresql

# Browser tests of the dashboard: headless Chromium through playwright-core.
e2e: build node-deps
	@ALALLO_BIN=$(abspath $(BUILD)/alallo) ALALLO_ROOT=$(CURDIR) \
	  ALALLO_E2E_ARTIFACTS=$(abspath $(BUILD))/e2e-artifacts \
	  node --test --test-concurrency=1 tests/e2e/*.test.mjs

# Each stage timed; the log ends with a line a stage (scripts/test-stages.sh).
test: deps-test
	@scripts/test-stages.sh layers unit integration e2e gpu-emu asan fuzz

# The GPU backend compiled onto the CPU emulator of tests/gpu/emu/ (a test
# build, never a product one; docs/trainer.md, "The whole binary under the
# emulator"): every GPU test but the PyTorch comparison (which needs
# transformers and peft, on the GPU machine: scripts/gpu-check.sh), then the
# service end to end with one emulated GPU worker, ALALLO_TEST_GPU standing
# in for nvidia-smi's line. All of it in a shuffled order
# (ALALLO_EMU_SHUFFLE: blocks and threads in an order drawn from the seed),
# after the shared-memory race checks of the attention kernels and the
# reductions, which run on the CPU build (ctest -L emu_race in $(BUILD);
# tests/gpu/emu/emu_race.h). The race checks are one long single-threaded
# test (the attention's, minutes under the detector), so they run beside
# the emulator's build and tests, one at a time, and print at the end
# (docs/testing.md, "The race checks beside the emulator's build").
gpu-emu: deps node-deps build
	@race_log=$$(mktemp /tmp/alallo-emu-race-XXXXXX); \
	( cd $(BUILD) && ctest --output-on-failure -L emu_race -j 1 ) >"$$race_log" 2>&1 & race=$$!; \
	echo "gpu-emu: the race checks (ctest -L emu_race) beside the emulator's build and tests, output at the end"; \
	cmake -S . -B build-emu -DCMAKE_BUILD_TYPE=RelWithDebInfo -DALALLO_CUDA=OFF -DALALLO_CUDA_EMU=ON \
	  $(cmake_werror) >/dev/null && \
	cmake --build build-emu -j $(JOBS) --target alallo gpu_test_cuda_attn gpu_test_cuda_gemm \
	  gpu_test_cuda_memory gpu_test_cuda_model gpu_test_cuda_ops gpu_test_cuda_resume && \
	( cd build-emu && ALALLO_EMU_SHUFFLE=4 ctest --output-on-failure -L gpu -E test_cuda_torch -j $(JOBS) ); \
	rc=$$?; wait $$race; race_rc=$$?; \
	echo "gpu-emu: the race checks:"; cat "$$race_log"; rm -f "$$race_log"; \
	echo "gpu-emu: emulator tests exited $$rc, race checks $$race_rc"; \
	[ $$rc -eq 0 ] && [ $$race_rc -eq 0 ]
	@ALALLO_EMU_SHUFFLE=5 ALALLO_TEST_GPU="emulated-gpu,16384" ALALLO_BIN=$(abspath build-emu/alallo) ALALLO_ROOT=$(CURDIR) \
	  node --test --test-concurrency=1 tests/integration/gpu_e2e.test.mjs

# Every libFuzzer target for a short, bounded time, after replaying the
# saved crash inputs (fuzz/run.sh; FUZZ_SECONDS per target).
FUZZ_SECONDS ?= 8
fuzz: deps-test
	@fuzz/run.sh $(FUZZ_SECONDS)

# The unit and integration suites again under AddressSanitizer +
# UndefinedBehaviorSanitizer, less the integration files that check what a
# model learns or a peer's reading of alallo's files
# (tests/integration/plain-pass-only.txt; docs/testing.md) (leaks are checked in the unit tests, where
# every allocation is freed before exit; serve and workers are killed).
# CPU-only (-DALALLO_CUDA=OFF, as CI's build): the CUDA runtime does not run
# under ASan's default shadow-memory layout (it needs protect_shadow_gap=0),
# and the GPU code is checked on a GPU by scripts/gpu-check.sh.
# Optimised (-O2, as the product build; AddressSanitizer's documentation
# advises -O1 or more): every access and operation the program still makes
# is checked, and the trainer, which the integration files run again and
# again, is many times faster than at -O0 (docs/testing.md).
asan: deps node-deps
	@cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS_DEBUG="-g -O2" \
	  -DALALLO_SANITIZE=ON -DALALLO_CUDA=OFF $(cmake_werror) >/dev/null
	@cmake --build build-asan -j $(JOBS)
	@cd build-asan && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -j $(JOBS) -LE emu_race
	@ASAN_OPTIONS=detect_leaks=0 ALALLO_IT_PLAIN_ONLY=leave scripts/integration.sh build-asan/alallo

clean:
	rm -rf $(BUILD) build-asan build-emu
