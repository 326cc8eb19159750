"""Where every stage runs: the one rank formula of the runtime.

A pipeline replica has P pipeline ranks holding its S stages round-robin (stage s on
pipeline rank ``s % P``, :func:`suite.schedules.rank_of_stage`): P = S for GPipe and
1F1B, P = S / v for schedules with v model chunks per rank (interleaved 1F1B). Every
pipeline rank is T tensor-parallel ranks (T = ``tp``, innermost, as Megatron-LM: the ranks
of one tensor-parallel group are neighbours, i.e. on one host). Replica d's pipeline rank
p, tensor-parallel rank t is transport address::

    rank = (d * P + p) * T + t

the global rank under torchrun, and the address of the simulated rank in one process
(single mode runs all P x T ranks of replica 0 in one process, so messages queue between
the same addresses as under torchrun).
"""

from __future__ import annotations

from dataclasses import dataclass

from suite.schedules import rank_of_stage

__all__ = ["Placement"]


@dataclass(frozen=True)
class Placement:
    """The pipeline ranks this process runs (``pp_ranks``), in which data-parallel replica, and
    which tensor-parallel ranks of them (``tp_ranks``: one under torchrun, all in single mode)."""

    n_stages: int
    n_ranks: int  # pipeline ranks per replica (P)
    pp_ranks: tuple[int, ...]
    dp_rank: int = 0
    dp_size: int = 1
    tp_size: int = 1
    tp_ranks: tuple[int, ...] = (0,)

    def __post_init__(self) -> None:
        if self.n_ranks < 1 or self.n_stages % self.n_ranks:
            raise ValueError(f"{self.n_stages} stages cannot be spread evenly over {self.n_ranks} pipeline ranks")
        if self.tp_size < 1 or not self.tp_ranks or not all(0 <= t < self.tp_size for t in self.tp_ranks):
            raise ValueError(f"tensor-parallel ranks {self.tp_ranks} do not fit tp={self.tp_size}")

    @classmethod
    def all_local(cls, n_stages: int, n_ranks: int, tp_size: int = 1) -> Placement:
        """Every pipeline and tensor-parallel rank of one replica in this process (single mode)."""
        return cls(n_stages, n_ranks, tuple(range(n_ranks)), tp_size=tp_size, tp_ranks=tuple(range(tp_size)))

    @classmethod
    def of_rank(cls, rank: int, n_stages: int, n_ranks: int, dp_size: int, tp_size: int = 1) -> Placement:
        """What global rank ``rank`` runs under torchrun (inverse of :meth:`address`)."""
        rest, t = divmod(rank, tp_size)
        return cls(n_stages, n_ranks, (rest % n_ranks,), rest // n_ranks, dp_size, tp_size, (t,))

    @property
    def tp_rank(self) -> int:
        """The tensor-parallel rank this process speaks for on pipeline links (the first it holds)."""
        return self.tp_ranks[0]

    @property
    def stages(self) -> tuple[int, ...]:
        """The stages this process runs, in order."""
        return tuple(s for s in range(self.n_stages) if self.pp_rank(s) in self.pp_ranks)

    def pp_rank(self, stage: int) -> int:
        """Pipeline rank (within a replica) holding ``stage``."""
        return rank_of_stage(stage, self.n_ranks)

    def address(self, pp_rank: int, dp_rank: int | None = None, tp_rank: int | None = None) -> int:
        """Transport address / global rank of pipeline rank ``pp_rank`` in replica ``dp_rank``,
        tensor-parallel rank ``tp_rank`` (defaults: this process's)."""
        d = self.dp_rank if dp_rank is None else dp_rank
        t = self.tp_rank if tp_rank is None else tp_rank
        return (d * self.n_ranks + pp_rank) * self.tp_size + t

    def rank(self, stage: int, dp_rank: int | None = None, tp_rank: int | None = None) -> int:
        """Transport address of ``stage`` in replica ``dp_rank``, tensor-parallel rank ``tp_rank``
        (defaults: this process's)."""
        return self.address(self.pp_rank(stage), dp_rank, tp_rank)
