"""Model files for the remote and CLI tests, written by the oracle libraries.

safetensors files come from HF ``safetensors.torch`` and GGUF files from
gguf-py's ``GGUFWriter`` -- never from our own writers -- so what the tests
read back is checked against files the reference implementations produced.

:func:`build` lays out the local files and the two nginx document roots:

    files/        every file, served as is
    noranges/     a copy served with Range disabled (200 + whole file)
    range416/     copies served with 416 for every Range request
    org/<repo>/resolve/main/...   a Hub-style layout (HF_ENDPOINT = nginx)
    api/models/org/<repo>         static JSON repo listings
    root2/cdn/... the redirect target on the second port
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np
import torch
from safetensors.torch import save_file


@dataclass
class Tree:
    files: Path  # local copies of every file
    root: Path  # nginx main document root
    root2: Path  # nginx redirect-target document root


def _small() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    t = {"model.embed_tokens.weight": torch.randn(1000, 64, generator=g).to(torch.bfloat16)}
    for i in range(3):
        p = f"model.layers.{i}"
        t[f"{p}.input_layernorm.weight"] = torch.ones(64)
        t[f"{p}.self_attn.q_proj.weight"] = torch.randn(64, 64, generator=g).to(torch.bfloat16)
        t[f"{p}.self_attn.k_proj.weight"] = torch.randn(32, 64, generator=g).to(torch.bfloat16)
        t[f"{p}.mlp.up_proj.weight"] = torch.randn(96, 64, generator=g).to(torch.float16)
    t["model.norm.weight"] = torch.ones(64)
    t["model.rotary.inv_freq"] = torch.arange(32, dtype=torch.int64)
    t["lm_head.weight"] = torch.randn(1000, 64, generator=g).to(torch.bfloat16)
    return t


def _big_header() -> dict[str, torch.Tensor]:
    # ~2,500 tiny tensors with long names: a JSON header well over 100 KB
    return {
        f"model.layers.{i // 64}.block_sparse_moe.experts.{i % 64}.w{i % 3}.weight": torch.full(
            (2, 3), float(i)
        )
        for i in range(2500)
    }


def write_sharded(folder: Path, tensors: dict[str, torch.Tensor], n: int) -> None:
    names = sorted(tensors)
    weight_map, total = {}, 0
    for k in range(n):
        shard = f"model-{k + 1:05d}-of-{n:05d}.safetensors"
        part = {name: tensors[name] for name in names[k::n]}
        save_file(part, str(folder / shard), metadata={"format": "pt"})
        for name, t in part.items():
            weight_map[name] = shard
            total += t.numel() * t.element_size()
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))


def _gguf_writer(path: Path, **kw) -> gguf.GGUFWriter:
    w = gguf.GGUFWriter(str(path), "llama", **kw)
    w.add_name("tiny-llama")
    w.add_block_count(2)
    w.add_context_length(256)
    w.add_embedding_length(64)
    return w


def _gguf_tensors(w: gguf.GGUFWriter) -> None:
    rng = np.random.default_rng(0)
    w.add_tensor("token_embd.weight", rng.standard_normal((256, 64)).astype(np.float16))
    for i in range(2):
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(64, np.float32))
        q = gguf.quants.quantize(
            rng.standard_normal((64, 64)).astype(np.float32), gguf.GGMLQuantizationType.Q8_0
        )
        w.add_tensor(f"blk.{i}.attn_q.weight", q, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        w.add_tensor(f"blk.{i}.ffn_up.weight", rng.standard_normal((96, 64)).astype(np.float32))
    w.add_tensor("output_norm.weight", np.ones(64, np.float32))


def write_gguf(path: Path, n_tokens: int) -> None:
    w = _gguf_writer(path)
    # a long token list: the KV section alone is larger than the first chunk
    w.add_tokenizer_model("llama")
    # long tokens: few elements (gguf-py reads arrays element by element) but many bytes
    w.add_token_list([f"tok{i:07d}" + "x" * 100 for i in range(n_tokens)])
    _gguf_tensors(w)
    # a data section larger than the header, so a header read is visibly partial
    w.add_tensor("output.weight", np.zeros((16000, 128), np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_split_gguf(path: Path) -> list[Path]:
    w = _gguf_writer(path, split_max_tensors=3)
    _gguf_tensors(w)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return sorted(path.parent.glob(f"{path.stem}-*-of-*.gguf"))


def build(base: Path) -> Tree:
    files, root, root2 = base / "files", base / "root", base / "root2"
    for d in (files, root, root2):
        d.mkdir(parents=True)
    save_file(_small(), str(files / "small.safetensors"), metadata={"format": "pt"})
    save_file(_big_header(), str(files / "big.safetensors"))
    save_file({}, str(files / "tiny.safetensors"))
    (files / "empty.safetensors").write_bytes(b"")
    (files / "sharded").mkdir()
    write_sharded(files / "sharded", _small(), 3)
    write_gguf(files / "model.gguf", 15_000)
    (files / "split").mkdir()
    write_split_gguf(files / "split" / "model.gguf")

    shutil.copytree(files, root / "files")
    (root / "noranges").mkdir()
    shutil.copy(files / "small.safetensors", root / "noranges")
    shutil.copy(files / "model.gguf", root / "noranges")
    (root / "range416").mkdir()
    shutil.copy(files / "tiny.safetensors", root / "range416")
    shutil.copy(files / "small.safetensors", root / "range416")

    def hub(repo: str, *sources: Path, where: Path = root) -> Path:
        d = where / repo
        d.mkdir(parents=True, exist_ok=True)
        for s in sources:
            shutil.copy(s, d / s.name)
        return d

    hub("org/single/resolve/main", files / "small.safetensors")
    (root / "org/single/resolve/main/model.safetensors").write_bytes(
        (files / "small.safetensors").read_bytes()
    )
    hub("org/sharded/resolve/main", *sorted((files / "sharded").iterdir()))
    hub("org/bigrepo/resolve/main")
    shutil.copy(files / "big.safetensors", root / "org/bigrepo/resolve/main/model.safetensors")
    split = sorted((files / "split").iterdir())
    hub("org/ggufrepo/resolve/main", files / "model.gguf", *split)
    listing = {
        "id": "org/ggufrepo",
        "siblings": [
            {"rfilename": n} for n in ["README.md", "model.gguf", *(p.name for p in split)]
        ],
    }
    (root / "api/models/org").mkdir(parents=True)
    (root / "api/models/org/ggufrepo").write_text(json.dumps(listing))
    (root / "api/models/org/empty").write_text(json.dumps({"id": "org/empty", "siblings": []}))
    for repo in ("privsame",):
        d = hub(f"org/{repo}/resolve/main")
        shutil.copy(files / "small.safetensors", d / "model.safetensors")
    for repo in ("private", "redirected"):
        d = hub(f"cdn/{repo}", where=root2)
        shutil.copy(files / "small.safetensors", d / "model.safetensors")
    return Tree(files, root, root2)
