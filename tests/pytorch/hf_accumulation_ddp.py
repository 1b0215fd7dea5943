"""One rank of Hugging Face's Trainer under torchrun (gloo, CPU), for
test_accumulation_ddp.py: ``torchrun --nproc_per_node=2 hf_accumulation_ddp.py LOG_DIR``.
The one-layer GPT-2 of test_accumulation_loss.py takes ``num_items_in_batch``, counted over
both ranks' padded rows (``average_tokens_across_devices``, the default): the Trainer
multiplies each rank's loss by the number of processes, in place, before backward. Rank 0
writes the Trainer's ``log_history`` to ``LOG_DIR/log_history.json``."""
import io
import json
import os
import sys

from test_accumulation_loss import MICRO, Rows, gpt2
from transformers import Trainer, TrainingArguments

from mindwatch.torch import HFCallback


def main(log_dir: str) -> None:
    args = TrainingArguments(output_dir=f"{log_dir}/trainer", per_device_train_batch_size=MICRO,
                             gradient_accumulation_steps=2, max_steps=3, learning_rate=1e-3,
                             logging_steps=1, report_to=[], save_strategy="no", use_cpu=True,
                             disable_tqdm=True, seed=0, ddp_backend="gloo")
    callback = HFCallback(log_dir, stream=io.StringIO())
    trainer = Trainer(model=gpt2(), args=args, train_dataset=Rows(24, padded=True),
                      callbacks=[callback])
    trainer.train()
    assert trainer.model_accepts_loss_kwargs and args.average_tokens_across_devices
    if int(os.environ["RANK"]) == 0:
        with open(f"{log_dir}/log_history.json", "w") as out:
            json.dump(trainer.state.log_history, out)


if __name__ == "__main__":
    main(*sys.argv[1:])
