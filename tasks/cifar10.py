"""CIFAR-10 image classification with ResNet-18 split into pipeline stages.

Model: torchvision's ``resnet18(num_classes=10)`` in its CIFAR form (3x3 stride-1 stem, no
max-pool). The smoke and quick tiers scale every channel width down to an eighth
(``extra["width"]`` = 8: the stem's channels; 64 is the real ResNet-18) so that a cell
trains in seconds on a CPU; the architecture (blocks, strides, boundaries) is the same.

Stages (boundary activations for a 32x32 input, width w):
  4 stages: [stem + layer1] | [layer2] | [layer3] | [layer4 + pool + fc]
            boundaries carry (B, w, 32, 32), (B, 2w, 16, 16), (B, 4w, 8, 8)
  2 stages: [stem + layer1 + layer2] | [layer3 + layer4 + pool + fc]
            boundary carries (B, 2w, 16, 16)

Training: SGD, momentum 0.9, Nesterov, weight decay 5e-4, linear warm-up then cosine decay;
random crop (zero pad 4) and horizontal flip as one batched gather on uint8 tensors. The
training pool and test set are held as uint8 tensors on the run's device (``to_device``):
on a GPU the batches never touch the host. The ``gpu`` tier adds bf16 autocast,
channels_last and label smoothing 0.2.
Metric: top-1 accuracy on the test set (or a fixed subset of it in smoke / quick).

Data: ``cifar10-jpg.tar.gz`` (ImageFolder layout) in the data dir, else torchvision's
``cifar-10-batches-py`` there, else torchvision downloads that into the data dir (unless
``$MPCBENCH_OFFLINE=1``). Decoded once into uint8 arrays under the cache dir.
Sample ids: the index into the training set (0..49999); evaluation samples get
50000 + index into the test set, so they never collide with a training id.
"""

from __future__ import annotations

import os
import tarfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Iterator

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .api import Batch, DataMissingError, Task, TaskError, TierBudget
from .data import SampleOrder, cached_arrays, fixed_subset, offline, source_key, step_generator
from .schedules import warmup_cosine

__all__ = ["Cifar10", "TASK", "CLASSES", "load_cifar10", "resnet18_cifar", "random_crop_flip"]

CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
MEAN = (0.4914, 0.4822, 0.4465)
STD = (0.2470, 0.2435, 0.2616)
N_TRAIN = 50_000
JPG_ARCHIVE = "cifar10-jpg.tar.gz"


# --- data --------------------------------------------------------------------------------
def _decode_archive(archive: Path) -> dict[str, np.ndarray]:
    """Decode the ImageFolder tarball (train/<class>/NNNN.jpg, test/...) into NCHW uint8 arrays."""
    from torchvision.io import ImageReadMode, decode_jpeg

    files: dict[str, list[tuple[str, int, bytes]]] = {"train": [], "test": []}
    with tarfile.open(archive, "r:gz") as tar:
        for m in tar:
            parts = Path(m.name).parts
            if not m.isfile() or len(parts) < 3 or parts[-3] not in files or not m.name.endswith(".jpg"):
                continue
            split, cls = parts[-3], parts[-2]
            if cls not in CLASSES:
                raise DataMissingError(f"{archive}: unexpected class folder {cls!r}; expected {', '.join(CLASSES)}")
            files[split].append((m.name, CLASSES.index(cls), tar.extractfile(m).read()))
    out = {}
    for split, items in files.items():
        items.sort()  # by path: class order, then file number
        raw = [torch.frombuffer(bytearray(b), dtype=torch.uint8) for _, _, b in items]
        # decoded in C++ (libjpeg-turbo), one chunk per core: ~5 s for all 60k images on 2 cores
        chunks = [raw[i :: os.cpu_count() or 1] for i in range(os.cpu_count() or 1)]
        with ThreadPoolExecutor(len(chunks)) as pool:
            decoded = list(pool.map(lambda c: decode_jpeg(c, mode=ImageReadMode.RGB), chunks))
        images = [decoded[i % len(chunks)][i // len(chunks)] for i in range(len(raw))]  # undo the striding
        out[f"{split}_x"] = torch.stack(images).numpy()  # (N, 3, 32, 32) uint8
        out[f"{split}_y"] = np.array([c for _, c, _ in items], dtype=np.int64)
    if len(out["train_x"]) != N_TRAIN or len(out["test_x"]) != 10_000:
        raise DataMissingError(
            f"{archive}: found {len(out['train_x'])} train / {len(out['test_x'])} test images, expected 50000 / 10000"
        )
    return out


def _torchvision_arrays(root: Path, download: bool) -> dict[str, np.ndarray]:
    """torchvision's CIFAR-10 (the pickled python version), downloading if asked."""
    import torchvision

    out = {}
    for split, train in (("train", True), ("test", False)):
        ds = torchvision.datasets.CIFAR10(str(root), train=train, download=download)
        out[f"{split}_x"] = np.ascontiguousarray(ds.data.transpose(0, 3, 1, 2))  # NHWC -> NCHW
        out[f"{split}_y"] = np.asarray(ds.targets, dtype=np.int64)
    return out


def load_cifar10(data_dir: Path) -> dict[str, np.ndarray]:
    """``train_x`` (50000, 3, 32, 32) uint8, ``train_y`` (50000,) int64, ``test_x``, ``test_y``."""
    archive = data_dir / JPG_ARCHIVE
    if archive.exists():
        return cached_arrays("cifar10-jpg", source_key(archive), lambda: _decode_archive(archive))
    pickled = data_dir / "cifar-10-batches-py"
    if pickled.is_dir():
        try:
            return cached_arrays(
                "cifar10-tv", source_key(pickled / "data_batch_1"), lambda: _torchvision_arrays(data_dir, False)
            )
        except (RuntimeError, OSError) as e:  # torchvision: "Dataset not found or corrupted"
            raise DataMissingError(
                f"CIFAR-10 in {pickled} is incomplete or corrupted ({e}); replace it or put {JPG_ARCHIVE} in {data_dir}"
            ) from None
    where = f"put {JPG_ARCHIVE} (ImageFolder train/<class>/*.jpg, test/...) or torchvision's cifar-10-batches-py in {data_dir} (--data-dir / $MPCBENCH_DATA_DIR)"
    if offline():
        raise DataMissingError(f"CIFAR-10 not found: {where}; or unset MPCBENCH_OFFLINE to let torchvision download it")
    try:  # torchvision downloads cifar-10-batches-py into the data dir
        _torchvision_arrays(data_dir, True)
    except Exception as e:  # offline, proxy, read-only data dir...
        raise DataMissingError(
            f"CIFAR-10 not found and torchvision's download into {data_dir} failed ({type(e).__name__}: {e}); {where}"
        ) from None
    return load_cifar10(data_dir)


def random_crop_flip(images: Tensor, dy: Tensor, dx: Tensor, flip: Tensor, pad: int = 4) -> Tensor:
    """Random crop after zero padding by ``pad``, then horizontal flip, as one gather.

    images (B, C, H, W) any dtype; dy, dx (B,) crop offsets in [0, 2*pad]; flip (B,) bool.
    """
    B, C, H, W = images.shape
    padded = F.pad(images, (pad, pad, pad, pad))  # (B, C, H+2p, W+2p), zeros
    dev = images.device
    dy, dx, flip = dy.to(dev), dx.to(dev), flip.to(dev)
    rows = dy[:, None] + torch.arange(H, device=dev)  # (B, H)
    cols = torch.arange(W, device=dev).expand(B, W)
    cols = dx[:, None] + torch.where(flip[:, None], W - 1 - cols, cols)  # (B, W)
    b = torch.arange(B, device=dev)[:, None, None, None]
    c = torch.arange(C, device=dev)[None, :, None, None]
    return padded[b, c, rows[:, None, :, None], cols[:, None, None, :]]


_STATS: dict[torch.device, tuple[Tensor, Tensor]] = {}  # (mean, std) * 255 per device, (1, 3, 1, 1)


def _normalize(images: Tensor) -> Tensor:
    """uint8 (B, 3, H, W) -> float32, per-channel standardized."""
    if images.device not in _STATS:  # once per device: a host-to-GPU copy per batch would stall the stream
        _STATS[images.device] = tuple(torch.tensor(v, device=images.device).view(1, 3, 1, 1) * 255 for v in (MEAN, STD))
    mean, std = _STATS[images.device]
    return (images.float() - mean) / std


# --- model -------------------------------------------------------------------------------
def resnet18_cifar(width: int = 64, num_classes: int = 10) -> nn.Module:
    """torchvision ResNet-18 with the CIFAR stem (3x3 stride 1, no max-pool), channels scaled to ``width``."""
    import torchvision
    from torchvision.models.resnet import BasicBlock

    model = torchvision.models.resnet18(num_classes=num_classes)
    model.conv1 = nn.Conv2d(3, width, kernel_size=3, stride=1, padding=1, bias=False)
    model.maxpool = nn.Identity()
    if width != 64:  # rebuild the stages with torchvision's own block builder at the new width
        model.bn1 = nn.BatchNorm2d(width)
        model.inplanes = width
        model.layer1 = model._make_layer(BasicBlock, width, 2)
        model.layer2 = model._make_layer(BasicBlock, 2 * width, 2, stride=2)
        model.layer3 = model._make_layer(BasicBlock, 4 * width, 2, stride=2)
        model.layer4 = model._make_layer(BasicBlock, 8 * width, 2, stride=2)
        model.fc = nn.Linear(8 * width, num_classes)
    for m in model.modules():  # torchvision's initialization, applied to the replaced modules too
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
    return model


class Stage(nn.Module):
    """A run of ResNet layers; ignores the batch input (images only enter stage 0 as ``x``)."""

    def __init__(self, *layers: nn.Module) -> None:
        super().__init__()
        self.layers = nn.Sequential(*layers)

    def forward(self, x: Tensor, batch_input: Tensor | None = None) -> Tensor:
        return self.layers(x)


def split_resnet(model: nn.Module, n_stages: int) -> list[nn.Module]:
    """Cut a (CIFAR) ResNet into stages at the boundaries listed in the module docstring."""
    stem = [model.conv1, model.bn1, model.relu, model.maxpool]
    head = [model.avgpool, nn.Flatten(1), model.fc]
    if n_stages == 4:
        return [Stage(*stem, model.layer1), Stage(model.layer2), Stage(model.layer3), Stage(model.layer4, *head)]
    if n_stages == 2:
        return [Stage(*stem, model.layer1, model.layer2), Stage(model.layer3, model.layer4, *head)]
    raise TaskError(f"task 'cifar10' cannot be split into {n_stages} stages; valid: 2, 4")


# --- task --------------------------------------------------------------------------------
DESCRIPTION = {
    "name": "cifar10",
    "family": "image classification (trained from scratch)",
    "metric": "accuracy",
    "higher_is_better": True,
    "metric_range": [0.0, 1.0],
    "chance": 0.1,
    "chance_note": "10 balanced classes",
    "trivial": 0.105,
    "trivial_note": "predicting the majority class of the 2048-image evaluation subset of the smoke, quick and plateau tiers (0.100 on the full, balanced test set)",
    "targets": {"smoke": 0.15, "quick": 0.45, "plateau": 0.5, "full": 0.9, "gpu": 0.93},
    "page": "CIFAR-10 image classification: ResNet-18 (CIFAR stem; an eighth of the width in the smoke and quick tiers) split into pipeline stages, trained from scratch. Metric: test accuracy.",
}


class Cifar10(Task):
    """Image classification: ResNet-18 (CIFAR form) trained from scratch on CIFAR-10 (32x32 pixels, 10 classes).

    Boundaries carry convolutional feature maps (B, C, H, W); smoke / quick use an eighth of
    the width and a fixed test subset. Metric: top-1 test accuracy (chance 0.10).
    """

    description = DESCRIPTION
    default_stages = 4
    stage_choices = (2, 4)
    # named widths (the stem's channels; overrides of the tier's ``extra``): w4 / w16, half and twice
    # the CPU tiers' eighth-width net, trainable on a CPU (the scale ladder); resnet18, the real width
    model_sizes = {"w4": {"width": 4}, "w16": {"width": 16}, "resnet18": {"width": 64}}
    tiers = {
        # seconds on a CPU: an eighth-width net, a few steps, tiny subsets
        "smoke": TierBudget(
            steps=4,
            batch_size=16,
            microbatches=2,
            eval_every=2,
            lr=0.05,
            eval_samples=64,
            train_samples=512,
            warmup_steps=0,
            extra={"width": 8},
        ),
        # calibrated on the 2-core CPU (docs/tasks.md): eighth width, a fixed pool of 2560 images
        # seen 12 times (AQ-SGD sends deltas from the second visit on), 2048 test images
        # (binomial noise ~1.1 points); the baseline still climbs at 120 steps, so 480
        "quick": TierBudget(
            steps=480,
            batch_size=64,
            microbatches=4,
            eval_every=120,
            lr=0.2,
            eval_samples=2048,
            train_samples=2560,
            warmup_steps=20,
            extra={"width": 8},
        ),
        # the quick tier's eighth-width net and 2560-image pool trained four times as long (48
        # visits), so that the uncompressed curve flattens: at 960 steps (24 visits) it still
        # gained +0.024 over its last quarter (docs/reproductions.md, "The plateau tier")
        "plateau": TierBudget(
            steps=1920,
            batch_size=64,
            microbatches=4,
            eval_every=120,
            lr=0.2,
            eval_samples=2048,
            train_samples=2560,
            warmup_steps=20,
            extra={"width": 8},
        ),
        # the real thing (GPU): 30 epochs of 390 steps at batch 128, full test set
        "full": TierBudget(
            steps=11_700,
            batch_size=128,
            microbatches=4,
            eval_every=390,
            lr=0.1,
            eval_samples=None,
            warmup_steps=390,
            extra={"width": 64},
        ),
        # one GPU, fast: full width, 15 epochs of 98 steps at batch 512 (micro-batches of 128),
        # bf16 autocast, channels_last, data resident on the GPU, label smoothing 0.2, 2 warm-up
        # epochs then cosine; time-to-target = time to 93% test accuracy (the H100 goal: < 60 s).
        # Not yet calibrated on a GPU: see docs/performance.md.
        "gpu": TierBudget(
            steps=1_465,
            batch_size=512,
            microbatches=4,
            eval_every=98,
            lr=0.4,
            eval_samples=None,
            warmup_steps=196,
            precision="bf16",
            extra={"width": 64, "channels_last": True, "label_smoothing": 0.2, "eval_batch_size": 1000},
        ),
    }

    def __init__(self, tier="smoke", seed=0, data_dir=None, features=frozenset(), model_size=None) -> None:
        super().__init__(tier, seed, data_dir, features, model_size)
        self._data: dict[str, np.ndarray] | None = None
        self._eval: list[Batch] | None = None
        self.device = torch.device("cpu")  # where batches are built (to_device)
        self._resident: tuple[Tensor, Tensor, Tensor] | None = None  # pool images, labels, row of each id

    @property
    def channels_last(self) -> bool:
        """NHWC stages and batches (``extra["channels_last"]``, the gpu tier)."""
        return bool(self.budget.extra.get("channels_last", False))

    @property
    def label_smoothing(self) -> float:
        return float(self.budget.extra.get("label_smoothing", 0.0))

    @property
    def data(self) -> dict[str, np.ndarray]:
        if self._data is None:
            self._data = load_cifar10(self.data_dir)
        return self._data

    # model
    def build_model(self) -> nn.Module:
        """The unsplit network (``build_stages`` cuts exactly this one)."""
        torch.manual_seed(self.seed)
        return resnet18_cifar(width=int(self.budget.extra.get("width", 64)))

    def build_stages(self, n_stages: int) -> list[nn.Module]:
        if n_stages not in self.stage_choices:
            raise TaskError(f"task 'cifar10' cannot be split into {n_stages} stages; valid: 2, 4")
        stages = split_resnet(self.build_model(), n_stages)
        if self.channels_last:  # NHWC convolutions (tensor cores); boundaries still carry NCHW tensors
            stages = [m.to(memory_format=torch.channels_last) for m in stages]
        return stages

    def loss(self, output: Tensor, targets: Tensor) -> Tensor:
        return F.cross_entropy(output, targets, label_smoothing=self.label_smoothing)

    def metric_sums(self, output: Tensor, targets: Tensor) -> tuple[float, float]:
        return float((output.argmax(-1) == targets).sum()), float(targets.numel())

    # optimization
    def make_optimizer(self, params: list[nn.Parameter]) -> torch.optim.Optimizer:
        return torch.optim.SGD(params, lr=self.budget.lr, momentum=0.9, nesterov=True, weight_decay=5e-4)

    def make_scheduler(self, optimizer):
        return warmup_cosine(optimizer, self.budget.steps, self.budget.warmup_steps)

    # data
    def to_device(self, device: torch.device) -> None:
        """Build batches on ``device``: the training pool (uint8, 154 MB for all of CIFAR-10)
        and the evaluation set are uploaded once; gathering, crop/flip and normalization run
        there. The random draws stay on the CPU generator, so batches are identical on every
        device."""
        device = torch.device(device)
        if device != self.device:
            self.device, self._resident, self._eval = device, None, None

    def _pool(self) -> tuple[Tensor, Tensor, Tensor]:
        """(images (P, 3, 32, 32) uint8, labels (P,) int64) of the training pool on the
        device, and ``row`` (50000,) int64: the pool row of each training id (-1 if absent)."""
        if self._resident is None:
            pool = fixed_subset(N_TRAIN, self.budget.train_samples)
            idx = pool.numpy()
            images = torch.from_numpy(np.ascontiguousarray(self.data["train_x"][idx])).to(self.device)
            labels = torch.from_numpy(np.ascontiguousarray(self.data["train_y"][idx])).to(self.device)
            row = torch.full((N_TRAIN,), -1, dtype=torch.int64)
            row[pool] = torch.arange(len(pool))
            self._resident = (images, labels, row.to(self.device))
        return self._resident

    def _layout(self, images: Tensor) -> Tensor:
        return images.contiguous(memory_format=torch.channels_last) if self.channels_last else images

    def train_batches(self, dp_rank: int = 0, dp_size: int = 1) -> Iterator[Batch]:
        b = self.budget
        images_all, labels_all, row = self._pool()
        order = SampleOrder(fixed_subset(N_TRAIN, b.train_samples), b.batch_size, self.seed)
        for step in range(b.steps):
            ids = order.indices(step, dp_rank, dp_size)  # (B,) int64 training-set ids, on the CPU
            # augmentation drawn for the whole global batch, so replicas partition it exactly
            g = step_generator(self.seed, step, salt=1)
            n = b.batch_size * dp_size
            dy, dx = torch.randint(0, 9, (2, n), generator=g)
            flip = torch.rand(n, generator=g) < 0.5
            mine = slice(dp_rank * b.batch_size, (dp_rank + 1) * b.batch_size)
            rows = row[ids.to(self.device, non_blocking=True)]
            images = random_crop_flip(images_all[rows], dy[mine], dx[mine], flip[mine])  # (B, 3, 32, 32) uint8
            yield Batch(self._layout(_normalize(images)), labels_all[rows], ids)

    def eval_batches(self) -> Iterator[Batch]:
        if self._eval is None:
            b = self.budget
            x, y = self.data["test_x"], self.data["test_y"]
            ids = fixed_subset(len(x), b.eval_samples, salt=1)
            size = int(b.extra.get("eval_batch_size", b.batch_size))
            images = torch.from_numpy(np.ascontiguousarray(x[ids.numpy()])).to(self.device)
            labels = torch.from_numpy(np.ascontiguousarray(y[ids.numpy()])).to(self.device)
            self._eval = [
                Batch(self._layout(_normalize(images[c])), labels[c], ids[c] + N_TRAIN)
                for c in torch.arange(len(ids)).split(size)
            ]
        return iter(self._eval)


TASK = Cifar10

if __name__ == "__main__":
    from .standalone import main

    raise SystemExit(main(Cifar10))
