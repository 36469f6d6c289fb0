"""Tiny random encoder folders for tests/test_convert_encoders2.py (Gemma-embedding, UMT5,
mT5, nomic-bert MoE), kept apart from :mod:`support.hf_models` so builders for other
families do not collide.  Each builder takes the folder and returns it."""

from __future__ import annotations

import json
from pathlib import Path

from .hf_models import _mean_pooling, _random_init, _save, train_spm, train_unigram

_DENSE = "sentence_transformers.models.Dense"


def _dense(folder: Path, name: str, n_in: int, n_out: int, seed: int) -> None:
    """A sentence-transformers ``Dense`` module (no bias, identity activation)."""
    import numpy as np

    from weightsmith.safetensors import save_file

    d = folder / name
    d.mkdir()
    (d / "config.json").write_text(json.dumps({
        "in_features": n_in, "out_features": n_out, "bias": False,
        "activation_function": "torch.nn.modules.linear.Identity",
    }))  # fmt: skip
    w = np.random.default_rng(seed).standard_normal((n_out, n_in), dtype=np.float32) * 0.1
    save_file({"linear.weight": w.astype(np.float32)}, d / "model.safetensors")


def gemma_embedding(folder: Path, *, dtype: str = "float32", seed: int = 30) -> Path:
    """A tiny EmbeddingGemma: ``Gemma3TextModel`` with bidirectional attention (6 layers:
    Gemma 3's pattern, the last one global; a window of 8), a SentencePiece tokenizer,
    then mean pooling, ``2_Dense`` (64 -> 256), ``3_Dense``
    (256 -> 64) and ``Normalize``, as the published sentence-transformers folder."""
    from transformers import Gemma3TextConfig, Gemma3TextModel

    vocab = train_spm(folder)
    cfg = Gemma3TextConfig(
        vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=6,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        max_position_embeddings=256, sliding_window=8, query_pre_attn_scalar=16,
        use_bidirectional_attention=True, bos_token_id=1, eos_token_id=2, pad_token_id=0,
    )  # fmt: skip
    model = Gemma3TextModel(cfg)
    _random_init(model, seed)
    _save(model, folder, dtype)
    _mean_pooling(folder, 64)
    _dense(folder, "2_Dense", 64, 256, seed + 1)
    _dense(folder, "3_Dense", 256, 64, seed + 2)
    (folder / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Dense", "type": _DENSE},
        {"idx": 3, "name": "3", "path": "3_Dense", "type": _DENSE},
        {"idx": 4, "name": "4", "path": "4_Normalize",
         "type": "sentence_transformers.models.Normalize"},
    ]))  # fmt: skip
    return folder


def xlmr_with_tokenizer(folder: Path, *, json_only: bool = False) -> Path:
    """The tiny XLM-RoBERTa of :mod:`support.hf_models` plus the HF tokenizer files
    transformers saves for it (tokenizer.json, tokenizer_config.json); ``json_only``:
    without ``sentencepiece.bpe.model`` (jina-embeddings-v3's layout)."""
    from transformers import AutoTokenizer

    from .hf_models import xlmroberta

    xlmroberta(folder)
    AutoTokenizer.from_pretrained(folder).save_pretrained(folder)
    if json_only:
        (folder / "sentencepiece.bpe.model").unlink()
    return folder


def _t5_family(folder: Path, cls_name: str, seed: int) -> Path:
    import transformers

    from .hf_models import _t5_config

    vocab = train_unigram(folder)
    cfg_cls = getattr(transformers, cls_name.replace("ForConditionalGeneration", "Config")
                      .replace("Model", "Config"))  # fmt: skip
    cfg = cfg_cls(**{k: v for k, v in _t5_config(vocab).to_dict().items()
                     if k not in ("model_type", "architectures", "transformers_version")})  # fmt: skip
    model = getattr(transformers, cls_name)(cfg)
    _random_init(model, seed)
    return _save(model, folder, "float32")


def mt5(folder: Path) -> Path:
    """A tiny MT5ForConditionalGeneration (T5 v1.1 layout: gated GELU, untied head)."""
    return _t5_family(folder, "MT5ForConditionalGeneration", 31)


def umt5(folder: Path) -> Path:
    """A tiny UMT5ForConditionalGeneration: a relative attention bias in every block."""
    return _t5_family(folder, "UMT5ForConditionalGeneration", 32)


def umt5_model(folder: Path) -> Path:
    """A tiny UMT5Model (encoder-decoder without the LM head)."""
    return _t5_family(folder, "UMT5Model", 33)


def xlmr_wide(folder: Path) -> Path:
    """A tiny XLMRobertaModel 256 wide (rows of 256: the k-quants apply without fallback)."""
    from transformers import XLMRobertaConfig, XLMRobertaModel

    n_sp = train_unigram(folder, name="sentencepiece.bpe.model", ids=(-1, 2, 0, 1))
    _mean_pooling(folder, 256)
    cfg = XLMRobertaConfig(
        vocab_size=n_sp + 2, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
        num_attention_heads=4, max_position_embeddings=66, type_vocab_size=1, pad_token_id=1,
        bos_token_id=0, eos_token_id=2,
    )  # fmt: skip
    model = XLMRobertaModel(cfg, add_pooling_layer=False)
    _random_init(model, 34)
    return _save(model, folder, "float32")


def t5_wide(folder: Path) -> Path:
    """A tiny T5 (gated GELU) 256 wide, for the k-quants."""
    from transformers import T5ForConditionalGeneration

    from .hf_models import _t5_config

    cfg = _t5_config(train_unigram(folder))
    cfg.d_model, cfg.d_kv, cfg.d_ff = 256, 64, 512
    model = T5ForConditionalGeneration(cfg)
    _random_init(model, 35)
    return _save(model, folder, "float32")


def nomic_bert_moe(folder: Path, *, seed: int = 36) -> Path:
    """A tiny nomic-embed-text-v2-moe layout written with numpy (remote code): layer 0 a
    GELU ``fc1`` / ``fc2`` MLP, layer 1 (``moe_every_n_layers`` 2) 4 experts with top-2
    softmax routing; Q/K/V, output and MLP biases; RoPE; post-norm; XLM-R's Unigram
    tokenizer.json; mean pooling.  The experts' output bias is zero: llama.cpp (and its
    converter) have no slot for it."""
    import numpy as np

    from weightsmith.safetensors import save_file

    xlmr_with_tokenizer(folder, json_only=True)
    for f in ("config.json", "model.safetensors"):
        (folder / f).unlink()
    n_embd, n_inner, n_exp, vocab = 64, 128, 4, 130
    cfg = {
        "architectures": ["NomicBertModel"], "model_type": "nomic_bert", "n_embd": n_embd,
        "n_head": 4, "n_layer": 2, "n_inner": n_inner, "n_positions": 2048,
        "max_trained_positions": 2048, "vocab_size": vocab, "type_vocab_size": 1,
        "layer_norm_epsilon": 1e-5, "rotary_emb_base": 10000, "rotary_emb_fraction": 1.0,
        "rotary_emb_interleaved": False, "rotary_emb_scale_base": None,
        "activation_function": "gelu", "causal": False, "qkv_proj_bias": True,
        "mlp_fc1_bias": True, "mlp_fc2_bias": True, "prenorm": False, "pad_token_id": 1,
        "moe_every_n_layers": 2, "moe_top_k": 2, "num_experts": n_exp,
    }  # fmt: skip
    (folder / "config.json").write_text(json.dumps(cfg, indent=2))
    rng = np.random.default_rng(seed)

    def w(*shape: int, base: float = 0.0, scale: float = 0.05) -> np.ndarray:
        return (rng.standard_normal(shape, dtype=np.float32) * scale + base).astype(np.float32)

    t = {
        "embeddings.word_embeddings.weight": w(vocab, n_embd, scale=0.5),
        "embeddings.token_type_embeddings.weight": w(1, n_embd),
        "emb_ln.weight": w(n_embd, base=1.0),
        "emb_ln.bias": w(n_embd),
    }
    for i in range(2):
        p = f"encoder.layers.{i}."
        t |= {p + "attn.Wqkv.weight": w(3 * n_embd, n_embd, scale=0.2),
              p + "attn.Wqkv.bias": w(3 * n_embd),
              p + "attn.out_proj.weight": w(n_embd, n_embd, scale=0.2),
              p + "attn.out_proj.bias": w(n_embd)}  # fmt: skip
        for n in ("norm1", "norm2"):
            t[p + n + ".weight"], t[p + n + ".bias"] = w(n_embd, base=1.0), w(n_embd)
        if i == 0:
            t |= {p + "mlp.fc1.weight": w(n_inner, n_embd, scale=0.2),
                  p + "mlp.fc1.bias": w(n_inner),
                  p + "mlp.fc2.weight": w(n_embd, n_inner, scale=0.2),
                  p + "mlp.fc2.bias": w(n_embd)}  # fmt: skip
        else:
            t |= {p + "mlp.router.layer.weight": w(n_exp, n_embd, scale=0.5),
                  p + "mlp.experts.mlp.w1": w(n_exp * n_inner, n_embd, scale=0.2),
                  p + "mlp.experts.mlp.w2": w(n_exp * n_inner, n_embd, scale=0.2),
                  p + "mlp.experts.bias": np.zeros(n_embd, np.float32)}  # fmt: skip
    save_file(t, folder / "model.safetensors", metadata={"format": "pt"})
    return folder


def roberta(folder: Path, *, seed: int = 37) -> Path:
    """A tiny RobertaModel: llama.cpp's GPT-2 byte-level BPE as tokenizer.json, RoBERTa's
    padding id 1 (positions start at 2), mean pooling."""
    from transformers import RobertaConfig, RobertaModel

    from .hf_models import _bpe_tokenizer

    vocab = _bpe_tokenizer(folder, "gpt-2")
    _mean_pooling(folder, 64)
    cfg = RobertaConfig(
        vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, max_position_embeddings=66, type_vocab_size=1, pad_token_id=1,
        bos_token_id=50256, eos_token_id=50256,
    )  # fmt: skip
    model = RobertaModel(cfg, add_pooling_layer=False)
    _random_init(model, seed)
    return _save(model, folder, "float32")


def distilbert(folder: Path, *, masked_lm: bool = False, seed: int = 38) -> Path:
    """A tiny DistilBertModel (or DistilBertForMaskedLM: ``distilbert.`` prefix, ``vocab_*``
    head) with MiniLM's WordPiece tokenizer, mean pooling."""
    import shutil

    from transformers import DistilBertConfig, DistilBertForMaskedLM, DistilBertModel

    from .hf_models import minilm_dir

    src = minilm_dir()
    for f in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt"):
        shutil.copy(src / f, folder / f)
    _mean_pooling(folder, 64)
    cfg = DistilBertConfig(vocab_size=30522, dim=64, hidden_dim=128, n_layers=2, n_heads=4,
                           max_position_embeddings=128)  # fmt: skip
    model = (DistilBertForMaskedLM if masked_lm else DistilBertModel)(cfg)
    _random_init(model, seed)
    return _save(model, folder, "float32")


def reranker(folder: Path, family: str, *, seed: int = 39) -> Path:
    """A tiny cross-encoder (bge-reranker's layout: ``*ForSequenceClassification`` with one
    label): ``family`` ``xlmroberta`` (Unigram sentencepiece.bpe.model) or ``roberta``
    (GPT-2 BPE)."""
    import transformers

    from .hf_models import _bpe_tokenizer

    if family == "xlmroberta":
        vocab = train_unigram(folder, name="sentencepiece.bpe.model", ids=(-1, 2, 0, 1)) + 2
        bos = eos = None
        cls = "XLMRoberta"
    else:
        vocab, bos, cls = _bpe_tokenizer(folder, "gpt-2"), 50256, "Roberta"
        eos = bos
    cfg = getattr(transformers, cls + "Config")(
        vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, max_position_embeddings=66, type_vocab_size=1, pad_token_id=1,
        bos_token_id=0 if bos is None else bos, eos_token_id=2 if eos is None else eos,
        num_labels=1,
    )  # fmt: skip
    model = getattr(transformers, cls + "ForSequenceClassification")(cfg)
    _random_init(model, seed)
    return _save(model, folder, "float32")


def bert_reranker(folder: Path, *, labels: int = 1, seed: int = 40) -> Path:
    """A tiny BertForSequenceClassification (ms-marco cross-encoders' layout: ``bert.``
    prefix, pooler, one ``classifier`` layer) with MiniLM's WordPiece tokenizer."""
    import shutil

    from transformers import BertConfig, BertForSequenceClassification

    from .hf_models import minilm_dir

    src = minilm_dir()
    for f in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt"):
        shutil.copy(src / f, folder / f)
    cfg = BertConfig(vocab_size=30522, hidden_size=64, intermediate_size=128,
                     num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=128,
                     num_labels=labels)  # fmt: skip
    model = BertForSequenceClassification(cfg)
    _random_init(model, seed)
    return _save(model, folder, "float32")


def modernbert_reranker(folder: Path, *, seed: int = 41) -> Path:
    """A tiny ModernBertForSequenceClassification with one label (gte-reranker-modernbert's
    layout: ``model.`` prefix, ``head.dense`` / ``head.norm``, ``classifier``)."""
    from transformers import ModernBertConfig, ModernBertForSequenceClassification

    from .hf_models import _bpe_tokenizer

    vocab, eot = _bpe_tokenizer(folder, "gpt-2"), 50256
    cfg = ModernBertConfig(
        vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=3,
        num_attention_heads=4, max_position_embeddings=128, local_attention=16,
        global_attn_every_n_layers=3, pad_token_id=eot, bos_token_id=eot, eos_token_id=eot,
        cls_token_id=eot, sep_token_id=eot, num_labels=1,
    )  # fmt: skip
    model = ModernBertForSequenceClassification(cfg)
    _random_init(model, seed)
    return _save(model, folder, "float32")


def eurobert(folder: Path, *, seed: int = 42) -> Path:
    """A tiny EuroBertModel (Llama-like layers, bidirectional, GQA) with llama.cpp's
    GPT-2 BPE, mean pooling (``classifier_pooling`` mean: the reference refuses the
    config default ``late``)."""
    from transformers import EuroBertConfig, EuroBertModel

    from .hf_models import _bpe_tokenizer

    vocab, eot = _bpe_tokenizer(folder, "gpt-2"), 50256
    _mean_pooling(folder, 64)
    cfg = EuroBertConfig(
        vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=128,
        pad_token_id=eot, bos_token_id=eot, eos_token_id=eot, mask_token_id=eot,
        classifier_pooling="mean",
    )  # fmt: skip
    model = EuroBertModel(cfg)
    _random_init(model, seed)
    return _save(model, folder, "float32")


def distilbert_reranker(folder: Path, *, seed: int = 43) -> Path:
    """A tiny DistilBertForSequenceClassification with one label (``distilbert.`` prefix,
    ``pre_classifier`` then ReLU then ``classifier``) and MiniLM's WordPiece tokenizer."""
    import shutil

    from transformers import DistilBertConfig, DistilBertForSequenceClassification

    from .hf_models import minilm_dir

    src = minilm_dir()
    for f in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt"):
        shutil.copy(src / f, folder / f)
    cfg = DistilBertConfig(vocab_size=30522, dim=64, hidden_dim=128, n_layers=2, n_heads=4,
                           max_position_embeddings=128, num_labels=1)  # fmt: skip
    model = DistilBertForSequenceClassification(cfg)
    _random_init(model, seed)
    return _save(model, folder, "float32")


def camembert(folder: Path, *, unigram: bool = False, seed: int = 44) -> Path:
    """A tiny CamembertModel (RoBERTa's layout without a prefix: padding id 1, positions
    from 2), mean pooling.  Tokenizer: MiniLM's WordPiece (one llama.cpp's converter
    fingerprints), or with ``unigram`` CamemBERT's own kind, a SentencePiece Unigram
    ``sentencepiece.bpe.model`` saved by CamembertTokenizer (``tokenizer.json`` too)."""
    import shutil

    from transformers import CamembertConfig, CamembertModel

    from .hf_models import minilm_dir

    if unigram:
        from transformers import CamembertTokenizer

        n = train_unigram(folder, name="sentencepiece.bpe.model", ids=(-1, 2, 0, 1))
        CamembertTokenizer(str(folder / "sentencepiece.bpe.model")).save_pretrained(folder)
        vocab = n + 4
    else:
        src = minilm_dir()
        for f in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                  "vocab.txt"):  # fmt: skip
            shutil.copy(src / f, folder / f)
        vocab = 30522
    _mean_pooling(folder, 64)
    cfg = CamembertConfig(
        vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, max_position_embeddings=66, type_vocab_size=1,
    )  # fmt: skip
    model = CamembertModel(cfg, add_pooling_layer=False)
    _random_init(model, seed)
    return _save(model, folder, "float32")


def modernbert_mlm(folder: Path, *, decoder_bias: bool = True, seed: int = 43) -> Path:
    """A tiny ModernBertForMaskedLM (ModernBERT-base's layout: ``model.`` prefix, the
    ``head.dense`` / ``head.norm`` prediction head, ``decoder`` tied to the token
    embeddings, with its own bias unless ``decoder_bias`` is False) with llama.cpp's
    GPT-2 vocabulary, mean pooling."""
    from transformers import ModernBertConfig, ModernBertForMaskedLM

    from .hf_models import _bpe_tokenizer

    vocab, eot = _bpe_tokenizer(folder, "gpt-2"), 50256
    _mean_pooling(folder, 64)
    cfg = ModernBertConfig(
        vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=3,
        num_attention_heads=4, max_position_embeddings=128, local_attention=16,
        global_attn_every_n_layers=3, pad_token_id=eot, bos_token_id=eot, eos_token_id=eot,
        cls_token_id=eot, sep_token_id=eot, decoder_bias=decoder_bias,
    )  # fmt: skip
    model = ModernBertForMaskedLM(cfg)
    _random_init(model, seed)
    return _save(model, folder, "float32")
