# HuggingFace export (issue 16): ./train embeds tools/hf/*.py (.incbin in trainer/hf_export.c)
# and copies them into every non-vanilla checkpoint; rebuild the object when they change.
$(BUILD)/trainer/hf_export.o: tools/hf/configuration_phaselab.py tools/hf/modeling_phaselab.py
