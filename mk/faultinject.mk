# Fault injection (tests/faultinject/README.md): the LD_PRELOAD shim that fails a write, fsync or
# rename with ENOSPC, or kills the process, at its N-th call under a directory, and the test that
# runs an analysis (analysis.h5) and a checkpoint save under it.
#   make test                     builds the shim; tests/test_fault_injection.py runs a sample of
#                                 the calls (both modes)
#   make test-faults-exhaustive   every call of each, modes enospc, enospc-once and kill
FAULTINJECT_SO := $(BUILD)/faultinject/faultinject.so

$(FAULTINJECT_SO): tests/faultinject/faultinject.c
	@mkdir -p $(dir $@)
	$(CC) -std=c11 -D_GNU_SOURCE -O2 -g -Wall -Wextra -fPIC -shared -o $@ $< -ldl

test: $(FAULTINJECT_SO)

.PHONY: faultinject test-faults-exhaustive
faultinject: $(FAULTINJECT_SO)

test-faults-exhaustive: $(PROGRAMS) $(FAULTINJECT_SO)
	@FAULT_EXHAUSTIVE=1 TEST_TIMEOUT=$(or $(FAULT_TIMEOUT),3600) BUILD=$(BUILD) tests/run_tests.sh test_fault_injection
