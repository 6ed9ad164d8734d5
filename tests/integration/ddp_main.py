"""One multi-process Lightning run on 2 CPU gloo processes: ``python -m tests.integration.ddp_main STRATEGY OUT_DIR``.

Run from the repository root (``tests.integration.test_lightning`` does, with ``MASTER_PORT`` set to a free port).
``STRATEGY`` is ``ddp`` (Lightning relaunches this module once per extra rank, with the same arguments) or
``ddp_spawn`` (Lightning pickles the trainer and the module into 2 spawned workers). Each rank fits (2 epochs, with
validation, :class:`~torchmetrics_async.lightning.AsyncMetricLogging` over the ``cb_*`` metrics beside the blocking
path), validates and tests; :class:`tests.integration.lit.Recorder` saves what each rank saw per stage in ``OUT_DIR``.
With ``ddp_spawn`` the launching process also saves, in ``OUT_DIR/parent.pt``, which of its own module's metric states
differ from their defaults after the three stages (the workers must not have written into them).
"""

import datetime
import os
import sys

import torch
from lightning.pytorch.strategies import DDPStrategy

from tests.integration import lit
from torchmetrics_async.lightning import AsyncMetricLogging

EVERY = 3


def main(strategy: str, out_dir: str) -> None:
    start_method = "spawn" if strategy == "ddp_spawn" else "popen"
    ddp = DDPStrategy(start_method=start_method, timeout=datetime.timedelta(seconds=300))
    model = lit.LitClassifier(callback_metrics=True)
    callbacks = [
        AsyncMetricLogging(metrics=["cb_loss", "cb_metrics"], every_n_steps=EVERY, prefix="async/"),
        lit.BlockingWindows(EVERY, prefix="async/"),
    ]
    trainer = lit.trainer(devices=2, strategy=ddp, callbacks=callbacks, out_dir=out_dir)
    trainer.fit(model, lit.loader(40, seed=1), lit.loader(16, seed=2))
    trainer.validate(model, lit.loader(16, seed=2), verbose=False)
    trainer.test(model, lit.loader(16, seed=3), verbose=False)
    if strategy == "ddp_spawn":
        torch.save({"changed": lit.changed_metric_states(model)}, os.path.join(out_dir, "parent.pt"))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
