"""An mtmd context over a text GGUF and its projector, for in-process mtmd checks."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


@contextmanager
def mtmd_pair(text: Path, mmproj: Path, n_ctx: int = 256, **params: Any) -> Iterator[tuple]:
    """``(llm, ctx)``: llama-cpp-python's model of ``text`` and mtmd's context of ``mmproj``
    on the CPU with 2 threads; ``params`` set further mtmd context fields (``warmup``,
    ``flash_attn_type``). Both are freed on exit."""
    import llama_cpp
    from llama_cpp import mtmd_cpp

    llm = llama_cpp.Llama(model_path=str(text), n_ctx=n_ctx, n_threads=2, verbose=False)
    try:
        p = mtmd_cpp.mtmd_context_params_default()
        p.use_gpu, p.n_threads, p.print_timings = False, 2, False
        for key, value in params.items():
            setattr(p, key, value)
        ctx = mtmd_cpp.mtmd_init_from_file(str(mmproj).encode(), llm.model, p)
        assert ctx is not None, "mtmd did not load the projector"
        try:
            yield llm, ctx
        finally:
            mtmd_cpp.mtmd_free(ctx)
    finally:
        llm.close()
