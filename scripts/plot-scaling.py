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
# (title, subtitle, unit, value of a run, the row of TABLE that gives its
# mainnet estimate)
FIGURES = [
    ("bytes per lookup", "query + response", "bytes",
     lambda r: r.get("query_bytes", 0) + r.get("response_bytes", 0), 0),
    ("server time per lookup", "one answer, both cores", "ms",
     lambda r: r.get("respond_ms"), 3),
    ("client preparation per lookup", "ours: s·A + e; reference: its whole query", "ms",
     lambda r: r.get("prepare_ms") if r["impl"] == "ours" else r.get("query_ms"), 5),
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


def decade(e, unit):
    """An axis label for 10^e of `unit` (decimal prefixes: round numbers)."""
    if unit == "bytes":
        for power, name in ((9, "GB"), (6, "MB"), (3, "kB")):
            if e >= power:
                return f"{10 ** (e - power)} {name}"
        return f"{10 ** e} B"
    if unit == "ms":
        return f"{10 ** (e - 3)} s" if e >= 3 else f"{10.0 ** e:g} ms"
    return f"{10.0 ** e:g} {unit}"


# Mainnet's base as the snapshotter would pack it
# (`ethpir-snapshot plan --accounts 350000000`: k = 1134, 24-byte values).
PLAN = {"accounts": MAINNET_ACCOUNTS, "rows": 356_352, "db_bytes": 12_332.2 * 2**20,
        "lookup_bytes": 1_533.8 * 2**10, "hint_bytes": 245.6 * 2**20}

# The mainnet table: (figure, unit, value of a run, what it scales with).
# Sizes come from the plan (exact: they follow from the shapes); times are
# fitted to the measured points against what they scale with: an answer
# scans the database, a preparation expands n x rows of A, a build handles
# every account.
TABLE = [
    ("bytes per lookup (query + response)", "bytes",
     lambda r: r.get("query_bytes", 0) + r.get("response_bytes", 0), "lookup_bytes"),
    ("setup download (hint)", "bytes", lambda r: r.get("hint_bytes"), "hint_bytes"),
    ("database", "bytes", lambda r: r.get("db_bytes"), "db_bytes"),
    ("server time per lookup (one answer, 2 cores)", "ms", lambda r: r.get("respond_ms"),
     ("db_bytes", lambda r: r.get("db_bytes"))),
    ("server time per query in a batch of 16", "ms",
     lambda r: r.get("respond_batch_ms_per_query"), ("db_bytes", lambda r: r.get("db_bytes"))),
    ("client preparation per lookup (2 cores)", "ms", lambda r: r.get("prepare_ms"),
     ("rows", lambda r: r.get("rows"))),
    ("base setup: encode + hint (2 cores)", "s", lambda r: r.get("setup_s"),
     ("accounts", lambda r: 2 ** r["log2_keys"])),
]


def ours_runs(runs):
    return [r for (i, _), r in sorted(runs.items(), key=lambda kv: kv[0][1]) if i == "ours"]


def mainnet_estimate(ours, value, scale):
    """(value at mainnet, how) for a TABLE entry, or None."""
    if isinstance(scale, str):
        return PLAN[scale], "the plan"
    name, x_of = scale
    usable = [r for r in ours if value(r) and x_of(r)]
    # The smallest bases are mostly fixed costs: fit from 2^20 up.
    big = [r for r in usable if r["log2_keys"] >= 20]
    usable = big if len(big) >= 2 else usable
    if len(usable) < 2:
        return None
    a, b = fit([(x_of(r), value(r)) for r in usable])
    return math.exp(a + b * math.log(PLAN[name])), f"fitted: {name}^{b:.2f} over {len(usable)} points"


def table(runs):
    ours = ours_runs(runs)
    rows = ["| figure (ours) | measured | mainnet, 3.5e8 accounts | how |", "|---|---|---|---|"]
    for title, unit, value, scale in TABLE:
        pts = [(2 ** r["log2_keys"], value(r)) for r in ours if value(r)]
        estimate = mainnet_estimate(ours, value, scale)
        if not pts or estimate is None:
            continue
        measured = ", ".join(f"2^{round(math.log2(n))}: {human(v, unit)}" for n, v in pts)
        at, how = estimate
        rows.append(f"| {title} | {measured} | {human(at, unit)} | {how} |")
    return "\n".join(rows)


def svg(runs, path):
    panel_w, panel_h, pad_l, pad_b, pad_t = 360, 300, 62, 46, 40
    width = len(FIGURES) * (panel_w + 20) + 20
    height = panel_h + 84
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif" font-size="11">',
           f'<rect width="{width}" height="{height}" fill="white"/>']
    xs_all = [n for (_, n) in runs] + [MAINNET_ACCOUNTS]
    xlo, xhi = math.log10(min(xs_all)) - 0.1, math.log10(max(xs_all)) + 0.1
    for p, (title, subtitle, unit, value, row) in enumerate(FIGURES):
        x0 = 20 + p * (panel_w + 20)
        ours = series(runs, "ours", value)
        peer = series(runs, "chalametpir-0.8", value)
        ys = [v for _, v in ours + peer]
        estimate = mainnet_estimate(ours_runs(runs), TABLE[row][2], TABLE[row][3])
        if estimate:
            ys.append(estimate[0])
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

        out.append(f'<text x="{x0 + panel_w / 2}" y="16" text-anchor="middle" '
                   f'font-weight="bold">{title}</text>')
        out.append(f'<text x="{x0 + panel_w / 2}" y="30" text-anchor="middle" '
                   f'fill="#555">{subtitle}</text>')
        out.append(f'<rect x="{left}" y="{top}" width="{w}" height="{h}" fill="none" stroke="#999"/>')
        for e in range(ylo, yhi + 1):
            y = py(10 ** e)
            out.append(f'<line x1="{left}" y1="{y}" x2="{left + w}" y2="{y}" stroke="#eee"/>')
            out.append(f'<text x="{left - 4}" y="{y + 4}" text-anchor="end">'
                       f'{decade(e, unit)}</text>')
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
            if impl == "ours" and pts and estimate:
                n1, v1 = pts[-1]
                v2 = estimate[0]
                out.append(f'<line x1="{px(n1):.1f}" y1="{py(v1):.1f}" x2="{xm:.1f}" y2="{py(v2):.1f}" '
                           f'stroke="{colour}" stroke-dasharray="5,4"/>')
                out.append(f'<rect x="{xm - 3:.1f}" y="{py(v2) - 3:.1f}" width="6" height="6" '
                           f'fill="white" stroke="{colour}"/>')
    legend_y = height - 28
    out.append(f'<circle cx="30" cy="{legend_y - 4}" r="4" fill="{COLOURS["ours"]}"/>'
               f'<text x="40" y="{legend_y}">ours (measured; open square: mainnet, from the plan or the fit)</text>')
    out.append(f'<circle cx="470" cy="{legend_y - 4}" r="4" fill="{COLOURS["chalametpir-0.8"]}"/>'
               f'<text x="480" y="{legend_y}">ChalametPIR 0.8.0 (measured, same run and machine)</text>')
    machine = next((r.get("cpu_model") for r in runs.values() if r.get("cpu_model")), "?")
    out.append(f'<text x="24" y="{legend_y + 18}" fill="#555">{machine}, '
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
