"""Runs a MindFormers launcher (``run_mindformer.py``, its arguments as they are) with mindwatch
imported first:

    python "$(python -m mindwatch.mindformers | tail -n 1)/mindwatch_launch.py" \\
        run_mindformer.py --config CONFIG --register_path "$(...)"
    msrun --worker_num=8 ... "$REGISTER_PATH/mindwatch_launch.py" run_mindformer.py --config ...

Why: under pipeline stages and under gradient accumulation, MindFormers' Trainer replaces
``runner_wrapper.type`` by its own pipeline cell when it is constructed, before it builds the
wrapper and the callbacks, which is when a YAML's ``auto_register`` entries import mindwatch.
Imported first, mindwatch has the Trainer put ``MindWatchPipelineCell`` there instead (and
registers its names, so ``auto_register`` is no longer needed). Without these two cases the
launcher changes nothing: ``run_mindformer.py`` alone works as well.
"""
import os
import runpy
import sys

USAGE = ("usage: python mindwatch_launch.py run_mindformer.py [its arguments]: runs the "
         "script with mindwatch.mindformers imported first (docs/mindformers.md)")


def take_script(usage: str) -> str:
    """The script named first on this launcher's command line, with the process made as
    ``python script args`` makes it for the script (``sys.argv``, ``sys.path[0]``); exits
    with ``usage`` when there is none."""
    if len(sys.argv) < 2 or not os.path.isfile(sys.argv[1]):
        given = f" (no such file: {sys.argv[1]})" if len(sys.argv) > 1 else ""
        sys.exit(usage + given)
    script = os.path.abspath(sys.argv[1])
    sys.argv = [script, *sys.argv[2:]]
    sys.path[0] = os.path.dirname(script)
    return script


def main() -> None:
    script = take_script(USAGE)
    import mindwatch.mindformers  # noqa: F401  registers; the Trainer keeps mindwatch's cells
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
