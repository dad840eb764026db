#!/usr/bin/env python3
"""Render a Strata Chrome trace (strata simulate --trace) as an SVG timeline: one row per
(rank, stream), bars coloured by phase, a time axis in ms. Stdlib only; for docs and quick looks
where Perfetto is not at hand. Usage: trace_svg.py TRACE.json OUT.svg [--title TEXT]"""
import json, sys, html

COLORS = {"forward": "#4C78A8", "backward": "#F58518", "recompute": "#E45756", "optimizer": "#54A24B",
          "other": "#9D9D9D", "wait": None}

def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    trace, out = sys.argv[1], sys.argv[2]
    title = sys.argv[sys.argv.index("--title") + 1] if "--title" in sys.argv else trace
    ev = json.load(open(trace))["traceEvents"]
    procs = {e["pid"]: e["args"]["name"] for e in ev if e.get("ph") == "M" and e["name"] == "process_name"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in ev if e.get("ph") == "M" and e["name"] == "thread_name"}
    spans = [e for e in ev if e.get("ph") == "X" and e.get("args", {}).get("kind") not in ("wait", "record")]
    if not spans:
        sys.exit("no spans in " + trace)
    rows = sorted({(e["pid"], e["tid"]) for e in spans})
    t_end = max(e["ts"] + e["dur"] for e in spans)
    left, top, row_h, width = 230, 40, 16, 1400
    scale = (width - left - 20) / t_end
    h = top + row_h * len(rows) + 50
    o = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{h}" font-family="sans-serif" font-size="11">',
         f'<rect width="{width}" height="{h}" fill="white"/>',
         f'<text x="10" y="20" font-size="14">{html.escape(title)}</text>']
    for i, (pid, tid) in enumerate(rows):
        y = top + i * row_h
        label = f'{procs.get(pid, pid)} / {threads.get((pid, tid), tid)}'
        o.append(f'<text x="5" y="{y + 12}">{html.escape(label[:40])}</text>')
        o.append(f'<line x1="{left}" y1="{y + row_h}" x2="{width - 20}" y2="{y + row_h}" stroke="#eee"/>')
    index = {r: i for i, r in enumerate(rows)}
    for e in spans:
        i = index[(e["pid"], e["tid"])]
        phase = e.get("cat", "other").split(",")[0]  # cat = "phase,op"
        color = COLORS.get(phase) or "#9D9D9D"
        if e.get("args", {}).get("kind") in ("collective", "send", "recv", "copy"):
            color = "#B279A2" if phase != "optimizer" else COLORS["optimizer"]
        x = left + e["ts"] * scale
        w = max(0.5, e["dur"] * scale)
        o.append(f'<rect x="{x:.1f}" y="{top + i * row_h + 2}" width="{w:.2f}" height="{row_h - 4}" fill="{color}">'
                 f'<title>{html.escape(e["name"])} {e["dur"]:.1f} us</title></rect>')
    ya = top + row_h * len(rows) + 15
    steps = 10
    for k in range(steps + 1):
        t = t_end * k / steps
        x = left + t * scale
        o.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{ya - 8}" stroke="#ddd"/>')
        o.append(f'<text x="{x:.1f}" y="{ya + 5}" text-anchor="middle">{t / 1000:.1f} ms</text>')
    legend = [("forward", COLORS["forward"]), ("backward", COLORS["backward"]), ("recompute", COLORS["recompute"]),
              ("communication", "#B279A2"), ("optimizer", COLORS["optimizer"])]
    x = left
    for name, c in legend:
        o.append(f'<rect x="{x}" y="{ya + 15}" width="12" height="10" fill="{c}"/><text x="{x + 16}" y="{ya + 24}">{name}</text>')
        x += 120
    o.append("</svg>")
    open(out, "w").write("\n".join(o))

main()
