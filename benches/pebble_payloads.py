"""P8 and P9 on pebble, one call at a time on request, so that benches/figures.rs
can alternate pebble's calls with toolpool's and both sides meet the same load
(this VM's CPU is shared: figures measured minutes apart differ by more than
the two tools do).

Reads a line per call from stdin — `records` (P8: a 10 000-record result) or
`take_records` (P9: a 2 000-record argument) — and writes the call's time in
ms on a line of stdout. Ends at the end of stdin.
"""

import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "tools"))
import pebble  # noqa: E402
from bench_tools import records, take_records  # noqa: E402

ROWS = records(2000)
CALLS = {"records": (records, (10000,)), "take_records": (take_records, (ROWS,))}


def main():
    with pebble.ProcessPool(max_workers=1) as pool:
        for function, args in CALLS.values():
            for _ in range(5):
                pool.schedule(function, args=args).result()
        for line in sys.stdin:
            function, args = CALLS[line.strip()]
            started = time.perf_counter()
            pool.schedule(function, args=args).result()
            print(f"{(time.perf_counter() - started) * 1e3:.4f}", flush=True)


if __name__ == "__main__":
    main()
