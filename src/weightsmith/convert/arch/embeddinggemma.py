"""EmbeddingGemma (``Gemma3TextModel``): Gemma 3 text run bidirectionally, as an embedding
model -- llama.cpp's ``EmbeddingGemma`` class (conversion/gemma.py), GGUF arch
``gemma-embedding``.

Gemma 3's rows and ops (norm + 1, embedding rows cut to the tokenizer), then:

* ``attention.sliding_window`` again, from ``config.json`` itself (the reference re-reads
  it there; it refuses a config without one);
* ``dense_2_feat_in`` / ``_out``, ``dense_3_feat_in`` / ``_out`` and the tensors
  ``dense_2.weight`` / ``dense_3.weight``, written first: the sentence-transformers
  ``Dense`` modules after the pooling (:func:`weightsmith.convert._pooling.dense_modules`;
  the reference takes them with ``--sentence-transformers-dense-modules``, and without
  that flag writes neither: llama.cpp then returns the pooled hidden state, not the
  model's embedding -- we always take them);
* ``pooling_type`` from the sentence-transformers files.

The checkpoint's names have no ``model.`` prefix (``layers.N.``, ``embed_tokens``,
``norm``).  GGUF -> HF writes a ``Gemma3TextModel`` with
``use_bidirectional_attention`` and the Dense modules back as sentence-transformers
modules.  llama.cpp uses Gemma 3's fixed layer pattern (every 6th layer global) and
scales queries by ``1/sqrt(head_dim)``, so the config gets the class's default
``layer_types`` and ``query_pre_attn_scalar = head_dim``.
"""

from __future__ import annotations

from ._common import BASE_NAMES, GEMMA_EMBED_ROWS, GEMMA_NORM, GEMMA_NORMS, QK_NORM
from ._model import Arch, NameRule, m
from .gemma import GEMMA3

DENSE = ("dense_2.weight", "dense_3.weight")


def _dense_dim(tensor: str, k: int):
    return lambda cfg: (cfg.get("_dense") or {}).get(tensor, (None, None))[k]


GEMMA_EMBEDDING = Arch(
    hf_archs=("Gemma3TextModel",),
    gguf_arch="gemma-embedding",
    meta=[
        *GEMMA3.meta,
        m("attention.sliding_window", "sliding_window"),
        *[
            m(f"{t[:-7]}_feat_{io}", f"_{t[:-7]}_feat_{io}", value=_dense_dim(t, k))
            for t in DENSE
            for k, io in enumerate(("in", "out"))
        ],
        m("pooling_type", "_pooling_type", value=lambda c: c.get("_pooling_type")),
    ],
    names=[*BASE_NAMES, *QK_NORM, *GEMMA_NORMS, *[NameRule(t, t) for t in DENSE]],
    transforms=[GEMMA_EMBED_ROWS, GEMMA_NORM],
    renames=((r"^(embed_tokens|layers|norm)\.", r"model.\1."),),
    vocab_rows=True,
    required=(*GEMMA3.required, "sliding_window"),
    defaults=GEMMA3.defaults,
    pooling=True,
    dense=DENSE,
    tokenizer=GEMMA3.tokenizer,
    model_types={"Gemma3TextModel": "gemma3_text"},
    hf_config=lambda cfg, names: {
        "hidden_activation": "gelu_pytorch_tanh",
        "query_pre_attn_scalar": cfg.get("head_dim", 256),
        "use_bidirectional_attention": True,
    },
)
