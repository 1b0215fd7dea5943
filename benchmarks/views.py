"""Time and memory of the views (`summary`, `report`, `watch`) on a long run, side by side with
one plain ``json.loads`` pass over the same lines, and with TensorBoard's EventAccumulator.

The run is generated on the fly into a temporary directory, one process per rank: RANKS x
STEPS step records with every field the monitor writes (MindSpore adapter: loss scale, data
time), a ``state`` record every STATE_INTERVAL steps (the default ``state_interval``) shaped
like an LLM's under Adam (a layer is a parameter name minus its last part: BLOCKS decoder
blocks of nine layers, the embedding, the final norm and the head; per layer the weight,
update, gradient and both moment norms and the ratio, float32 values), a hardware record
every 2 s of simulated time with one NPU each, an epoch record every 10,000 steps, two
anomalies (rank 0 and the last rank), and an end record; every line through
``mindwatch.records.encode``, so the format is the writer's. Each measurement runs in a fresh
child process (``--child``), which reports its wall time and the peak RSS of itself and of
its largest worker (``getrusage``); ratios are against the ``json.loads`` pass of this run.

- json.loads: every line of every rank, one process, nothing kept.
- summary / report: the commands as ``mindwatch.cli.main`` runs them (report writes the
  HTML, its size is printed).
- watch: the time from starting the process to the first frame that shows data, drawn
  into a terminal-like buffer (the command's loop, which then reads the older records and
  stops; its RSS covers that too).
- TensorBoard: the same run's scalars written by mindwatch's TensorBoardSink for the first
  TB_STEPS steps of every rank, read back with EventAccumulator; its time is scaled
  linearly to STEPS (the reading is linear in the events).

Each is taken ROUNDS times in rotating order; the median time is shown. Peak RSS with
workers is bounded by the process's own plus each worker at the largest one's. The goals
are for the full size: a quick run (``--ranks 2 --steps 20000``) is mostly interpreter
start-up and imports (~0.15 s), which the ratios then show.

    python benchmarks/views.py [--ranks 8] [--steps 200000] [--rounds 3] [--tb-steps 20000]
                               [--blocks 24] [--baseline-src DIR]

``--baseline-src DIR``: also time the views of another source tree (``DIR/mindwatch``, e.g.
a checkout from before a change) on the same run; ``MINDWATCH_JSON=json`` in the
environment times the standard-json path of this one.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import resource
import struct
import subprocess
import sys
import tempfile
import time

from mindwatch import records

GOALS = {"summary": 0.3, "report": 0.6}     # at most this times the json.loads pass
RSS_GOAL_MB = 500
WATCH_GOAL_S = 1.0
HTML_GOAL_MB = 10
START = 1_700_000_000.0                     # simulated wall clock, Unix seconds
STATE_INTERVAL = 100                        # the state_interval setting's default
BLOCKS = 24                                 # decoder blocks of the simulated model
# A Llama-like decoder block's layers (parameter names minus ".weight"/".bias").
BLOCK_LAYERS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj", "input_layernorm",
                "post_attention_layernorm")


def _config() -> dict:
    return {"print_interval": 10, "loss_smoothing": 0.9, "batch_size": 32,
            "grad_explode": 100.0, "grad_vanish": 1e-6, "max_temperature_c": 85.0,
            "hardware_interval_s": 2.0, "on_anomaly": "warn"}


def layer_names(blocks: int) -> list[str]:
    return (["model.embed_tokens"]
            + [f"model.layers.{b}.{layer}" for b in range(blocks) for layer in BLOCK_LAYERS]
            + ["model.norm", "lm_head"])


def _f32(value: float) -> float:
    """The float32 nearest ``value``, as the state probe's float32 vector gives it."""
    return struct.unpack("f", struct.pack("f", value))[0]


def state_fields(rng: random.Random, names: list[str], step: int) -> dict:
    """A ``state`` record's fields (docs/log-format.md#state) under an Adam-like optimizer."""
    layers, weights, updates = {}, 0.0, 0.0
    for index, name in enumerate(names):
        weight = _f32(10.0 + index % 7 + rng.random())
        update = _f32(weight * 1e-3 * (0.5 + rng.random()))
        weights, updates = weights + weight * weight, updates + update * update
        layers[name] = {"weight_norm": weight, "update_norm": update,
                        "update_ratio": _f32(update / weight),
                        "grad_norm": _f32(0.1 + rng.random()),
                        "m_norm": _f32(0.01 * rng.random()), "v_norm": _f32(1e-5 * rng.random())}
    return {"step": step, "weight_norm": _f32(weights ** 0.5),
            "update_norm": _f32(updates ** 0.5), "layers": layers}


def write_rank(path: str, rank: int, ranks: int, steps: int, blocks: int = BLOCKS) -> None:
    rng = random.Random(rank)
    names = layer_names(blocks)
    now, smooth, next_sample = START, None, START + 2.0
    spike, explode = (steps * 2 // 5, 0), (steps * 7 // 10, ranks - 1)
    lines = [records.encode({
        "kind": "run", "rank": rank, "time": now, "schema": records.SCHEMA_VERSION,
        "world_size": ranks, "host": f"node{rank // 8}", "pid": 4000 + rank, "config": _config(),
        "versions": {"mindwatch": "0.1.0", "mindspore": "2.10.0", "python": "3.11.7"},
        "log_path": path, "total_steps": steps, "argv": ["train.py"], "wrapped": True,
        "mode": "GRAPH_MODE", "device_target": "Ascend", "dataset_sink_mode": False})]
    with open(path, "w", encoding="utf-8") as handle:
        for step in range(1, steps + 1):
            step_time = 0.1 + 0.02 * rng.random()
            now += step_time
            loss = 3.0 / (1 + step / 20_000) + 0.05 * rng.random()
            if (step, rank) == spike:
                loss *= 4
            smooth = loss if smooth is None else 0.9 * smooth + 0.1 * loss
            grad = 500.0 if (step, rank) == explode else 1.0 + rng.random()
            lines.append(records.encode({
                "kind": "step", "rank": rank, "time": now, "step": step,
                "epoch": 1 + step // 10_000, "loss": loss, "loss_smooth": smooth,
                "lr": 3e-4 * min(1.0, step / 2000), "grad_norm": grad, "step_time_s": step_time,
                "skipped": False, "steps_covered": 1, "samples_per_s": 32 / step_time,
                "loss_scale": 65536.0, "data_time_s": 0.002 * rng.random()}))
            if blocks and step % STATE_INTERVAL == 0:       # right after its step record
                lines.append(records.encode({"kind": "state", "rank": rank, "time": now,
                                             **state_fields(rng, names, step)}))
            if (step, rank) in (spike, explode):
                kind = "loss_spike" if (step, rank) == spike else "gradient_explode"
                lines.append(records.encode({
                    "kind": "anomaly", "rank": rank, "time": now, "anomaly": kind, "step": step,
                    "value": loss if kind == "loss_spike" else grad, "threshold": 10.0,
                    "message": f"{kind} at step {step}", "actions": ["warn"],
                    "checkpoint": None, "report": None}))
            if now >= next_sample:
                next_sample += 2.0
                lines.append(records.encode({
                    "kind": "hardware", "rank": rank, "time": now,
                    "cpu_percent": 40 + 20 * rng.random(), "mem_used_gb": 200 + rng.random(),
                    "mem_available_gb": 800.0, "rss_gb": 12.5, "devices": [{
                        "type": "npu", "index": rank, "util_percent": 80 + 20 * rng.random(),
                        "mem_used_mb": 30_000.0 + step % 1000, "mem_total_mb": 65536.0,
                        "temp_c": 55 + 10 * rng.random(), "power_w": 300.0}],
                    "framework_memory": None}))
            if step % 10_000 == 0:
                lines.append(records.encode({
                    "kind": "epoch", "rank": rank, "time": now, "epoch": step // 10_000,
                    "loss_mean": smooth, "steps": 10_000, "loss_change": None,
                    "converging": None, "nonfinite_losses": 0}))
            if len(lines) >= 10_000:
                handle.write("\n".join(lines) + "\n")
                lines = []
        lines.append(records.encode({"kind": "end", "rank": rank, "time": now,
                                     "reason": "completed", "steps": steps,
                                     "elapsed_s": now - START, "error": None,
                                     "stopped_by": None}))
        handle.write("\n".join(lines) + "\n")


def generate(run_dir: str, ranks: int, steps: int, blocks: int = BLOCKS) -> None:
    jobs = [(os.path.join(run_dir, f"rank_{r}.jsonl"), r, ranks, steps, blocks)
            for r in range(ranks)]
    with multiprocessing.Pool(min(ranks, os.cpu_count() or 1)) as pool:
        pool.starmap(write_rank, jobs)


def write_tensorboard(run_dir: str, ranks: int, steps: int) -> None:
    """The first ``steps`` steps of every rank's log, through mindwatch's TensorBoardSink."""
    from mindwatch.sinks.tensorboard import TensorBoardSink
    for rank in range(ranks):
        sink = TensorBoardSink(run_dir, rank, flush_secs=60)
        with open(os.path.join(run_dir, f"rank_{rank}.jsonl"), encoding="utf-8") as handle:
            for line in handle:
                record = records.decode(line)
                if record.get("step", 0) > steps:
                    break
                sink.write(record)
        sink.close()


# -- the measurements, each in a child process ----------------------------------------------
def _json_pass(run_dir: str) -> dict:
    lines = 0
    for name in sorted(os.listdir(run_dir)):
        if name.startswith("rank_") and name.endswith(".jsonl"):
            with open(os.path.join(run_dir, name), "rb") as handle:
                for line in handle:
                    json.loads(line)
                    lines += 1
    return {"lines": lines}


def _command(argv: list[str]) -> dict:
    from mindwatch.cli import main
    with open(os.devnull, "w") as null:
        stdout, sys.stdout = sys.stdout, null
        try:
            code = main(argv)
        finally:
            sys.stdout = stdout
    return {"exit_code": code}


def _watch(run_dir: str) -> dict:
    """The command's loop into a terminal-like buffer; returns when the first frame that shows
    data was drawn (time.monotonic, shared by processes) and what it showed. The loop stops
    at its first wait, after the older records are read."""
    import io

    from rich.console import Console

    import mindwatch.report.watch as live
    marks: dict[str, object] = {}
    draw = live.render

    def render(state, **options):
        frame = draw(state, **options)
        ranks = state.ranks
        if ranks and "first" not in marks:
            marks["first"] = time.monotonic()
            ended = sum(r.end is not None for r in ranks.values())
            steps = sorted((r.step or {}).get("step", 0) for r in ranks.values())
            at = f"{steps[0]}" if steps[0] == steps[-1] else f"{steps[0]} to {steps[-1]}"
            marks["shown"] = f"{len(ranks)} ranks, {ended} ended, latest step {at}"
        return frame

    def stop(_seconds: float) -> None:
        if "first" in marks:
            raise KeyboardInterrupt

    live.render = render
    console = Console(file=io.StringIO(), width=160, force_terminal=True)
    code = live.watch(run_dir, console=console, refresh_s=0.5, sleep=stop)
    return {"exit_code": code, "first_frame": marks.get("first"), "shown": marks.get("shown")}


def _tensorboard(run_dir: str) -> dict:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    points = 0
    for name in sorted(os.listdir(os.path.join(run_dir, "tensorboard"))):
        events = EventAccumulator(os.path.join(run_dir, "tensorboard", name),
                                  size_guidance={"scalars": 0})     # 0: keep every point
        events.Reload()
        points += sum(len(events.Scalars(tag)) for tag in events.Tags()["scalars"])
    return {"points": points}


def child(kind: str, run_dir: str, out: str) -> None:
    started = time.perf_counter()
    if kind == "json":
        result = _json_pass(run_dir)
    elif kind == "summary":
        result = _command(["summary", run_dir])
    elif kind == "report":
        result = _command(["report", run_dir, "-o", out])
    elif kind == "watch":
        result = _watch(run_dir)
    else:
        result = _tensorboard(run_dir)
    result["seconds"] = time.perf_counter() - started
    result["rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    result["workers_rss_mb"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(json.dumps(result))


def measure(kind: str, run_dir: str, out: str = "", src: str | None = None) -> dict:
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [src, env.get("PYTHONPATH")]))
    began = time.monotonic()
    done = subprocess.run([sys.executable, __file__, "--child", kind, run_dir, out], env=env,
                          capture_output=True, text=True, check=True)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["wall"] = time.monotonic() - began          # the process's whole life
    if result.get("first_frame"):
        result["wall"] = result["first_frame"] - began
    return result


# -- the table -------------------------------------------------------------------------------
def _rss(result: dict) -> tuple[float, str]:
    """The peak of the process and its workers together (at most: each worker's peak taken
    as the largest one's), and how it reads."""
    own, worker = result["rss_mb"], result["workers_rss_mb"]
    if not worker:
        return own, f"{own:.0f} MB"
    workers = min(os.cpu_count() or 1, result.get("ranks", 1))
    total = own + workers * worker
    return total, f"<= {total:.0f} MB ({own:.0f} MB + {workers} workers x {worker:.0f} MB)"


def _verdict(ok: bool) -> str:
    return "OK" if ok else "OVER"


def _anomalies_on_curves(html_path: str) -> str:
    """Every anomaly's step is a point of its rank's loss curve in the page's data."""
    with open(html_path, encoding="utf-8") as handle:
        page = handle.read()
    data = json.loads(page.split('id="mw-data">')[1].split("</script>")[0])
    loss = {line["rank"]: set(line["x"]) for panel in data["panels"] if panel["id"] == "loss"
            for line in panel["lines"] if not line.get("faint")}
    found = [a for a in data["anomalies"] if a["step"] in loss.get(a["rank"], ())]
    return f"{len(found)}/{len(data['anomalies'])} anomalies on their curves " + _verdict(
        len(found) == len(data["anomalies"]) > 0)


def report_rows(results: dict, base: float, ranks: int, html: str) -> None:
    print(f"{'':32}{'time':>9}{'x json':>8}  {'goal':12}peak RSS")
    for name, result in results.items():
        result["ranks"] = ranks
        total, rss = _rss(result)
        ratio = result["wall"] / base
        goal = ""
        kind = name.split()[0]
        if kind in GOALS:
            goal = f"<= {GOALS[kind]:.1f} " + _verdict(ratio <= GOALS[kind])
        elif kind == "watch":
            goal = f"< {WATCH_GOAL_S:.0f} s " + _verdict(result["wall"] < WATCH_GOAL_S)
        if kind != "json.loads":
            rss += f" (< {RSS_GOAL_MB} MB {_verdict(total < RSS_GOAL_MB)})"
        shown = f"{ratio:8.2f}" if kind != "watch" else " " * 8
        print(f"{name:32}{result['wall']:8.2f}s{shown}  {goal:12}{rss}")
    watched = results.get("watch (first frame)", {}).get("shown")
    if watched:
        print(f"watch's first frame: {watched}")
    if html:
        size = os.path.getsize(html) / 1e6
        print(f"report HTML: {size:.2f} MB (< {HTML_GOAL_MB} MB {_verdict(size < HTML_GOAL_MB)}); "
              + _anomalies_on_curves(html))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--steps", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3,
                        help="times each measurement is taken, in rotating order; the median "
                        "wall time is shown, and the largest RSS")
    parser.add_argument("--tb-steps", type=int, default=20_000,
                        help="steps per rank written to TensorBoard (0: skip TensorBoard)")
    parser.add_argument("--blocks", type=int, default=BLOCKS,
                        help=f"decoder blocks of the simulated model's state records (9 layers "
                        f"each, plus 3; default {BLOCKS}); 0: no state records")
    parser.add_argument("--baseline-src", metavar="DIR",
                        help="also time the views of the mindwatch package in DIR")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(*args.child)
        return 0
    from mindwatch.runlog import fast
    parser_name = "msgspec" if fast.parser() is not None else "json (standard library)"
    with tempfile.TemporaryDirectory(prefix="mindwatch-views-") as tmp:
        run_dir = os.path.join(tmp, "run")
        os.mkdir(run_dir)
        began = time.perf_counter()
        generate(run_dir, args.ranks, args.steps, args.blocks)
        size = sum(os.path.getsize(os.path.join(run_dir, n)) for n in os.listdir(run_dir))
        states = (f"state records every {STATE_INTERVAL} steps of "
                  f"{len(layer_names(args.blocks))} layers" if args.blocks else "no state records")
        print(f"run: {args.ranks} ranks x {args.steps:,} steps, {states}, {size / 1e6:.1f} MB of "
              f"JSONL (generated in {time.perf_counter() - began:.1f} s); parser: {parser_name}; "
              f"{os.cpu_count()} CPUs; median of {args.rounds} rounds")
        html = os.path.join(tmp, "report.html")
        plan = {"json.loads pass": ("json", None), "summary": ("summary", None),
                "report": ("report", None), "watch (first frame)": ("watch", None)}
        if args.baseline_src:
            plan.update({f"{kind} (baseline)": (kind, args.baseline_src)
                         for kind in ("summary", "report", "watch")})
        results = rounds(plan, run_dir, html, args.rounds)
        base = results["json.loads pass"]["wall"]
        print(f"json.loads pass: {results['json.loads pass']['lines']:,} lines")
        report_rows(results, base, args.ranks, html)
        if args.tb_steps:
            tensorboard(run_dir, args.ranks, min(args.tb_steps, args.steps), args.steps, base)
    return 0


def rounds(plan: dict, run_dir: str, html: str, count: int) -> dict:
    """Each measurement ``count`` times, the order rotating by one each round (so that a
    slower spell of the machine does not fall on one of them only)."""
    names = list(plan)
    samples: dict[str, list[dict]] = {name: [] for name in names}
    for round_ in range(count):
        for name in names[round_ % len(names):] + names[:round_ % len(names)]:
            kind, src = plan[name]
            out = html + (".baseline" if src else "")
            samples[name].append(measure(kind, run_dir, out, src))
    results = {}
    for name, taken in samples.items():
        taken.sort(key=lambda r: r["wall"])
        result = dict(taken[len(taken) // 2])
        result["rss_mb"] = max(r["rss_mb"] for r in taken)
        result["workers_rss_mb"] = max(r["workers_rss_mb"] for r in taken)
        results[name] = result
    return results


def tensorboard(run_dir: str, ranks: int, steps: int, full: int, base: float) -> None:
    began = time.perf_counter()
    write_tensorboard(run_dir, ranks, steps)
    written = time.perf_counter() - began
    result = measure("tensorboard", run_dir)
    scaled = result["wall"] * full / steps
    print(f"TensorBoard EventAccumulator, same scalars ({result['points']:,} points of "
          f"{ranks} x {steps:,} steps, written in {written:.1f} s): {result['wall']:.2f} s, "
          f"peak RSS {result['rss_mb']:.0f} MB; scaled to {full:,} steps: {scaled:.1f} s = "
          f"{scaled / base:.2f} x the json.loads pass")


if __name__ == "__main__":
    sys.exit(main())
