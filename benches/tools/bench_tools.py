"""The functions every pool in the benchmark runs: the same code for toolpool and its peers."""

import time


def noop() -> None:
    """Do nothing: measures the round trip alone."""
    return None


def sleep(seconds: float) -> str:
    """Sleep, for timeout figures."""
    time.sleep(seconds)
    return "slept"


def records(count: int) -> list:
    """A table-shaped result: `count` small records (P8)."""
    return [{"id": i, "name": f"item-{i}", "score": i * 0.5, "tags": ["a", "b"]} for i in range(count)]


def take_records(rows: list) -> int:
    """A table-shaped argument (P9): how many rows arrived."""
    return len(rows)


def take_text(text: str) -> int:
    """The length of the text given (a large argument's way in)."""
    return len(text)


def zeros(count: int) -> list:
    """A list of `count` zeros (a large result: ~2 bytes each as JSON)."""
    return [0] * count


def spin(seconds: float, beat_file: str) -> str:
    """Burn CPU in Python for `seconds`, writing a heartbeat count to
    `beat_file` every 50 ms (M5: whether the tool still runs after its
    timeout was reported)."""
    deadline = time.monotonic() + seconds
    beat, next_beat = 0, 0.0
    while time.monotonic() < deadline:
        if time.monotonic() >= next_beat:
            beat += 1
            with open(beat_file, "w") as f:
                f.write(str(beat))
            next_beat = time.monotonic() + 0.05
    return "spun"


def text_of(character: str, megabytes: int) -> str:
    """A result of `megabytes` MB, all one character (the result-memory rows:
    a letter costs one byte as JSON, U+0001 six)."""
    return character * (megabytes * 1_000_000)


def tidy(seconds: float, cleanup_ms: float) -> str:
    """Sleep; a `finally` that takes `cleanup_ms` (G1: a timeout with a grace)."""
    try:
        time.sleep(seconds)
    finally:
        time.sleep(cleanup_ms / 1000)
    return "slept"


def stubborn(seconds: float) -> str:
    """Catch the deadline's TimeoutError and sleep on (G1: killed at the grace's end)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            time.sleep(max(0.0, end - time.monotonic()))
        except TimeoutError:
            pass
    return "slept"


def hold(seconds: float) -> float:
    """Hold a worker `seconds`; returns when it started (time.time(), G2)."""
    started = time.time()
    time.sleep(seconds)
    return started
