"""Side by side: two result files (for example two burtorch builds or versions), row by row.

Rows match on (framework, workload, configuration, phase); the ratio is new / old, so a value
above 1 is a slowdown. Comparing interpreters within one run is `burtorch-bench ... --against
LABEL=PYTHON`, whose rows appear in the ordinary tables.
"""
from __future__ import annotations

from . import report


def _index(doc: dict) -> dict:
    out = {}
    for r in doc["runs"]:
        if r["status"] != "ok":
            continue
        for phase, s in r["summary"].items():
            key = (r["workload"], report.config_key(r["config"]), r["name"], phase)
            out[key] = (s["median"], r.get("agrees"), r["peak_rss"])
    return out


def compare(old: dict, new: dict, only=None) -> list:
    """[(workload, config, framework, phase, old_median, new_median, new/old, agrees_old, agrees_new)]."""
    a, b = _index(old), _index(new)
    rows = []
    for key in sorted(set(a) & set(b), key=lambda k: (report.WORKLOAD_ORDER.index(k[0]), k[1:])):
        if only and key[2] not in only:
            continue
        (ma, ga, _), (mb, gb, _) = a[key], b[key]
        rows.append((*key, ma, mb, mb / ma if ma else None, ga, gb))
    return rows


def render(rows: list, old_name: str, new_name: str) -> str:
    header = ["workload", "config", "framework", "phase", f"old: {old_name}", f"new: {new_name}",
              "new/old", "agrees old/new"]
    body = []
    for w, c, name, phase, ma, mb, ratio, ga, gb in rows:
        unit = report.unit_label(w)
        body.append([w, c, name, phase, f"{report._fmt(ma)} {unit}", f"{report._fmt(mb)} {unit}",
                     report._fmt(ratio, 3), f"{'yes' if ga else 'NO'}/{'yes' if gb else 'NO'}"])
    if not body:
        return "no rows in common\n"
    return report._text_table(header, body) + "\n"
