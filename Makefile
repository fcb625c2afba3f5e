# phaselab build.
#   make          builds ./train and ./tokenize (CPU backend; CUDA backend too wherever nvcc exists)
#   make test     builds and runs the whole test suite; last line "N passed, M failed, K skipped"
#   make run      the default job: synthetic corpus + configs/demo.ini on the CPU
#   make bench    CPU training-step benchmark (tokens/s, GFLOP/s, sgemm peak)
# Dependencies are installed by tools/install-deps when a marker of one is missing.
#
# Layout of the build: every .c under model/ kernels/ kernels/cpu/ trainer/ data/ except *main.c goes
# into build/libphaselab.a; every kernels/cuda/*.cu into the same archive when nvcc exists.
# tests/test_*.c each become build/tests/test_* linked against that archive.

BUILD   ?= build
CC      ?= gcc
CUDA_HOME ?= /usr/local/cuda
NVCC    ?= $(firstword $(wildcard $(CUDA_HOME)/bin/nvcc) $(shell command -v nvcc 2>/dev/null))
CUDA_ARCHS ?= 80 90
# (plus PTX of the last architecture, so newer GPUs can JIT-compile it)
MPI_INC := $(shell pkg-config --cflags-only-I ompi-c 2>/dev/null)
MPI_LIB := $(shell pkg-config --libs ompi-c 2>/dev/null)
HDF5_INC := -I/usr/include/hdf5/serial
# OpenBLAS built on OpenMP, so that BLAS calls and our OpenMP loops share one thread pool (the
# pthread build's spinning threads fight OpenMP's on a small machine: 2x slower here).
BLAS_DIR := /usr/lib/x86_64-linux-gnu/openblas-openmp
BLAS_INC := -I/usr/include/x86_64-linux-gnu/openblas-openmp
BLAS_LIB := -L$(BLAS_DIR) -Wl,-rpath,$(BLAS_DIR) -lopenblas
HDF5_LIB := -L/usr/lib/x86_64-linux-gnu/hdf5/serial -lhdf5_serial -lhdf5_serial_hl

CFLAGS  ?= -O3 -march=x86-64-v3 -g
CFLAGS  += -std=c11 -D_GNU_SOURCE -fopenmp -Wall -Wextra -Wno-unused-parameter -Wno-sign-compare \
           -I. $(MPI_INC) $(HDF5_INC) $(BLAS_INC) -MMD -MP
LDLIBS  := -fopenmp $(BLAS_LIB) $(HDF5_LIB) -linih -lcjson -lpcre2-8 -lutf8proc -lz -lzstd $(MPI_LIB) -lm -lpthread

LDLIBS_HOST := $(LDLIBS)

ifneq ($(NVCC),)
  HAVE_CUDA := 1
  CFLAGS  += -DPHASELAB_CUDA -I$(CUDA_HOME)/include
  NVFLAGS := -O3 -std=c++17 -I. -I$(CUDA_HOME)/include -DPHASELAB_CUDA $(MPI_INC) -MMD -MP \
             $(foreach a,$(CUDA_ARCHS),-gencode arch=compute_$(a),code=sm_$(a)) \
             -gencode arch=compute_$(lastword $(CUDA_ARCHS)),code=compute_$(lastword $(CUDA_ARCHS)) -Xcompiler -fPIC
  LDLIBS  += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudart -lcublasLt -lcublas -lcudnn -lnccl -lstdc++
endif

LIB_SRC  := $(filter-out %main.c,$(wildcard model/*.c kernels/cpu/*.c trainer/*.c data/*.c kernels/*.c))
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/%.o)
CU_SRC   := $(if $(HAVE_CUDA),$(wildcard kernels/cuda/*.cu))
CU_OBJ   := $(CU_SRC:%.cu=$(BUILD)/%.cu.o)
TEST_SRC := $(wildcard tests/test_*.c tests/gpu/test_*.c)
TEST_BIN := $(TEST_SRC:%.c=$(BUILD)/%) $(BUILD)/tests/ref_forward
PROGRAMS := train tokenize

DEPS_STAMP := $(BUILD)/.deps-ok

.PHONY: all test run bench clean deps gpu-check
all: $(PROGRAMS)

# Re-run tools/install-deps whenever a header or tool we need is missing.
$(DEPS_STAMP): tools/install-deps
	@missing=0; for f in /usr/include/x86_64-linux-gnu/openblas-openmp/cblas.h /usr/include/ini.h /usr/include/cjson/cJSON.h \
	  /usr/include/hdf5/serial/hdf5.h /usr/include/pcre2.h /usr/include/utf8proc.h /usr/include/zstd.h /usr/bin/mpirun /usr/sbin/slurmctld /usr/bin/zstd; do \
	  [ -e $$f ] || missing=1; done; \
	python3 -c "import numpy, h5py, matplotlib" 2>/dev/null || missing=1; \
	if [ $$missing = 1 ]; then tools/install-deps; fi
	@mkdir -p $(BUILD) && touch $@
deps: ; @tools/install-deps

$(BUILD)/%.o: %.c | $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/%.cu.o: %.cu | $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -c $< -o $@

$(BUILD)/libphaselab.a: $(LIB_OBJ) $(CU_OBJ)
	@rm -f $@
	ar rcs $@ $^

# The program is ./train; its sources live in trainer/ (a file and a directory cannot share
# the name "train").
train: $(BUILD)/trainer/main.o $(BUILD)/libphaselab.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

tokenize: $(BUILD)/data/tokenize_main.o $(BUILD)/libphaselab.a
	$(CC) -o $@ $^ $(LDLIBS)

$(BUILD)/tests/%: $(BUILD)/tests/%.o $(BUILD)/libphaselab.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# cuDNN graph check (nvcc builds only): offline in make test, on the GPU in tests/gpu/check.sh
ifneq ($(NVCC),)
TEST_BIN += $(BUILD)/tests/gpu/cudnn_graph_check
$(BUILD)/tests/gpu/cudnn_graph_check: $(BUILD)/tests/gpu/cudnn_graph_check.cu.o $(BUILD)/libphaselab.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)
endif

# ---- cuemu: the CUDA backend's own .cu files compiled with g++ against tests/cuemu (a CPU
# emulator of the CUDA runtime, WMMA, cuBLASLt and CUB), so that the GPU parity tests run on
# every machine. No nvcc needed. Binaries: $(BUILD)/tests/cuemu/test_* ("cuemu: " names).
CXX ?= g++
CUEMU_FLAGS := -std=c++17 -O2 -g -Itests/cuemu/include -I. $(BLAS_INC) -DPHASELAB_CUDA -DPHASELAB_CUEMU -MMD -MP \
               -Wall -Wno-comment -Wno-sign-compare -Wno-unknown-pragmas -Wno-unused-parameter -Wno-unused-function
CUEMU_OBJ := $(patsubst %.cu,$(BUILD)/cuemu/%.o,$(wildcard kernels/cuda/*.cu)) \
             $(patsubst %.cpp,$(BUILD)/cuemu/%.o,$(filter-out %test_cuemu_checks.cpp,$(wildcard tests/cuemu/*.cpp)))
CUEMU_TEST := $(patsubst tests/gpu/%.c,$(BUILD)/tests/cuemu/%,$(wildcard tests/gpu/test_*.c)) $(BUILD)/tests/cuemu/test_cuemu_checks
TEST_BIN += $(CUEMU_TEST)

$(BUILD)/cuemu/%.o: %.cu | $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	$(CXX) $(CUEMU_FLAGS) -x c++ -c $< -o $@

$(BUILD)/cuemu/%.o: %.cpp | $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	$(CXX) $(CUEMU_FLAGS) -c $< -o $@

$(BUILD)/tests/cuemu/%.o: tests/gpu/%.c | $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -DPHASELAB_CUDA -DPHASELAB_CUEMU '-DCHECK_NAME_PREFIX="cuemu: "' -c $< -o $@

# the emulator's self-test (tests/cuemu/test_cuemu_checks.cpp): needs only the emulator
CUEMU_RT := $(patsubst %.cpp,$(BUILD)/cuemu/%.o,$(filter-out %test_cuemu_checks.cpp,$(wildcard tests/cuemu/*.cpp)))
$(BUILD)/tests/cuemu/test_cuemu_checks: $(BUILD)/cuemu/tests/cuemu/test_cuemu_checks.o $(CUEMU_RT)
	$(CXX) -o $@ $^ $(LDLIBS_HOST)

# the emulated backend_cuda and cu_* come first, so the archive's real CUDA objects are never pulled
$(BUILD)/tests/cuemu/%: $(BUILD)/tests/cuemu/%.o $(CUEMU_OBJ) $(BUILD)/libphaselab.a
	$(CXX) -o $@ $^ $(LDLIBS_HOST)

test: $(PROGRAMS) $(TEST_BIN)
	@BUILD=$(BUILD) tests/run_tests.sh

run: $(PROGRAMS)
	@tools/demo-run

bench: $(PROGRAMS)
	./train --bench --threads 2

# GPU machine only: parity tests + benchmark in one script (logs to $$OUT when set)
gpu-check:
	tests/gpu/check.sh

clean:
	rm -rf $(BUILD) tokenize

# test objects are intermediates of build/tests/%: keep them (no rebuild, no "rm" lines)
.SECONDARY:

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)

# The code version recorded in metrics.h5, checkpoints and logs.
$(BUILD)/trainer/main.o: CFLAGS += -DPHASELAB_VERSION=\"$(shell git describe --always --dirty 2>/dev/null || echo unknown)\"

# Feature fragments (fuzzing, sanitizers, ...): each mk/*.mk adds its own targets.
-include $(wildcard mk/*.mk)
