#!/usr/bin/env python3
"""Plot and fit the scaling points of scripts/bench-scaling.sh.

    python3 scripts/plot-scaling.py docs/data/scaling.jsonl docs/scaling.svg

Reads pir-bench JSON lines (ours and chalametpir-0.8), draws three log-log
panels against the number of accounts (bytes per lookup, server time per
lookup, client preparation), ours beside the reference where it ran, and
prints a Markdown table: for each figure of ours, the measured points, the
power law fitted to them by least squares on logs (slope b in N^b), and its
value at mainnet's size. Standard library only (the SVG is written by hand).
"""

import json
import math
import sys

MAINNET_ACCOUNTS = 3.5e8

# (title, unit, function of a pir-bench line -> value or None)
FIGURES = [
    ("bytes per lookup (query + response)", "bytes",
     lambda r: r.get("query_bytes", 0) + r.get("response_bytes", 0)),
    ("server time per lookup (one answer, 2 cores)", "ms",
     lambda r: r.get("respond_ms")),
    ("client preparation per lookup (ours: s·A + e; reference: whole query)", "ms",
     lambda r: r.get("prepare_ms") if r["impl"] == "ours" else r.get("query_ms")),
]
# Further figures of ours that the table fits (not plotted).
TABLE_ONLY = [
    ("answer per query, batch of 16", "ms", lambda r: r.get("respond_batch_ms_per_query")),
    ("database", "bytes", lambda r: r.get("db_bytes")),
    ("setup download (hint)", "bytes", lambda r: r.get("hint_bytes")),
    ("base setup: encode + hint (2 cores)", "s", lambda r: r.get("setup_s")),
]
COLOURS = {"ours": "#1f5fbf", "chalametpir-0.8": "#d9731a"}


def load(path):
    runs = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line.startswith("{"):
                continue
            r = json.loads(line)
            if "impl" not in r:
                continue
            # The newest line of an (impl, size) wins: reruns replace.
            runs[(r["impl"], 2 ** r["log2_keys"])] = r
    return runs


def series(runs, impl, value):
    points = []
    for (i, n), r in sorted(runs.items(), key=lambda kv: kv[0][1]):
        if i == impl:
            v = value(r)
            if v:
                points.append((n, float(v)))
    return points


def fit(points):
    """Least squares of log v = a + b log n: returns (a, b)."""
    xs = [math.log(n) for n, _ in points]
    ys = [math.log(v) for _, v in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        return my, 0.0
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    return my - b * mx, b


def human(v, unit):
    if unit == "bytes":
        for div, name in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
            if v >= div:
                return f"{v / div:,.2f} {name}"
        return f"{v:,.0f} B"
    if unit == "ms" and v >= 1000:
        return f"{v / 1000:,.2f} s"
    if unit == "s" and v >= 120:
        return f"{v / 60:,.1f} min"
    return f"{v:,.3g} {unit}"


def table(runs):
    rows = ["| figure (ours) | measured | fitted slope b (N^b) | at 3.5e8 accounts (fit) |",
            "|---|---|---|---|"]
    for title, unit, value in FIGURES + TABLE_ONLY:
        pts = series(runs, "ours", value)
        if len(pts) < 2:
            continue
        a, b = fit(pts)
        measured = ", ".join(f"2^{round(math.log2(n))}: {human(v, unit)}" for n, v in pts)
        at = math.exp(a + b * math.log(MAINNET_ACCOUNTS))
        rows.append(f"| {title} | {measured} | {b:.2f} | {human(at, unit)} |")
    return "\n".join(rows)


def svg(runs, path):
    panel_w, panel_h, pad_l, pad_b, pad_t = 360, 300, 62, 46, 40
    width = len(FIGURES) * (panel_w + 20) + 20
    height = panel_h + 70
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif" font-size="11">',
           f'<rect width="{width}" height="{height}" fill="white"/>']
    xs_all = [n for (_, n) in runs] + [MAINNET_ACCOUNTS]
    xlo, xhi = math.log10(min(xs_all)) - 0.1, math.log10(max(xs_all)) + 0.1
    for p, (title, unit, value) in enumerate(FIGURES):
        x0 = 20 + p * (panel_w + 20)
        ours = series(runs, "ours", value)
        peer = series(runs, "chalametpir-0.8", value)
        ys = [v for _, v in ours + peer]
        if len(ours) >= 2:
            a, b = fit(ours)
            ys.append(math.exp(a + b * math.log(MAINNET_ACCOUNTS)))
        if not ys:
            continue
        ylo, yhi = math.floor(math.log10(min(ys))), math.ceil(math.log10(max(ys)))
        if yhi == ylo:
            yhi += 1
        left, top = x0 + pad_l, pad_t
        w, h = panel_w - pad_l, panel_h - pad_b - pad_t + 20

        def px(n):
            return left + (math.log10(n) - xlo) / (xhi - xlo) * w

        def py(v):
            return top + h - (math.log10(v) - ylo) / (yhi - ylo) * h

        out.append(f'<text x="{x0 + panel_w / 2}" y="18" text-anchor="middle" '
                   f'font-weight="bold">{title}</text>')
        out.append(f'<rect x="{left}" y="{top}" width="{w}" height="{h}" fill="none" stroke="#999"/>')
        for e in range(ylo, yhi + 1):
            y = py(10 ** e)
            out.append(f'<line x1="{left}" y1="{y}" x2="{left + w}" y2="{y}" stroke="#eee"/>')
            out.append(f'<text x="{left - 4}" y="{y + 4}" text-anchor="end">'
                       f'{human(10 ** e, unit)}</text>')
        for e in range(math.ceil(xlo), math.floor(xhi) + 1):
            x = px(10 ** e)
            out.append(f'<line x1="{x}" y1="{top}" x2="{x}" y2="{top + h}" stroke="#eee"/>')
            out.append(f'<text x="{x}" y="{top + h + 14}" text-anchor="middle">1e{e}</text>')
        xm = px(MAINNET_ACCOUNTS)
        out.append(f'<line x1="{xm}" y1="{top}" x2="{xm}" y2="{top + h}" stroke="#888" '
                   f'stroke-dasharray="2,3"/>')
        out.append(f'<text x="{xm - 3}" y="{top + 12}" text-anchor="end" fill="#555">mainnet</text>')
        out.append(f'<text x="{left + w / 2}" y="{top + h + 30}" text-anchor="middle">accounts</text>')
        for impl, pts in (("ours", ours), ("chalametpir-0.8", peer)):
            colour = COLOURS[impl]
            if len(pts) >= 2:
                line = " ".join(f"{px(n):.1f},{py(v):.1f}" for n, v in pts)
                out.append(f'<polyline points="{line}" fill="none" stroke="{colour}" stroke-width="2"/>')
            for n, v in pts:
                out.append(f'<circle cx="{px(n):.1f}" cy="{py(v):.1f}" r="3" fill="{colour}"/>')
            if impl == "ours" and len(pts) >= 2:
                a, b = fit(pts)
                n1 = pts[-1][0]
                v1 = math.exp(a + b * math.log(n1))
                v2 = math.exp(a + b * math.log(MAINNET_ACCOUNTS))
                out.append(f'<line x1="{px(n1):.1f}" y1="{py(v1):.1f}" x2="{xm:.1f}" y2="{py(v2):.1f}" '
                           f'stroke="{colour}" stroke-dasharray="5,4"/>')
                out.append(f'<rect x="{xm - 3:.1f}" y="{py(v2) - 3:.1f}" width="6" height="6" '
                           f'fill="white" stroke="{colour}"/>')
    legend_y = height - 12
    out.append(f'<circle cx="30" cy="{legend_y - 4}" r="4" fill="{COLOURS["ours"]}"/>'
               f'<text x="40" y="{legend_y}">ours (measured; dashed: fitted power law to mainnet)</text>')
    out.append(f'<circle cx="380" cy="{legend_y - 4}" r="4" fill="{COLOURS["chalametpir-0.8"]}"/>'
               f'<text x="390" y="{legend_y}">ChalametPIR 0.8.0 (measured, same run and machine)</text>')
    machine = next((r.get("cpu_model") for r in runs.values() if r.get("cpu_model")), "?")
    out.append(f'<text x="{width - 10}" y="{legend_y}" text-anchor="end" fill="#555">{machine}, '
               f'32-byte keys, 24-byte values, bases packed for 1.5 MiB a lookup</text>')
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    runs = load(sys.argv[1])
    if not runs:
        sys.exit(f"no pir-bench lines in {sys.argv[1]}")
    svg(runs, sys.argv[2])
    print(table(runs))
    print(f"\n(plot: {sys.argv[2]})")


if __name__ == "__main__":
    main()
