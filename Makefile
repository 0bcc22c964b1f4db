# Two commands for a fresh machine: `make demo` and `make test`.
# Both bootstrap .venv on first use and are no-ops for the install step after.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test pytest lit bench fuzz fuzz-compiler clean toolchains executorch-aarch64

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	# torch first and by exact version: this machine has its CPU wheel; letting pip
	# resolve torch through another package would pull a multi-GB CUDA build.
	$(PY) -m pip install -q torch==2.13.0
	# devtools: pandas, for Inspector.to_dataframe and ExecuTorch's devtools in the .bpte interop tests.
	# llm: the tokenizers library, which etc.llm's runner (and its tests) read tokenizer.json with.
	$(PY) -m pip install -q -e '.[test,devtools,quantization,llm]'
	# The reference we compare against in interop tests and benchmarks only.
	# --no-deps: executorch's own requirements would re-resolve torch.
	$(PY) -m pip install -q --no-deps executorch==1.5.1 ruamel.yaml==0.19.1 tabulate==0.10.0
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m etc.tools.demo

# The cross toolchains and emulators the deployment tests build and run with (C libraries for
# AArch64 and Cortex-M, the ExecuTorch backend for AArch64): Debian's packages, installed here and
# never by hand. A no-op when every tool is already there.
TOOLCHAIN_PACKAGES := qemu-user qemu-system-arm gcc-aarch64-linux-gnu g++-aarch64-linux-gnu gcc-arm-none-eabi \
	libnewlib-arm-none-eabi
TOOLCHAIN_TOOLS := qemu-aarch64 qemu-system-arm aarch64-linux-gnu-gcc aarch64-linux-gnu-g++ arm-none-eabi-gcc
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

toolchains:
	@for tool in $(TOOLCHAIN_TOOLS); do command -v $$tool >/dev/null || missing=1; done; \
	[ -f /usr/lib/arm-none-eabi/newlib/libc.a ] || missing=1; \
	if [ -n "$$missing" ]; then \
		echo "installing $(TOOLCHAIN_PACKAGES)"; \
		$(SUDO) apt-get update -q && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q \
			--no-install-recommends $(TOOLCHAIN_PACKAGES); \
	fi

# The AArch64 ExecuTorch SDK: the executorch wheel built for manylinux AArch64 (its headers, shared
# libraries and CMake config, ~18 MB), which etc's ExecuTorch backend and runner are cross-built against
# (etc.runtime.executorch_backend.AARCH64_SDK) and run under qemu-aarch64 in the tests.
AARCH64_SDK := $(VENV)/executorch-aarch64
$(AARCH64_SDK)/.unpacked: $(STAMP)
	rm -rf $(AARCH64_SDK) && mkdir -p $(AARCH64_SDK)
	$(PY) -m pip download -q executorch==1.5.1 --no-deps --only-binary=:all: --platform manylinux_2_28_aarch64 \
		--python-version 3.11 -d $(AARCH64_SDK)/wheel
	$(PY) -c "import glob, zipfile; z = zipfile.ZipFile(glob.glob('$(AARCH64_SDK)/wheel/*.whl')[0]); \
		[z.extract(n, '$(AARCH64_SDK)') for n in z.namelist() if n.split('/')[1:2] in (['lib'], ['include'], ['share'])]"
	rm -rf $(AARCH64_SDK)/wheel
	touch $@

executorch-aarch64: $(AARCH64_SDK)/.unpacked

# pytest on both cores (pytest-xdist; worksteal: a worker that runs out takes tests queued for the
# other, so a slow test near the end does not leave one core idle); lit runs its own workers.
test: $(STAMP) toolchains $(AARCH64_SDK)/.unpacked
	$(PY) -m pytest test/python -n 2 --dist worksteal -rfEs --durations=25
	$(VENV)/bin/lit -sv test/lit

pytest: $(STAMP) toolchains $(AARCH64_SDK)/.unpacked
	$(PY) -m pytest test/python -n 2 --dist worksteal -rfEs --durations=25

lit: $(STAMP)
	$(VENV)/bin/lit -sv test/lit

# The program fuzzer of test_program_fuzz.py with ten times its CI cases: mutated programs
# loaded and run in child processes; fails on any crash, hang, non-EtcError or silent wrong output.
FUZZ_CASES ?= 30000
fuzz: $(STAMP)
	cd test/python && ../../$(PY) program_fuzzer.py --cases $(FUZZ_CASES)

# The compiler fuzzer (test/python/model_fuzzer.py, FUZZING.md) with many more models than make test's
# budget: random models compiled portable and for the cpu target (1 and 2 threads, profiled), run at
# several sizes within their bounds, compared with eager, on both cores. It stops at the first
# failure of each half, shrinks it to a minimal model and prints its reproduction script (also in
# fuzz-failures/); FUZZ_FLAGS=--keep-going records every failure unshrunk instead.
FUZZ_MODELS ?= 5000
FUZZ_SEED ?= 0
FUZZ_FLAGS ?=
fuzz-compiler: $(STAMP)
	cd test/python && ../../$(PY) model_fuzzer.py --models $(FUZZ_MODELS) --seed $(FUZZ_SEED) --jobs 2 \
		--failures-dir ../../fuzz-failures $(FUZZ_FLAGS)

# Bench-only dependencies (bench/hf_models.py builds real models from transformers configs),
# in their own stamp so that `make test` never needs them. transformers does not depend on
# torch; torch is named again, at its exact version, so that no resolution can replace it.
BENCH_STAMP := $(VENV)/.bench-installed

$(BENCH_STAMP): $(STAMP) Makefile
	$(PY) -m pip install -q torch==2.13.0 transformers==5.23.0 huggingface_hub==2.4.0 tokenizers==0.23.3 safetensors==0.8.0
	touch $(BENCH_STAMP)

bench: $(STAMP) $(BENCH_STAMP)
	$(PY) -m etc.bench

clean:
	rm -rf $(VENV)

# Deploying without Python (README "Microcontrollers"): the MNIST-style MLP and the keyword-spotting
# DS-CNN, int8, as C libraries linked into Cortex-M33 firmware for QEMU's mps2-an505 (etc's start-up
# code, linker script and semihosting harness, etc/targets/cpu/firmware/), with the size report;
# run-firmware boots them under qemu-system-arm and prints the predictions.
FIRMWARE_BOARD ?= mps2-an505

.PHONY: firmware run-firmware
firmware: $(STAMP) toolchains
	$(PY) -m etc.tools.firmware build --board $(FIRMWARE_BOARD)

run-firmware: $(STAMP) toolchains
	$(PY) -m etc.tools.firmware run --board $(FIRMWARE_BOARD)
