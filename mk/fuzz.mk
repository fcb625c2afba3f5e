# Fuzzing (docs/fuzzing.md): libFuzzer harnesses tests/fuzz/fuzz_NAME.c for the input parsers,
# linked against the project library built by clang with the fuzzer's coverage instrumentation
# and ASan + UBSan, in its own build directory $(FUZZ_BUILD)/.
#   make fuzz                       builds $(FUZZ_BUILD)/fuzz/fuzz_NAME for every harness
#   make test-fuzz                  runs each for $(FUZZ_SECONDS) s (tests/fuzz/run_fuzz.sh); a
#                                   finding fails it; last line "N passed, M failed, K skipped"
#   make test-fuzz FUZZ_SECONDS=600 FUZZ_ONLY=probe   one harness, longer
# The seed corpora are tests/fuzz/corpus/NAME/ (read-only); new inputs go to
# $(FUZZ_BUILD)/corpus/NAME/, crashes to $(FUZZ_BUILD)/artifacts/.
FUZZ_BUILD    ?= build-fuzz
FUZZ_CC       ?= clang
FUZZ_SECONDS  ?= 30
FUZZ_ONLY     ?=
FUZZ_NAMES    := $(patsubst tests/fuzz/fuzz_%.c,%,$(wildcard tests/fuzz/fuzz_*.c))
FUZZ_SAN      := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
# The library without OpenMP (the parsers do not use it; clang's OpenMP runtime is not the
# libgomp that OpenBLAS is built on), so its loops compile serial: -Wno-source-uses-openmp.
# (CFLAGS is given on the sub-make's command line, which overrides the Makefile's own
# CFLAGS +=, so the generated-header directory -I$(FUZZ_BUILD)/gen is named here too.)
FUZZ_CFLAGS   := -O1 -g -march=x86-64-v3 -std=c11 -D_GNU_SOURCE -Wall -Wextra -Wno-unused-parameter \
                 -Wno-sign-compare -Wno-source-uses-openmp -Wno-unknown-pragmas -I. -I$(FUZZ_BUILD)/gen $(CONFIG_CFLAGS) -MMD -MP -fsanitize=fuzzer-no-link $(FUZZ_SAN)
FUZZ_LDLIBS   := $(filter-out -fopenmp,$(LDLIBS_HOST)) -lgomp
FUZZ_BIN      := $(FUZZ_NAMES:%=$(BUILD)/fuzz/fuzz_%)

FUZZ_RT       := $(firstword $(wildcard /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a))

.PHONY: fuzz test-fuzz fuzz-bins fuzz-deps
# clang and libFuzzer are test-only dependencies (tools/install-deps fuzz)
fuzz-deps:
	@if ! command -v $(FUZZ_CC) >/dev/null || [ -z "$(FUZZ_RT)" ]; then tools/install-deps fuzz; fi

fuzz: fuzz-deps
	+@$(MAKE) --no-print-directory BUILD=$(FUZZ_BUILD) CC='$(FUZZ_CC)' CFLAGS='$(FUZZ_CFLAGS)' CUDA=0 fuzz-bins

test-fuzz: fuzz
	@FUZZ_BUILD=$(FUZZ_BUILD) FUZZ_SECONDS=$(FUZZ_SECONDS) FUZZ_ONLY='$(FUZZ_ONLY)' tests/fuzz/run_fuzz.sh

# (inside the clang sub-make, where BUILD is $(FUZZ_BUILD))
fuzz-bins: $(FUZZ_BIN)

$(BUILD)/fuzz/fuzz_%: $(BUILD)/tests/fuzz/fuzz_%.o $(BUILD)/libphaselab.a
	@mkdir -p $(dir $@)
	$(CC) -fsanitize=fuzzer $(FUZZ_SAN) -o $@ $^ $(FUZZ_LDLIBS)
