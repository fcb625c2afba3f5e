# phaselab build.
#   make          builds ./train and ./tokenize (CPU backend; CUDA backend too wherever nvcc exists)
#   make test     builds and runs the whole test suite; last line "N passed, M failed, K skipped"
#   make run      the default job: synthetic corpus + configs/demo.ini on the CPU
#   make bench    CPU training-step benchmark (tokens/s, GFLOP/s, sgemm peak)
#   make mini-sweep   the laptop sweep of configs/mini/ (ROWS=claims: 5 seeds; QUICK=1) and its report
#   make gallery  the figure gallery of tools/report (docs/gallery.md) from a synthetic sweep
#   make config   prints what tools/configure found (BLAS, HDF5, MPI, CUDA archs, cuDNN, NCCL)
#
# Configuration: before anything is compiled, tools/configure finds every dependency (pkg-config,
# mpicc, nvcc, link tests) and writes $(BUILD)/config.mk; where a required one is missing,
# tools/install-deps installs it (Debian/Ubuntu as root or with sudo) or prints what to install,
# and configure runs again. make re-reads the new flags by itself (an included makefile that was
# remade restarts make), so the first `make` on a fresh machine works. Overrides (see
# tools/configure --help): CC ARCH_FLAGS BLAS BLAS_CFLAGS BLAS_LIBS HDF5_DIR MPI_HOME CUDA
# CUDA_HOME CUDA_ARCHS CUDNN_HOME NCCL_HOME PKG_CONFIG_PATH; changing one re-configures.
#
# Layout of the build (docs/CONVENTIONS.md): every .c under common/ model/ kernels/ kernels/cpu/ data/
# trainer/ analysis/ goes into build/libphaselab.a; every kernels/cuda/*.cu into the same archive
# when CUDA is on; cli/*.c are the programs' own objects, never in the archive.
# tests/test_*.c each become build/tests/test_* linked against that archive.

BUILD   ?= build
# Plain `make` builds the programs (the configuration rule below comes first in the file).
.DEFAULT_GOAL := all
CXX     ?= g++
CONFIG_MK := $(BUILD)/config.mk

# ---- configuration (tools/configure) --------------------------------------------------------
# What configure's result depends on besides its own text: the overrides and the search path.
CONFIG_INPUTS := CC=$(CC) ARCH_FLAGS=$(origin ARCH_FLAGS):$(ARCH_FLAGS) BLAS=$(BLAS) BLAS_CFLAGS=$(BLAS_CFLAGS) \
  BLAS_LIBS=$(BLAS_LIBS) HDF5_DIR=$(HDF5_DIR) MPI_HOME=$(MPI_HOME) CUDA=$(CUDA) CUDA_HOME=$(CUDA_HOME) \
  CUDA_ARCHS=$(CUDA_ARCHS) CUDNN_HOME=$(origin CUDNN_HOME):$(CUDNN_HOME) NCCL_HOME=$(origin NCCL_HOME):$(NCCL_HOME) \
  PKG_CONFIG_PATH=$(PKG_CONFIG_PATH) PATH=$(PATH)
NO_CONFIG_GOALS := clean help
ifneq ($(filter-out $(NO_CONFIG_GOALS),$(or $(MAKECMDGOALS),all)),)
  -include $(CONFIG_MK)
  ifneq ($(CONFIG_INPUTS_SEEN),$(CONFIG_INPUTS))
    CONFIG_FORCE := FORCE
  endif
endif
# The overrides a user gave (environment or make line) are exported to configure; the ones not
# given stay unset there (an empty CUDNN_HOME= would mean "no cuDNN").
CONFIG_VARS := CC ARCH_FLAGS BLAS BLAS_CFLAGS BLAS_LIBS HDF5_DIR MPI_HOME CUDA CUDA_HOME CUDA_ARCHS CUDNN_HOME NCCL_HOME
$(foreach v,$(CONFIG_VARS),$(if $(filter environment command% override,$(origin $(v))),$(eval export $(v))))
$(CONFIG_MK): tools/configure tools/install-deps $(CONFIG_FORCE)
	@mkdir -p $(BUILD)
	@tools/configure --out $@.new --summary $(BUILD)/config.summary --quiet || \
	  { tools/install-deps build && tools/configure --out $@.new --summary $(BUILD)/config.summary --quiet; } || \
	  { rm -f $@.new; tools/configure --out /dev/null; exit 1; }
	@echo 'CONFIG_INPUTS_SEEN := $(CONFIG_INPUTS)' >> $@.new
	@cat $(BUILD)/config.summary
	@if cmp -s $@.new $@; then rm -f $@.new; touch $@; else mv $@.new $@; fi
FORCE:
.PHONY: FORCE config
config: $(CONFIG_MK)
	@cat $(BUILD)/config.summary

ARCH_FLAGS_USED := $(CONFIG_ARCH_FLAGS)
CC := $(or $(CONFIG_CC),$(CC))
BLAS_INC := $(CONFIG_BLAS_CFLAGS)
MPI_INC  := $(CONFIG_MPI_CFLAGS)

CFLAGS  ?= -O3 -g
CFLAGS  += $(ARCH_FLAGS_USED) -std=c11 -D_GNU_SOURCE -fopenmp -Wall -Wextra -Werror=incompatible-pointer-types -Wno-unused-parameter -Wno-sign-compare \
           -I. -I$(BUILD)/gen $(CONFIG_CFLAGS) -MMD -MP
LDLIBS  := -fopenmp $(CONFIG_LIBS) -lm -lpthread

LDLIBS_HOST := $(LDLIBS)

HAVE_CUDA := $(filter 1,$(CONFIG_HAVE_CUDA))
NVCC := $(CONFIG_NVCC)
CUDA_HOME_USED := $(CONFIG_CUDA_HOME)
CUDA_ARCHS_USED := $(CONFIG_CUDA_ARCHS)
ifneq ($(HAVE_CUDA),)
  CUDA_DEFS := -DPHASELAB_CUDA $(if $(filter 1,$(CONFIG_HAVE_CUDNN)),-DPHASELAB_CUDNN $(CONFIG_CUDNN_CFLAGS)) \
               $(if $(filter 1,$(CONFIG_HAVE_NCCL)),-DPHASELAB_NCCL $(CONFIG_NCCL_CFLAGS))
  CFLAGS  += -I$(CUDA_HOME_USED)/include $(CUDA_DEFS)
  NVFLAGS := -O3 -std=c++17 -I. -I$(BUILD)/gen -I$(CUDA_HOME_USED)/include $(CUDA_DEFS) $(MPI_INC) -MMD -MP \
             $(foreach a,$(CUDA_ARCHS_USED),-gencode arch=compute_$(a),code=sm_$(a)) \
             -gencode arch=compute_$(lastword $(CUDA_ARCHS_USED)),code=compute_$(lastword $(CUDA_ARCHS_USED)) -Xcompiler -fPIC
  LDLIBS  += $(CONFIG_CUDA_LIBS) $(if $(filter 1,$(CONFIG_HAVE_CUDNN)),$(CONFIG_CUDNN_LIBS)) \
             $(if $(filter 1,$(CONFIG_HAVE_NCCL)),$(CONFIG_NCCL_LIBS)) -lstdc++
endif

LIB_SRC  := $(wildcard common/*.c model/*.c kernels/*.c kernels/cpu/*.c data/*.c trainer/*.c analysis/*.c)
# cli/: the programs' main()s and their dispatch (--bench, --summary); linked into the programs only.
TRAIN_CLI_OBJ    := $(patsubst %.c,$(BUILD)/%.o,$(filter-out cli/tokenize_main.c,$(wildcard cli/*.c)))
TOKENIZE_CLI_OBJ := $(BUILD)/cli/tokenize_main.o
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/%.o)
CU_SRC   := $(if $(HAVE_CUDA),$(wildcard kernels/cuda/*.cu))
CU_OBJ   := $(CU_SRC:%.cu=$(BUILD)/%.cu.o)
TEST_SRC := $(wildcard tests/test_*.c tests/gpu/test_*.c)
TEST_BIN := $(TEST_SRC:%.c=$(BUILD)/%) $(BUILD)/tests/ref_forward
PROGRAMS := train tokenize

VERSION_H := $(BUILD)/gen/phaselab_version.h

.PHONY: all test run bench mini-sweep clean deps gpu-check
all: $(PROGRAMS)

# Everything compiled depends on the configuration: a changed config.mk (another BLAS, cuDNN
# turned off, ...) rebuilds every object. config.mk changes only when configure's result does.
CONFIG_DEP := $(CONFIG_MK)
deps: ; @tools/install-deps all

# The code version (git describe) as one generated header: every object that records the
# version includes "phaselab_version.h" and is rebuilt when the commit (or dirty state) changes.
# The header is rewritten only when its text changes.
PHASELAB_GIT_VERSION := $(shell git describe --always --dirty 2>/dev/null || echo unknown)
$(VERSION_H): FORCE
	@mkdir -p $(dir $@)
	@printf '/* generated by make: the code version (git describe --always --dirty) and what tools/configure built in */\n#define PHASELAB_VERSION "%s"\n#define PHASELAB_BUILD_FEATURES "%s"\n' \
	  '$(PHASELAB_GIT_VERSION)' '$(CONFIG_FEATURES)' > $@.new
	@if cmp -s $@.new $@; then rm -f $@.new; else mv $@.new $@; fi

$(BUILD)/%.o: %.c $(CONFIG_DEP) | $(VERSION_H)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

# trainer/hf_export.c embeds the transformers remote code (.incbin), which the compiler's .d files do
# not list: a changed tools/hf/*.py must rebuild it, or ./train writes the old code into checkpoints.
$(BUILD)/trainer/hf_export.o: tools/hf/configuration_phaselab.py tools/hf/modeling_phaselab.py

$(BUILD)/%.cu.o: %.cu $(CONFIG_DEP) | $(VERSION_H)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -c $< -o $@

$(BUILD)/libphaselab.a: $(LIB_OBJ) $(CU_OBJ)
	@rm -f $@
	ar rcs $@ $^

# The programs: ./train (cli/train_main.c with cli/bench.c and cli/summary.c) and ./tokenize
# (cli/tokenize_main.c), each linked against the library archive.
train: $(TRAIN_CLI_OBJ) $(BUILD)/libphaselab.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

tokenize: $(TOKENIZE_CLI_OBJ) $(BUILD)/libphaselab.a
	$(CC) -o $@ $^ $(LDLIBS)

$(BUILD)/tests/%: $(BUILD)/tests/%.o $(BUILD)/libphaselab.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# cuDNN graph check (nvcc builds only): offline in make test, on the GPU in tests/gpu/check.sh
ifneq ($(filter 1,$(CONFIG_HAVE_CUDNN)),)
TEST_BIN += $(BUILD)/tests/gpu/cudnn_graph_check
$(BUILD)/tests/gpu/cudnn_graph_check: $(BUILD)/tests/gpu/cudnn_graph_check.cu.o $(BUILD)/libphaselab.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)
endif

# ---- cuemu: the CUDA backend's own .cu files compiled with g++ against tests/cuemu (a CPU
# emulator of the CUDA runtime, WMMA, cuBLASLt and CUB), so that the GPU parity tests run on
# every machine. No nvcc needed. Binaries: $(BUILD)/tests/cuemu/test_* ("cuemu: " names).
CUEMU_FLAGS := -std=c++17 -O2 -g -Itests/cuemu/include -I. $(BLAS_INC) -DPHASELAB_CUDA -DPHASELAB_CUEMU -MMD -MP \
               -Wall -Wno-comment -Wno-sign-compare -Wno-unknown-pragmas -Wno-unused-parameter -Wno-unused-function
CUEMU_OBJ := $(patsubst %.cu,$(BUILD)/cuemu/%.o,$(wildcard kernels/cuda/*.cu)) \
             $(patsubst %.cpp,$(BUILD)/cuemu/%.o,$(filter-out %test_cuemu_checks.cpp,$(wildcard tests/cuemu/*.cpp)))
CUEMU_TEST := $(patsubst tests/gpu/%.c,$(BUILD)/tests/cuemu/%,$(wildcard tests/gpu/test_*.c)) $(BUILD)/tests/cuemu/test_cuemu_checks
TEST_BIN += $(CUEMU_TEST)

$(BUILD)/cuemu/%.o: %.cu $(CONFIG_DEP) | $(VERSION_H)
	@mkdir -p $(dir $@)
	$(CXX) $(CUEMU_FLAGS) -x c++ -c $< -o $@

$(BUILD)/cuemu/%.o: %.cpp $(CONFIG_DEP) | $(VERSION_H)
	@mkdir -p $(dir $@)
	$(CXX) $(CUEMU_FLAGS) -c $< -o $@

$(BUILD)/tests/cuemu/%.o: tests/gpu/%.c $(CONFIG_DEP) | $(VERSION_H)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -DPHASELAB_CUDA -DPHASELAB_CUEMU '-DCHECK_NAME_PREFIX="cuemu: "' -c $< -o $@

# the emulator's self-test (tests/cuemu/test_cuemu_checks.cpp): needs only the emulator
CUEMU_RT := $(patsubst %.cpp,$(BUILD)/cuemu/%.o,$(filter-out %test_cuemu_checks.cpp,$(wildcard tests/cuemu/*.cpp)))
$(BUILD)/tests/cuemu/test_cuemu_checks: $(BUILD)/cuemu/tests/cuemu/test_cuemu_checks.o $(CUEMU_RT)
	$(CXX) -o $@ $^ $(LDLIBS_HOST)

# the emulated backend_cuda and cu_* come first, so the archive's real CUDA objects are never pulled.
# A static pattern rule: an implicit one lost to $(BUILD)/tests/% in an incremental build whenever a
# new kernels/cuda/*.cu had no emulator object yet (make prefers a rule whose prerequisites exist),
# and the test then linked against the real CUDA objects.
$(filter-out %/test_cuemu_checks,$(CUEMU_TEST)): $(BUILD)/tests/cuemu/%: $(BUILD)/tests/cuemu/%.o $(CUEMU_OBJ) $(BUILD)/libphaselab.a
	$(CXX) -o $@ $^ $(LDLIBS_HOST)

# make test and make run install what their scripts need (Python modules; Slurm and munge for
# the scheduler test) where they can; plain make never does.
test: $(PROGRAMS) $(TEST_BIN)
	@tools/install-deps test
	@BUILD=$(BUILD) tests/run_tests.sh

run: $(PROGRAMS)
	@tools/install-deps run
	@tools/demo-run

bench: $(PROGRAMS)
	./train --bench --threads 2

# The laptop mini-sweep (configs/mini/README.md): a row set of configs/mini/rows/ (default claims:
# every claim row x 5 seeds; ROWS=quick,extra,...; QUICK=1 = ROWS=quick), one-thread runs on all
# cores, resumable, ending with runs/mini/report/. JOBS=N SEEDS=1,2 MINI_OUT=DIR.
mini-sweep: $(PROGRAMS)
	@tools/install-deps run
	@ROWS='$(ROWS)' QUICK='$(QUICK)' tools/mini-sweep

# The figure gallery (docs/gallery.md, docs/img/gallery/): tools/report on a synthetic sweep.
.PHONY: gallery
gallery:
	tools/report --gallery docs/img/gallery --gallery-md docs/gallery.md

# GPU machine only: parity tests + benchmark in one script (logs to $$OUT when set)
gpu-check:
	tests/gpu/check.sh

clean:
	rm -rf $(BUILD) train tokenize

# test objects are intermediates of build/tests/%: keep them (no rebuild, no "rm" lines)
.SECONDARY:

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)

# Feature fragments (fuzzing, sanitizers, ...): each mk/*.mk adds its own targets.
-include $(wildcard mk/*.mk)
