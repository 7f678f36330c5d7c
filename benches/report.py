"""Merges toolpool's figures and the peers', prints the table, writes --json."""

import json
import sys

ours, peers, json_path = json.loads(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3]

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
p10 = ours["P10"]
rows.append(("P10 --sandbox: pool of 4 from cold / next call after a kill (ms)",
             f"{p10['cold_4_ms']:.0f} / {p10['next_after_kill_p50_ms']:.2f}",
             f"unsandboxed {p10['cold_4_unsandboxed_ms']:.0f} / {p10['next_after_kill_unsandboxed_p50_ms']:.2f}",
             f"{p10['cold_ratio']:.2f}× / {p10['next_ratio']:.2f}× (target each ≤ 1.5)",
             p10["cold_ratio"] <= 1.5 and p10["next_ratio"] <= 1.5))
widths = [max(len(str(r[i])) for r in rows) for i in range(4)]
header = ("figure", "toolpool", "peers", "ratio / target")
print("  ".join(h.ljust(w) for h, w in zip(header, widths)) + "  met")
for row in rows:
    print("  ".join(str(c).ljust(w) for c, w in zip(row[:4], widths)) + ("  yes" if row[4] else "  NO"))
if json_path:
    with open(json_path, "w") as f:
        json.dump(ours, f, indent=2)
        f.write("\n")
