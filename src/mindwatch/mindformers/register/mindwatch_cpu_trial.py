"""Runs a MindFormers launcher (``run_mindformer.py``, its arguments as they are) for a trial
on the CPU, FOR CPU TRIALS ONLY (docs/mindformers.md#a-first-run-on-the-cpu):

    REGISTER_PATH="$(python -m mindwatch.mindformers | tail -n 1)"
    python "$REGISTER_PATH/mindwatch_cpu_trial.py" run_mindformer.py \\
        --config "$PWD/cpu_trial.yaml" --register_path "$REGISTER_PATH"

Two things, then the script as ``python run_mindformer.py ...`` runs it:

- Where ``hyper_parallel`` is not installed, a stand-in serves MindFormers 2.0's imports of it
  (mindwatch_hyper_parallel.py says what it is and why a CPU trial needs no more). Where it
  is installed, and on MindFormers 1.6 to 1.9, which start without it, nothing changes.
- A YAML entry naming a class of mindwatch's without its ``auto_register`` fails with
  mindwatch's message, the line to add (mindwatch_entries.py), where MindFormers says
  "Can't find class ...".

Unlike ``mindwatch_launch.py`` it does not import mindwatch first: mindwatch comes in through
the YAML's ``auto_register`` entries, as under ``run_mindformer.py`` alone on Ascend, so a
YAML that trains here registers there. (The CPU runs no pipeline stages, where
``mindwatch_launch.py`` is needed.) A script path, not ``python -m``, so that ``msrun`` can
start it for data-parallel ranks on the CPU.
"""
import runpy

# its neighbours in this folder, sys.path[0] when it runs as a script
import mindwatch_entries  # type: ignore[import-not-found]
import mindwatch_hyper_parallel  # type: ignore[import-not-found]
from mindwatch_launch import take_script  # type: ignore[import-not-found]

USAGE = ("usage: python mindwatch_cpu_trial.py run_mindformer.py [its arguments]: runs the "
         "script for a trial on the CPU, with a stand-in for hyper_parallel where it is not "
         "installed (docs/mindformers.md#a-first-run-on-the-cpu)")


def main() -> None:
    script = take_script(USAGE)
    if mindwatch_hyper_parallel.needed():
        mindwatch_hyper_parallel.install()
    mindwatch_entries.install()
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
