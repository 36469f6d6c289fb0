"""The registry's data model: metadata rows, tensor ops and the per-tensor plan.

An :class:`Arch` entry is data.  Its tensor ops each have a forward (HF -> GGUF)
and an inverse (GGUF -> HF) reading of the same row:

* :class:`NameRule` -- rename one tensor (also "keep fused": Phi-3's ``qkv_proj``);
* :class:`Stack` -- N per-expert HF tensors ``...experts.{xid}.w1.weight`` -> one 3-D
  GGUF tensor ``[n_expert, rows, cols]`` (numpy order); inverse: slab ``xid``;
* :class:`Split` -- one HF tensor -> several GGUF tensors, as equal consecutive parts
  along an axis (fused ``gate_up_proj``) or interleaved (every n-th row); inverse:
  the parts concatenated (or re-interleaved);
* :class:`Transform` -- a value transform by a named function on the HF side (RoPE
  permutation, norm + 1, ...), with its inverse;
* :class:`Compose` -- a source tensor computed from several before the plan (forward
  only: PocketTTS's embedding with learned rows appended);
* :class:`ShapeConfig` -- the config of a checkpoint that ships no ``config.json``,
  derived from its tensor shapes (PocketTTS);
* :class:`Packed` -- raw passthrough of already-quantized HF data (gpt-oss MXFP4
  ``*_blocks`` + ``*_scales``) repacked into ggml blocks, no float round trip; its
  inverse is the float rule for the same GGUF names (the data is dequantized).

:meth:`Arch.plan` turns the source tensors (names and shapes, in the reference
converter's read order) into :class:`OutTensor` rows, in the order llama.cpp emits
them: a renamed or split tensor when its source is read; the tensors of a stack
*group* (e.g. Mixtral's w1, w2, w3 of one layer) when the last expert of the group
is read, in the group's rule order; :class:`Packed` tensors first of all (llama.cpp
writes them while it prepares the tensors).  :meth:`Arch.inverse_plan` turns GGUF tensor
names into :class:`HfTensor` rows.  Neither reads data; the converters stream it.

Metadata rows (:class:`MetaKey`) name the GGUF key, the config.json fields and the
value type; ``value`` derives a value from the whole config, ``inverse`` maps a
GGUF value back to the config field (``fields[0]``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...gguf import GGUFValueType

VT = GGUFValueType

#: placeholder row: ``general.file_type`` goes here in the metadata order
FILE_TYPE = "file_type"
#: the value of a :attr:`MetaKey.slot` row: the place of a key written later
SLOT = object()


# --------------------------------------------------------------------------- config helpers


def first(cfg: dict, keys: Iterable[str]) -> Any:
    """The value of the first key present (llama.cpp's ``find_hparam``)."""
    for k in keys:
        if k in cfg:
            return cfg[k]
    return None


def rope_parameters(cfg: dict) -> dict:
    """The RoPE settings as llama.cpp's TextModel normalises them (``rope_parameters`` or
    ``rope_scaling``, with the top-level ``rope_theta`` etc. mirrored in)."""
    rp = cfg.get("rope_parameters", cfg.get("rope_scaling")) or {}
    rp = dict(rp)
    if "full_attention" not in rp and "sliding_attention" not in rp:
        local = first(
            cfg,
            (
                "local_rope_theta",
                "rope_local_theta",
                "rope_theta_local",
                "swa_rope_theta",
                "rope_local_base_freq",
            ),
        )
        theta = first(
            cfg,
            (
                "global_rope_theta",
                "rope_global_theta",
                "rope_theta_global",
                "rope_theta",
                "rotary_emb_base",
            ),
        )
        prf = first(cfg, ("partial_rotary_factor", "rope_pct", "rope_percent"))
        if local is not None:
            rp["sliding_attention"] = {"rope_theta": local}
        if "rope_theta" not in rp and theta is not None:
            rp["rope_theta"] = theta
        if "rope_type" not in rp and rp.get("type") is not None:
            rp["rope_type"] = rp["type"]
        if "partial_rotary_factor" not in rp and prf is not None:
            rp["partial_rotary_factor"] = prf
        orig = cfg.get("original_max_position_embeddings")
        if "original_max_position_embeddings" not in rp and orig is not None:
            rp["original_max_position_embeddings"] = orig
    return rp


def full_rope(cfg: dict) -> dict:
    rp = rope_parameters(cfg)
    return rp.get("full_attention", rp)


def head_counts(cfg: dict) -> tuple[int, int]:
    """(heads, KV heads) under every spelling the registry's configs use (Falcon says
    ``num_kv_heads``, or ``multi_query`` for one KV head); llama-quantize's GQA rules
    read the KV count, so a missed spelling changes the recipe."""
    n_head = first(cfg, ("num_attention_heads", "n_heads"))  # n_heads: Mistral's params.json
    for key in ("num_key_value_heads", "num_kv_heads", "n_head_kv", "n_kv_heads"):
        if cfg.get(key):
            return n_head, cfg[key]
    return n_head, 1 if cfg.get("multi_query") else n_head


def head_dim(cfg: dict) -> int:
    hd = cfg.get("head_dim")
    return hd if hd is not None else cfg["hidden_size"] // cfg["num_attention_heads"]


def layer_of(name: str) -> int | None:
    """llama.cpp's block id: the first all-digit part of the name."""
    for part in name.split("."):
        if part.isdecimal():
            return int(part)
    return None


# --------------------------------------------------------------------------- metadata rows


@dataclass(frozen=True)
class MetaKey:
    """One ``<arch>.<key>`` hyperparameter.

    ``fields`` are the config.json fields read (first present wins; the inverse
    writes ``fields[0]``).  ``value`` overrides the lookup with a function of the
    whole config (returning None omits the key), for derived or defaulted values;
    ``inverse`` maps the GGUF value back (default: as is).  ``general`` rows are
    written under ``general.`` instead of the arch prefix, ``absolute`` ones under
    ``key`` as it is (a ``tokenizer.ggml.*`` key a model class writes with its
    hyperparameters).  A ``slot`` row writes nothing itself: it holds the place in the
    order of a key written later (the reference sets a default there that a later row
    overwrites in place: DeepSeek-V4's chat template).
    """

    key: str
    fields: tuple[str, ...]
    type: GGUFValueType
    value: Callable[[dict], Any] | None = None
    general: bool = False
    inverse: Callable[[Any], Any] | None = None
    absolute: bool = False
    slot: bool = False

    def get(self, cfg: dict) -> Any:
        if self.value is not None:
            return self.value(cfg)
        return first(cfg, self.fields)

    def full_key(self, arch: str) -> str:
        if self.absolute:
            return self.key
        return f"general.{self.key}" if self.general else f"{arch}.{self.key}"

    def back(self, v: Any) -> Any:
        return v if self.inverse is None else self.inverse(v)


def m(key: str, *fields: str, t: GGUFValueType = VT.UINT32, value=None, inverse=None) -> MetaKey:
    """Shorthand for a :class:`MetaKey` row."""
    return MetaKey(key, tuple(fields), t, value, inverse=inverse)


# --------------------------------------------------------------------------- tensor ops


def _rx(template: str) -> re.Pattern[str]:
    s = re.escape(template)
    s = s.replace(r"\{bid\}", r"(?P<bid>\d+)").replace(r"\{xid\}", r"(?P<xid>\d+)")
    return re.compile(s + r"$")


@dataclass(frozen=True)
class NameRule:
    """HF name template (``{bid}`` = layer number) <-> GGUF name template.

    ``unless`` (a GGUF name template): the inverse does not apply when the file has that
    tensor (T5's ``ffn_up`` is ``wi`` alone, ``wi_1`` beside a ``ffn_gate``)."""

    hf: str
    gguf: str
    unless: str = ""

    def forward(self, name: str) -> str | None:
        mt = _rx(self.hf).match(name)
        return None if mt is None else self.gguf.format(**mt.groupdict())

    def inverse(self, name: str, present: frozenset[str] = frozenset()) -> str | None:
        mt = _rx(self.gguf).match(name)
        if mt is None or (self.unless and self.unless.format(**mt.groupdict()) in present):
            return None
        return self.hf.format(**mt.groupdict())


@dataclass(frozen=True)
class Stack:
    """Per-expert HF tensors (``{xid}`` = expert number) <-> one 3-D GGUF tensor.

    ``count`` gives the number of experts from the config (``layer_count``, when set,
    from the config and the layer number: Dots3 Note's vision tower has more experts in
    later blocks).  Rules sharing ``group`` are emitted together, in rule order, when the
    last expert of the last of them has been read (llama.cpp buffers a layer's experts
    that way).
    """

    hf: str
    gguf: str
    count: Callable[[dict], int]
    group: str = "experts"
    layer_count: Callable[[dict, int], int] | None = None

    def n(self, cfg: dict, bid: int) -> int:
        """The number of experts of layer ``bid``."""
        return self.count(cfg) if self.layer_count is None else self.layer_count(cfg, bid)

    def match(self, name: str) -> tuple[int, int] | None:
        mt = _rx(self.hf).match(name)
        return None if mt is None else (_bid(mt), int(mt["xid"]))

    def inverse_match(self, name: str) -> int | None:
        mt = _rx(self.gguf).match(name)
        return None if mt is None else _bid(mt)


def _bid(mt: re.Match[str]) -> int:
    """The layer number of a match; -1 for a whole-model tensor (Gemma 3n's AltUp
    projections stack without one)."""
    bid = mt.groupdict().get("bid")
    return -1 if bid is None else int(bid)


@dataclass(frozen=True)
class Split:
    """One HF tensor <-> several GGUF tensors along ``axis`` (negative: from the end).

    The parts are equal consecutive blocks, or with ``interleave`` every n-th slice
    (part k takes slices k, k + n, ...).  A split no slice expresses (DeepSeek's MLA
    ``kv_b_proj``: per-head blocks of unequal size, one transposed) names functions
    instead: ``fn(x, cfg)`` -> the parts, ``shapes(shape, cfg)`` -> their shapes,
    ``join(parts, cfg)`` -> the HF tensor back.
    """

    hf: str
    gguf: tuple[str, ...]
    axis: int = 0
    interleave: bool = False
    fn: Callable[[np.ndarray, dict], list[np.ndarray]] | None = None
    shapes: Callable[[tuple[int, ...], dict], list[tuple[int, ...]]] | None = None
    join: Callable[[list[np.ndarray], dict], np.ndarray] | None = None

    def forward(self, name: str) -> list[str] | None:
        mt = _rx(self.hf).match(name)
        return None if mt is None else [g.format(**mt.groupdict()) for g in self.gguf]

    def inverse(self, name: str) -> tuple[str, list[str]] | None:
        """``(hf name, all part names)`` if ``name`` is one of the parts."""
        for g in self.gguf:
            mt = _rx(g).match(name)
            if mt is not None:
                d = mt.groupdict()
                return self.hf.format(**d), [x.format(**d) for x in self.gguf]
        return None

    def take(self, k: int, shape: tuple[int, ...]) -> tuple[int, int, int | None, int]:
        """``(axis, start, stop, step)`` of part ``k`` in a source of ``shape``."""
        n = len(self.gguf)
        ax = self.axis % len(shape)
        if self.interleave:
            return ax, k, None, n
        size = shape[ax] // n
        return ax, k * size, (k + 1) * size, 1


@dataclass(frozen=True)
class Transform:
    """A value transform for HF names matching ``pattern`` (a regex, ``search``ed).

    ``forward(x, cfg, ctx)`` maps HF values to GGUF values, ``inverse(x, cfg, ctx)``
    back; ``shape(shape, cfg, ctx)`` gives the GGUF shape (numpy order) without data
    (identity by default), and ``inverse_shape`` the HF shape from the GGUF one (identity
    by default; a transpose is its own inverse).  ``ctx`` carries converter facts such as ``n_vocab``
    (the tokenizer's size).  ``exact`` says whether the inverse restores the
    original bits (a float add does not in general).
    """

    name: str
    pattern: str
    forward: Callable[[np.ndarray, dict, dict], np.ndarray]
    inverse: Callable[[np.ndarray, dict, dict], np.ndarray]
    shape: Callable[[tuple[int, ...], dict, dict], tuple[int, ...]] | None = None
    exact: bool = True
    inverse_shape: Callable[[tuple[int, ...], dict, dict], tuple[int, ...]] | None = None

    def matches(self, hf_name: str) -> bool:
        return re.search(self.pattern, hf_name) is not None


@dataclass(frozen=True)
class Packed:
    """Already-quantized HF data written as a ggml ``ggml`` tensor without a float round trip.

    The sources are ``hf + "_blocks"`` (uint8 ``[..., rows, n_blocks, block_bytes]``) and
    ``hf + "_scales"`` (uint8 ``[..., rows, n_blocks]``); ``repack(blocks, scales)`` gives
    the ggml bytes ``[..., rows, n_blocks * ggml block size]``; ``values`` is the number
    of values per block.  Several ``gguf`` names split the rows into parts (every n-th
    with ``interleave``, else consecutive), as :class:`Split` does for float weights.

    Per-expert sources (``count`` experts, ``{xid}`` in ``hf``; DeepSeek-V4's
    ``.weight`` ``[rows, cols / 2]`` + ``.scale`` ``[rows, cols / 32]``, ``suffixes``) are
    stacked per layer into one ``[n_expert, rows, cols]`` tensor, emitted in rule order
    when the layer's last one is read, as :class:`Stack` does for float experts.
    """

    hf: str
    gguf: tuple[str, ...]
    repack: Callable[[np.ndarray, np.ndarray], np.ndarray]
    ggml: str = "MXFP4"
    values: int = 32
    interleave: bool = False
    suffixes: tuple[str, str] = ("_blocks", "_scales")
    count: Callable[[dict], int] | None = None

    def match(self, name: str) -> tuple[str, dict] | None:
        """``("blocks" | "scales", template fields)`` if ``name`` is one of the sources."""
        for part, suf in zip(("blocks", "scales"), self.suffixes):
            mt = _rx(self.hf + suf).match(name)
            if mt is not None:
                return part, mt.groupdict()
        return None

    def outputs(
        self, fields: dict, blocks: str, shape: tuple[int, ...]
    ) -> list[tuple[str, tuple[int, ...], list[Piece]]]:
        """``(GGUF name, numpy shape of the values, [blocks piece, scales piece])`` per part."""
        n, nd = len(self.gguf), len(shape)
        rows = shape[-3] // n
        out = []
        for k, g in enumerate(self.gguf):
            start, stop, step = (k, None, n) if self.interleave else (k * rows, (k + 1) * rows, 1)
            pieces = [
                Piece(blocks, (nd - 3, start, stop, step)),
                Piece(blocks[: -len("blocks")] + "scales", (nd - 3, start, stop, step)),
            ]
            out.append((g.format(**fields), (*shape[:-3], rows, shape[-2] * self.values), pieces))
        return out


@dataclass(frozen=True)
class Compose:
    """One source tensor replaced by a function of it and others, before the plan.

    ``target`` (an HF name) is read with ``inputs`` (those present; optional ones may be
    missing) and becomes ``fn({name: widened values})`` of shape ``shape({name:
    shape})``: PocketTTS's embedding with its learned rows appended; with ``config`` set,
    ``fn(values, cfg)`` (Qwen3-TTS folds its text MLP with the config's activation).
    Forward only (the entry has no GGUF -> HF direction)."""

    target: str
    inputs: tuple[str, ...]
    fn: Callable[..., np.ndarray]
    shape: Callable[[dict[str, tuple[int, ...]]], tuple[int, ...]]
    config: bool = False


@dataclass(frozen=True)
class ShapeConfig:
    """The config of a checkpoint that ships no ``config.json``, from its tensor shapes
    (the reference's ``register_hparams_loader``: a matcher and a loader per family).

    The converter asks it only for a local folder without ``config.json`` holding one
    ``model*.safetensors`` file, with ``{name: shape}`` of that file's tensors:
    ``matches(shapes)`` says the checkpoint is the entry's (the reference's matcher);
    ``needs`` are the tensors read before any output (the config's sources, and any
    other the conversion cannot go without) with their number of dimensions: a
    checkpoint lacking one is refused by name, naming ``what`` the checkpoint is;
    ``config(shapes)`` is the config (its ``architectures`` names the entry)."""

    matches: Callable[[dict[str, tuple[int, ...]]], bool]
    needs: dict[str, int]
    config: Callable[[dict[str, tuple[int, ...]]], dict[str, Any]]
    what: str


def _as_is(cfg: dict) -> dict:
    return cfg


def _without_nextn(cfg: dict) -> dict:
    return {k: v for k, v in cfg.items() if k != "num_nextn_predict_layers"}


@dataclass(frozen=True)
class Mtp:
    """An entry's multi-token-prediction (NextN) blocks, for the reference's ``--no-mtp``
    and ``--mtp`` (its ``supports_mtp_export`` classes; an entry without one is refused).

    ``is_mtp(key, cfg)`` says whether a source tensor (its name as the rules see it,
    before the config ``rename``) belongs to the blocks.  Without them (``--no-mtp``) the
    converter drops those tensors and converts ``drop(cfg)`` (default: the config without
    ``num_nextn_predict_layers``: ``block_count`` is the trunk's, no
    ``nextn_predict_layers`` row).  With the blocks only (``--mtp``: a speculative draft)
    it keeps them and the ``keep`` tensors (the embedding, final norm and head they
    share) and converts ``only(cfg)`` (default: the metadata unchanged; DeepSeek-V4's
    draft counts its blocks, which its full file leaves out)."""

    is_mtp: Callable[[str, dict], bool]
    drop: Callable[[dict], dict] = _without_nextn
    only: Callable[[dict], dict] = _as_is
    keep: tuple[str, ...] = ("model.embed_tokens.weight", "model.norm.weight", "lm_head.weight")


_LAYER_NUM = re.compile(r"model\.layers\.(\d+)\.")


def layer_at_or_past(name: str, n: int) -> bool:
    """``name`` is a ``model.layers.{i}.*`` tensor with ``i >= n``."""
    mt = _LAYER_NUM.match(name)
    return mt is not None and int(mt[1]) >= n


def past_trunk(name: str, cfg: dict) -> bool:
    """A ``model.layers.{i}.*`` tensor with ``i >= num_hidden_layers``: an MTP block the
    checkpoint appends after the trunk (the reference's test for most families)."""
    return layer_at_or_past(name, cfg["num_hidden_layers"])


#: MTP blocks appended after the trunk, counted by ``num_nextn_predict_layers``
APPENDED_MTP = Mtp(past_trunk)


# --------------------------------------------------------------------------- plans


@dataclass(frozen=True)
class Piece:
    """One source read for an output tensor: the HF tensor, then optionally a slice
    (``take``) or part ``part`` of a function split (``split``)."""

    hf: str
    take: tuple[int, int, int | None, int] | None = None  # (axis, start, stop, step)
    split: Split | None = None
    part: int = 0

    def apply(self, x: np.ndarray, cfg: dict | None = None) -> np.ndarray:
        if self.split is not None and self.split.fn is not None:
            return np.ascontiguousarray(self.split.fn(x, cfg or {})[self.part])
        if self.take is None:
            return x
        ax, start, stop, step = self.take
        sl = [slice(None)] * x.ndim
        sl[ax] = slice(start, stop, step)
        return np.ascontiguousarray(x[tuple(sl)])

    def shape(self, shape: tuple[int, ...], cfg: dict | None = None) -> tuple[int, ...]:
        if self.split is not None and self.split.shapes is not None:
            return tuple(self.split.shapes(shape, cfg or {})[self.part])
        if self.take is None:
            return shape
        ax, start, stop, step = self.take
        return tuple(
            len(range(*slice(start, stop, step).indices(n))) if i == ax else n
            for i, n in enumerate(shape)
        )


@dataclass
class OutTensor:
    """One GGUF tensor of the forward plan.  ``stacked``: the pieces are expert slabs
    (the tensor is ``[len(pieces), *piece shape]``), else exactly one piece."""

    name: str
    shape: tuple[int, ...]
    pieces: list[Piece]
    stacked: bool = False
    raw: Packed | None = None  # pieces are packed blocks + scales, written as ``raw.ggml``


@dataclass
class HfTensor:
    """One HF tensor of the inverse plan: the GGUF tensors it is read from.

    ``expert``: slab ``expert`` of ``sources[0]``; several ``sources``: their values
    joined along ``axis`` (consecutive, or interleaved)."""

    name: str
    sources: list[str]
    expert: int | None = None
    axis: int = 0
    interleave: bool = False
    split: Split | None = None

    def join(self, parts: list[np.ndarray], cfg: dict) -> np.ndarray:
        if self.split is not None and self.split.join is not None:
            return self.split.join(parts, cfg)
        return join(parts, self.axis, self.interleave)

    def shape(self, shapes: list[tuple[int, ...]], cfg: dict) -> tuple[int, ...]:
        """The HF shape from the GGUF parts' shapes (joined without data)."""
        if self.split is not None and self.split.join is not None:
            z = [np.empty(s, np.float32) for s in shapes]
            return tuple(self.split.join(z, cfg).shape)
        ax = self.axis % len(shapes[0])
        return tuple(sum(p[ax] for p in shapes) if i == ax else n for i, n in enumerate(shapes[0]))


class PlanError(ValueError):
    """A tensor the entry cannot place; ``kind`` says why, ``name`` which tensor."""

    def __init__(self, kind: str, name: str, detail: str = "") -> None:
        super().__init__(f"{kind}: {name} {detail}".strip())
        self.kind, self.name, self.detail = kind, name, detail


# --------------------------------------------------------------------------- entries

#: llama.cpp's ``filter_tensors``: wrappers of multimodal checkpoints and renames
_WRAPPERS = (("language_model.", ""),)
#: TextModel.filter_tensors: tensors of the other modalities are not converted
_OTHER_MODALITIES = re.compile(
    r"^(mlp|vit\.|vpm\.|siglip2\.|conformer\.|merger\.|resampler\.|multi_modal_projector\.|"
    r"vision_tower\.|multimodal_projector\.|speech_embeddings\.)|visual\.|vision\.|audio\.|vision_|audio_|"
    r"projector\.|patch_embed|patch_merge_mlp\.|model\.connector\.|image_newline|view_seperator|"
    # Mistral's own layout of Mistral Small 3.1's projector (TextModel.filter_tensors)
    r"patch_merger\.|pre_mm_projector_norm"
)


@dataclass(frozen=True)
class Arch:
    hf_archs: tuple[str, ...]
    gguf_arch: str
    meta: list[MetaKey | str]
    names: list[NameRule]
    transforms: list[Transform] = field(default_factory=list)
    stacks: list[Stack] = field(default_factory=list)
    splits: list[Split] = field(default_factory=list)
    packed: list[Packed] = field(default_factory=list)
    # rows llama.cpp writes while it prepares the tensors, before ``general.type``
    early_meta: list[MetaKey] = field(default_factory=list)
    skip: tuple[str, ...] = (
        r"rotary_emb\.inv_freq$",
        r"\.attention\.masked_bias$",
        r"\.attention\.bias$",
    )
    # extra tensors written first: GGUF name -> function of the config (None: not written)
    extra: dict[str, Callable[[dict], np.ndarray | None]] = field(default_factory=dict)
    # config.json fields that must be present (named in the error otherwise)
    required: tuple[str, ...] = (
        "hidden_size",
        "num_attention_heads",
        "num_hidden_layers",
        "intermediate_size",
        "vocab_size",
    )
    # config class defaults transformers' AutoConfig fills in (and llama.cpp then reads):
    # a value, or a function of the given config for derived ones (None: no default),
    # filled where the field is missing or null; and fields the reference's model class
    # ignores (Granite pops ``head_dim``)
    defaults: dict[str, Any] = field(default_factory=dict)
    ignored: tuple[str, ...] = ()
    # True: the embedding table is cut to the tokenizer's size (ctx["n_vocab"])
    vocab_rows: bool = False
    # tokenizer route: which vocabulary builder and special-token rules (tokenizer/)
    tokenizer: dict[str, Any] = field(default_factory=dict)
    # GGUF -> HF: config.json ``model_type`` of each HF architecture, and the config
    # fields GGUF does not carry, as a function of the rebuilt config and the tensor names
    model_types: dict[str, str] = field(default_factory=dict)
    hf_config: Callable[[dict, set[str]], dict] = field(default=lambda cfg, names: {})
    # GGUF -> HF: the finished config.json as written, reshaped (a Gemma 4 assistant's text
    # model fields go under ``text_config``); the flat form stays the converter's own view
    hf_wrap: Callable[[dict], dict] | None = None
    # the reference class's own filter_tensors renames, ``(regex, replacement)`` applied to
    # every source name before the rules (BERT's ``bert.`` prefix, LayerNorm gamma/beta)
    renames: tuple[tuple[str, str], ...] = ()
    # one tensor stored under several names (T5's shared embedding): the first one read is
    # converted, the others are skipped, as the reference does
    aliases: tuple[str, ...] = ()
    # True: the sentence-transformers pooling (modules.json) goes into the config as
    # ``_pooling_type`` (llama.cpp's PoolingType number, None without modules.json)
    pooling: bool = False
    # GGUF names of sentence-transformers ``Dense`` module weights (EmbeddingGemma's
    # ``dense_2`` / ``dense_3``): read from the module folders ``modules.json`` names
    # (:func:`weightsmith.convert._pooling.dense_modules`), written back as such modules
    dense: tuple[str, ...] = ()
    # a folder holding the one Dense module (``dense[0]``) read whatever ``modules.json``
    # says (LFM2-ColBERT's PyLate ``1_Dense``: the reference reads
    # ``<folder>/model.safetensors`` directly); written back as that module
    dense_file: str = ""
    # True: the reference's Qwen3 reranker detection applies to this entry's folders
    # (``_rerank`` = the ``yes`` / ``no`` ids in the config; VARIANTS then pick the entry)
    rerank: bool = False
    # a rename that depends on the config, ``(forward(name, cfg), inverse(name, cfg))``,
    # applied after ``renames`` (Qwen's ``mtp.*`` block numbered after the trunk)
    rename: tuple[Callable[[str, dict], str], Callable[[str, dict], str]] | None = None
    # config fields read off the checkpoint's tensor names, ``fn(cfg, names)`` (a layer
    # count the config does not give)
    from_tensors: Callable[[dict, list[str]], dict] | None = None
    # True: the reference does ``rename`` in modify_tensors, after it took the block id
    # from the name as read; its always-F32 rules (``ffn_gate_inp`` ...) match that block
    # id, so a tensor renamed into another block gets the output type (Nemotron-H's MTP)
    late_rename: bool = False
    # True: ``generation_config.json``'s ``suppress_tokens`` go into the config as
    # ``_suppress_tokens`` (Gemma 4 Unified writes them with its hyperparameters)
    suppress_tokens: bool = False
    # ``(name, other)`` HF tensors: ``name`` is not converted when its values equal
    # ``other``'s (the reference compares the data: Mamba's head stored as a copy of the
    # embedding is dropped, llama.cpp then reuses the embedding)
    drop_if_same: tuple[tuple[str, str], ...] = ()
    # config values the reference asserts (it converts nothing else): another value is
    # refused before any output (Gemma 3n's 4 AltUp streams)
    fixed: dict[str, Any] = field(default_factory=dict)
    # config.json fields of any value the reference reads without a default (refused
    # before any output when missing: DeepSeek-V4's ``compress_ratios``)
    present: tuple[str, ...] = ()
    # False: GGUF -> HF is refused by name before reading the metadata (DeepSeek-V4:
    # transformers reads only DeepSeek's own layout, which the inverse does not write)
    hf_back: bool = True
    # HF tensors not converted for this config (exact names, a function of the config:
    # DeepSeek-V4's hash layers' unused router bias)
    skip_cfg: Callable[[dict], tuple[str, ...]] | None = None
    # GGUF name patterns (``search``ed) of tensors the reference writes before all others,
    # grouped by pattern, then by layer, then in plan order (DeepSeek-V4 generates its
    # routing tables and MXFP4 experts first)
    front: tuple[str, ...] = ()
    # the type a tensor is written in by its source's dtype, whatever the output type,
    # ``fn(gguf name, safetensors dtype, ndim)`` (None: the usual rules); the reference's
    # ``tensor_force_quant`` by source dtype (DeepSeek-V4)
    source_type: Callable[[str, str, int], str | None] | None = None
    # True: FP8 weights with an E8M0 ``.scale`` per 128 x 128 block (DeepSeek-V4's own
    # layout, no ``quantization_config`` needed) are dequantized on read
    e8m0_scales: bool = False
    # the ``general.file_type`` the reference labels every output with (DeepSeek-V4:
    # MXFP4_MOE), for the f32 / f16 / bf16 / q8_0 output types
    file_type: str | None = None
    # a config check the reference makes (it asserts): ``fn(cfg)`` -> None, or ``(field,
    # expected, found)`` for a config it refuses, refused here by name before any output
    # (Step 3.5's RoPE widths per layer type)
    check: Callable[[dict], tuple[str, Any, Any] | None] | None = None
    # GGUF -> HF: the config fields the metadata must give (None: ``required``); for an
    # entry whose required fields are derived by ``hf_config`` from rows of other fields
    # (Dots3 Note's sliding layers' geometry from per-layer arrays)
    hf_required: tuple[str, ...] | None = None
    # source tensors replaced by a function of several (:class:`Compose`), before the plan
    compose: tuple[Compose, ...] = ()
    # the config of this entry's checkpoint when it ships no config.json, from the tensor
    # shapes (:class:`ShapeConfig`; the registry's :func:`~weightsmith.convert.arch.by_shapes`)
    config_from_shapes: ShapeConfig | None = None
    # the multi-token-prediction blocks (:class:`Mtp`) the converter drops or keeps alone
    # (``mtp="drop"`` / ``"only"``); None: the reference refuses both for this class
    mtp: Mtp | None = None

    # -- config

    def config(self, cfg: dict) -> dict:
        """``cfg`` with the config class defaults filled in (AutoConfig's view)."""
        fixed = {k: v for k, v in self.defaults.items() if not callable(v)}
        out = {**fixed, **cfg}
        for k, v in self.defaults.items():
            if callable(v) and out.get(k) is None and (d := v(cfg)) is not None:
                out[k] = d
        return {k: v for k, v in out.items() if k not in self.ignored}

    def metadata(self, cfg: dict, early: bool = False) -> list[tuple[str, Any, GGUFValueType]]:
        """``(key, value, type)`` rows for this config, ``general.file_type`` as a
        ``(FILE_TYPE, None, UINT32)`` placeholder at its place in the order; with
        ``early`` the rows of ``early_meta`` instead."""
        out: dict[str, tuple[Any, GGUFValueType]] = {}
        for row in self.early_meta if early else self.meta:
            if row == FILE_TYPE:
                out[FILE_TYPE] = (None, VT.UINT32)
                continue
            assert isinstance(row, MetaKey)
            if row.slot:
                out[row.full_key(self.gguf_arch)] = (SLOT, row.type)
                continue
            v = row.get(cfg)
            if v is not None:
                # a later row for the same key replaces the value in place, as gguf-py does
                out[row.full_key(self.gguf_arch)] = (v, row.type)
        return [(k, v, t) for k, (v, t) in out.items()]

    # -- names

    def source_key(self, hf_name: str, cfg: dict | None = None) -> str | None:
        """The name the rules see (renamed, wrappers stripped); None for other modalities."""
        for rx, rep in self.renames:
            hf_name = re.sub(rx, rep, hf_name)
        for a, b in _WRAPPERS:
            hf_name = hf_name.replace(a, b)
        if _OTHER_MODALITIES.search(hf_name):
            return None
        return hf_name if self.rename is None or cfg is None else self.rename[0](hf_name, cfg)

    def gguf_name(self, hf_name: str) -> str | None:
        for r in self.names:
            if (g := r.forward(hf_name)) is not None:
                return g
        return None

    def hf_name(self, gguf_name: str, present: frozenset[str] = frozenset()) -> str | None:
        for r in self.names:
            if (h := r.inverse(gguf_name, present)) is not None:
                return h
        return None

    def skipped(self, hf_name: str) -> bool:
        return any(re.search(p, hf_name) for p in self.skip)

    def transforms_for(self, hf_name: str) -> list[Transform]:
        return [t for t in self.transforms if t.matches(hf_name)]

    def _shape(self, name: str, shape: tuple[int, ...], cfg: dict, ctx: dict) -> tuple[int, ...]:
        for t in self.transforms_for(name):
            if t.shape is not None:
                shape = t.shape(shape, cfg, ctx)
        return shape

    # -- forward plan

    def plan(
        self, sources: list[tuple[str, tuple[int, ...]]], cfg: dict, ctx: dict
    ) -> list[OutTensor]:
        """The GGUF tensors for ``sources`` (rule names, shapes) in llama.cpp's order.

        Raises :class:`PlanError` (``unmapped``, ``expert shape``, ``missing experts``).
        """
        shapes = dict(sources)
        out: list[OutTensor] = []
        raw: list[OutTensor] = []
        pending: dict[tuple[str, int], dict[int, dict[int, str]]] = {}
        packed_seen: set[str] = set()
        alias_seen = False
        skip_names = set(self.skip_cfg(cfg)) if self.skip_cfg is not None else set()
        for name, shape in sources:
            if self.skipped(name) or name in skip_names:
                continue
            if name in self.aliases:
                if alias_seen:
                    continue
                alias_seen = True
            if self._stack_member(name, cfg, pending, shapes, out):
                continue
            if self._packed_member(name, shapes, packed_seen, raw, cfg, pending):
                continue
            for sp in self.splits:
                parts = sp.forward(name)
                if parts is not None:
                    src = self._shape(name, shape, cfg, ctx)
                    for k, g in enumerate(parts):
                        if sp.fn is not None:
                            pc = Piece(name, split=sp, part=k)
                        else:
                            pc = Piece(name, sp.take(k, src))
                        out.append(OutTensor(g, pc.shape(src, cfg), [pc]))
                    break
            else:
                g = self.gguf_name(name)
                if g is None:
                    raise PlanError("unmapped", name)
                out.append(OutTensor(g, self._shape(name, shape, cfg, ctx), [Piece(name)]))
        for (group, bid), members in pending.items():
            have = sum(len(v) for v in members.values())
            raise PlanError("missing experts", f"layer {bid} group {group}", f"read {have}")
        if packed_seen:
            raise PlanError("unmapped", sorted(packed_seen)[0], "(blocks without scales)")
        return self._front(raw + out)

    def _front(self, outs: list[OutTensor]) -> list[OutTensor]:
        if not self.front:
            return outs

        def group(o: OutTensor) -> int:
            return next((i for i, p in enumerate(self.front) if re.search(p, o.name)), -1)

        first = [(group(o), layer_of(o.name) or 0, i, o) for i, o in enumerate(outs)]
        head = sorted((g, b, i) for g, b, i, _ in first if g >= 0)
        return [outs[i] for _, _, i in head] + [o for g, _, _, o in first if g < 0]

    def _packed_member(self, name, shapes, seen, out, cfg=None, pending=None) -> bool:
        """A packed source: its tensors are planned once blocks and scales are both read
        (per-expert ones: once every expert of every per-expert rule of the layer is)."""
        for i, pk in enumerate(self.packed):
            hit = pk.match(name)
            if hit is None:
                continue
            part, fields = hit
            if pk.count is not None:
                self._packed_expert(i, name, part, fields, shapes, cfg, pending, out)
                return True
            blocks = name[: -len(part)] + "blocks"
            other = name[: -len(part)] + ("scales" if part == "blocks" else "blocks")
            if other not in seen:
                seen.add(name)
                return True
            seen.discard(other)
            bs, ss = shapes[blocks], shapes[blocks[: -len("blocks")] + "scales"]
            if len(bs) < 3 or tuple(ss) != tuple(bs[:-1]):
                raise PlanError("packed shape", name, f"blocks {list(bs)} scales {list(ss)}")
            for g, shape, pieces in pk.outputs(fields, blocks, bs):
                out.append(OutTensor(g, shape, pieces, raw=pk))
            return True
        return False

    def _packed_expert(self, i, name, part, fields, shapes, cfg, pending, out) -> None:
        pk = self.packed[i]
        bid, xid = int(fields.get("bid", -1)), int(fields["xid"])
        n = pk.count(cfg)
        if xid >= n:
            raise PlanError("unmapped", name, f"(expert {xid} of {n})")
        rules = [j for j, p in enumerate(self.packed) if p.count is not None]
        slot = pending.setdefault(("packed", bid), {j: {} for j in rules})
        slot[i].setdefault(xid, {})[part] = name
        full = all(
            len(slot[j]) == self.packed[j].count(cfg) and all(len(v) == 2 for v in slot[j].values())
            for j in rules
        )
        if not full:
            return
        del pending[("packed", bid)]
        for j in rules:
            p = self.packed[j]
            pieces, shape = [], None
            for x in range(len(slot[j])):
                b, s = slot[j][x]["blocks"], slot[j][x]["scales"]
                bs, ss = shapes[b], shapes[s]
                if len(bs) != 2 or tuple(ss) != (bs[0], bs[1] * 2 // p.values):
                    raise PlanError("packed shape", b, f"blocks {list(bs)} scales {list(ss)}")
                if shape is not None and (bs[0], bs[1] * 2) != shape:
                    raise PlanError("expert shape", b, f"{list(bs)} != {list(shape)}")
                shape = (bs[0], bs[1] * 2)
                pieces += [Piece(b), Piece(s)]
            g = p.gguf[0].format(bid=bid)
            out.append(OutTensor(g, (len(slot[j]), *shape), pieces, True, raw=p))

    def _stack_member(self, name, cfg, pending, shapes, out) -> bool:
        for i, st in enumerate(self.stacks):
            hit = st.match(name)
            if hit is None:
                continue
            bid, xid = hit
            n = st.n(cfg, bid)
            if xid >= n:
                raise PlanError("unmapped", name, f"(expert {xid} of {n})")
            group = [j for j, s in enumerate(self.stacks) if s.group == st.group]
            slot = pending.setdefault((st.group, bid), {j: {} for j in group})
            slot[i][xid] = name
            if all(len(slot[j]) == self.stacks[j].n(cfg, bid) for j in group):
                del pending[(st.group, bid)]
                for j in group:
                    names = [slot[j][x] for x in range(len(slot[j]))]
                    s0 = shapes[names[0]]
                    for nm in names:
                        if shapes[nm] != s0:
                            raise PlanError("expert shape", nm, f"{list(shapes[nm])} != {list(s0)}")
                    g = self.stacks[j].gguf.format(bid=bid)
                    out.append(OutTensor(g, (len(names), *s0), [Piece(x) for x in names], True))
            return True
        return False

    # -- inverse plan

    def inverse_plan(
        self, tensors: list[tuple[str, tuple[int, ...]]], cfg: dict
    ) -> tuple[list[HfTensor], list[str]]:
        """HF tensors for the GGUF ``tensors`` (name, numpy shape), and the unmapped names."""
        out: list[HfTensor] = []
        unmapped: list[str] = []
        done_split: set[str] = set()
        present = frozenset(n for n, _ in tensors)
        for name, shape in tensors:
            if name in self.extra or name in self.dense:
                continue
            for st in self.stacks:
                bid = st.inverse_match(name)
                if bid is not None:
                    for x in range(shape[0]):
                        hf = st.hf.format(bid=bid, xid=x)
                        out.append(HfTensor(hf, [name], expert=x))
                    break
            else:
                for sp in self.splits:
                    inv = sp.inverse(name)
                    if inv is not None:
                        hf, parts = inv
                        if hf not in done_split:
                            done_split.add(hf)
                            out.append(
                                HfTensor(
                                    hf, parts, axis=sp.axis, interleave=sp.interleave, split=sp
                                )
                            )
                        break
                else:
                    hf = self.hf_name(name, present)
                    if hf is None:
                        unmapped.append(name)
                    else:
                        out.append(HfTensor(hf, [name]))
        if self.rename is not None:
            for h in out:
                h.name = self.rename[1](h.name, cfg)
        return out, unmapped


def join(parts: list[np.ndarray], axis: int, interleave: bool) -> np.ndarray:
    """The inverse of :meth:`Split.take`: parts back into one tensor."""
    if not interleave:
        return np.concatenate(parts, axis=axis)
    ax = axis % parts[0].ndim
    st = np.stack(parts, axis=ax + 1)
    shape = list(parts[0].shape)
    shape[ax] *= len(parts)
    return st.reshape(shape)
