"""The MindSpore callback's measure of a rank's own work in a step (issue #44,
mindspore/ranks/own_work.py): CPU seconds from the step's begin to its end, per step, on the
CPU only."""
from mindwatch.mindspore.ranks.own_work import OwnWork


class Seconds:
    def __init__(self, *values):
        self.values = list(values)

    def __call__(self):
        return self.values.pop(0)


def test_cpu_seconds_from_begin_to_end_per_covered_step():
    work = OwnWork(Seconds(10.0, 10.25, 11.0, 11.5), on_cpu=lambda: True)
    work.begin()
    assert work.end() == 0.25
    assert work.end() is None                  # no begin since
    work.begin()
    assert work.end(steps=4) == 0.125          # sink mode: the callback covered 4 steps


def test_nothing_on_a_device_where_the_host_cpu_says_nothing_of_its_compute():
    asked = []
    work = OwnWork(Seconds(), on_cpu=lambda: asked.append(1) or False)
    for _ in range(3):
        work.begin()
        assert work.end() is None
    assert asked == [1]                        # decided once
