"""The training-loop comparison: torchmetrics vs torchmetrics-async on the profiling article's loop.

``python -m tools.demo`` trains a model on synthetic images and labels and logs the article's five
metrics (``avg_loss`` through ``MeanMetric``; ``accuracy``, ``precision``, ``recall``, ``f1_score`` over 1000 classes)
(computed, printed and reset every ``--log-every`` steps), once per mode, with the same seed and data:

- ``torchmetrics``: the installed torchmetrics classes;
- ``accelerated``: the same classes after :func:`torchmetrics_async.accelerate`;
- ``accelerated_async`` (:data:`ASYNC_MODE`; the default with ``--world-size`` above 1): the accelerated metrics in an
  :class:`~torchmetrics_async.AsyncMetricCollector`: ``schedule_collection()`` at every logging step, and the window
  it scheduled collected (``collect_results()``) at the next logging step or after the last step, so its sync and
  compute overlap with the training steps in between.

With CUDA it is the article's setup (ResNet-18, 224x224 images, batch 128); on the CPU a small CNN on 32x32 images so
a run takes about a minute. Per mode it reports the mean step time, the host syncs per step made by the metric calls
in the loop (``update``/``forward``), the host syncs per logging step (``compute`` and ``.item()``), and the final
metric values, which must match across modes.

``--world-size N`` (N > 1) runs the comparison as N spawned processes on the CPU, joined by a gloo process group on
127.0.0.1 (a free port): each rank trains a ``DistributedDataParallel`` copy of the model on its own shard of the
same synthetic data (batch ``i`` goes to rank ``i % N``) and logs the metrics through one ``MetricCollection``
(``accelerate`` makes its ``compute()`` one fused sync). Each mode also reports the collectives per logging step
(``torch.distributed`` collectives called inside the logging calls) and the host time of the logging calls per
logging step (``compute()``, ``.item()`` and ``reset()``; ``schedule_collection()`` and ``collect_results()`` for
the async mode), measured, like the step time, with the host-sync counter active. Rank 0 prints the table and writes
the JSON; every rank's final values must match across modes and across ranks.

Example:
    >>> from tools.demo import run
    >>> report = run(steps=3, device="cpu", log_every=2, modes=("torchmetrics", "accelerated"), image_size=8)
    >>> sorted(report["modes"]), report["steps"]
    (['accelerated', 'torchmetrics'], 3)
"""

import argparse
import contextlib
import datetime
import json
import os
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torchmetrics
from torch import nn

from torchmetrics_async import AsyncMetricCollector, accelerate
from torchmetrics_async.testing import count_collectives, count_host_syncs

__all__ = ["ASYNC_MODE", "MODES", "build_metrics", "format_report", "main", "run", "update_metrics"]

MODES: dict[str, Callable[[dict], dict]] = {
    "torchmetrics": lambda metrics: metrics,
    "accelerated": accelerate,
}
#: The mode that logs the accelerated metrics through an ``AsyncMetricCollector`` (a default only with several ranks,
#: so the single-process comparison stays the two modes of :data:`MODES`).
ASYNC_MODE = "accelerated_async"


def build_metrics(
    num_classes: int = 1000, average: str | None = None, extra_metrics: bool = False
) -> dict[str, torchmetrics.Metric]:
    """The article's metrics, as plain torchmetrics objects: the loss mean and four multiclass scores.

    Args:
        num_classes: classes of the classification task.
        average: the scores' ``average``; ``None`` keeps the task wrappers' default (``"micro"``), as the article.
        extra_metrics: also what users put next to them: a binned AUROC (``thresholds=50``), the Jaccard index and
            a regression metric (the Brier score: mean squared error of the probabilities against one-hot labels).

    Returns:
        Name -> metric.

    Example:
        >>> sorted(build_metrics(10))
        ['accuracy', 'avg_loss', 'f1_score', 'precision', 'recall']
        >>> sorted(set(build_metrics(10, extra_metrics=True)) - set(build_metrics(10)))
        ['auroc', 'brier', 'jaccard']
    """
    task: dict[str, Any] = {"task": "multiclass", "num_classes": num_classes}
    if average is not None:
        task["average"] = average
    return {
        "avg_loss": torchmetrics.MeanMetric(),
        "accuracy": torchmetrics.Accuracy(**task),
        "precision": torchmetrics.Precision(**task),
        "recall": torchmetrics.Recall(**task),
        "f1_score": torchmetrics.F1Score(**task),
        **(
            {
                "auroc": torchmetrics.AUROC(task="multiclass", num_classes=num_classes, thresholds=50),
                "jaccard": torchmetrics.JaccardIndex(task="multiclass", num_classes=num_classes),
                "brier": torchmetrics.MeanSquaredError(),
            }
            if extra_metrics
            else {}
        ),
    }


def update_metrics(
    metrics: dict[str, torchmetrics.Metric], loss: torch.Tensor, output: torch.Tensor, target: torch.Tensor
) -> None:
    """One training step's metric updates, as the article makes them: the loss mean, and the scores on the logits.

    Args:
        metrics: what :func:`build_metrics` returned (possibly accelerated).
        loss: the step's loss.
        output: the model's logits ``(N, C)``.
        target: the labels ``(N,)``.

    Example:
        >>> metrics = build_metrics(4)
        >>> update_metrics(metrics, torch.tensor(1.2), torch.randn(8, 4), torch.randint(0, 4, (8,)))
        >>> metrics["avg_loss"].compute()
        tensor(1.2000)
    """
    for name, metric in metrics.items():
        if name == "avg_loss":
            metric.update(loss.detach())
        elif name == "brier":
            probs = output.detach().softmax(-1)
            # scatter_, not F.one_hot: one_hot checks the label range on the host (a sync not made by the metric)
            metric.update(probs, torch.zeros_like(probs).scatter_(1, target.unsqueeze(1), 1.0))
        else:
            metric.update(output.detach(), target)


class _BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = (
            nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
            if stride != 1 or cin != cout
            else nn.Identity()
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(out)) + self.down(x))


def resnet18(num_classes: int = 1000) -> nn.Module:
    """ResNet-18 (torchvision's layout), so the demo needs no torchvision.

    Args:
        num_classes: output classes.

    Returns:
        The model.

    Example:
        >>> sum(p.numel() for p in resnet18().parameters())
        11689512
    """
    layers: list[nn.Module] = [
        nn.Conv2d(3, 64, 7, 2, 3, bias=False),
        nn.BatchNorm2d(64),
        nn.ReLU(inplace=True),
        nn.MaxPool2d(3, 2, 1),
    ]
    cin = 64
    for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        layers += [_BasicBlock(cin, cout, stride), _BasicBlock(cout, cout, 1)]
        cin = cout
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, num_classes)]
    return nn.Sequential(*layers)


def small_cnn(num_classes: int = 1000) -> nn.Module:
    """A small CNN for CPU runs.

    Args:
        num_classes: output classes.

    Returns:
        The model.

    Example:
        >>> small_cnn(10)(torch.zeros(2, 3, 32, 32)).shape
        torch.Size([2, 10])
    """
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, 2, 1),
        nn.ReLU(),
        nn.Conv2d(16, 32, 3, 2, 1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(32, num_classes),
    )


def _batches(
    steps: int, batch_size: int, image_size: int, num_classes: int, seed: int, rank: int = 0, world_size: int = 1
) -> list:
    # Every rank draws the whole dataset from the same generator and keeps its shard (global batch i goes to rank
    # i % world_size), so the data do not depend on the world size and one rank gets exactly the single-process data.
    generator = torch.Generator().manual_seed(seed)
    labels = torch.arange(steps * world_size * batch_size) % num_classes  # the article's FakeDataset: index % 1000
    shard = []
    for i in range(steps * world_size):
        images = torch.randn(batch_size, 3, image_size, image_size, generator=generator)
        if i % world_size == rank:
            shard.append((images, labels[i * batch_size : (i + 1) * batch_size]))
    return shard


class _Logging:
    """The logging step of one mode and what it costs (host syncs, collectives, host time, summed over the run).

    Synchronous modes compute, read every value on the host and reset; the async mode collects the window it
    scheduled at the previous logging step (if any) and schedules the current one, and :meth:`finish` collects the
    last window after the loop.
    """

    def __init__(self, mode: str, metrics: dict[str, torchmetrics.Metric], distributed: bool) -> None:
        self.names = list(metrics)
        self.distributed = distributed
        logged: Any = metrics
        if distributed:
            # One collection, as a multi-rank loop logs (accelerate() makes its compute() one fused sync). The members
            # are updated one by one (the loss mean takes other inputs than the scores), hence no compute groups.
            logged = torchmetrics.MetricCollection(metrics, compute_groups=False)
        # In place: the members of `metrics`, which the loop updates, are the converted objects.
        self.logged = MODES["accelerated" if mode == ASYNC_MODE else mode](logged)
        self.collector: AsyncMetricCollector | None = None
        if mode == ASYNC_MODE:
            self.collector = AsyncMetricCollector(self.logged)
            self.collector.bind()
        self.last: dict[str, float] = {}
        self.logs = 0
        self.host_syncs = 0
        self.collectives = 0
        self.seconds = 0.0
        self.counting = True  # False: log without the counters (``benchmarks.step_share`` times those logs)

    @contextlib.contextmanager
    def _measure(self) -> Iterator[None]:
        if not self.counting:
            yield
            return
        collectives = count_collectives() if self.distributed else contextlib.nullcontext(None)
        with count_host_syncs(record_events=False) as syncs, collectives as counted:
            start = time.perf_counter()
            yield
            self.seconds += time.perf_counter() - start
        self.host_syncs += syncs.total
        if counted is not None:
            self.collectives += counted.total

    def log(self) -> None:
        with self._measure():
            if self.collector is None:
                self.last = self._compute_and_reset()
            else:
                if self.collector.is_scheduled:  # the previous window, synced while the steps since then ran
                    self.last = self._ordered(self.collector.collect_results())
                self.collector.schedule_collection()
        self.logs += 1

    def finish(self) -> None:
        if self.collector is None:
            return
        with self._measure():  # the last window: every mode reports the values of the same window
            self.last = self._ordered(self.collector.collect_results())
        self.collector.unbind()

    def _compute_and_reset(self) -> dict[str, float]:
        if isinstance(self.logged, torchmetrics.MetricCollection):
            values = self.logged.compute()  # the accelerated collection syncs every member in one fused round here
            last = {name: values[name].item() for name in self.names}
            self.logged.reset()
            return last
        last = {name: metric.compute().item() for name, metric in self.logged.items()}
        for metric in self.logged.values():
            metric.reset()
        return last

    def _ordered(self, values: Mapping[str, float]) -> dict[str, float]:
        # the metrics' order (a collection orders its keys its own way)
        return {name: values[name] for name in self.names}


def _run_mode(mode: str, device: torch.device, steps: int, log_every: int, cfg: dict, batches: list) -> dict:
    distributed = cfg["world_size"] > 1
    torch.manual_seed(cfg["seed"])
    model = (resnet18 if cfg["model"] == "resnet18" else small_cnn)(cfg["num_classes"]).to(device)
    if distributed:
        # Data parallel, as a multi-rank loop trains: every rank keeps the same model (gradients averaged in backward).
        model = nn.parallel.DistributedDataParallel(model)
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    built = build_metrics(cfg["num_classes"], cfg["average"], cfg["extra_metrics"])
    metrics = {name: metric.to(device) for name, metric in built.items()}
    metric_log = _Logging(mode, metrics, distributed)
    step_syncs = 0
    step_times: list[float] = []
    for idx, (images, labels) in enumerate(batches):
        t0 = time.perf_counter()
        data, target = images.to(device, non_blocking=True), labels.to(device, non_blocking=True)
        optimizer.zero_grad()
        output = model(data)
        loss = criterion(output, target)
        loss.backward()
        optimizer.step()
        with count_host_syncs(record_events=False) as syncs:
            update_metrics(metrics, loss, output, target)
        step_syncs += syncs.total
        if (idx + 1) % log_every == 0 or idx + 1 == steps:
            metric_log.log()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        step_times.append(time.perf_counter() - t0)
    metric_log.finish()
    warm = step_times[min(len(step_times) - 1, cfg["warmup"]) :]
    logs = max(metric_log.logs, 1)
    result: dict[str, Any] = {
        "step_ms": 1000 * sum(warm) / len(warm),
        "host_syncs_per_step": step_syncs / steps,
        "host_syncs_per_log": metric_log.host_syncs / logs,
    }
    if distributed:
        result["collectives_per_log"] = metric_log.collectives / logs
        result["sync_ms"] = 1000 * metric_log.seconds / logs
    result["metrics"] = metric_log.last
    return result


def _distributed() -> tuple[int, int]:
    """``(rank, world size)`` of the initialised default process group, else ``(0, 1)``."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def run(
    steps: int = 200,
    device: str = "auto",
    log_every: int = 50,
    modes: Sequence[str] | None = None,
    seed: int = 0,
    image_size: int = 0,
    average: str | None = None,
    extra_metrics: bool = False,
) -> dict[str, Any]:
    """Run every mode on the same data and return the report (the ``--json`` document).

    Called on every rank of an initialised process group (as ``--world-size`` does), each rank trains a
    ``DistributedDataParallel`` model on its shard of the data, the metrics are logged through one
    ``MetricCollection``, and the report gains the collectives and host time of the logging calls; ``"auto"`` then
    means the CPU.

    Args:
        steps: training steps per mode (per rank).
        device: ``"auto"`` (CUDA when available, single process), ``"cpu"`` or ``"cuda"``.
        log_every: compute, log and reset the metrics every this many steps (and after the last step).
        modes: which modes to run; ``None``: those of :data:`MODES`, and :data:`ASYNC_MODE` too with several ranks.
        seed: seed for the model and the data.
        image_size: image side; 0 picks 224 with CUDA and 32 on the CPU.
        average: the classification scores' ``average`` (``None``: torchmetrics' task-wrapper default, micro).
        extra_metrics: add AUROC, JaccardIndex and a regression metric (see :func:`build_metrics`).

    Returns:
        ``{"device", "world_size", "steps", "model", "average", "modes": {mode: {"step_ms", "host_syncs_per_step",
        "host_syncs_per_log", "metrics"}}}``; with several ranks every mode also has ``"collectives_per_log"`` and
        ``"sync_ms"``, and ``"ranks_agree"`` says whether every rank's final values are the same.

    Example:
        >>> run(steps=2, device="cpu", log_every=1, modes=("accelerated",), image_size=8)["world_size"]
        1
    """
    rank, world_size = _distributed()
    if modes is None:
        modes = tuple(MODES) if world_size == 1 else (*MODES, ASYNC_MODE)
    auto_cuda = torch.cuda.is_available() and world_size == 1  # the multi-rank demo is the gloo/CPU one
    dev = torch.device("cuda" if device == "auto" and auto_cuda else ("cpu" if device == "auto" else device))
    cuda = dev.type == "cuda"
    cfg = {
        "seed": seed,
        "num_classes": 1000,
        "model": "resnet18" if cuda else "small_cnn",
        "batch_size": 128 if cuda else 64,
        "image_size": image_size or (224 if cuda else 32),
        "warmup": 10 if steps > 20 else 0,
        "average": average,
        "extra_metrics": extra_metrics,
        "world_size": world_size,
    }
    if cuda:
        torch.backends.cudnn.benchmark = True
    batches = _batches(steps, cfg["batch_size"], cfg["image_size"], cfg["num_classes"], seed, rank, world_size)
    report: dict[str, Any] = {
        "device": str(dev),
        "world_size": world_size,
        "steps": steps,
        "model": cfg["model"],
        "average": average or "micro",
        "metrics": list(build_metrics(2, average, extra_metrics)),
        "modes": {},
    }
    for mode in modes:
        report["modes"][mode] = _run_mode(mode, dev, steps, log_every, cfg, batches)
    if world_size > 1:
        finals: list[Any] = [None] * world_size
        dist.all_gather_object(finals, {mode: result["metrics"] for mode, result in report["modes"].items()})
        report["ranks_agree"] = all(final == finals[0] for final in finals)
    return report


def _values_match(report: Mapping[str, Any]) -> bool:
    """Whether the final values match across modes (and across ranks, when the report says)."""
    values = [result["metrics"] for result in report["modes"].values()]
    return all(v == values[0] for v in values[1:]) and report.get("ranks_agree", True)


def format_report(report: dict[str, Any]) -> str:
    """The report as a table, with the final metric values side by side.

    A report from several ranks adds two columns: collectives per logging step (``colls/log``) and the host time of
    the logging calls per logging step (``sync ms``).

    Args:
        report: what :func:`run` returned.

    Returns:
        Printable text.

    Example:
        >>> report = {"device": "cpu", "world_size": 1, "steps": 1, "model": "m", "modes": {}}
        >>> print(format_report(report).splitlines()[0])
        device cpu, world size 1, model m, 1 steps, average micro
        >>> result = {"step_ms": 9.0, "host_syncs_per_step": 0.0, "host_syncs_per_log": 5.0, "collectives_per_log": 2.0,
        ...           "sync_ms": 3.5, "metrics": {"avg_loss": 6.9}}
        >>> report.update(world_size=2, ranks_agree=True, modes={"accelerated": result})
        >>> print(format_report(report))  # doctest: +NORMALIZE_WHITESPACE
        device cpu, world size 2, model m, 1 steps, average micro
        mode                     step ms  syncs/step  syncs/log colls/log   sync ms        avg_loss
        accelerated                 9.00        0.00       5.00      2.00      3.50        6.900000
        final metric values match across modes and ranks
    """
    modes = report["modes"]
    lines = [f"device {report['device']}, world size {report['world_size']}, model {report['model']},"]
    lines[0] += f" {report['steps']} steps, average {report.get('average', 'micro')}"
    header = f"{'mode':<22}{'step ms':>10}{'syncs/step':>12}{'syncs/log':>11}"
    distributed = any("collectives_per_log" in result for result in modes.values())
    if distributed:
        header += f"{'colls/log':>10}{'sync ms':>10}"
    names = sorted({name for result in modes.values() for name in result["metrics"]})
    lines.append(header + "".join(f"{name:>16}" for name in names))
    for mode, result in modes.items():
        row = f"{mode:<22}{result['step_ms']:>10.2f}"
        row += f"{result['host_syncs_per_step']:>12.2f}{result['host_syncs_per_log']:>11.2f}"
        if distributed:
            row += f"{result.get('collectives_per_log', float('nan')):>10.2f}"
            row += f"{result.get('sync_ms', float('nan')):>10.2f}"
        lines.append(row + "".join(f"{result['metrics'].get(name, float('nan')):>16.6f}" for name in names))
    same = _values_match(report)
    if "ranks_agree" in report:
        match, differ = "match across modes and ranks", "DIFFER ACROSS MODES OR RANKS"
        lines.append(f"final metric values {match}" if same else f"FINAL METRIC VALUES {differ}")
    else:
        lines.append("final metric values match across modes" if same else "FINAL METRIC VALUES DIFFER ACROSS MODES")
    return "\n".join(lines)


def _emit(report: dict[str, Any], json_path: str | None) -> int:
    """Print the table, write the JSON if asked; the exit status (0: the final values match)."""
    print(format_report(report), flush=True)
    if json_path:
        with open(json_path, "w") as handle:
            json.dump(report, handle, indent=2)
    return 0 if _values_match(report) else 1


def _free_port() -> int:
    """A port nobody listens on right now on 127.0.0.1 (bound to port 0, read back, closed)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _rank_main(rank: int, world_size: int, port: int, kwargs: dict, json_path: str | None, status_path: str) -> None:
    """One rank of ``--world-size``: join the gloo group, run, rank 0 prints and writes the JSON; save the status."""
    # The ranks share the machine: each takes its share of the cores instead of one thread per core (oversubscribed
    # ranks would time each other's contention).
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    torch.set_num_threads(max(1, cores // world_size))
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world_size,
        timeout=datetime.timedelta(minutes=5),  # a rank that dies must not leave the others waiting half an hour
    )
    try:
        report = run(**kwargs)
        status = _emit(report, json_path) if rank == 0 else (0 if _values_match(report) else 1)
    finally:
        dist.destroy_process_group()
    with open(status_path, "w") as handle:
        json.dump({"status": status}, handle)


def _spawn(world_size: int, kwargs: dict, json_path: str | None) -> int:
    """Run :func:`run` on ``world_size`` spawned gloo ranks; the exit status (0: every rank's values match)."""
    context = mp.get_context("spawn")
    port = _free_port()
    with tempfile.TemporaryDirectory() as tmp:
        paths = [os.path.join(tmp, f"rank{rank}.json") for rank in range(world_size)]
        processes = [
            context.Process(target=_rank_main, args=(rank, world_size, port, kwargs, json_path, paths[rank]))
            for rank in range(world_size)
        ]
        for process in processes:
            process.start()
        while any(process.is_alive() for process in processes):
            if any(process.exitcode not in (None, 0) for process in processes):
                # A failed rank leaves the others blocked in a collective until gloo's timeout: end them now.
                for process in processes:
                    if process.is_alive():
                        process.kill()
                break
            time.sleep(0.1)
        for process in processes:
            process.join()
        status = 0
        for rank, (process, path) in enumerate(zip(processes, paths, strict=True)):
            if process.exitcode != 0 or not os.path.exists(path):
                print(f"rank {rank} failed (exit code {process.exitcode})", file=sys.stderr)
                status = 1
                continue
            with open(path) as handle:
                status = max(status, json.load(handle)["status"])
    return status


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive number of steps, got {value}")
    return value


def main(argv: Sequence[str] = ()) -> int:
    """Command line entry point: ``python -m tools.demo [--steps N] [--world-size N] [--json PATH]``.

    Args:
        argv: arguments (without the program name).

    Returns:
        0 when the final metric values match across modes (and across ranks with ``--world-size``), 1 otherwise.

    Example:
        >>> main(["--steps", "2", "--device", "cpu", "--log-every", "1", "--image-size", "8"])  # doctest: +ELLIPSIS
        device cpu, world size 1, model small_cnn, 2 steps, average micro
        ...
        0
    """
    parser = argparse.ArgumentParser(prog="python -m tools.demo", description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=_positive_int, default=200, help="training steps per mode (default 200)")
    parser.add_argument("--device", default="auto", help="auto (CUDA if available), cpu or cuda")
    parser.add_argument("--log-every", type=int, default=50, help="compute/log/reset interval in steps (default 50)")
    parser.add_argument(
        "--modes",
        nargs="+",
        choices=[*MODES, ASYNC_MODE],
        help=f"default: {' '.join(MODES)}, and {ASYNC_MODE} with --world-size above 1",
    )
    parser.add_argument("--image-size", type=int, default=0, help="image side (default: 224 on CUDA, 32 on CPU)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--average",
        choices=["micro", "macro", "weighted"],
        help="average of the four scores (default: the task wrappers' default, micro, as in the article)",
    )
    parser.add_argument(
        "--extra-metrics",
        action="store_true",
        help="also log a binned AUROC, the Jaccard index and the Brier score (mean squared error)",
    )
    parser.add_argument(
        "--world-size",
        type=int,
        default=1,
        help="ranks (default 1); above 1, spawned processes on the CPU joined by gloo on 127.0.0.1, each on its shard",
    )
    parser.add_argument("--json", metavar="PATH", help="also write the report as JSON to PATH")
    args = parser.parse_args(list(argv))
    if args.world_size < 1:
        parser.error("--world-size must be at least 1")
    if args.world_size > 1 and args.device not in ("auto", "cpu"):
        parser.error("--world-size above 1 runs on the CPU (gloo): use --device cpu (or auto)")
    kwargs = {
        "steps": args.steps,
        "device": args.device,
        "log_every": args.log_every,
        "modes": args.modes,
        "seed": args.seed,
        "image_size": args.image_size,
        "average": args.average,
        "extra_metrics": args.extra_metrics,
    }
    if args.world_size > 1:
        return _spawn(args.world_size, {**kwargs, "device": "cpu"}, args.json)
    return _emit(run(**kwargs), args.json)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
