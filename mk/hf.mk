# HuggingFace export (issue 16): ./train embeds tools/hf/*.py (.incbin in trainer/hf_export.c)
# and copies them into every non-vanilla checkpoint; rebuild the object when they change.
$(BUILD)/trainer/hf_export.o: tools/hf/configuration_phaselab.py tools/hf/modeling_phaselab.py

# The venv tests/test_hf_transformers.py and tests/test_hf_tokenizer.py use when python3 lacks
# torch/transformers (they look for build/venv-hf/bin/python, or $PHASELAB_HF_PYTHON), and
# tests/test_tokenize_parquet.py for pyarrow. PyPI only: the torch wheel (539 MB) pulls the
# CUDA 13 wheels, ~6.0 GB installed, ~5 min here.
# HF_VENV= puts it elsewhere (CI keeps one outside the clone: .ci/run); point the tests at it
# with PHASELAB_HF_PYTHON=$(HF_VENV)/bin/python. An existing venv that lacks one of the modules
# (a package added since it was made) gets the missing packages installed.
HF_VENV_PACKAGES ?= torch==2.15.0 transformers==5.24.0 numpy h5py nexusformat==2.1.0 pyarrow
HF_VENV ?= $(BUILD)/venv-hf
.PHONY: hf-venv
hf-venv: $(HF_VENV)/bin/python
	@$(HF_VENV)/bin/python -c "import torch, transformers, numpy, h5py, nexusformat, pyarrow" 2>/dev/null || \
	  $(HF_VENV)/bin/pip install --quiet $(HF_VENV_PACKAGES) || \
	  echo "hf-venv: could not add the missing packages to $(HF_VENV): the tests that need them will be skipped"
$(HF_VENV)/bin/python:
	python3 -m venv $(HF_VENV)
	$(HF_VENV)/bin/pip install --quiet $(HF_VENV_PACKAGES) || { rm -rf $(HF_VENV); exit 1; }
