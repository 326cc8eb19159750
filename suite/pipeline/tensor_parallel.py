"""Tensor parallelism (Megatron-LM, Shoeybi et al. 2019) with compressed collectives.

Every transformer block of a stage is split over the stage's ``tp`` ranks: the attention's
query/key/value projections and the MLP's first linear are **column-parallel** (each rank
holds ``1/tp`` of the output features: its share of the heads, its share of the MLP width),
the attention output projection and the MLP's second linear are **row-parallel** (each rank
holds ``1/tp`` of the input features and produces a partial sum). Two conjugate operators
join the replicated and the split regions, per sub-block (attention, MLP):

* ``f``: identity forward, all-reduce of the input gradients backward (before the column-parallel layer);
* ``g``: all-reduce of the partial sums forward, identity backward (after the row-parallel layer).

Everything else (embeddings, LayerNorms, residuals, row-parallel biases, the head) is
replicated: every TP rank computes it on identical tensors, so its gradients are identical
and need no reduction.

**The all-reduce, compressed.** A reduction is an *all-gather of compressed contributions*:
rank ``t`` compresses its contribution with its own sender instance, sends the payload to
every other TP rank through the pipeline's transport (counted there, key
``tp.s{stage}.r{i}.forward|backward``), and every rank decodes all ``tp`` payloads (its own
included, with its own receiver instance per source) and sums them in rank order, so every
rank reconstructs the same tensor. Why not reduce-scatter + all-gather: with a non-linear
code the reduce-scatter's partial sums would be decoded, summed and compressed again (two
lossy steps, and the second one sees sums, not a rank's contribution); the all-gather form
compresses each contribution once and works for every plugin. For tp = 2 it sends what a
ring all-reduce sends (each rank: one tensor); for tp > 2 an uncompressed ring would send
``2 (tp-1)/tp`` tensors per rank instead of ``tp - 1``, which the records show as they are.

Roles: contributions forward are ``TensorRole.TP_ACTIVATION``, backward
``TensorRole.TP_ACTIVATION_GRAD`` (plan directions ``tp_forward`` / ``tp_backward``). A
differentiable (learned) compressor forward is trained through: each rank backpropagates
through its own decode and encoder (``g``'s backward stays the identity: no traffic).

**One process or many.** Under torchrun a process holds one TP rank of its stage; in single
mode it holds all of them: the sharded modules keep one shard per local rank, run them one
after another, and the reduction sends and receives every simulated rank's messages through
the same transport (the ``LocalTransport`` counts what ``DistTransport`` sends), so losses
and bytes are the same in both modes. Dropout inside the split region (attention
probabilities) draws per rank from a generator seeded from one draw of the stage's stream,
so ranks run in sequence or in parallel see the same masks.

:func:`shard_stage` replaces every BERT-family encoder layer (Hugging Face ``BertLayer`` and
look-alikes: ``.attention.self.query/key/value``, ``.attention.output``, ``.intermediate``,
``.output``) and every GPT block of ``tasks.gpt`` in a stage module with its sharded version;
a task built from those gets tensor parallelism without further code.
"""

from __future__ import annotations

import copy
from contextlib import contextmanager, nullcontext
from typing import Any, Callable, ContextManager, Hashable, Iterator

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from compressors.api import Compressor, Payload, TensorInfo, TensorRole
from compressors.builtins.baseline import NoCompression
from compressors.registry import build, private_plugin_modules
from compressors.spec import Spec

from .boundary import Micro, _check_output, _check_payload, derive_seed
from .errors import ConfigError
from .timing import Clock
from .transport import Transport

__all__ = ["TPGroup", "shard_stage", "tp_key", "ColumnParallelLinear", "RowParallelLinear"]

_ROLE = {"forward": TensorRole.TP_ACTIVATION, "backward": TensorRole.TP_ACTIVATION_GRAD}


def tp_key(stage: int, site: int, direction: str) -> str:
    """Meter key of reduction ``site`` of ``stage`` (2 per block: attention, MLP)."""
    return f"tp.s{stage}.r{site}.{direction}"


class TPGroup:
    """The tensor-parallel reductions of one stage in this process (its local TP ranks).

    ``address(t)`` is the transport address of TP rank ``t`` of this stage. The stage sets
    ``micro`` before every forward; reductions read it (and ``f`` keeps it for its backward).
    """

    def __init__(
        self,
        stage: int,
        size: int,
        local: tuple[int, ...],
        address: Callable[[int], int],
        transport: Transport,
        specs: dict[str, Spec],
        device: torch.device,
        seed: int,
        clock: Clock,
        features: dict[str, Any] | None = None,
    ) -> None:
        self.stage, self.size, self.local = stage, size, local
        self.address = address
        self.transport = transport
        self.specs = specs  # direction -> spec
        self.device, self.seed, self.clock = device, seed, clock
        self.features = features or {}
        self.micro: Micro | None = None
        self.sites = 0
        # (site, direction, "send", t) / (site, direction, "recv", j, src) -> instance
        self._instances: dict[tuple, Compressor] = {}
        self._plain = NoCompression()
        self._plain.spec = "none"

    # --- construction ------------------------------------------------------------------
    def new_site(self) -> int:
        """Register one reduction site (a sub-block's f/g pair); builds its compressor instances."""
        site, self.sites = self.sites, self.sites + 1
        for direction in ("forward", "backward"):
            for t in self.local:
                self._instances[(site, direction, "send", t)] = self._build(direction, t)
                for src in range(self.size):
                    self._instances[(site, direction, "recv", t, src)] = self._build(direction, t)
        return site

    def _build(self, direction: str, t: int) -> Compressor:
        # several TP ranks in one process: each gets its own copy of every plugin module, as torchrun gives it
        realm = ("tp", self.stage, t) if len(self.local) > 1 else None
        with private_plugin_modules(realm):
            c = build(self.specs[direction])
        c.bind(self.features)
        c.to(self.device)
        return c

    def compressors(self) -> list[Compressor]:
        return list(self._instances.values())

    def parameters(self) -> list[nn.Parameter]:
        return [p for c in self._instances.values() for p in c.parameters()]

    # --- the conjugate operators ------------------------------------------------------------
    def copy_in(self, site: int, x: Tensor) -> list[Tensor]:
        """``f``: ``x`` for each local rank (identity); backward: all-reduce of their gradients."""
        if not (torch.is_grad_enabled() and x.requires_grad):
            return [x] * len(self.local)
        return list(_Copy.apply(self, site, self.micro, x))

    def reduce(self, site: int, parts: list[Tensor]) -> Tensor:
        """``g``: the sum of every TP rank's contribution (``parts``: the local ranks'), as every rank
        reconstructs it; backward: the identity (straight-through), or through a learned code."""
        micro = self.micro
        assert micro is not None, "the stage sets TPGroup.micro before running its module"
        comp = self._comp(site, "forward", "send", self.local[0], micro=micro)
        if comp.differentiable and micro.compressed and micro.training and torch.is_grad_enabled():
            return self._reduce_differentiable(site, parts, micro)
        if not torch.is_grad_enabled() or not any(p.requires_grad for p in parts):
            return self.all_reduce(site, "forward", parts, micro)
        return _Reduce.apply(self, site, micro, *parts)

    # --- the collective ------------------------------------------------------------------------
    def _comp(self, site: int, direction: str, side: str, *ranks: int, micro: Micro | None = None) -> Compressor:
        """The instance of (site, direction, side, rank(s)); the plain ``none`` path when uncompressed."""
        if micro is not None and not micro.compressed:
            return self._plain
        return self._instances[(site, direction, side, *ranks)]

    def _info(self, direction: str, site: int, micro: Micro, shape: torch.Size, dtype: torch.dtype, src: int):
        role = _ROLE[direction]
        return TensorInfo(
            role=role,
            boundary=site,
            microbatch=micro.index,
            step=micro.step,
            shape=torch.Size(shape),
            dtype=dtype,
            device=self.device,
            sample_ids=micro.sample_ids,
            seed=derive_seed(self.seed, "tp", self.stage, site, role.value, micro.step, micro.index, src),
            batch_input=micro.batch_input,
            training=micro.training,
        )

    def _stream(self, comp: Compressor, site: int, direction: str, micro: Micro, src: int, dst: int) -> Hashable | None:
        """The fixed-size stream of a message (None: framed every time); it names both TP ranks, as a
        transport keys streams by one peer and single mode sends for several simulated ranks."""
        if not comp.fixed_size:
            return None
        inp = micro.batch_input
        batch = tuple(inp.shape) if isinstance(inp, Tensor) else None
        return ("tp", self.stage, site, direction, src, dst, comp is self._plain, micro.training, batch)

    @contextmanager
    def _as_rank(self, t: int) -> Iterator[None]:
        """Single mode: the transport speaks for simulated rank ``t`` (then for the stage again)."""
        had = hasattr(self.transport, "rank")
        previous = getattr(self.transport, "rank", None)
        if len(self.local) > 1:
            self.transport.rank = self.address(t)  # type: ignore[attr-defined]
        try:
            yield
        finally:
            if had and len(self.local) > 1:
                self.transport.rank = previous  # type: ignore[attr-defined]

    def _send_all(self, site: int, direction: str, parts: list[Tensor], micro: Micro, grad: bool = False) -> dict:
        """Compress each local contribution and send it to every other TP rank; own payloads by rank."""
        own: dict[int, Payload] = {}
        for t, x in zip(self.local, parts):
            comp = self._comp(site, direction, "send", t, micro=micro)
            x = x.contiguous()
            info = self._info(direction, site, micro, x.shape, x.dtype, t)
            with self.clock.codec(f"tp.s{self.stage}.{direction}.compress", x):
                if grad:
                    payload = _check_payload(comp.compress(x, info), comp, info)
                else:
                    with torch.no_grad():
                        payload = _check_payload(comp.compress(x.detach(), info), comp, info)
            with self.clock.section("comm"), self._as_rank(t):
                for j in range(self.size):
                    if j != t:
                        stream = self._stream(comp, site, direction, micro, t, j)
                        self.transport.send(
                            payload,
                            self.address(j),
                            key=tp_key(self.stage, site, direction),
                            shape=x.shape,
                            dtype=x.dtype,
                            stream=stream,
                        )
            own[t] = payload
        return own

    def _receive(self, site: int, direction: str, j: int, src: int, micro: Micro) -> tuple[Payload, Any, Any]:
        comp = self._comp(site, direction, "recv", j, src, micro=micro)
        with self.clock.section("comm"), self._as_rank(j):
            return self.transport.recv(self.address(src), self._stream(comp, site, direction, micro, src, j))

    def all_reduce(self, site: int, direction: str, parts: list[Tensor], micro: Micro) -> Tensor:
        """The reconstructed sum (no autograd): what every TP rank computes from the payloads."""
        shape, dtype = parts[0].shape, parts[0].dtype
        own = self._send_all(site, direction, parts, micro)
        out: Tensor | None = None
        # single mode: every simulated rank decodes (its receivers' state moves); rank 0's sum is used
        for j in self.local:
            total: Tensor | None = None
            for src in range(self.size):
                payload = own[src] if src == j else self._receive(site, direction, j, src, micro)[0]
                comp = self._comp(site, direction, "recv", j, src, micro=micro)
                info = self._info(direction, site, micro, shape, dtype, src)
                with self.clock.codec(f"tp.s{self.stage}.{direction}.decompress", (shape, dtype)), torch.no_grad():
                    x = _check_output(comp.decompress(payload, info), comp, info, payload=payload)
                total = x.clone() if total is None else total.add_(x)
            out = total if out is None else out
        assert out is not None
        return out

    def _reduce_differentiable(self, site: int, parts: list[Tensor], micro: Micro) -> Tensor:
        """A learned code: every rank decodes every payload with autograd; a rank's own encoder gets
        its gradient through its own decode (the peers' payloads arrive as leaves, as over a wire)."""
        shape, dtype = parts[0].shape, parts[0].dtype
        own = self._send_all(site, "forward", parts, micro, grad=True)
        sums = []
        for j in self.local:
            total: Tensor | None = None
            for src in range(self.size):
                if src == j:
                    payload = own[src]
                else:
                    received = self._receive(site, "forward", j, src, micro)[0]
                    payload = tuple(t.requires_grad_() if t.is_floating_point() else t for t in received)
                comp = self._comp(site, "forward", "recv", j, src, micro=micro)
                info = self._info("forward", site, micro, shape, dtype, src)
                with self.clock.codec(f"tp.s{self.stage}.forward.decompress", (shape, dtype)):
                    x = _check_output(comp.decompress(payload, info), comp, info, payload=payload)
                total = x if total is None else total + x
            sums.append(total)
        # single mode: the value is rank 0's; each simulated rank's sum carries the gradient into its own graph
        out = sums[0]
        for s in sums[1:]:
            out = out + (s - s.detach())
        return out

    # --- dropout in the split region ----------------------------------------------------------------
    def rank_rngs(self, active: bool) -> list[ContextManager[None]]:
        """Per local rank, a context that runs its split region on its own random stream (seeded
        from one draw of the stage's stream, the same draw in one process or many)."""
        if not active:
            return [nullcontext() for _ in self.local]
        base = int(torch.randint(0, 2**62, (1,)).item())
        return [_seeded(self.device, derive_seed(base, t)) for t in self.local]


@contextmanager
def _seeded(device: torch.device, seed: int) -> Iterator[None]:
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(seed)
        yield


class _Copy(torch.autograd.Function):
    """``f``: one copy of ``x`` per local TP rank; backward: all-reduce of their gradients."""

    @staticmethod
    def forward(ctx, group: TPGroup, site: int, micro: Micro, x: Tensor):  # type: ignore[override]
        ctx.group, ctx.site, ctx.micro = group, site, micro
        ctx.like = (x.shape, x.dtype, x.device)
        if len(group.local) == 1:
            return (x.view_as(x),)
        return tuple(x.clone() for _ in group.local)

    @staticmethod
    def backward(ctx, *grads: Tensor):  # type: ignore[override]
        shape, dtype, device = ctx.like
        grads = tuple(g if g is not None else torch.zeros(shape, dtype=dtype, device=device) for g in grads)
        return None, None, None, ctx.group.all_reduce(ctx.site, "backward", list(grads), ctx.micro)


class _Reduce(torch.autograd.Function):
    """``g`` (straight-through): the reconstructed sum forward, the identity to every part backward."""

    @staticmethod
    def forward(ctx, group: TPGroup, site: int, micro: Micro, *parts: Tensor):  # type: ignore[override]
        ctx.n = len(parts)
        return group.all_reduce(site, "forward", list(parts), micro)

    @staticmethod
    def backward(ctx, g: Tensor):  # type: ignore[override]
        return (None, None, None, *([g] * ctx.n))


# --- sharded linears ---------------------------------------------------------------------------------------


def _chunk(w: Tensor, dim: int, size: int, t: int, groups: int = 1) -> Tensor:
    """Rank ``t``'s share of ``w`` along ``dim``: of each of ``groups`` equal parts (fused q/k/v) its ``1/size``."""
    parts = w.chunk(groups, dim=dim)
    return torch.cat([p.chunk(size, dim=dim)[t] for p in parts], dim=dim).detach().clone()


class ColumnParallelLinear(nn.Module):
    """``linear`` split by output features: one ``nn.Linear(in, out / tp)`` per local rank."""

    def __init__(self, linear: nn.Linear, size: int, ranks: tuple[int, ...], groups: int = 1) -> None:
        super().__init__()
        out = linear.out_features
        if out % (size * groups):
            raise ConfigError(f"cannot split {out} output features over tp={size}")
        self.shards = nn.ModuleList()
        for t in ranks:
            sh = nn.Linear(linear.in_features, out // size, bias=linear.bias is not None)
            sh.weight = nn.Parameter(_chunk(linear.weight, 0, size, t, groups))
            if linear.bias is not None:
                sh.bias = nn.Parameter(_chunk(linear.bias, 0, size, t, groups))
            self.shards.append(sh)


class RowParallelLinear(nn.Module):
    """``linear`` split by input features: one bias-free ``nn.Linear(in / tp, out)`` per local rank
    (partial sums); the bias is replicated and added once after the reduction."""

    def __init__(self, linear: nn.Linear, size: int, ranks: tuple[int, ...]) -> None:
        super().__init__()
        if linear.in_features % size:
            raise ConfigError(f"cannot split {linear.in_features} input features over tp={size}")
        self.shards = nn.ModuleList()
        for t in ranks:
            sh = nn.Linear(linear.in_features // size, linear.out_features, bias=False)
            sh.weight = nn.Parameter(_chunk(linear.weight, 1, size, t))
            self.shards.append(sh)
        self.bias = linear.bias  # the original Parameter (replicated), or None

    def finish(self, reduced: Tensor) -> Tensor:
        return reduced if self.bias is None else reduced + self.bias


# --- sharded blocks ---------------------------------------------------------------------------------------


def _is_bert_layer(m: nn.Module) -> bool:
    att = getattr(m, "attention", None)
    sa = getattr(att, "self", None)
    return (
        all(isinstance(getattr(sa, n, None), nn.Linear) for n in ("query", "key", "value"))
        and isinstance(getattr(getattr(att, "output", None), "dense", None), nn.Linear)
        and isinstance(getattr(getattr(m, "intermediate", None), "dense", None), nn.Linear)
        and isinstance(getattr(getattr(m, "output", None), "dense", None), nn.Linear)
        and not getattr(m, "add_cross_attention", False)
    )


def _is_gpt_block(m: nn.Module) -> bool:
    attn = getattr(m, "attn", None)
    return (
        isinstance(getattr(attn, "qkv", None), nn.Linear)
        and isinstance(getattr(m, "fc", None), nn.Linear)
        and hasattr(m, "mlp_out")
        and hasattr(m, "ln1")
    )


class TPBertLayer(nn.Module):
    """A post-LayerNorm BERT encoder layer split over TP ranks (same forward signature, returns the
    hidden states)."""

    def __init__(self, layer: nn.Module, group: TPGroup) -> None:
        super().__init__()
        size, ranks = group.size, group.local
        att, sa = layer.attention, layer.attention.self
        heads = sa.num_attention_heads
        if heads % size:
            raise ConfigError(f"cannot split {heads} attention heads over tp={size}; pick a tp that divides {heads}")
        self.group = group
        self.site_attn, self.site_mlp = group.new_site(), group.new_site()
        q, k, v = (ColumnParallelLinear(getattr(sa, n), size, ranks) for n in ("query", "key", "value"))
        self.selfs = nn.ModuleList()
        for i in range(len(ranks)):
            s = copy.copy(sa)  # HF self-attention over this rank's heads (its forward infers the head count)
            s._modules = dict(sa._modules)
            s._parameters, s._buffers = dict(sa._parameters), dict(sa._buffers)
            s.query, s.key, s.value = q.shards[i], k.shards[i], v.shards[i]
            s.num_attention_heads = heads // size
            s.all_head_size = s.num_attention_heads * s.attention_head_size
            self.selfs.append(s)
        self.attn_out = RowParallelLinear(att.output.dense, size, ranks)
        self.attn_drop, self.attn_ln = att.output.dropout, att.output.LayerNorm
        self.inter = ColumnParallelLinear(layer.intermediate.dense, size, ranks)
        self.act = layer.intermediate.intermediate_act_fn
        self.out = RowParallelLinear(layer.output.dense, size, ranks)
        self.out_drop, self.out_ln = layer.output.dropout, layer.output.LayerNorm
        self.attn_p = float(getattr(sa.dropout, "p", 0.0))

    def forward(self, hidden: Tensor, attention_mask: Tensor | None = None, *args: Any, **kwargs: Any) -> Tensor:
        g = self.group
        xs = g.copy_in(self.site_attn, hidden)
        rngs = g.rank_rngs(self.training and self.attn_p > 0)
        parts = []
        for i, x in enumerate(xs):
            with rngs[i]:
                ctx, _ = self.selfs[i](x, attention_mask=attention_mask)
            parts.append(self.attn_out.shards[i](ctx))
        a = self.attn_out.finish(g.reduce(self.site_attn, parts))
        a = self.attn_ln(self.attn_drop(a) + hidden)
        xs = g.copy_in(self.site_mlp, a)
        parts = [self.out.shards[i](self.act(self.inter.shards[i](x))) for i, x in enumerate(xs)]
        o = self.out.finish(g.reduce(self.site_mlp, parts))
        return self.out_ln(self.out_drop(o) + a)


class TPGPTBlock(nn.Module):
    """A pre-LayerNorm GPT block of ``tasks.gpt`` split over TP ranks (fused q/k/v split per head)."""

    def __init__(self, block: nn.Module, group: TPGroup) -> None:
        super().__init__()
        size, ranks = group.size, group.local
        self.n_head = block.attn.n_head
        if self.n_head % size:
            raise ConfigError(f"cannot split {self.n_head} attention heads over tp={size}; pick a tp that divides it")
        self.group = group
        self.site_attn, self.site_mlp = group.new_site(), group.new_site()
        self.ln1, self.ln2 = block.ln1, block.ln2
        self.dropout = block.attn.dropout
        self.qkv = ColumnParallelLinear(block.attn.qkv, size, ranks, groups=3)
        self.attn_out = RowParallelLinear(block.attn.out.proj, size, ranks)
        self.attn_drop = block.attn.out.drop
        self.register_buffer("attn_basis", block.attn.out.basis, persistent=False)
        self.fc = ColumnParallelLinear(block.fc, size, ranks)
        self.mlp_out = RowParallelLinear(block.mlp_out.proj, size, ranks)
        self.mlp_drop = block.mlp_out.drop
        self.register_buffer("mlp_basis", block.mlp_out.basis, persistent=False)

    def forward(self, x: Tensor) -> Tensor:
        g = self.group
        B, T, C = x.shape
        heads = self.n_head // g.size
        xs = g.copy_in(self.site_attn, self.ln1(x))
        rngs = g.rank_rngs(self.training and self.dropout > 0)
        parts = []
        for i, h in enumerate(xs):
            q, k, v = self.qkv.shards[i](h).split(C // g.size, dim=2)
            q, k, v = (t.view(B, T, heads, C // self.n_head).transpose(1, 2) for t in (q, k, v))
            with rngs[i]:
                y = F.scaled_dot_product_attention(
                    q, k, v, dropout_p=self.dropout if self.training else 0.0, is_causal=True
                )
            parts.append(self.attn_out.shards[i](y.transpose(1, 2).reshape(B, T, C // g.size)))
        a = self.attn_drop(self.attn_out.finish(g.reduce(self.site_attn, parts)))
        x = x + (a if self.attn_basis is None else a @ self.attn_basis.T)
        xs = g.copy_in(self.site_mlp, self.ln2(x))
        parts = [self.mlp_out.shards[i](F.gelu(self.fc.shards[i](h))) for i, h in enumerate(xs)]
        m = self.mlp_drop(self.mlp_out.finish(g.reduce(self.site_mlp, parts)))
        return x + (m if self.mlp_basis is None else m @ self.mlp_basis.T)


_SHARDERS: tuple[tuple[Callable[[nn.Module], bool], Callable[[nn.Module, TPGroup], nn.Module]], ...] = (
    (_is_bert_layer, TPBertLayer),
    (_is_gpt_block, TPGPTBlock),
)


def shard_stage(module: nn.Module, group: TPGroup) -> int:
    """Replace every transformer block inside ``module`` by its sharded version (in place, in
    module order, so every process numbers the reduction sites alike); returns how many."""
    count = 0

    def visit(parent: nn.Module) -> None:
        nonlocal count
        for name, child in list(parent.named_children()):
            for match, sharded in _SHARDERS:
                if match(child):
                    setattr(parent, name, sharded(child, group))
                    count += 1
                    break
            else:
                visit(child)

    visit(module)
    return count


def check_shardable(n_blocks: int, task: str, stage: int) -> None:
    """A stage without blocks to split holds only replicated layers (allowed); a task with none anywhere is refused."""
    if n_blocks == 0:
        raise ConfigError(
            f"task {task!r} has no transformer block to split for tensor parallelism (stage {stage}); "
            "tp > 1 needs a BERT-family encoder or a tasks.gpt decoder; use tp=1"
        )
