"""Where every stage runs: the one rank formula of the runtime.

A pipeline replica has P pipeline ranks holding its S stages round-robin (stage s on
pipeline rank ``s % P``, :func:`suite.schedules.rank_of_stage`): P = S for GPipe and
1F1B, P = S / v for schedules with v model chunks per rank (interleaved 1F1B). Replica d's
pipeline rank p is transport address ``d * P + p``: the global rank under torchrun, and
the address of the simulated rank in one process (single mode runs all P ranks of replica
0 in one process, so messages queue between the same addresses as under torchrun).
"""

from __future__ import annotations

from dataclasses import dataclass

from suite.schedules import rank_of_stage

__all__ = ["Placement"]


@dataclass(frozen=True)
class Placement:
    """The pipeline ranks this process runs (``pp_ranks``), in which data-parallel replica."""

    n_stages: int
    n_ranks: int  # pipeline ranks per replica (P)
    pp_ranks: tuple[int, ...]
    dp_rank: int = 0
    dp_size: int = 1

    def __post_init__(self) -> None:
        if self.n_ranks < 1 or self.n_stages % self.n_ranks:
            raise ValueError(f"{self.n_stages} stages cannot be spread evenly over {self.n_ranks} pipeline ranks")

    @classmethod
    def all_local(cls, n_stages: int, n_ranks: int) -> Placement:
        """Every pipeline rank of one replica in this process (single mode)."""
        return cls(n_stages, n_ranks, tuple(range(n_ranks)))

    @classmethod
    def of_rank(cls, rank: int, n_stages: int, n_ranks: int, dp_size: int) -> Placement:
        """What global rank ``rank`` runs under torchrun (inverse of :meth:`address`)."""
        return cls(n_stages, n_ranks, (rank % n_ranks,), rank // n_ranks, dp_size)

    @property
    def stages(self) -> tuple[int, ...]:
        """The stages this process runs, in order."""
        return tuple(s for s in range(self.n_stages) if self.pp_rank(s) in self.pp_ranks)

    def pp_rank(self, stage: int) -> int:
        """Pipeline rank (within a replica) holding ``stage``."""
        return rank_of_stage(stage, self.n_ranks)

    def address(self, pp_rank: int, dp_rank: int | None = None) -> int:
        """Transport address / global rank of pipeline rank ``pp_rank`` in replica ``dp_rank``
        (default: this process's replica)."""
        return (self.dp_rank if dp_rank is None else dp_rank) * self.n_ranks + pp_rank

    def rank(self, stage: int, dp_rank: int | None = None) -> int:
        """Transport address of ``stage`` in replica ``dp_rank`` (default: this one)."""
        return self.address(self.pp_rank(stage), dp_rank)
