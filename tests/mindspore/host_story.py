"""What a demo's run log says of its pace and its host, for a test's failure message: when a
throughput_drop's cause is not what the test expects, the reader needs every anomaly's whole
message and the samples the cause was judged from (CI keeps no run directory)."""
import statistics


def host_story(log) -> str:
    start = log.run["time"]
    lines = [f"{a['anomaly']} at step {a['step']} (cause {a.get('cause')}): {a['message']}"
             for a in log.anomalies]
    lines.append("hardware (s from the start: host busy %, this process %, its threads' "
                 "wait for a CPU s):")
    lines += [f"  {h['time'] - start:7.1f}: {h.get('cpu_percent')}, "
              f"{h.get('process_cpu_percent')}, {h.get('cpu_wait_s')}"
              for h in log.of_kind("hardware")]
    lines.append("steps (s from the start of the last of 10: their median step time, ms):")
    steps = log.steps
    for first in range(0, len(steps), 10):
        block = steps[first:first + 10]
        lines.append(f"  {block[0]['step']}-{block[-1]['step']}, "
                     f"{block[-1]['time'] - start:7.1f}: "
                     f"{1000 * statistics.median(s['step_time_s'] for s in block):.1f}")
    return "\n".join(lines)
