"""The Python API's side of the benchmark (docs/benchmarks.md, Y1–Y4):
`toolpool.Pool` (python_shim/toolpool, a client of `toolpool host`) on the
same no-op and sleeping functions as the Rust bench (benches/tools), with
pebble and ProcessPoolExecutor beside it for Y1. Prints one JSON object;
benches/report.py puts it next to the Rust API's figures (Y1 and Y2 are
ratios to P1 and P2).

Run by benches/peers on the bench venv's interpreter with
TOOLPOOL_BIN=target/release/toolpool and python_shim on PYTHONPATH; alone:

    TOOLPOOL_BIN=target/release/toolpool PYTHONPATH=python_shim \\
        target/pyvenv-bench/bin/python benches/python_api.py [--quick]

Without pebble importable, its figures are null.

- Y1: serial no-op `pool.invoke` round trips on a 1-worker pool, p50 and p99
  (µs); pebble's `ProcessPool(max_workers=1).schedule(noop).result()` and
  PPE's, in alternating rounds (a fresh pool per round, as P1).
- Y2: 16 Python threads calling the no-op at once on a 2-worker pool:
  calls/s, the median of three rounds (a fresh pool per round, as P2).
- Y3: `invoke("sleep", {"seconds": 10}, timeout=0.2)` on a 1-worker pool:
  how late `ToolTimeout` comes back (elapsed - 0.2 s), p99 (ms), as P3.
- Y4: a fresh `python -c 'import toolpool; toolpool.Pool()'` (the bundled
  tools: no functions directory) until the pool is ready, against a fresh
  `toolpool catalog` until it exits, rounds alternating: the medians (ms).
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ProcessPoolExecutor

BENCHES = os.path.dirname(os.path.abspath(__file__))
TOOLS = os.path.join(BENCHES, "tools")
sys.path.insert(0, TOOLS)
from bench_tools import noop  # noqa: E402

import toolpool  # noqa: E402
from toolpool._pool import find_binary  # noqa: E402

try:
    import pebble  # noqa: E402
except ImportError:
    pebble = None

QUICK = "--quick" in sys.argv
SCALE = 5 if QUICK else 1


def percentile(samples, p):
    samples = sorted(samples)
    return samples[min(len(samples) - 1, round((len(samples) - 1) * p))]


def tool_pool(workers, session_dir):
    return toolpool.Pool(TOOLS, workers=workers, session_dir=session_dir)


def serial_us(call, calls):
    """`calls` timed serial calls after 200 untimed ones: samples in µs."""
    for _ in range(200):
        call()
    samples = []
    for _ in range(calls):
        started = time.perf_counter()
        call()
        samples.append((time.perf_counter() - started) * 1e6)
    return samples


def y1(session_dir, rounds, calls):
    """Serial no-op round trips: toolpool.Pool, pebble and PPE taking turns,
    a fresh 1-worker pool each per round."""
    ours, theirs, ppe = [], [], []
    for _ in range(rounds):
        with tool_pool(1, session_dir) as pool:
            ours += serial_us(lambda: pool.invoke("noop"), calls)
        if pebble is not None:
            with pebble.ProcessPool(max_workers=1) as peer:
                theirs += serial_us(lambda: peer.schedule(noop).result(), calls)
        with ProcessPoolExecutor(max_workers=1) as peer:
            ppe += serial_us(lambda: peer.submit(noop).result(), calls)
    p50 = percentile(ours, 0.5)
    pebble_p50 = percentile(theirs, 0.5) if theirs else None
    return {
        "toolpool_p50_us": p50,
        "toolpool_p99_us": percentile(ours, 0.99),
        "pebble_p50_us": pebble_p50,
        "ppe_p50_us": percentile(ppe, 0.5),
        "ratio_vs_pebble": p50 / pebble_p50 if pebble_p50 else None,
    }


def threaded_rate(pool, calls, threads):
    """`calls` no-op calls from `threads` threads released at once: calls/s."""
    per_thread = calls // threads
    barrier = threading.Barrier(threads + 1)
    failures = []

    def run():
        barrier.wait()
        try:
            for _ in range(per_thread):
                pool.invoke("noop")
        except BaseException as e:  # reported below, not lost in the thread
            failures.append(e)

    workers = [threading.Thread(target=run) for _ in range(threads)]
    for worker in workers:
        worker.start()
    barrier.wait()
    started = time.perf_counter()
    for worker in workers:
        worker.join()
    elapsed = time.perf_counter() - started
    if failures:
        raise SystemExit(f"Y2: a call failed: {failures[0]!r}")
    return per_thread * threads / elapsed


def y2(session_dir, rounds, calls, threads=16, workers=2):
    rates = []
    for _ in range(rounds):
        with tool_pool(workers, session_dir) as pool:
            for _ in range(100):
                pool.invoke("noop")
            rates.append(threaded_rate(pool, calls, threads))
    return {"toolpool_calls_per_s": statistics.median(rates), "rounds_calls_per_s": rates,
            "threads": threads, "workers": workers}


def y3(session_dir, rounds):
    """How late a 200 ms timeout is reported (as P3), and the next call after
    the kill (as P4), on a 1-worker pool."""
    late, after = [], []
    with tool_pool(1, session_dir) as pool:
        pool.invoke("noop")
        for _ in range(rounds):
            # Let the replacement (or spare) be ready, as between real calls.
            time.sleep(0.3)
            started = time.perf_counter()
            try:
                pool.invoke("sleep", {"seconds": 10}, timeout=0.2)
                raise SystemExit("Y3: the sleeping call did not time out")
            except toolpool.ToolTimeout:
                late.append((time.perf_counter() - started - 0.2) * 1e3)
            started = time.perf_counter()
            pool.invoke("noop")
            after.append((time.perf_counter() - started) * 1e3)
    return {"toolpool_p99_ms": percentile(late, 0.99), "toolpool_p50_ms": percentile(late, 0.5),
            "next_call_p50_ms": statistics.median(after)}


# Y4's Python side: ready is the first line; the tool count follows, for the
# check that both sides load the same (bundled) tools.
READY_CHILD = """\
import sys
import toolpool
pool = toolpool.Pool()
sys.stdout.write("ready\\n")
sys.stdout.flush()
sys.stdout.write(f"{len(pool.catalog())}\\n")
pool.close()
"""


def y4(rounds):
    """A fresh Python process to `Pool()` ready, against a fresh `toolpool
    catalog` to its exit, both on the bundled tools (a scratch working
    directory without functions/function_calling, no functions directory in
    the environment), rounds alternating which side goes first."""
    binary = find_binary()
    if os.sep in binary:  # a relative TOOLPOOL_BIN would not hold in the scratch directory
        binary = os.path.abspath(binary)
    env = {k: v for k, v in os.environ.items() if k not in ("TOOLPOOL_FUNCTIONS_DIR", "MAC_FUNCTIONS_DIR")}
    env["TOOLPOOL_BIN"] = binary
    # Likewise a relative PYTHONPATH (python_shim) for the Pool() process.
    if env.get("PYTHONPATH"):
        env["PYTHONPATH"] = os.pathsep.join(os.path.abspath(p) if p else p for p in env["PYTHONPATH"].split(os.pathsep))
    with tempfile.TemporaryDirectory(prefix="toolpool-y4-") as cwd:

        def pool_ready():
            started = time.perf_counter()
            child = subprocess.Popen([sys.executable, "-c", READY_CHILD], cwd=cwd, env=env,
                                     stdout=subprocess.PIPE, text=True)
            first = child.stdout.readline()
            ready = (time.perf_counter() - started) * 1e3
            rest = child.stdout.read()
            if child.wait() != 0 or first.strip() != "ready":
                raise SystemExit(f"Y4: the Pool() process failed (exit {child.returncode})")
            exited = (time.perf_counter() - started) * 1e3
            return ready, exited, int(rest.split()[0])

        def catalog():
            started = time.perf_counter()
            subprocess.run([binary, "catalog"], cwd=cwd, env=env, stdout=subprocess.DEVNULL, check=True)
            return (time.perf_counter() - started) * 1e3

        # Untimed: the shim's install in the cache directory, the page cache.
        _, _, tools = pool_ready()
        listed = subprocess.run([binary, "catalog", "--format", "json"], cwd=cwd, env=env,
                                capture_output=True, text=True, check=True)
        catalog_tools = len(json.loads(listed.stdout)["functions"])
        if tools != catalog_tools:
            raise SystemExit(f"Y4: Pool() loaded {tools} tools, `toolpool catalog` {catalog_tools}")
        ready, exited, listing = [], [], []
        for i in range(rounds):
            if i % 2:
                listing.append(catalog())
            r, e, _ = pool_ready()
            ready.append(r)
            exited.append(e)
            if not i % 2:
                listing.append(catalog())
    ready_ms, catalog_ms = statistics.median(ready), statistics.median(listing)
    return {"pool_ready_ms": ready_ms, "catalog_ms": catalog_ms, "ratio_vs_catalog": ready_ms / catalog_ms,
            "pool_process_exit_ms": statistics.median(exited), "tools": tools}


def main():
    figures = {"binary": find_binary(), "module": os.path.dirname(toolpool.__file__),
               "pebble": pebble is not None}
    with tempfile.TemporaryDirectory(prefix="toolpool-bench-") as session_dir:
        figures["Y1"] = y1(session_dir, 5, 1000 // SCALE)
        figures["Y2"] = y2(session_dir, 3, 20000 // SCALE)
        figures["Y3"] = y3(session_dir, 30 // min(SCALE, 3))
    figures["Y4"] = y4(3 if QUICK else 9)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
