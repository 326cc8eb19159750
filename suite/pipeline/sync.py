"""How data-parallel replicas synchronize: every step, or a DiLoCo-style outer loop.

``DPSync`` is a cell setting (``CellConfig.sync``, ``--sync``, ``sync:`` in a matrix entry),
written as a short string:

* ``step`` (default): gradients are reduced every step (DDP communication hook with the plan's
  ``dp`` compressor, ``suite.pipeline.data_parallel``);
* ``outer(h=8)``, also ``outer(h=8, lr=0.7, momentum=0.9, nesterov=true)``: each replica takes
  ``h`` steps with the task's optimizer alone (no traffic), then the replicas average the
  pseudo-gradient ``theta_outer - theta_local`` (compressed by the plan's ``dp`` compressor in the
  ``pseudo_grad`` role) and an outer SGD (Nesterov momentum by default, as DiLoCo) steps the
  shared parameters, which every replica then copies (``suite.pipeline.outer_loop``).

Torch-free (options and config validation import it).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from .errors import ConfigError

__all__ = ["DPSync", "SYNC_MODES", "parse_sync"]

SYNC_MODES = ("step", "outer")
_PARAM = re.compile(r"\s*([a-z_]+)\s*=\s*([^,]+?)\s*(?:,|$)")


@dataclass(frozen=True)
class DPSync:
    """A data-parallel synchronization choice.

    Attributes:
        mode: ``step`` (reduce gradients every step) or ``outer`` (DiLoCo-style outer loop).
        h: inner steps between outer synchronizations (``outer`` only; 1 for ``step``).
        lr: outer learning rate (DiLoCo: 0.7).
        momentum: outer SGD momentum (DiLoCo: 0.9).
        nesterov: Nesterov momentum (DiLoCo: true).
    """

    mode: str = "step"
    h: int = 1
    lr: float = 0.7
    momentum: float = 0.9
    nesterov: bool = True

    def __post_init__(self) -> None:
        if self.mode not in SYNC_MODES:
            raise ConfigError(f"sync mode {self.mode!r} is unknown; valid: step, outer(h=8)")
        if not isinstance(self.h, int) or isinstance(self.h, bool) or not 1 <= self.h <= 1_000_000:
            raise ConfigError(f"sync h={self.h!r} must be an integer in 1..1000000 (inner steps per outer step)")
        if self.mode == "step" and self.h != 1:
            raise ConfigError(f"sync h={self.h} needs the outer loop: write outer(h={self.h})")
        if not isinstance(self.lr, (int, float)) or not math.isfinite(self.lr) or not 0 < self.lr <= 10:
            raise ConfigError(f"sync lr={self.lr!r} must be a number in (0, 10] (the outer learning rate)")
        if not isinstance(self.momentum, (int, float)) or not 0 <= self.momentum < 1:
            raise ConfigError(f"sync momentum={self.momentum!r} must be a number in [0, 1)")
        if not isinstance(self.nesterov, bool):
            raise ConfigError(f"sync nesterov={self.nesterov!r} must be true or false")
        if self.nesterov and self.momentum == 0:
            raise ConfigError("sync nesterov=true needs momentum > 0; write nesterov=false for plain SGD")

    @property
    def outer(self) -> bool:
        return self.mode == "outer"

    def due(self, step: int, steps: int) -> bool:
        """Whether the outer synchronization runs after ``step`` (0-based) of ``steps``: every
        ``h`` steps and after the last one (so the final model is the shared one)."""
        return self.outer and ((step + 1) % self.h == 0 or step + 1 == steps)

    def __str__(self) -> str:
        if not self.outer:
            return "step"
        d = DPSync(mode="outer", h=self.h)
        extra = [
            f"{k}={_fmt(getattr(self, k))}" for k in ("lr", "momentum", "nesterov") if getattr(self, k) != getattr(d, k)
        ]
        return f"outer({', '.join([f'h={self.h}', *extra])})"


def _fmt(v: object) -> str:
    return str(v).lower() if isinstance(v, bool) else repr(v)


def parse_sync(text: str | DPSync) -> DPSync:
    """``step`` / ``outer(h=8, lr=0.7, momentum=0.9, nesterov=true)`` -> :class:`DPSync`
    (:class:`ConfigError`, one line, on anything else)."""
    if isinstance(text, DPSync):
        return text
    if not isinstance(text, str):
        raise ConfigError(f"sync must be a string such as step or outer(h=8), got {type(text).__name__}")
    s = text.strip()
    if s == "step":
        return DPSync()
    m = re.fullmatch(r"outer\s*(?:\((.*)\))?", s)
    if not m:
        raise ConfigError(f"sync {text!r} is unknown; valid: step, outer(h=8, lr=0.7, momentum=0.9, nesterov=true)")
    kwargs: dict[str, object] = {}
    body = (m.group(1) or "").strip()
    pos = 0
    while pos < len(body):
        p = _PARAM.match(body, pos)
        if not p or p.end() == pos:
            raise ConfigError(f"sync {text!r}: cannot read parameters {body[pos:]!r}; write outer(h=8, lr=0.7)")
        key, raw = p.group(1), p.group(2)
        pos = p.end()
        if key not in ("h", "lr", "momentum", "nesterov"):
            raise ConfigError(f"sync {text!r}: unknown parameter {key!r}; valid: h, lr, momentum, nesterov")
        try:
            if key == "h":
                kwargs[key] = int(raw)
            elif key == "nesterov":
                if raw.lower() not in ("true", "false", "1", "0"):
                    raise ValueError(raw)
                kwargs[key] = raw.lower() in ("true", "1")
            else:
                kwargs[key] = float(raw)
        except ValueError:
            raise ConfigError(f"sync {text!r}: {key}={raw!r} is not a valid value") from None
    if "h" not in kwargs:
        raise ConfigError(f"sync {text!r} needs h, the inner steps per outer step: outer(h=8)")
    return DPSync(mode="outer", **kwargs)  # type: ignore[arg-type]
