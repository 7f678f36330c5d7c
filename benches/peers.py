"""The Python peers' side of the benchmark (docs/benchmarks.md): the same no-op and
sleeping functions on concurrent.futures.ProcessPoolExecutor and
pebble.ProcessPool, on the same interpreter. Prints one JSON object.

Usage: peers.py [--quick]
"""

import json
import os
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures import TimeoutError as FuturesTimeout

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "tools"))
from bench_tools import noop, sleep  # noqa: E402

import pebble  # noqa: E402

QUICK = "--quick" in sys.argv
SCALE = 5 if QUICK else 1


def percentile(samples, p):
    samples = sorted(samples)
    return samples[min(len(samples) - 1, round((len(samples) - 1) * p))]


def serial_us(submit, calls):
    for _ in range(200):
        submit(noop).result()
    samples = []
    for _ in range(calls):
        started = time.perf_counter()
        submit(noop).result()
        samples.append((time.perf_counter() - started) * 1e6)
    return percentile(samples, 0.5), percentile(samples, 0.99)


def throughput(submit, calls, in_flight):
    for _ in range(100):
        submit(noop).result()
    started = time.perf_counter()
    window = []
    for _ in range(calls):
        window.append(submit(noop))
        if len(window) >= in_flight:
            window.pop(0).result()
    for future in window:
        future.result()
    return calls / (time.perf_counter() - started)


def pebble_timeouts(rounds):
    """P3 (how late a 200 ms timeout is reported) and P4 (the next call after the kill)."""
    late, after = [], []
    with pebble.ProcessPool(max_workers=1) as pool:
        pool.schedule(noop).result()
        for _ in range(rounds):
            time.sleep(0.3)
            started = time.perf_counter()
            future = pool.schedule(sleep, args=(10,), timeout=0.2)
            try:
                future.result()
                raise SystemExit("pebble: the sleeping call did not time out")
            except FuturesTimeout:
                late.append((time.perf_counter() - started - 0.2) * 1e3)
            started = time.perf_counter()
            pool.schedule(noop).result()
            after.append((time.perf_counter() - started) * 1e3)
    return percentile(late, 0.99), statistics.median(after)


def main():
    figures = {}
    with pebble.ProcessPool(max_workers=1) as pool:
        figures["pebble_p1"] = serial_us(pool.schedule, 5000 // SCALE)
    with ProcessPoolExecutor(max_workers=1) as pool:
        figures["ppe_p1"] = serial_us(pool.submit, 5000 // SCALE)
    with ProcessPoolExecutor(max_workers=2) as pool:
        figures["ppe_p2"] = throughput(pool.submit, 20000 // SCALE, 64)
    figures["pebble_p3"], figures["pebble_p4"] = pebble_timeouts(30 // min(SCALE, 3))
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
