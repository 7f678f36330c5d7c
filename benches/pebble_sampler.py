"""pebble's side of P2, P8 and P9, one measurement at a time on request, so
that benches/figures.rs can alternate pebble's measurements with toolpool's
and both sides meet the same load (this VM's CPU is shared: figures measured
minutes apart differ by more than the two tools do).

Reads a line per measurement from stdin and writes its result on a line of
stdout; ends at the end of stdin:
- `records` (P8: a 10 000-record result) or `take_records` (P9: a 2 000-record
  argument): one call on a 1-worker pool, in ms;
- `throughput N` (P2): N no-op calls, 64 in flight, on a 2-worker pool, in calls/s.
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "tools"))
import pebble  # noqa: E402
from bench_tools import records, take_records  # noqa: E402
from peers import throughput  # noqa: E402

ROWS = records(2000)
CALLS = {"records": (records, (10000,)), "take_records": (take_records, (ROWS,))}


def main():
    with pebble.ProcessPool(max_workers=1) as serial, pebble.ProcessPool(max_workers=2) as pair:
        for function, args in CALLS.values():
            for _ in range(5):
                serial.schedule(function, args=args).result()
        for line in sys.stdin:
            words = line.split()
            if words[0] == "throughput":
                print(f"{throughput(pair.schedule, int(words[1]), 64):.1f}", flush=True)
                continue
            function, args = CALLS[words[0]]
            started = time.perf_counter()
            serial.schedule(function, args=args).result()
            print(f"{(time.perf_counter() - started) * 1e3:.4f}", flush=True)


if __name__ == "__main__":
    main()
