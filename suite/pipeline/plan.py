"""A compression plan, and resolving it once against a task: ``resolve_plan``.

:class:`CompressionPlan` says which spec runs where (forward / backward at every boundary,
overrides per boundary, data-parallel gradients). :func:`resolve_plan` is the one place that
checks it, for a task, a stage count and a replica count: every spec parsed into a
:class:`~compressors.spec.Spec` tree and built once (names, parameters), the roles checked
on the built instances (a wrapper such as ``ef(...)`` takes its inner compressor's roles),
the model features the compressors require checked against the task, the per-boundary
overrides expanded to one spec per (direction, boundary). Everything after it (the runtime,
the trainer, the boundaries, the data-parallel hook) uses the :class:`ResolvedPlan` and
checks nothing again. Results are memoized per process, so the runner, the cell process and
the trainer share one resolution.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Literal, Mapping

from compressors.api import Compressor, CompressorError, TensorRole
from compressors.registry import build, get_class
from compressors.spec import Spec, parse_spec, spec_names
from suite.results.records import DIRECTIONS as RECORD_DIRECTIONS

from .errors import ConfigError

__all__ = ["Direction", "DIRECTIONS", "ROLE_OF_DIRECTION", "CompressionPlan", "ResolvedPlan", "resolve_plan"]

Direction = Literal["forward", "backward", "dp", "tp_forward", "tp_backward"]
DIRECTIONS: tuple[str, ...] = RECORD_DIRECTIONS  # one home: the record schema (suite.results.records)
ROLE_OF_DIRECTION = {
    "forward": TensorRole.ACTIVATION,
    "backward": TensorRole.ACTIVATION_GRAD,
    "dp": TensorRole.WEIGHT_GRAD,
    "tp_forward": TensorRole.TP_ACTIVATION,
    "tp_backward": TensorRole.TP_ACTIVATION_GRAD,
}
_FLAG = {
    "forward": "--forward",
    "backward": "--backward",
    "dp": "--dp",
    "tp_forward": "--tp-forward",
    "tp_backward": "--tp-backward",
}
# directions sent once per cell, not per boundary (their spec is looked up at index 0)
_GLOBAL = ("dp", "tp_forward", "tp_backward")


@dataclass(frozen=True)
class CompressionPlan:
    """Which compressor spec runs where.

    ``forward`` / ``backward`` apply at every pipeline boundary unless ``per_boundary``
    overrides them: ``per_boundary = {"0": {"forward": "topk(ratio=0.1)"}}`` changes the
    forward compressor of boundary 0 only. ``dp`` compresses data-parallel weight gradients.
    ``tp_forward`` / ``tp_backward`` compress the tensor-parallel all-reduces of every block
    (activations after row-parallel layers, their gradients before column-parallel ones;
    ``suite.pipeline.tensor_parallel``); a matrix entry writes them ``tp_forward: ..`` / ``tp_backward: ..``.
    """

    forward: str = "none"
    backward: str = "none"
    dp: str = "none"
    per_boundary: tuple[tuple[int, str, str], ...] = ()  # (boundary, direction, spec)
    tp_forward: str = "none"
    tp_backward: str = "none"

    def spec_for(self, direction: str, boundary: int = 0) -> str:
        for b, d, s in self.per_boundary:
            if b == boundary and d == direction:
                return s
        return getattr(self, direction)

    def all_specs(self) -> list[str]:
        return [self.forward, self.backward, self.dp, self.tp_forward, self.tp_backward] + [
            s for _, _, s in self.per_boundary
        ]

    @property
    def label(self) -> str:
        """Short display name: the forward spec if everything else is ``none``/same, else all."""
        parts = []
        if self.forward == self.backward:
            parts.append(self.forward)
        else:
            parts.append(f"fwd={self.forward},bwd={self.backward}")
        if self.dp != "none":
            parts.append(f"dp={self.dp}")
        if (self.tp_forward, self.tp_backward) != ("none", "none"):
            same = self.tp_forward == self.tp_backward
            parts.append(f"tp={self.tp_forward}" if same else f"tp={self.tp_forward},tp_bwd={self.tp_backward}")
        for b, d, s in self.per_boundary:
            parts.append(f"b{b}.{d}={s}")
        return "|".join(parts)

    @classmethod
    def from_dict(cls, d: dict[str, Any] | str) -> CompressionPlan:
        """From a matrix entry: a spec string (forward = backward = it) or a mapping."""
        if isinstance(d, str):
            return cls(forward=d, backward=d)
        if not isinstance(d, dict):
            raise ConfigError(f"compressor entry must be a spec string or a mapping, got {type(d).__name__}")
        unknown = set(d) - {"forward", "backward", "dp", "per_boundary", "both", "tp_forward", "tp_backward"}
        if unknown:
            raise ConfigError(
                f"compressor entry has unknown key(s) {sorted(unknown)}; valid keys: forward, backward, dp, both, "
                "per_boundary, tp_forward, tp_backward"
            )
        tp_fwd, tp_bwd = str(d.get("tp_forward", "none")), str(d.get("tp_backward", "none"))
        both = d.get("both")
        pb = []
        for b, dirs in (d.get("per_boundary") or {}).items():
            if not isinstance(dirs, dict):
                raise ConfigError(f"per_boundary[{b}] must map direction -> spec")
            for direction, spec in dirs.items():
                if direction not in ("forward", "backward"):
                    raise ConfigError(f"per_boundary[{b}]: direction {direction!r} must be forward or backward")
                pb.append((int(b), direction, str(spec)))
        return cls(
            forward=str(d.get("forward", both or "none")),
            backward=str(d.get("backward", both or "none")),
            dp=str(d.get("dp", "none")),
            per_boundary=tuple(sorted(pb)),
            tp_forward=tp_fwd,
            tp_backward=tp_bwd,
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"forward": self.forward, "backward": self.backward, "dp": self.dp}
        if (self.tp_forward, self.tp_backward) != ("none", "none"):  # absent at their default: old keys stay
            out.update(tp_forward=self.tp_forward, tp_backward=self.tp_backward)
        if self.per_boundary:
            pb: dict[str, dict[str, str]] = {}
            for b, d, s in self.per_boundary:
                pb.setdefault(str(b), {})[d] = s
            out["per_boundary"] = pb
        return out

    def canonical(self) -> CompressionPlan:
        """The same plan with every spec in its normalized spelling (parse errors raise ConfigError).

        Spelling only: checking names, parameters and roles is :func:`resolve_plan`'s job."""

        def canon(s: str, where: str) -> str:
            try:
                return str(parse_spec(s))
            except CompressorError as e:
                raise ConfigError(f"{where} compressor: {e}") from None

        return CompressionPlan(
            forward=canon(self.forward, "forward"),
            backward=canon(self.backward, "backward"),
            dp=canon(self.dp, "dp"),
            per_boundary=tuple((b, d, canon(s, f"boundary {b} {d}")) for b, d, s in self.per_boundary),
            tp_forward=canon(self.tp_forward, "tp_forward"),
            tp_backward=canon(self.tp_backward, "tp_backward"),
        )


@dataclass(frozen=True)
class ResolvedPlan:
    """A plan checked for one (task, stages, replicas): what the runtime builds from.

    ``uses`` holds the parsed spec of every (direction, boundary) that sends tensors: forward
    and backward at boundaries ``0 .. stages-2`` (overrides applied) and ``("dp", 0)`` when
    there are replicas, ``("tp_forward", 0)`` / ``("tp_backward", 0)`` when the cell is tensor
    parallel. ``not_applicable`` is the reason the task cannot run the plan (a
    compressor requires a model feature the task lacks): the runner skips such cells, the
    runtime refuses them.
    """

    plan: CompressionPlan  # every spec in its canonical spelling
    uses: Mapping[tuple[str, int], Spec]
    features: frozenset[str]  # model features the compressors require
    names: frozenset[str]  # every compressor name the plan uses
    not_applicable: str | None = None
    # options the compressors ask of those features (e.g. subspace(ratio=0.01): {"residual_subspace": {"ratio": 0.01}})
    feature_options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def spec(self, direction: str, boundary: int = 0) -> Spec:
        """The parsed spec at ``boundary`` in ``direction`` (``dp``, ``tp_*``: the one spec of the cell)."""
        return self.uses[(direction, 0 if direction in _GLOBAL else boundary)]


# (plan, task class, stages, replicas) -> (resolution, {name: class} it was made with)
_RESOLVED: dict[tuple[Any, ...], tuple[ResolvedPlan, dict[str, type]]] = {}
_MAX_MEMO = 512


def resolve_plan(
    plan: CompressionPlan, task: Any, n_stages: int, dp: int = 1, tp: int = 1, outer: bool = False
) -> ResolvedPlan:
    """Check ``plan`` for ``task`` (a task class) split into ``n_stages`` with ``dp`` replicas
    and ``tp`` tensor-parallel ranks per stage; ``outer``: replicas synchronize through an outer
    loop (``suite.pipeline.sync``), so the ``dp`` spec compresses pseudo-gradients (role
    ``pseudo_grad``) instead of weight gradients. With one replica a ``dp`` spec other than
    ``none`` compresses and decompresses the replica's own gradient (seed 002's one-worker runs).

    Raises :class:`ConfigError` with one line naming the offender and the fix: a bad spec,
    an override outside the boundaries, a compressor used in a role it does not handle
    (checked on the built instance), a data-parallel spec without replicas. A missing model
    feature is not raised but returned as ``not_applicable``. Memoized per process (a hit is
    re-checked against the registry, so a re-registered name is resolved again).
    """
    key = (plan, task, n_stages, dp, tp, outer)
    hit = _RESOLVED.get(key)
    if hit is not None and all(_class_or_none(n) is c for n, c in hit[1].items()):
        return hit[0]
    resolved = _resolve(plan, task, n_stages, dp, tp, outer)
    if len(_RESOLVED) >= _MAX_MEMO:
        _RESOLVED.clear()
    _RESOLVED[key] = (resolved, {n: get_class(n) for n in resolved.names})
    return resolved


def _class_or_none(name: str) -> type | None:
    try:
        return get_class(name)
    except CompressorError:
        return None


def _resolve(
    plan: CompressionPlan, task: Any, n_stages: int, dp: int, tp: int = 1, outer: bool = False
) -> ResolvedPlan:
    for b, _, _ in plan.per_boundary:
        if not 0 <= b < n_stages - 1:
            raise ConfigError(
                f"per_boundary boundary {b} out of range: {n_stages} stages have boundaries 0..{n_stages - 2}"
            )
    for d in ("tp_forward", "tp_backward"):
        if getattr(plan, d) != "none" and tp < 2:
            raise ConfigError(f"{d} compressor {getattr(plan, d)!r} needs tensor parallelism; set tp >= 2 (--tp 2)")

    # every spec the plan names, parsed and built once (unknown names, bad parameters)
    built: dict[str, tuple[Spec, Compressor]] = {}

    def resolve(text: str, where: str) -> Spec:
        try:
            tree = parse_spec(text)
            canon = str(tree)
            if canon not in built:
                built[canon] = (tree, build(tree))
        except CompressorError as e:
            raise ConfigError(f"{where} compressor: {e}") from None
        return built[canon][0]

    canonical = CompressionPlan(
        forward=str(resolve(plan.forward, "forward")),
        backward=str(resolve(plan.backward, "backward")),
        dp=str(resolve(plan.dp, "dp")),
        per_boundary=tuple((b, d, str(resolve(s, f"boundary {b} {d}"))) for b, d, s in plan.per_boundary),
        tp_forward=str(resolve(plan.tp_forward, "tp_forward")),
        tp_backward=str(resolve(plan.tp_backward, "tp_backward")),
    )

    uses: dict[tuple[str, int], Spec] = {}
    for b in range(n_stages - 1):
        for d in ("forward", "backward"):
            uses[(d, b)] = parse_spec(canonical.spec_for(d, b))
    if dp > 1 or outer or canonical.dp != "none":
        uses[("dp", 0)] = parse_spec(canonical.dp)
    if tp > 1:
        uses[("tp_forward", 0)] = parse_spec(canonical.tp_forward)
        uses[("tp_backward", 0)] = parse_spec(canonical.tp_backward)

    for (d, b), tree in uses.items():
        role = TensorRole.PSEUDO_GRAD if d == "dp" and outer else ROLE_OF_DIRECTION[d]
        roles = built[str(tree)][1].roles  # the instance's: a wrapper handles what it wraps
        if role not in roles:
            handled = ", ".join(sorted(r.value for r in roles)) or "nothing"
            at = f"boundary {b} " if any(pb == b and pd == d for pb, pd, _ in plan.per_boundary) else ""
            raise ConfigError(
                f"{at}{d} compressor {str(tree)!r} cannot compress the {d} direction ({role.value}): {tree} does not "
                f"support role {role.value} (it handles: {handled}); give that direction another spec "
                f"(e.g. {_FLAG[d]} none)"
            )

    names = frozenset(n for tree, _ in built.values() for n in spec_names(tree))
    features = frozenset(f for n in names for f in get_class(n).requires)
    have = set(getattr(task, "features", ()))
    not_applicable = None
    for canon in sorted(built):
        for name in sorted(spec_names(built[canon][0])):
            missing = set(get_class(name).requires) - have
            if missing and not_applicable is None:
                not_applicable = (
                    f"not applicable: {name} requires model feature(s) {', '.join(sorted(missing))} "
                    f"that task {getattr(task, 'name', task)} does not provide"
                )
    return ResolvedPlan(canonical, uses, features, names, not_applicable, _feature_options(built.values()))


def _feature_options(built: Iterable[tuple[Any, Compressor]]) -> dict[str, dict[str, Any]]:
    """What the built compressors (wrappers: their inner ones too) ask of the task's features.
    One model serves every boundary, so two specs asking different options are refused."""
    out: dict[str, dict[str, Any]] = {}
    for _tree, c in built:
        node: Compressor | None = c
        while node is not None:
            for feature, opts in node.feature_options.items():
                if feature in out and out[feature] != dict(opts):
                    raise ConfigError(
                        f"compressors ask for different {feature!r} options ({out[feature]} and {dict(opts)}); "
                        "use the same parameters for every direction and boundary"
                    )
                out[feature] = dict(opts)
            node = node.inner
    return out
