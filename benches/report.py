"""Merges toolpool's figures (the Rust API's, benches/figures.rs, and the
Python API's, benches/python_api.py) and the peers', prints the table,
writes --json.

Usage: report.py OURS_JSON PEERS_JSON PYTHON_API_JSON JSON_PATH (JSON_PATH may be empty)
"""

import json
import sys

ours, peers = json.loads(sys.argv[1]), json.loads(sys.argv[2])
python_api, json_path = json.loads(sys.argv[3]), sys.argv[4]


def number(value, digits=0):
    return "—" if value is None else f"{value:.{digits}f}"


p1, p2 = ours["P1"], ours["P2"]
p1.update({
    "pebble_p50_us": peers["pebble_p1"][0],
    "ppe_p50_us": peers["ppe_p1"][0],
    "ratio_vs_floor": p1["toolpool_p50_us"] / p1["floor_p50_us"],
    "ratio_vs_pebble": p1["toolpool_p50_us"] / peers["pebble_p1"][0],
})
# pebble's P2 is in ours already: its rounds alternated with toolpool's.
p2["ppe_calls_per_s"] = peers["ppe_p2"]
# P8 and P9 carry pebble's figures already: its calls alternated with toolpool's.
ours["P3"]["pebble_p99_ms"] = peers["pebble_p3"]
ours["P4"]["pebble_p50_ms"] = peers["pebble_p4"]

rows = [
    ("P1 serial no-op p50 (µs)", f"{p1['toolpool_p50_us']:.0f} (p99 {p1['toolpool_p99_us']:.0f})",
     f"floor {p1['floor_p50_us']:.0f} · pebble {p1['pebble_p50_us']:.0f} · PPE {p1['ppe_p50_us']:.0f}",
     f"{p1['ratio_vs_floor']:.2f}× floor (target ≤ 1.25)", p1["ratio_vs_floor"] <= 1.25),
    ("P1 on one CPU, p50 (µs)", f"{p1['one_cpu']['toolpool_p50_us']:.0f}",
     f"floor {p1['one_cpu']['floor_p50_us']:.0f}",
     f"{p1['one_cpu']['toolpool_p50_us'] / p1['one_cpu']['floor_p50_us']:.2f}× floor (target ≤ 1.25)",
     p1['one_cpu']['toolpool_p50_us'] / p1['one_cpu']['floor_p50_us'] <= 1.25),
    ("P2 no-op calls/s, 64 in flight, 2 workers", f"{p2['toolpool_calls_per_s']:.0f}",
     f"pebble {p2['pebble_calls_per_s']:.0f} · PPE {p2['ppe_calls_per_s']:.0f}",
     f"{p2['ratio_vs_pebble']:.2f}× pebble (target ≥ 2.5)", p2["ratio_vs_pebble"] >= 2.5),
    ("P3 200 ms timeout reported late by, p99 (ms)", f"{ours['P3']['toolpool_p99_ms']:.1f}",
     f"pebble {ours['P3']['pebble_p99_ms']:.1f}", "target ≤ 20", ours["P3"]["toolpool_p99_ms"] <= 20),
    ("P4 next call after a kill, p50 (ms)", f"{ours['P4']['toolpool_p50_ms']:.2f}",
     f"pebble {ours['P4']['pebble_p50_ms']:.2f}", "target ≤ pebble",
     ours["P4"]["toolpool_p50_ms"] <= ours["P4"]["pebble_p50_ms"]),
    ("P5 pool of 4 ready from cold (ms)", f"{ours['P5']['toolpool_ms']:.0f}",
     f"one worker {ours['P5']['one_worker_ms']:.0f}",
     f"{ours['P5']['ratio_vs_one_worker']:.2f}× one worker (target ≤ 1.5)", ours["P5"]["ratio_vs_one_worker"] <= 1.5),
    ("P6 supervisor RSS, 4 idle workers (MB)", f"{ours['P6']['toolpool_mb']:.1f}", "", "target ≤ 15",
     ours["P6"]["toolpool_mb"] <= 15),
    ("P7 catalog of 1 000 functions (s)", f"{ours['P7']['toolpool_s']:.2f}", "", "target ≤ 1.5",
     ours["P7"]["toolpool_s"] <= 1.5),
]
for key, what in (("P8", "10 000-record result"), ("P9", "2 000-record argument")):
    figure = ours[key]
    c_ext = figure.get("toolpool_p50_ms_c_ext")
    with_c = f" · C ext {c_ext:.2f}" if c_ext is not None else ""
    met = figure["ratio_vs_pebble"] <= 1.0 and (c_ext is None or figure["ratio_vs_pebble_c_ext"] <= 1.0)
    pebble_c = f" · alongside C ext {figure['pebble_p50_ms_c_ext']:.2f}" if c_ext is not None else ""
    ratio_c = f" · C ext {figure['ratio_vs_pebble_c_ext']:.2f}×" if c_ext is not None else ""
    rows.append((f"{key} {what}, serial p50 (ms)", f"{figure['toolpool_p50_ms']:.2f}{with_c}",
                 f"pebble {figure['pebble_p50_ms']:.2f}{pebble_c}",
                 f"{figure['ratio_vs_pebble']:.2f}×{ratio_c} pebble (target ≤ 1.0, with and without the C ext)", met))
g1, g2 = ours["G1"], ours["G2"]
rows += [
    ("G1 200 ms timeout, 1 s grace: answered late by, p99 (ms)",
     f"{g1['cleaned_up_late_p99_ms']:.1f} (finally of 10 ms)",
     f"one that catches it and goes on: killed {g1['killed_late_p99_ms']:.1f} after timeout + grace",
     "target ≤ 30 / ≤ 20", g1["cleaned_up_late_p99_ms"] <= 30 and g1["killed_late_p99_ms"] <= 20),
    ("G2 pool shrunk to 1 of 4: 4 calls until 4 busy (ms)", f"{g2['busy_4_ms']:.0f}",
     f"P5 cold pool of 4 {g2['cold_4_ms']:.0f}", f"{g2['ratio_vs_cold']:.2f}× P5 (target ≤ 1.5)",
     g2["ratio_vs_cold"] <= 1.5),
]
p10 = ours["P10"]
rows.append(("P10 --sandbox: pool of 4 from cold / next call after a kill (ms)",
             f"{p10['cold_4_ms']:.0f} / {p10['next_after_kill_p50_ms']:.2f}",
             f"unsandboxed {p10['cold_4_unsandboxed_ms']:.0f} / {p10['next_after_kill_unsandboxed_p50_ms']:.2f}",
             f"{p10['cold_ratio']:.2f}× / {p10['next_ratio']:.2f}× (target each ≤ 1.5)",
             p10["cold_ratio"] <= 1.5 and p10["next_ratio"] <= 1.5))
# Y1–Y4: the Python API (`toolpool.Pool` over `toolpool host`, release
# binary); Y1 and Y2 against the Rust API's P1 and P2 of this run.
y1, y2, y3, y4 = (python_api[key] for key in ("Y1", "Y2", "Y3", "Y4"))
y1["rust_api_p50_us"] = p1["toolpool_p50_us"]
y1["ratio_vs_rust_api"] = y1["toolpool_p50_us"] / p1["toolpool_p50_us"]
y2["rust_api_calls_per_s"] = p2["toolpool_calls_per_s"]
y2["ratio_vs_rust_api"] = y2["toolpool_calls_per_s"] / p2["toolpool_calls_per_s"]
y1_met = y1["ratio_vs_rust_api"] <= 1.2 and y1["ratio_vs_pebble"] is not None and y1["ratio_vs_pebble"] <= 0.6
rows += [
    ("Y1 Python API serial no-op p50 (µs)", f"{y1['toolpool_p50_us']:.0f} (p99 {y1['toolpool_p99_us']:.0f})",
     f"Rust API {y1['rust_api_p50_us']:.0f} · pebble {number(y1['pebble_p50_us'])} · PPE {number(y1['ppe_p50_us'])}",
     f"{y1['ratio_vs_rust_api']:.2f}× Rust API (target ≤ 1.2) · {number(y1['ratio_vs_pebble'], 2)}× pebble "
     "(target ≤ 0.6)", y1_met),
    (f"Y2 Python API no-op calls/s, {y2['threads']} threads, {y2['workers']} workers",
     f"{y2['toolpool_calls_per_s']:.0f}", f"Rust API (P2) {y2['rust_api_calls_per_s']:.0f}",
     f"{y2['ratio_vs_rust_api']:.2f}× Rust API (target ≥ 0.8)", y2["ratio_vs_rust_api"] >= 0.8),
    ("Y3 Python API 200 ms timeout reported late by, p99 (ms)", f"{y3['toolpool_p99_ms']:.1f}",
     f"Rust API (P3) {ours['P3']['toolpool_p99_ms']:.1f}", "target ≤ 20", y3["toolpool_p99_ms"] <= 20),
    ("Y4 import toolpool + Pool() ready, bundled tools (ms)", f"{y4['pool_ready_ms']:.0f}",
     f"toolpool catalog {y4['catalog_ms']:.0f}", f"{y4['ratio_vs_catalog']:.2f}× catalog (target ≤ 1.2)",
     y4["ratio_vs_catalog"] <= 1.2),
]
ours.update({"Y1": y1, "Y2": y2, "Y3": y3, "Y4": y4})

widths = [max(len(str(r[i])) for r in rows) for i in range(4)]
header = ("figure", "toolpool", "peers", "ratio / target")
print("  ".join(h.ljust(w) for h, w in zip(header, widths)) + "  met")
for row in rows:
    print("  ".join(str(c).ljust(w) for c, w in zip(row[:4], widths)) + ("  yes" if row[4] else "  NO"))
if json_path:
    with open(json_path, "w") as f:
        json.dump(ours, f, indent=2)
        f.write("\n")
