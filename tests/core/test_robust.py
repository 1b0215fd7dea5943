"""Shared detector helpers: robust statistics, one alarm per episode (the straggler rule
uses it too), and the launcher's rank variables."""
import statistics

import pytest

from mindwatch.basics.rank import env_int, rank_from_env
from mindwatch.detectors.base import Episode
from mindwatch.detectors.robust import MAD_TO_SIGMA, robust_sigma, robust_z
from mindwatch.detectors.straggler import StragglerDetector


def test_robust_sigma_and_z():
    window = [1.0, 2.0, 3.0, 4.0, 100.0]              # the outlier barely moves the estimate
    center = statistics.median(window)
    assert robust_sigma(window, center) == pytest.approx(MAD_TO_SIGMA * 1.0)
    assert robust_z(3.0 + 2 * MAD_TO_SIGMA, window) == pytest.approx(2.0)
    assert robust_z(5.0, [2.0, 2.0, 2.0]) is None      # a flat window has no spread


def test_episode_fires_once_and_rearms():
    episode = Episode()
    assert [episode.starts(c) for c in (False, True, True, False, True)] == [
        False, True, False, False, True]
    resumed = Episode()
    resumed.load_state_dict(episode.state_dict())
    assert resumed.active and not resumed.starts(True)


def test_straggler_fires_once_per_episode_and_resumes():
    detector = StragglerDetector(rank=1, world_size=2, window=3)
    fired = [len(detector.update_peers(step, [0.01, 0.5 if step <= 6 else 0.01], 1.0))
             for step in range(1, 10)]
    assert fired == [0, 0, 1, 0, 0, 0, 0, 0, 0]
    again = StragglerDetector(rank=1, world_size=2, window=3)
    again.load_state_dict(detector.state_dict())
    assert again.state_dict() == detector.state_dict()


def test_env_int_takes_the_first_number():
    env = {"LOCAL_RANK": " 3 ", "DEVICE_ID": "x", "RANK": "²", "WORLD_SIZE": "8"}
    assert env_int(env, "DEVICE_ID", "LOCAL_RANK") == 3
    assert env_int(env, "RANK") is None and env_int(env, "MISSING") is None
    info = rank_from_env(env)
    assert (info.rank, info.world_size, info.local_rank) == (0, 8, 3)


def test_jitter_of_a_few_milliseconds_is_no_straggler():
    """Millisecond CPU steps on a loaded host: one rank's pre-step time is 4x another's, but
    only 1.5 ms longer. Nobody waits long enough to call it a straggler."""
    detector = StragglerDetector(rank=1, world_size=2, window=3)
    assert not any(detector.update_peers(step, [0.0005, 0.002], 0.005) for step in range(1, 9))
    slow = StragglerDetector(rank=1, world_size=2, window=3)
    assert any(slow.update_peers(step, [0.0005, 0.02], 0.005) for step in range(1, 9))
