"""Names vulture (tests/test_dead_code.py) would call unused, and why they are kept.

Each line is a use vulture can see; keep this list short and say why.
"""

# fields of public result objects: read by callers, not by the package
ConversionResult.architecture  # noqa: B018, F821 -- convert.hf_to_gguf's result
Imatrix.chunk_size  # noqa: B018, F821 -- quant.imatrix: what llama-imatrix recorded
TensorRef.requires_grad  # noqa: B018, F821 -- torchfile: the flag the checkpoint stores
LegacyLayout.sys_info  # noqa: B018, F821 -- torchfile: the legacy file's sys_info record
StreamWriter.remaining  # noqa: B018, F821 -- safetensors: public writer API

# attributes of the tokenizers library's objects, set by us
tokenizer.pre_tokenizer  # noqa: B018, F821
tokenizer.post_processor  # noqa: B018, F821

# counters of quant/recipes.py's state, named by string (getattr/setattr)
_State.i_ffn_gate  # noqa: B018, F821
_State.i_ffn_up  # noqa: B018, F821

# HF's private helpers that downstream code imports from safetensors.torch (issue 17)
_end_ptr  # noqa: B018, F821
_is_complete  # noqa: B018, F821
