"""Tables and figures from the suite's JSON: terminal, Markdown, PNG, and the performance page.

Every figure shown is computed here from the runs in the JSON; nothing is typed by hand.

    burtorch-bench report RESULTS.json [--markdown PAGE.md] [--plots] [--summary-json OUT.json]

(also ``python -m burtorch_bench.report``). The repository's performance page is
``burtorch-bench report benchmarks/results/latest.json --markdown docs/performance.md``.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

from burtorch.io.atomic import write_atomic
from burtorch.viz.plots import save_figure

from . import agreement, paper
from .specs import FLOOR, PAPER_ITERS, WORKLOAD_ORDER, WORKLOADS, config_threads


def write_text(path, text: str) -> None:
    """Writes a UTF-8 text file through the atomic writer (a report is whole or not there)."""
    write_atomic(path, (text.encode("utf-8"),), durable=False)

SCHEMA = 1


# --- numbers derived from raw runs ------------------------------------------------------------

def config_key(config: dict) -> str:
    parts = [f"{k}={config[k]}" for k in ("e", "b") if k in config]
    return " ".join(parts) or "-"


def unit_label(workload: str) -> str:
    if WORKLOADS[workload].per_step:
        return "ms/step"
    return f"s per {PAPER_ITERS[workload]:,}"


def scaled(row: dict, phase: str) -> tuple:
    """(median, min, max) of one phase in the workload's unit (per paper count, or ms/step)."""
    times, n = row["times"][phase], row["n"][phase]
    factor = 1000.0 / n if WORKLOADS[row["workload"]].per_step else PAPER_ITERS[row["workload"]] / n
    return (statistics.median(times) * factor, min(times) * factor, max(times) * factor)


def groups(runs: list) -> list:
    """[(workload, config_key, rows)] in workload order, rows in run order."""
    out: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in runs:
        out.setdefault((r["workload"], config_key(r.get("config") or {})), []).append(r)
    order = {w: i for i, w in enumerate(WORKLOAD_ORDER)}
    keys = sorted(out, key=lambda k: (order.get(k[0], 99), _config_sort(k[1])))
    return [(w, c, out[(w, c)]) for w, c in keys]


def _config_sort(key: str):
    vals = dict(p.split("=") for p in key.split() if "=" in p)
    return (int(vals.get("e", 0)), int(vals.get("b", 0)))


def annotate(runs: list) -> None:
    """Agreement verdicts and ratios to burtorch, written into the rows."""
    for workload, _, rows in groups(runs):
        agreement.check(workload, rows)
        base = next((r for r in rows if r.get("name") == "burtorch" and r["status"] == "ok"), None)
        for r in rows:
            if r["status"] != "ok":
                continue
            r["summary"] = {}
            for phase in r["times"]:
                med, lo, hi = scaled(r, phase)
                ratio = None
                if base is not None and phase in base["times"]:
                    ratio = med / scaled(base, phase)[0]
                r["summary"][phase] = {"median": med, "min": lo, "max": hi, "ratio": ratio}


def computed(row: dict) -> str:
    nums, w = row["numbers"], row["workload"]
    if row.get("entry") == FLOOR:
        return f"{nums['gflop']:.3g} GFLOP per step"
    if w in ("tiny", "small"):
        return ", ".join(f"{nums[k]:.10g}" for k in agreement.GRAD_KEYS)
    if w == "saveload":
        return f"g={nums['g']:.6g} (7 values), {nums['file bytes']} B file"
    return f"{nums['loss before']:.5g} -> {nums['loss after']:.5g}"


def _fmt(x, digits=4) -> str:
    if x is None:
        return "-"
    if x >= 100:
        return f"{x:,.0f}"
    return f"{x:.{digits}g}"


def _threads(row: dict) -> int:
    return config_threads(row.get("config"))


def table_rows(rows: list) -> tuple:
    """(header, body rows of strings, notes) for one workload/config group."""
    w = rows[0]["workload"]
    header = ["framework", "threads", "phase", "units/run", f"median ({unit_label(w)})", "min", "max",
              "x burtorch", "% of GEMM floor", "peak RSS MB", "init s", "computed", "agrees"]
    # each row against the floor at its own thread count (the floor's BLAS ran with as many)
    floors = {_threads(r): r for r in rows if r.get("entry") == FLOOR and r["status"] == "ok"}
    body, notes = [], []
    for r in rows:
        if r["status"] != "ok":
            continue
        floor = floors.get(_threads(r))
        for phase, s in r["summary"].items():
            of_floor = "-"
            if floor is not None and phase in floor["summary"]:
                of_floor = f"{100 * floor['summary'][phase]['median'] / s['median']:.0f}"
            body.append([
                r["name"], str(_threads(r)), phase, f"{r['n'][phase]:,}",
                _fmt(s["median"]), _fmt(s["min"]), _fmt(s["max"]), _fmt(s["ratio"], 3), of_floor,
                f"{r['peak_rss'] / 2**20:.1f}", _fmt(r.get("init_s"), 3), computed(r),
                "yes" if r.get("agrees") else "NO",
            ])
        if not r.get("agrees"):
            notes.append(f"{r['name']} disagrees: {r.get('agreement')}")
    return header, body, notes


def status_lines(runs: list, missing: list) -> list:
    """One line per framework that did not run (not installed, unavailable, error)."""
    lines, seen = [], set()
    for m in missing:
        lines.append(f"{m['entry']}: not installed ({m['package']}); to include it: {m['install']}")
    for r in runs:
        if r["status"] == "ok":
            continue
        key = (r.get("name"), r["workload"], r["status"], r.get("message"))
        if key in seen:
            continue
        seen.add(key)
        lines.append(f"{r.get('name')} [{r['workload']}]: {r['status']}: {r.get('message')}")
    return lines


# --- terminal ---------------------------------------------------------------------------------

def _text_table(header, body) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *body)]
    line = "  ".join(h.ljust(wd) for h, wd in zip(header, widths))
    out = [line, "  ".join("-" * wd for wd in widths)]
    out += ["  ".join(str(c).ljust(wd) for c, wd in zip(row, widths)) for row in body]
    return "\n".join(out)


def processes_line(meta: dict | None) -> str:
    """How many processes each row pooled, when more than one."""
    n = int((meta or {}).get("processes", 1))
    if n <= 1:
        return ""
    return (f"Each row ran in {n} fresh processes, in rounds over all the rows; its median, min and "
            "max are over the samples of all of them (per-process medians: `process_medians` in the JSON).")


def render_terminal(doc: dict) -> str:
    from .capacity import around_runs

    probes = around_runs(doc.get("meta"))
    out = [line for line in (probes, processes_line(doc.get("meta"))) if line]
    for workload, ckey, rows in groups(doc["runs"]):
        spec = WORKLOADS[workload]
        header, body, notes = table_rows(rows)
        out.append(f"\n== {spec.title}" + (f"  [{ckey}]" if ckey != "-" else ""))
        if not body:
            out.append("   (no framework ran this configuration)")
            continue
        out.append(_text_table(header, body))
        out.append(f"   agreement: {spec.agreement_rule}")
        out += [f"   !! {n}" for n in notes]
    lines = status_lines(doc["runs"], doc.get("missing", []))
    if lines:
        out.append("\nnot run:")
        out += [f"  {line}" for line in lines]
    return "\n".join(out) + "\n"


# --- markdown ---------------------------------------------------------------------------------

def _md_table(header, body) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c).replace("|", "/") for c in row) + " |" for row in body]
    return "\n".join(out)


def render_markdown(doc: dict, png_names: dict | None = None) -> str:
    from .capacity import around_runs

    probes = around_runs(doc.get("meta"))
    out = [line + "\n" for line in (probes, processes_line(doc.get("meta"))) if line]
    current = None
    for workload, ckey, rows in groups(doc["runs"]):
        spec = WORKLOADS[workload]
        if workload != current:
            current = workload
            out.append(f"\n### {spec.title}\n")
            out.append(f"Timed region: {spec.timed_region}. Agreement: {spec.agreement_rule}.\n")
            regions: dict[str, str] = {}
            for r in (x for _, _, rs in groups(doc["runs"]) for x in rs):
                if r["workload"] == workload and r["status"] == "ok":
                    regions.setdefault(r["name"], r["timed_region"])
            out += [f"- `{name}`: {region}" for name, region in regions.items()]
            info = next((r.get("info") for r in rows if r.get("info")), None)
            if info:
                out.append("\nModel: " + ", ".join(f"{k} {v}" for k, v in info.items()
                                                   if k != "parameters" or workload == "gpt"))
            if png_names and workload in png_names:
                out.append(f"\n![{spec.title}]({png_names[workload]})")
            out.append("")
        header, body, notes = table_rows(rows)
        if body:
            out.append(f"**{ckey}**\n" if ckey != "-" else "")
            out.append(_md_table(header, body))
            out += [f"\n> {n}" for n in notes]
            out.append("")
    lines = status_lines(doc["runs"], doc.get("missing", []))
    if lines:
        out.append("\n### Not run\n")
        out += [f"- {line}" for line in lines]
    return "\n".join(out) + "\n"


# --- PNG --------------------------------------------------------------------------------------

def _bars(ax, categories, series, ylabel, title) -> None:
    width = 0.8 / len(series)
    for i, (name, vals) in enumerate(series.items()):
        xs = [c + i * width for c, cat in enumerate(categories) if cat in vals]
        ax.bar(xs, [vals[cat] for cat in categories if cat in vals], width=width, label=name)
    ax.set_yscale("log")
    ax.set_xticks([c + 0.4 - width / 2 for c in range(len(categories))])
    ax.set_xticklabels(categories, fontsize=8)
    ax.set_ylabel(ylabel, fontsize=8)
    ax.set_title(title, fontsize=9)
    ax.grid(axis="y", which="both", alpha=0.3)


def _panels(workload: str, cfgs: list) -> dict:
    """{panel title: (categories, {framework: {category: median}})}; W4 gets one panel per b."""
    panels: dict[str, Any] = {}
    for ckey, rows in cfgs:
        parts = dict(p.split("=") for p in ckey.split() if "=" in p)
        if workload == "mlp":
            panel, base_cat = f"b={parts.get('b')}", f"e={parts.get('e')}"
        else:
            panel, base_cat = "", ("" if ckey == "-" else ckey)
        cats, series = panels.setdefault(panel, ([], {}))
        for r in rows:
            if r["status"] != "ok":
                continue
            for phase, s in r["summary"].items():
                cat = " ".join(x for x in (base_cat, "" if phase in ("run", "step") else phase)
                               if x) or WORKLOADS[workload].key
                if cat not in cats:
                    cats.append(cat)
                series.setdefault(r["name"], {})[cat] = s["median"]
    return {k: v for k, v in panels.items() if v[1]}


def render_png(doc: dict, out_dir: Path) -> dict:
    """Log-scale bar charts (one file per workload); {} when matplotlib is absent."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return {}
    out_dir.mkdir(parents=True, exist_ok=True)
    written: dict[str, Any] = {}
    by_workload: dict[str, list[Any]] = {}
    for workload, ckey, rows in groups(doc["runs"]):
        by_workload.setdefault(workload, []).append((ckey, rows))
    for workload, cfgs in by_workload.items():
        panels = _panels(workload, cfgs)
        if not panels:
            continue
        fig, axes = plt.subplots(len(panels), 1, figsize=(9, 3.6 * len(panels)), squeeze=False)
        ylabel = f"{unit_label(workload)} (median, log)"
        for ax, (panel, (cats, series)) in zip(axes[:, 0], panels.items()):
            _bars(ax, cats, series, ylabel,
                  WORKLOADS[workload].title + (f", {panel}" if panel else ""))
        axes[0, 0].legend(fontsize=7, ncol=3)
        fig.tight_layout()
        path = out_dir / f"{workload}.png"
        save_figure(fig, path, dpi=100)
        plt.close(fig)
        written[workload] = path.name
    return written


# --- the performance page -----------------------------------------------------------------------------

def _median(doc, name, workload, phase, **cfg):
    for r in doc["runs"]:
        if (r.get("name") == name and r["workload"] == workload and r["status"] == "ok"
                and all(r["config"].get(k) == v for k, v in cfg.items()) and phase in r["summary"]):
            return r
    return None


def ours_like_paper(doc: dict) -> list:
    """Our figures arranged like the paper's table (computed from the runs; '' where not run)."""

    def med(name, workload, phase="run", **cfg):
        r = _median(doc, name, workload, phase, **cfg)
        return r["summary"][phase]["median"] if r else None

    def join(vals, unit=""):
        if all(v is None for v in vals):
            return ""
        return " / ".join(_fmt(v) for v in vals) + unit

    cols = ("burtorch", "torch-eager", "micrograd")
    rows = [
        ["W1, 100K iterations"] + [join([med(c, "tiny")], " s") for c in cols],
        ["W2, 20K iterations"] + [join([med(c, "small")], " s") for c in cols],
        ["W3, 5,000 saves / loads"] + [join([med(c, "saveload", "save"), med(c, "saveload", "load")],
                                            " s") for c in cols],
    ]
    for e in (4, 64, 1024):
        label = "W4 e=4, b=1 / b=64, ms per step" if e == 4 else f"W4 e={e}"
        rows.append([label] + [join([med(c, "mlp", "step", e=e, b=b) for b in (1, 64)])
                               for c in cols])
    rows.append(["W5 b=1 / b=8 / b=64, ms per step"]
                + [join([med(c, "gpt", "step", b=b) for b in (1, 8, 64)]) for c in cols])
    rss = [_median(doc, c, "gpt", "step", b=1) for c in cols]
    rows.append(["peak RSS, W5"] + [f"{r['peak_rss'] / 2**20:.1f} MB" if r else "" for r in rss])
    rows.append(["init, process start to one W5 step done"]
                + [f"{r['init_s']:.3g} s" if r and r.get("init_s") else "" for r in rss])
    return rows


def current_command(command: str) -> str:
    """The suite's command line as it is spelled today. Runs recorded before the suite became its
    own distribution name it by its former command (a subcommand of `burtorch`, or the module
    under burtorch), which no longer exists."""
    for former in ("burtorch bench ", "python -m burtorch.bench "):
        if command.startswith(former):
            return "burtorch-bench " + command[len(former):]
    return command


def render_page(doc: dict, json_arg: str, page_arg: str) -> str:
    """The performance page: how the numbers were produced (both commands), the machine, every
    table, and the paper's figures beside ours. A function of the JSON and the two paths named in
    its commands alone, so that the committed page can be regenerated byte for byte."""
    from .capacity import around_runs

    meta = doc["meta"]
    m = meta["machine"]
    probes = around_runs(meta)
    versions: dict[str, str] = {}
    for r in doc["runs"]:
        versions.update(r.get("versions") or {})
    out = [
        "# Performance",
        "",
        f"Generated by `burtorch-bench report` from the results of one run of the benchmark suite "
        f"(`{json_arg}`); no figure on this page is typed by hand except the paper's, which are quoted as "
        "such at the end. The suite is the `burtorch-bench` distribution in the repository's `benchmarks/` "
        "directory (`pip install ./benchmarks` beside burtorch; `pip install './benchmarks[peers]'` adds "
        "the peer frameworks).",
        "",
        "## How these numbers were produced",
        "",
        "```",
        current_command(meta["command"]),
        f"burtorch-bench report {json_arg} --markdown {page_arg}",
        "```",
        "",
        f"Preset `{meta['preset']}`; started {meta['started']}, took {meta['elapsed_s']:.0f} s. "
        "Each (framework, workload, configuration) ran in its own fresh Python process "
        f"pinned to CPU {meta.get('cpu')} (`os.sched_setaffinity`), with one library thread "
        "(OMP/MKL/XLA/torch set to 1), a warm-up, then the timed repetitions. A row of N threads "
        "(burtorch's, or the GEMM floor's BLAS) is pinned to N cores.",
        "",
        "- Times: median, min and max over the repetitions. W1/W2/W3 are shown per the paper's "
        "count (100,000 / 20,000 / 5,000); `units/run` says how many iterations each timed run "
        "really measured. Where a peer's run would exceed the preset's budget it measured fewer "
        "iterations per run and the time is scaled linearly per iteration (the iterations are "
        "identical). The `paper` preset measures the full counts for everyone.",
        "- W4/W5: milliseconds per training step (one step = one run), batch preparation excluded.",
        "- Peak RSS: `getrusage(RUSAGE_SELF).ru_maxrss` of the whole child process at its end "
        "(every child also runs the harness, `burtorch_bench`, around the framework it times).",
        "- Init: wall clock from spawning the interpreter to the end of the first step, measured "
        "by the parent (includes interpreter start, imports, data preparation and compilation).",
        "- x burtorch: the row's median divided by burtorch's in the same table.",
        "- computed / agrees: the numbers each framework produced, cross-checked (rule under each "
        "table); a faster wrong answer shows as `NO`.",
        "",
        "## Machine",
        "",
        f"- CPU: {m['cpu']} ({m['logical_cpus']} logical CPUs"
        f"{', virtualized' if m.get('virtualized') else ''}); flags: {', '.join(m['cpu_flags'])}",
        f"- Memory: {m.get('memory_gib')} GiB; OS: {m['os']}",
        f"- Python {m['python']} ({m['python_impl']}); C++ compiler: {m['compiler']}",
        "- Versions: " + ", ".join(f"{k} {v}" for k, v in sorted(versions.items())),
        *(["- " + probes] if probes else []),
        "",
        "## Results",
        render_markdown(doc),
        "## Beside the paper's figures",
        "",
        "Ours (this machine, from the JSON above; empty where that framework or workload did not "
        "run here). burtorch is measured through its Python API, one native call per scalar op; "
        "the paper's BurTorch column is the authors' C++ API.",
        "",
        _md_table(["workload", "burtorch (Python API)", "PyTorch eager", "micrograd"],
                  ours_like_paper(doc)),
        "",
        f"The paper's, quoted from {paper.SOURCE}. Another machine and the authors' C++ API, so "
        "compare ratios rather than absolute times.",
        "",
        _md_table(list(paper.COLUMNS), [list(r) for r in paper.ROWS]),
        "",
        paper.OTHERS,
        "",
    ]
    return "\n".join(out)


# --- files ------------------------------------------------------------------------------------

# A results file is tables of a few hundred rows; a larger file is not one.
MAX_RESULTS_BYTES = 1 << 28


def load(path) -> dict:
    from burtorch.io.regular_file import read_regular

    # regular files only (a FIFO would block the read forever), of a bounded size, then UTF-8 JSON
    try:
        doc = json.loads(read_regular(path, MAX_RESULTS_BYTES).decode("utf-8"))
    except RecursionError:  # arrays nested past Python's recursion limit: no results file is
        raise ValueError(f"{path}: not a burtorch-bench results file (nested too deeply)") from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA or "runs" not in doc:
        raise ValueError(f"{path}: not a burtorch-bench results file (schema {SCHEMA})")
    annotate(doc["runs"])
    return doc


def _raw(doc: dict) -> dict:
    """The run as the suite recorded it: without the verdicts and summaries `annotate` adds."""
    return {**doc, "runs": [{k: v for k, v in r.items() if k not in ("summary", "agrees", "agreement")}
                            for r in doc["runs"]]}


def reduced(doc: dict) -> dict:
    """The run with each row's repetition times reduced to (min, median, max), what every table
    renders (the median of those three is the median of all), and the count they came from in
    `reps_timed`: the file a page is kept from, a fraction of the size of the full run."""
    runs = []
    for r in _raw(doc)["runs"]:
        if r.get("times"):
            r = {**r, "times": {ph: [min(t), statistics.median(t), max(t)] for ph, t in r["times"].items()},
                 "reps_timed": r.get("reps_timed") or {ph: len(t) for ph, t in r["times"].items()}}
        runs.append(r)
    return {**doc, "meta": {**doc["meta"], "times": "min, median, max of each row's repetitions"}, "runs": runs}


def dumps_runs(doc: dict) -> str:
    """JSON with one run to a line: compact, and a diff of two runs shows the rows that changed."""
    head = json.dumps({k: v for k, v in doc.items() if k != "runs"}, indent=1)
    runs = ",\n".join(json.dumps(r, separators=(",", ":")) for r in doc["runs"])
    return head[:-2] + ',\n "runs": [\n' + runs + "\n ]\n}\n"


def write_outputs(doc: dict, out_dir: Path, stem: str = "results") -> dict:
    """Writes JSON (raw runs), Markdown and PNG charts into ``out_dir``; returns their paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path = out_dir / f"{stem}.json"
    doc["meta"]["json_name"] = json_path.name
    write_text(json_path, json.dumps(_raw(doc), indent=1) + "\n")
    pngs = render_png(doc, out_dir)
    md_path = out_dir / f"{stem}.md"
    write_text(md_path, render_markdown(doc, pngs))
    return {"json": json_path, "markdown": md_path, "png": [out_dir / p for p in pngs.values()]}


def add_report_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--markdown", metavar="PAGE.md",
                    help="report: write the performance page here (how the numbers were produced, the machine, "
                         "every table)")
    ap.add_argument("--plots", action="store_true",
                    help="report: also write PNG charts next to the results JSON (pip install matplotlib)")
    ap.add_argument("--summary-json", metavar="OUT.json",
                    help="report: write the run with each row's times reduced to min, median and max (what the "
                         "tables render): the file a committed page is kept from")


def report(json_arg: str, markdown: str | None = None, plots: bool = False, summary_json: str | None = None) -> int:
    """`burtorch-bench report`: the terminal tables of a results JSON, and the files asked for."""
    doc = load(json_arg)
    sys.stdout.write(render_terminal(doc))
    if summary_json:
        write_text(summary_json, dumps_runs(reduced(doc)))
        print(f"wrote {summary_json}")
    if markdown:
        write_text(markdown, render_page(doc, json_arg, markdown))
        print(f"wrote {markdown}")
    if plots:
        pngs = render_png(doc, Path(json_arg).resolve().parent)
        print(f"wrote {len(pngs)} PNG chart(s) next to {json_arg}" if pngs else "no PNG: pip install matplotlib")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m burtorch_bench.report",
                                 description="Tables, charts and the performance page from a results JSON.")
    ap.add_argument("json", help="results JSON written by `burtorch-bench`")
    add_report_arguments(ap)
    args = ap.parse_args(argv)
    return report(args.json, args.markdown, args.plots, args.summary_json)


if __name__ == "__main__":
    sys.exit(main())
