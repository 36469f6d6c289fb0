"""The compiled kernel core, built from ``csrc/`` by ``setup.py`` at install time.

One extension module per concern (``csrc/<name>.c`` -> ``weightsmith._native.<name>``).
Every kernel works on caller-owned buffers, releases the GIL while it runs and is
bit-exact with ggml's plain C reference; the Python layers above choose the row
chunks and the threads.  Two modules parse hostile bytes instead: ``st_header``
(the safetensors header validator) and ``gguf_meta`` (GGUF string arrays); both
are fuzzed and run under ASan/UBSan by ``scripts/test.sh``.
"""
