"""What the docs tests do with each Python block of README.md and docs/*.md, keyed by the
block (``<file>#<anchor of the heading above>:<n>``, docs_markdown.Block): every ```python
block is here, and every entry names one (tests/core/test_docs_blocks_listed.py).

- ``Run``: the block runs as written, in a fresh namespace, in a temporary directory (it
  writes its run directory there), in the suite's venv: ``"mindspore"`` in ``.venv``
  (tests/mindspore/test_docs_blocks.py; framework-free blocks run there too), ``"torch"`` in
  ``.venv-torch`` (tests/pytorch/test_docs_blocks_torch.py). A block shows the user's code
  and leaves out their model and data: ``stand_ins`` names the function of the suite's
  stand-ins (tests/mindspore/docs_stand_ins_ms.py, tests/pytorch/docs_stand_ins_torch.py)
  that makes them small (a few steps); the list below says what each gives. ``logs``: how
  the run logs the block wrote must end (the latest segment's ``end`` reason and last step);
  ``then``: checks run after the block, in its namespace.
  ``bug``: a product bug the block meets; the test is then xfail (strict), with that reason.
- ``Signature``: the block shows a method's signature; it must be the method's, every
  parameter with its kind and default.
- ``Skip``: the block cannot run here (a device, several processes, a launcher, a network
  service); the reason says why and what tests that path instead. Keep this list short.

Stand-ins, and what each gives the block:

- ``classifier`` (mindspore): ``net`` (Dense 4 -> 2), ``loss_fn``, ``optimizer``,
  ``net_with_loss``, ``forward_fn`` (returns ``(loss, logits)``), ``dataset`` and
  ``train_dataset`` (2 batches of 4), ``valid_dataset``.
- ``classifier_nan`` (mindspore): the same, with a ``dataset`` of 4 batches whose second
  holds a NaN.
- ``classifier_nan_restart`` (mindspore): ``classifier``'s model, and ``make_dataset()``,
  which builds ``classifier_nan``'s ``dataset`` anew (a restarted process's data).
- ``own_step_nan`` (mindspore): ``batches`` (6), ``train_one_step(batch) -> (loss,
  grad_norm)`` (a custom loop's own ``value_and_grad`` step), ``current_lr``; the third batch
  holds a NaN.
- ``trained_monitor`` (mindspore): ``monitor``, a ``TrainMonitor`` on ``runs/exp1`` after a
  6-step ``Model.train``; an empty ``ckpt/``.
- ``demo_model`` (mindspore): ``monitor``, and the demo's Transformer as ``net_with_loss``
  and ``optimizer`` (sub-Cells ``blocks.*.attn``, ``blocks.*.attn.scores``, ``blocks.*.mlp``).
- ``regression`` (torch): ``model`` (an MLP 8 -> 1), ``loss_fn``, ``loader`` (4 batches of 8).
- ``regression_nan`` (torch): the same, the ``loader``'s third batch holding a NaN.
- ``hf_trainer`` (torch): ``model`` (returns ``{"loss", "logits"}``), ``args``
  (``TrainingArguments``: 4 steps, on the CPU, nothing saved), ``train_dataset``.
- ``lightning_module`` (torch): ``module`` (a ``LightningModule`` with AdamW), ``loader`` (4
  batches), ``epochs`` (1).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

SUITES = ("mindspore", "torch")


@dataclass(frozen=True)
class Run:
    suite: str
    stand_ins: str | None = None
    logs: Mapping[str, tuple[str, int]] = field(default_factory=dict)
    then: str = ""
    bug: str = ""


@dataclass(frozen=True)
class Signature:
    suite: str
    target: str            # module:qualified name of the method


@dataclass(frozen=True)
class Skip:
    reason: str


def _completed(steps: int, run_dir: str = "runs/exp1") -> dict[str, tuple[str, int]]:
    return {run_dir: ("completed", steps)}


def _stopped(step: int, run_dir: str = "runs/exp1") -> dict[str, tuple[str, int]]:
    return {run_dir: ("stopped", step)}


BLOCKS: dict[str, Run | Signature | Skip] = {
    # -- MindSpore, in .venv ---------------------------------------------------------------
    "README.md#usage:1": Run("mindspore", "classifier", _completed(6)),
    "docs/api.md#trainmonitorlog_dir-settings:1": Run("mindspore", "classifier", _completed(6)),
    "docs/api.md#monitorwrap:1": Signature("mindspore", "mindwatch.mindspore:TrainMonitor.wrap"),
    "docs/api.md#monitorjit_step:1": Signature("mindspore",
                                               "mindwatch.mindspore:TrainMonitor.jit_step"),
    # the NaN batch: the loop leaves at step 2 through monitor.stop_requested
    "docs/api.md#monitorjit_step:2": Run(
        "mindspore", "classifier_nan", _stopped(2),
        then="assert monitor.stop_requested.kind == 'loss_nonfinite'"),
    "docs/api.md#custom-training-loops-observe-and-close:1": Run(
        "mindspore", "own_step_nan", _stopped(3),
        then="assert monitor.stop_requested.kind == 'loss_nonfinite'"),
    "docs/api.md#mindwatchmonitorlog_dir-settings:1": Run(
        "mindspore", then="assert monitor.settings.grad_explode == 50.0\n"
                          "assert monitor.settings.hardware_interval_s == 5.0"),
    "docs/api.md#run-segments-resumetrue-and-state_dict:1": Run(
        "mindspore", "trained_monitor", _completed(6),
        then="assert monitor.monitor.last_step == 6   # the history of the 6 steps is back"),
    # the NaN batch stops the first run at step 2; the restarted one withholds it by itself
    "docs/api.md#bad-batches-named-and-withheld-by-themselves-when-the-run-comes-back-mindspore:1":
        Run("mindspore", "classifier_nan_restart", _completed(4),
            then="import json\n"
                 "records = [json.loads(line) for line in open('runs/exp1/rank_0.jsonl')]\n"
                 "steps = [r.get('skip_reason') for r in records if r['kind'] == 'step']\n"
                 "assert steps[-4:] == [None, 'known_bad_batch', None, None], steps"),
    "docs/api.md#alerts-a-webhook:1": Run(
        "mindspore", then="assert monitor.settings.alert_format == 'slack'"),
    "docs/api.md#activations-and-attention-logits:1": Run(
        "mindspore", "demo_model", then="assert step is monitor.train_step"),
    "docs/api.md#tokens-per-second-and-mfu:1": Run(
        "mindspore", then="assert (monitor.settings.tokens_per_sample, "
                          "monitor.settings.peak_tflops) == (2048, 312)"),
    "docs/pipelines.md#modeltrain:1": Run("mindspore", "classifier", _completed(6)),
    "docs/pipelines.md#modelfit-with-a-validation-set:1": Run(
        "mindspore", "classifier", _completed(20),
        then="assert [sorted(e['eval']) for e in records('runs/exp1', 'epoch')] == "
             "[['accuracy', 'eval_loss']] * 10"),
    "docs/pipelines.md#the-functional-loop:1": Run("mindspore", "classifier", _completed(2)),
    "docs/trackers.md#mlflow:1": Skip(
        "it needs MLflow, which the suite's venv does not hold: tests/trackers/"
        "test_paths_mindspore.py (make test-trackers) runs TrainMonitor with "
        "report_to='mlflow' against a real MLflow server"),
    "docs/mindformers.md#the-yaml-entry:1": Skip(
        "a script of one's own around MindFormers' Trainer: it needs a model YAML whose "
        "dataset is on disk (pretrain_llama2_7b.yaml and its MindRecord files); "
        "tests/mindformers/ trains the same Trainer with MindWatchMonitor on the CPU "
        "through mf_launcher.py, run_mindformer.py's calls"),
    # the MindRecord of the CPU trial (tests/mindformers/test_mindformers_cpu_trial.py then
    # trains the page's config on it through the CPU-trial launcher)
    "docs/mindformers.md#a-first-run-on-the-cpu:1": Run(
        "mindspore",
        then="from mindspore.dataset import MindDataset\n"
             "rows = list(MindDataset('data/train.mindrecord', shuffle=False)"
             ".create_dict_iterator(output_numpy=True))\n"
             "assert len(rows) == SAMPLES\n"
             "assert {r['input_ids'].shape for r in rows} == {(SEQ_LENGTH + 1,)}\n"
             "assert all(3 <= r['input_ids'].min() and r['input_ids'].max() < VOCAB_SIZE "
             "for r in rows)"),
    # -- PyTorch, in .venv-torch -----------------------------------------------------------
    "README.md#usage:2": Run("torch", "regression", _completed(4)),
    "docs/api.md#mindwatchmonitorlog_dir-settings:2": Run(
        "torch", "regression",
        then="monitor.observe(step=1, loss=float('nan'))\n"
             "monitor.close()\n"
             "assert os.path.isfile('runs/exp1/checkpoints/anomaly_step1.pt')"),
    "docs/torch.md#one-line-in-your-code:1": Run(
        "torch", "regression_nan", _stopped(3),
        then="assert monitor.stop_requested.kind == 'loss_nonfinite'"),
    "docs/torch.md#bad-batches:1": Run(
        "torch", "regression_nan", _completed(4),
        then="import json\n"
             "rows = [json.loads(line) for line in open('runs/exp1/rank_0.jsonl')]\n"
             "assert [r['step'] for r in rows if r.get('skip_reason') == 'known_bad_batch']"
             " == [3]\n"
             "ledger = [json.loads(line) for line in open('runs/exp1/bad_batches.jsonl')]\n"
             "assert [e['step'] for e in ledger] == [3]\n"
             "assert ledger[0]['indices'] == list(range(16, 24))"),
    "docs/torch.md#one-line-in-your-code:2": Run("torch", "hf_trainer", _completed(4)),
    "docs/torch.md#one-line-in-your-code:3": Run("torch", "lightning_module", _completed(4)),
    # offline, in the test's directory (no login here): one run each, its steps all there
    # (tests/trackers/ reads every value back)
    "docs/trackers.md#swanlab:1": Run(
        "torch", "hf_trainer", _completed(4),
        then="import glob\n"
             "assert len(glob.glob('runs/exp1/swanlog/run-*/backup.swanlab')) == 1"),
    "docs/trackers.md#weights--biases:1": Run(
        "torch", "lightning_module", _completed(4),
        then="import glob\n"
             "assert len(glob.glob('wandb/offline-run-*/run-*.wandb')) == 1"),
    "docs/torch.md#a-first-run-on-the-cpu:1": Run(
        "torch", logs=_stopped(150, "runs/torch-first"),
        # and what the doc says of it after: the verdict, the checkpoint, the report
        then="assert monitor.stop_requested.kind == 'loss_nonfinite'\n"
             "assert os.listdir('runs/torch-first/checkpoints')\n"
             "from mindwatch.cli import main\n"
             "assert main(['summary', 'runs/torch-first']) == 1\n"
             "assert main(['report', 'runs/torch-first']) == 0\n"
             "assert os.path.isfile('runs/torch-first/report.html')"),
}
