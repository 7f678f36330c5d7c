"""The functions every pool in the benchmark runs: the same code for toolpool and its peers."""

import time


def noop() -> None:
    """Do nothing: measures the round trip alone."""
    return None


def sleep(seconds: float) -> str:
    """Sleep, for timeout figures."""
    time.sleep(seconds)
    return "slept"
