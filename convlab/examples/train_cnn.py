"""Train a small CNN on the synthetic shapes with convlab's kernels or with cuDNN, same seed, and compare.

    python -m convlab.examples.train_cnn --seeds 0 1 2 --steps 300 --out training-results/run.json \
        --figure training-results/loss.png        # add --tiny for the CUDA simulator's size

The network (``ShapesNet``, NCHW, ``S`` = image side, a multiple of 4; ``c`` = width)::

    x (B,1,S,S) -> conv3x3 p1 1->c            BN ReLU                     (B,c,S,S)
                -> conv3x3 s2 p1 c->2c         BN ReLU  = skip             (B,2c,S/2,S/2)
                -> conv3x3 p1 2c->2c groups=4  BN ReLU                     (B,2c,S/2,S/2)
                -> conv3x3 s2 p1 2c->4c        BN ReLU                     (B,4c,S/4,S/4)
                -> conv_transpose4x4 s2 p1 4c->2c (bias) BN, + skip, ReLU  (B,2c,S/2,S/2)
                -> conv1x1 2c->4c (bias)       ReLU -> global mean pool    (B,4c)
                -> linear 4c->classes                                      (B,classes)

``train(backend, seed)`` builds the network under ``torch.manual_seed(seed)``, then for
``backend="convlab"`` swaps every convolution for convlab's with ``convlab.torch.convert`` (parameters
shared, so both backends start from the same weights), and trains with Adam and a cosine learning rate
on batches drawn in a seed-fixed order; ``"cudnn"`` is torch's own convolution (cuDNN on a GPU; on a
machine without one, torch's CPU kernels, while convlab runs CPU tensors on Numba's CUDA simulator). On a
GPU fp32 is fp32 on both sides (TF32 off, as in the benchmarks). Step times are CUDA-synchronised wall
clock; the first step (where convlab's autotuner compiles and times kernels and cuDNN benchmarks its
algorithms) is reported apart and left out of the median.
"""
from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from convlab.examples.shapes import make_shapes
from convlab.examples.training_report import summarize, write_report

BACKENDS = ("cudnn", "convlab")


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Everything a run depends on besides the backend, the seed and the device."""

    steps: int = 300
    batch: int = 128
    size: int = 32            #: image side in pixels, a multiple of 4
    width: int = 16           #: channels of the first conv (c above); a multiple of 2
    num_classes: int = 10
    n_train: int = 8192
    n_test: int = 2048        #: rounded down to a multiple of batch (evaluation keeps the train shapes)
    noise: float = 0.75       #: Gaussian noise on images of intensity 0.6..1 (about 90% accuracy)
    lr: float = 3e-3
    data_seed: int = 1234     #: the dataset is the same for every seed; the seed sets init and order
    algorithm: str = "auto"   #: convlab's algorithm for every converted layer
    tune_configs: int = 1     #: under "auto": configs per plugin the autotuner times (0: all of them)

    @classmethod
    def tiny(cls, **overrides: Any) -> "TrainConfig":
        """A size the CUDA simulator trains in seconds per step: 8x8 images, batch 4, width 4, 3 steps."""
        return dataclasses.replace(cls(steps=3, batch=4, size=8, width=4, n_train=64, n_test=4),
                                   **overrides)


class ShapesNet(nn.Module):
    """The network of the module docstring; ``groups`` applies to the third conv (divides 2 * width)."""

    def __init__(self, num_classes: int = 10, width: int = 16, groups: int = 4) -> None:
        super().__init__()
        c = width
        if c < 2 or c % 2 or (2 * c) % groups:
            raise ValueError(f"width must be even and 2 * width divisible by groups={groups}, got {c}")

        def block(conv: nn.Module, channels: int) -> nn.Sequential:
            return nn.Sequential(conv, nn.BatchNorm2d(channels), nn.ReLU(inplace=True))

        self.stem = block(nn.Conv2d(1, c, 3, padding=1, bias=False), c)
        self.down1 = block(nn.Conv2d(c, 2 * c, 3, stride=2, padding=1, bias=False), 2 * c)
        self.grouped = block(nn.Conv2d(2 * c, 2 * c, 3, padding=1, groups=groups, bias=False), 2 * c)
        self.down2 = block(nn.Conv2d(2 * c, 4 * c, 3, stride=2, padding=1, bias=False), 4 * c)
        self.up = nn.ConvTranspose2d(4 * c, 2 * c, 4, stride=2, padding=1)
        self.up_bn = nn.BatchNorm2d(2 * c)
        self.mix = nn.Conv2d(2 * c, 4 * c, 1)
        self.head = nn.Linear(4 * c, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(B, 1, S, S) images -> (B, num_classes) logits; S a multiple of 4."""
        if x.dim() != 4 or x.shape[1] != 1 or x.shape[2] % 4 or x.shape[3] % 4:
            raise ValueError(f"x must be (B, 1, S, S) with S a multiple of 4, got {tuple(x.shape)}")
        skip = self.down1(self.stem(x))
        h = self.down2(self.grouped(skip))
        h = F.relu(self.up_bn(self.up(h)) + skip)
        h = F.relu(self.mix(h))
        return self.head(h.mean(dim=(2, 3)))


def default_device() -> str:
    """``"cuda"`` when torch sees a GPU, else ``"cpu"`` (where convlab runs on the CUDA simulator)."""
    return "cuda" if torch.cuda.is_available() else "cpu"


@functools.lru_cache(maxsize=4)
def _dataset(n: int, size: int, seed: int, num_classes: int, noise: float) -> tuple[np.ndarray, ...]:
    return make_shapes(n, size, seed, num_classes, noise)


def batch_order(seed: int, n: int, batch: int, steps: int) -> np.ndarray:
    """(steps, batch) sample indices: epochs of a seed-fixed permutation of ``range(n)``, whole batches."""
    if not 1 <= batch <= n:
        raise ValueError(f"batch must be in [1, n_train={n}], got {batch}")
    rng = np.random.default_rng(seed)
    per_epoch = n // batch
    epochs = -(-steps // per_epoch)
    return np.concatenate([rng.permutation(n)[:per_epoch * batch] for _ in range(epochs)]
                          ).reshape(-1, batch)[:steps]


def build(backend: str, seed: int, config: TrainConfig, device: str) -> nn.Module:
    """The seed's ``ShapesNet`` on ``device``; for ``"convlab"`` converted to convlab's convolutions."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    torch.manual_seed(seed)
    model = ShapesNet(config.num_classes, config.width).to(device)
    if backend == "convlab":
        import convlab.torch

        model = convlab.torch.convert(model, algorithm=config.algorithm)
    return model


def _sync(device: str) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def train(backend: str, seed: int = 0, device: str | None = None, config: TrainConfig | None = None,
          **overrides: Any) -> dict[str, Any]:
    """Train one network; ``overrides`` replace fields of ``config`` (default ``TrainConfig()``).

    Returns a dict: ``losses`` (training loss per step), ``final_loss`` (mean of the last tenth of the
    steps), ``test_loss`` and ``test_accuracy`` (held-out images, eval mode), ``first_step_s`` and
    ``step_ms_median`` (steps 2..N, CUDA-synchronised), ``train_s``, plus backend, seed, device, config.
    """
    config = dataclasses.replace(config or TrainConfig(), **overrides)
    device = device or default_device()
    if torch.device(device).type == "cuda":
        from convlab.bench import baseline

        baseline.load()  # cudnn.benchmark on, TF32 off: fp32 on both sides, as in the benchmarks
    n_test = max(config.batch, config.n_test // config.batch * config.batch)
    images, labels = _dataset(config.n_train + n_test, config.size, config.data_seed, config.num_classes,
                              config.noise)
    x = torch.from_numpy(images).to(device)
    y = torch.from_numpy(labels).to(device)
    order = torch.from_numpy(batch_order(seed, config.n_train, config.batch, config.steps)).to(device)

    model = build(backend, seed, config, device)
    from convlab.autotune import set_tune_configs

    previous = set_tune_configs(config.tune_configs or None)  # the first convlab step tunes 17 layer ops
    try:
        return _train(model, backend, seed, device, config, x, y, order)
    finally:
        set_tune_configs(previous)


def _train(model: nn.Module, backend: str, seed: int, device: str, config: TrainConfig, x: torch.Tensor,
           y: torch.Tensor, order: torch.Tensor) -> dict[str, Any]:
    """The training loop of :func:`train`, then the evaluation."""
    opt = torch.optim.Adam(model.parameters(), lr=config.lr)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=config.steps)
    losses, step_s = [], []
    model.train()
    start = time.perf_counter()
    for step in range(config.steps):
        xb, yb = x[order[step]], y[order[step]]
        _sync(device)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(xb), yb)
        loss.backward()
        opt.step()
        schedule.step()
        _sync(device)
        step_s.append(time.perf_counter() - t0)
        losses.append(loss.item())
    train_s = time.perf_counter() - start
    test_loss, test_accuracy = evaluate(model, x[config.n_train:], y[config.n_train:], config.batch)
    tail = losses[-max(1, len(losses) // 10):]
    return {"backend": backend, "seed": seed, "device": device, "config": dataclasses.asdict(config),
            "losses": losses, "final_loss": float(np.mean(tail)), "test_loss": test_loss,
            "test_accuracy": test_accuracy, "first_step_s": step_s[0],
            "step_ms_median": 1e3 * statistics.median(step_s[1:]) if len(step_s) > 1 else None,
            "train_s": train_s}


@torch.no_grad()
def evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch: int) -> tuple[float, float]:
    """(mean cross-entropy, accuracy) of ``model`` in eval mode over whole batches of ``x``, ``y``."""
    model.eval()
    total_loss, correct, count = 0.0, 0, 0
    for i in range(0, len(x) - batch + 1, batch):
        logits = model(x[i:i + batch])
        total_loss += F.cross_entropy(logits, y[i:i + batch], reduction="sum").item()
        correct += int((logits.argmax(1) == y[i:i + batch]).sum())
        count += batch
    model.train()
    return total_loss / count, correct / count


def compare(seeds: list[int], config: TrainConfig, device: str | None = None,
            backends: tuple[str, ...] = BACKENDS, progress: Any = print) -> list[dict[str, Any]]:
    """``train`` for every seed and backend (seed by seed, backends in turn); ``progress`` gets a line
    per run (None: silent)."""
    runs = []
    for seed in seeds:
        for backend in backends:
            run = train(backend, seed, device, config)
            runs.append(run)
            if progress:
                step = f"{run['step_ms_median']:.2f}" if run["step_ms_median"] is not None else "-"
                progress(f"{backend:<8} seed {seed}: final loss {run['final_loss']:.4f}  test accuracy "
                         f"{run['test_accuracy']:.3f}  step {step} ms  first step {run['first_step_s']:.2f} s  "
                         f"({run['train_s']:.1f} s)")
    return runs


def device_description(device: str) -> str:
    """The GPU's name, or a note that convlab ran on the CUDA simulator."""
    if torch.device(device).type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"{device} (torch CPU kernels; convlab on the CUDA simulator)"


def results_json(runs: list[dict[str, Any]], config: TrainConfig, device: str) -> dict[str, Any]:
    """Everything a results file holds: device, versions, config, every run (losses to 6 digits), summary."""
    from convlab.bench import baseline, report

    cudnn = baseline.load()[0] if torch.device(device).type == "cuda" else None
    meta = report.metadata(dataclasses.asdict(config),
                           {"torch": torch.__version__, **baseline.versions(cudnn)})
    rounded = [{**r, "losses": [float(f"{v:.6g}") for v in r["losses"]]} for r in runs]
    return {**meta, "format": "convlab-training/1", "torch_device": device_description(device),
            "runs": rounded, "summary": summarize(runs)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--tiny", action="store_true", help="TrainConfig.tiny() (default without a GPU)")
    size.add_argument("--full", action="store_true", help="TrainConfig() (default on a GPU)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--backends", nargs="+", choices=BACKENDS, default=list(BACKENDS))
    for field in dataclasses.fields(TrainConfig):
        parser.add_argument(f"--{field.name.replace('_', '-')}", type=type(field.default), default=None,
                            help=f"TrainConfig.{field.name} (full default {field.default})")
    parser.add_argument("--device", default=None, help="torch device (default: cuda when available)")
    parser.add_argument("--out", default=None, help="write the results JSON here")
    parser.add_argument("--figure", default=None, help="save the loss-curve figure here (needs matplotlib)")
    parser.add_argument("--replot", default=None, metavar="JSON",
                        help="train nothing: print the summary and draw --figure from a results JSON")
    args = parser.parse_args(argv)
    if args.replot:
        data = json.loads(Path(args.replot).read_text())
        config = TrainConfig(**data["settings"])
        seeds = sorted({run["seed"] for run in data["runs"]})
        return write_report(data, data["runs"], config, seeds, None, args.figure)
    device = args.device or default_device()
    tiny = args.tiny or (not args.full and torch.device(device).type != "cuda")
    config = TrainConfig.tiny() if tiny else TrainConfig()
    config = dataclasses.replace(config, **{f.name: getattr(args, f.name) for f in dataclasses.fields(config)
                                            if getattr(args, f.name) is not None})
    print(f"device: {device_description(device)}; {'tiny' if tiny else 'full'} config: {config}", flush=True)
    runs = compare(args.seeds, config, device, tuple(args.backends),
                   progress=lambda line: print(line, flush=True))
    return write_report(results_json(runs, config, device), runs, config, args.seeds, args.out, args.figure)


if __name__ == "__main__":
    raise SystemExit(main())
