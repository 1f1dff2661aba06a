"""The search as one self-contained HTML page: for each axis, the traced points' peak (filled)
and what each needs on the card (ring: reserved + outside the allocator) against the axis'
values, with the device's memory as a line; the frontier and the excluded points as tables.

As the snapshot report (reports/html.py): nothing remote, no script at all, the style allowed
by its hash in the Content-Security-Policy, every string escaped, and the search's JSON
embedded (never executed) for whoever wants the numbers.
"""

from __future__ import annotations

import base64
import hashlib
import html
from pathlib import Path
from typing import Any

from ..reports.html import embed_json
from ..snapshot.output_files import write_atomically
from ..units import format_bytes

W, H, PAD_L, PAD_B, PAD_T, PAD_R = 520, 260, 78, 34, 16, 16
COLOURS = {"fits": "#2e9e5b", "oom": "#d9443a"}
STYLE = """
body{font:14px system-ui,sans-serif;margin:24px;color:#222;background:#fff}
@media (prefers-color-scheme:dark){body{color:#ddd;background:#1e1e1e}.grid{stroke:#444}}
h1{font-size:20px}h2{font-size:16px;margin-top:28px}
.charts{display:flex;flex-wrap:wrap;gap:18px}
table{border-collapse:collapse;margin-top:8px}td,th{padding:3px 10px;text-align:left}
th{border-bottom:1px solid #888}td.n{text-align:right}
.grid{stroke:#ccc;stroke-width:1}.device{stroke:#888;stroke-dasharray:6 4;stroke-width:1.5}
text{font-size:11px;fill:currentColor}
"""


def render(document: dict[str, Any]) -> str:
    rows = document["rows"]
    total = document["device_total_bytes"]
    charts = [_chart(a["name"], a["values"], rows, total) for a in document["space"]
              if len(a["values"]) > 1]
    csp = ("default-src 'none'; style-src 'sha256-" +
           base64.b64encode(hashlib.sha256(STYLE.encode()).digest()).decode() +
           "'; base-uri 'none'; form-action 'none'")
    title = f"memlens fit · {document['target']}"
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            "<meta http-equiv=\"Content-Security-Policy\" "
            f"content=\"{html.escape(csp, quote=False)}\">\n"
            "<meta name=\"referrer\" content=\"no-referrer\">\n"
            f"<title>{html.escape(title)}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n"
            f"<h1>{html.escape(title)}</h1>\n"
            f"<p>{html.escape(document['device'])}: {format_bytes(total)} per GPU. "
            f"{_summary(document['counts'])}</p>\n"
            f"<div class=\"charts\">{''.join(charts)}</div>\n"
            f"<h2>Fits</h2>{_table(document['frontier'], document, True)}\n"
            f"<h2>Does not fit</h2>{_table(document['excluded'], document, False)}\n"
            f"<script type=\"application/json\" id=\"memlens-fit\">{embed_json(document)}"
            "</script>\n</body>\n</html>\n")


def _summary(c: dict[str, int]) -> str:
    return (f"{c['points']} points: {c['fits']} fit, {c['oom']} out of memory, {c['errors']} "
            f"failed; {c['traced'] + c['resumed']} traced, {c['pruned']} pruned, "
            f"{c['implied']} implied.")


def _chart(axis: str, values: list[str], rows: list[dict], total: int) -> str:
    traced = [r for r in rows if r.get("peak_bytes") is not None]
    top = max([total] + [r["device_total_bytes"] - r["headroom_bytes"] for r in traced]) * 1.1
    x0, x1, y0, y1 = PAD_L, W - PAD_R, H - PAD_B, PAD_T

    def x(v: str) -> float:
        return x0 + (x1 - x0) * (values.index(v) + 0.5) / len(values)

    def y(b: float) -> float:
        return y0 - (y0 - y1) * b / top

    parts = [f'<svg width="{W}" height="{H}" viewBox="0 0 {W} {H}" role="img">'
             f'<text x="{x0}" y="11">peak against {html.escape(axis)}</text>']
    for i in range(5):
        b = top * i / 4
        parts.append(f'<line class="grid" x1="{x0}" x2="{x1}" y1="{y(b):.1f}" y2="{y(b):.1f}"/>'
                     f'<text x="{x0 - 6}" y="{y(b) + 4:.1f}" text-anchor="end">'
                     f'{html.escape(format_bytes(int(b)))}</text>')
    parts.append(f'<line class="device" x1="{x0}" x2="{x1}" y1="{y(total):.1f}" '
                 f'y2="{y(total):.1f}"/><text x="{x1}" y="{y(total) - 4:.1f}" '
                 'text-anchor="end">device memory</text>')
    for v in values:
        parts.append(f'<text x="{x(v):.1f}" y="{H - 12}" text-anchor="middle">'
                     f'{html.escape(v)}</text>')
    spread = max(1, len(traced))
    for i, r in enumerate(traced):
        cx = x(r["point"][axis]) + ((i % 7) - 3) * 3 * (spread > 1)  # apart where they overlap
        colour = COLOURS.get(r["verdict"], "#888")
        need = r["device_total_bytes"] - r["headroom_bytes"]
        label = html.escape(f"{r['key']}: peak {format_bytes(r['peak_bytes'])}, needs "
                            f"{format_bytes(need)}")
        parts.append(f'<g><title>{label}</title>'
                     f'<circle cx="{cx:.1f}" cy="{y(r["peak_bytes"]):.1f}" r="3.5" '
                     f'fill="{colour}"/><circle cx="{cx:.1f}" cy="{y(need):.1f}" r="5" '
                     f'fill="none" stroke="{colour}"/></g>')
    parts.append("</svg>")
    return "".join(parts)


def _table(rows: list[dict], document: dict, fits: bool) -> str:
    names = [a["name"] for a in document["space"]]
    head = names + (["worst rank", "peak", "reserved", "headroom"] if fits else ["why"])
    out = ["<table><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in head) + "</tr>"]
    for r in rows:
        cells = [f"<td>{html.escape(r['point'][n])}</td>" for n in names]
        if not fits:
            cells.append(f"<td>{html.escape(r['reason'])}</td>")
        elif r.get("peak_bytes") is None:
            cells.append(f"<td colspan=\"4\">{html.escape(r['reason'])}</td>")
        else:
            reserved = r.get("reserved_peak_bytes")
            cells += [f"<td class=\"n\">{r['worst_rank']}</td>"] + [
                f"<td class=\"n\">{html.escape(format_bytes(b) if b is not None else '-')}</td>"
                for b in (r["peak_bytes"], reserved, r["headroom_bytes"])]
        out.append("<tr>" + "".join(cells) + "</tr>")
    return "".join(out) + "</table>"


def write_page(document: dict[str, Any], path: Path) -> Path:
    text = render(document)
    return write_atomically(path, lambda f: f.write(text), "fit page")
