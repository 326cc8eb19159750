"""A small GPT decoder (nanoGPT-style: pre-LayerNorm blocks, causal SDPA attention, GELU MLP,
no biases), optionally confined to a fixed residual subspace.

Subspace mode (``GPTConfig.subspace_rank = k``), the model feature ``residual_subspace``:
the residual stream is exactly ``x = token_term(ids) + basis @ c`` at every point, where

* ``basis`` (d, k) is a fixed orthonormal basis generated from a seed (not trained);
* ``token_term(ids)`` is a fixed, non-trainable token embedding table (V, d) from the same seed;
* everything trainable that writes into the stream writes ``c @ basis.T``: the trainable token
  and position embeddings are (V, k) / (T, k) coefficient tables, and every block's attention
  and MLP output projection is ``Linear(in, k)`` followed by ``@ basis.T``. Dropout acts on
  the k coefficients, so it cannot leave the subspace either.

So ``x - token_term(ids)`` lies in span(basis) at every stage boundary, and a compressor
that knows ``basis`` and ``token_term`` can send the k coefficients instead of d numbers,
losslessly (Protocol Models, Ramasinghe et al. 2025). The token and LM-head weights are not
tied (tying would couple the first and last pipeline stages).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["GPTConfig", "ResidualSubspace", "GPT", "GPTStage", "split_gpt", "GPT_SIZES"]

# Named sizes of the GPT family (the shakespeare and wikitext2 tasks' ``model_sizes``: overrides of
# a tier's ``extra``). d64 / d256: the CPU tiers' 4-layer baby GPT at half and twice its width d=128
# (4 heads), trainable on a CPU (the scale ladder). The rest are published shapes for projections
# (suite/pipeline/flops.py counts them on the meta device): GPT-2 small and medium (Radford et al.
# 2019), GPT-3 XL's 24 x 2048 with 16 heads of 128 and GPT-3 6.7B's 32 x 4096 (Brown et al. 2020,
# Table 2.1), all at GPT-2's context of 1024 so that only width and depth differ. Parameter counts
# depend on the task's vocabulary (65 characters, 50,257 BPE tokens) and its untied head.
GPT_SIZES: dict[str, dict[str, int]] = {
    "d64": {"n_embd": 64, "n_head": 4},
    "d256": {"n_embd": 256, "n_head": 4},
    "gpt2-124m": {"n_layer": 12, "n_head": 12, "n_embd": 768, "block_size": 1024},
    "gpt2-350m": {"n_layer": 24, "n_head": 16, "n_embd": 1024, "block_size": 1024},
    "gpt-1.3b": {"n_layer": 24, "n_head": 16, "n_embd": 2048, "block_size": 1024},
    "gpt-7b": {"n_layer": 32, "n_head": 32, "n_embd": 4096, "block_size": 1024},
}


@dataclass(frozen=True)
class GPTConfig:
    vocab_size: int
    block_size: int = 256  # context length T
    n_layer: int = 6
    n_head: int = 6
    n_embd: int = 384  # d
    dropout: float = 0.2
    subspace_rank: int | None = None  # k: confine the residual stream to token_term + span(basis)
    subspace_seed: int = 0


class ResidualSubspace:
    """The ``residual_subspace`` model feature: ``basis`` (d, k) float32 with orthonormal
    columns and the fixed token embedding ``token_term(ids) -> (B, T, d)``, both from a seed.

    Holds CPU tensors; ``token_term`` returns its result on the device of ``ids``.
    """

    def __init__(self, vocab_size: int, d: int, k: int, seed: int) -> None:
        if not 1 <= k <= d:
            raise ValueError(f"subspace rank k={k} must be in [1, d={d}]")
        g = torch.Generator().manual_seed(seed)
        q, _ = torch.linalg.qr(torch.randn(d, k, generator=g, dtype=torch.float64))
        self.basis = q.to(torch.float32).contiguous()  # (d, k), basis.T @ basis = I_k
        self.token_table = (0.02 * torch.randn(vocab_size, d, generator=g)).contiguous()  # (V, d), fixed
        self._tables: dict[torch.device, Tensor] = {}

    @property
    def rank(self) -> int:
        return self.basis.shape[1]

    @torch.no_grad()
    def token_term(self, batch_input: Tensor) -> Tensor:
        """The fixed token embedding of ids (B, T) -> (B, T, d), no grad, on ids' device."""
        dev = batch_input.device
        if dev not in self._tables:
            self._tables[dev] = self.token_table.to(dev)
        return F.embedding(batch_input, self._tables[dev])


class OutProj(nn.Module):
    """Projection back into the residual stream: ``Linear(in, d)``, or ``Linear(in, k) @ basis.T``."""

    def __init__(self, in_features: int, d: int, dropout: float, basis: Tensor | None, std: float) -> None:
        super().__init__()
        out = d if basis is None else basis.shape[1]
        self.proj = nn.Linear(in_features, out, bias=False)
        nn.init.normal_(self.proj.weight, std=std)
        self.drop = nn.Dropout(dropout)
        self.register_buffer("basis", None if basis is None else basis.clone(), persistent=False)

    def forward(self, h: Tensor) -> Tensor:
        c = self.drop(self.proj(h))  # (B, T, d) or coefficients (B, T, k)
        return c if self.basis is None else c @ self.basis.T


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: GPTConfig, basis: Tensor | None) -> None:
        super().__init__()
        self.n_head, self.dropout = cfg.n_head, cfg.dropout
        self.qkv = nn.Linear(cfg.n_embd, 3 * cfg.n_embd, bias=False)
        nn.init.normal_(self.qkv.weight, std=0.02)  # nanoGPT's init; output projections scaled by 1/sqrt(2L)
        self.out = OutProj(cfg.n_embd, cfg.n_embd, cfg.dropout, basis, std=0.02 / math.sqrt(2 * cfg.n_layer))

    def forward(self, x: Tensor) -> Tensor:
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))  # (B, nh, T, hs)
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout if self.training else 0.0, is_causal=True)
        return self.out(y.transpose(1, 2).reshape(B, T, C))


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig, basis: Tensor | None) -> None:
        super().__init__()
        d = cfg.n_embd
        self.ln1 = nn.LayerNorm(d, bias=False)
        self.attn = CausalSelfAttention(cfg, basis)
        self.ln2 = nn.LayerNorm(d, bias=False)
        self.fc = nn.Linear(d, 4 * d, bias=False)
        nn.init.normal_(self.fc.weight, std=0.02)
        self.mlp_out = OutProj(4 * d, d, cfg.dropout, basis, std=0.02 / math.sqrt(2 * cfg.n_layer))

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp_out(F.gelu(self.fc(self.ln2(x))))


class Embedding(nn.Module):
    """Token + position embedding: ids (B, T) -> residual stream (B, T, d)."""

    def __init__(self, cfg: GPTConfig, subspace: ResidualSubspace | None) -> None:
        super().__init__()
        width = cfg.n_embd if subspace is None else subspace.rank  # d, or k coefficients
        self.tok = nn.Embedding(cfg.vocab_size, width)
        self.pos = nn.Embedding(cfg.block_size, width)
        for e in (self.tok, self.pos):
            nn.init.normal_(e.weight, std=0.02)
        self.drop = nn.Dropout(cfg.dropout)
        self.register_buffer("basis", None if subspace is None else subspace.basis.clone(), persistent=False)
        self.register_buffer(
            "token_table", None if subspace is None else subspace.token_table.clone(), persistent=False
        )

    def forward(self, ids: Tensor) -> Tensor:
        pos = torch.arange(ids.shape[1], device=ids.device)
        h = self.drop(self.tok(ids) + self.pos(pos))  # (B, T, d) or (B, T, k)
        if self.basis is None:
            return h
        return F.embedding(ids, self.token_table) + h @ self.basis.T


class Head(nn.Module):
    """Final LayerNorm and the LM head: (B, T, d) -> logits (B, T, V)."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(cfg.n_embd, bias=False)
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        nn.init.normal_(self.lm_head.weight, std=0.02)

    def forward(self, x: Tensor) -> Tensor:
        return self.lm_head(self.ln(x))


class GPT(nn.Module):
    """The unsplit decoder: ``forward(ids (B, T)) -> logits (B, T, V)``."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.subspace = None
        if cfg.subspace_rank is not None:
            self.subspace = ResidualSubspace(cfg.vocab_size, cfg.n_embd, cfg.subspace_rank, cfg.subspace_seed)
        basis = None if self.subspace is None else self.subspace.basis
        self.embed = Embedding(cfg, self.subspace)
        self.blocks = nn.ModuleList(Block(cfg, basis) for _ in range(cfg.n_layer))
        self.head = Head(cfg)

    def forward(self, ids: Tensor) -> Tensor:
        x = self.embed(ids)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


class GPTStage(nn.Module):
    """Embedding (first stage), a run of blocks, head (last stage); ``forward(x, ids)``."""

    def __init__(
        self, embed: Embedding | None, blocks: list[Block], head: Head | None, subspace: ResidualSubspace | None
    ) -> None:
        super().__init__()
        self.embed = embed
        self.blocks = nn.ModuleList(blocks)
        self.head = head
        self.subspace = subspace  # plain object (not a module): the model feature

    def forward(self, x: Tensor, batch_input: Tensor) -> Tensor:
        if self.embed is not None:
            x = self.embed(batch_input)
        for block in self.blocks:
            x = block(x)
        return self.head(x) if self.head is not None else x


def split_gpt(model: GPT, n_stages: int) -> list[GPTStage]:
    """Blocks divided as evenly as possible (earlier stages take the remainder); the embedding
    goes with the first stage and the final LayerNorm + LM head with the last."""
    n = len(model.blocks)
    if not 1 <= n_stages <= n:
        raise ValueError(f"cannot split {n} blocks into {n_stages} stages (need 1 <= stages <= blocks)")
    sizes = [n // n_stages + (i < n % n_stages) for i in range(n_stages)]
    stages, start = [], 0
    for i, size in enumerate(sizes):
        blocks = list(model.blocks[start : start + size])
        start += size
        stages.append(
            GPTStage(
                model.embed if i == 0 else None,
                blocks,
                model.head if i == n_stages - 1 else None,
                model.subspace,
            )
        )
    return stages
