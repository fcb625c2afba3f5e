# make test-asan: the compiled test suite (C unit and integration tests, the GPU tests on the
# CUDA emulator tests/cuemu) built with AddressSanitizer + UndefinedBehaviorSanitizer in its
# own build directory $(ASAN_BUILD)/ and run there. Any sanitizer report stops the program
# (-fno-sanitize-recover, halt_on_error), which tests/run_tests.sh counts as a failure; the
# last line is run_tests.sh's "N passed, M failed, K skipped".
#   make test-asan                       everything
#   make test-asan ASAN_TESTS=test_probe  only the programs whose path matches
# The Python and shell tests drive ./train and ./tokenize, which stay the normal build; they
# are not part of this run. The sanitized programs are built as $(ASAN_BUILD)/bin/train and
# $(ASAN_BUILD)/bin/tokenize, and tests/asan/test_asan_cli.sh (run as
# $(ASAN_BUILD)/tests/test_asan_cli) drives them through their main paths.
ASAN_BUILD    ?= build-asan
# float-cast-overflow (a double outside the target type's range converted to it, e.g. a JSON
# 1e300 read into a long) is not part of gcc's -fsanitize=undefined; clang's fuzz build has it.
ASAN_SAN      := -fsanitize=address,undefined,float-cast-overflow -fno-sanitize-recover=all -fno-omit-frame-pointer
ASAN_CFLAGS   ?= -O1 -g
ASAN_CC       ?= gcc
ASAN_CXX      ?= g++
ASAN_TESTS    ?=
# the first report ends the program with status 1 (run_tests.sh: "exited with status 1");
# leaks are reported too (tests/asan/lsan.supp: only third-party libraries' own allocations)
ASAN_RUNTIME  := ASAN_OPTIONS=halt_on_error=1:abort_on_error=0:detect_leaks=1:strict_string_checks=1:check_initialization_order=1 \
                 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
                 LSAN_OPTIONS=suppressions=$(CURDIR)/tests/asan/lsan.supp:print_suppressions=0

# Each program's time limit under the sanitizers: 1500 s (TEST_TIMEOUT overrides): the emulated
# CUDA parity suite took 667 s on the 2-core machine under load (~3x its plain run per kernel).
.PHONY: test-asan asan-build
test-asan:
	+@CFLAGS='$(ASAN_CFLAGS)' $(MAKE) --no-print-directory BUILD=$(ASAN_BUILD) \
	  CC='$(ASAN_CC) $(ASAN_SAN)' CXX='$(ASAN_CXX) $(ASAN_SAN)' CUDA=0 asan-build
	@$(ASAN_RUNTIME) TEST_TIMEOUT=$${TEST_TIMEOUT:-1500} BUILD=$(ASAN_BUILD) TESTS='$(ASAN_BUILD)/tests/*$(ASAN_TESTS)' tests/run_tests.sh

# (run inside the sanitized sub-make, where BUILD is $(ASAN_BUILD)) every test binary, and the
# two programs under $(BUILD)/bin/ (never ./train: that is the normal build)
asan-build: $(TEST_BIN) $(BUILD)/bin/train $(BUILD)/bin/tokenize $(BUILD)/tests/test_asan_cli

$(BUILD)/tests/test_asan_cli: tests/asan/test_asan_cli.sh
	@mkdir -p $(dir $@)
	cp $< $@

$(BUILD)/bin/train: $(TRAIN_CLI_OBJ) $(BUILD)/libphaselab.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/bin/tokenize: $(BUILD)/cli/tokenize_main.o $(BUILD)/libphaselab.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)
