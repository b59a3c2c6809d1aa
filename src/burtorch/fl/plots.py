"""Curves of federated runs: gradient norm and loss against rounds and against the bits each
client sent, several runs on one figure."""
from __future__ import annotations


def plot_runs(runs: list, path: str, title: str = "") -> None:
    """runs: [{"label": str, "records": [round records]}]; writes a 2 x 2 figure to ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(11, 8))
    for run in runs:
        rows = [r for r in run["records"] if "grad_norm" in r]
        rounds = [r["round"] for r in rows]
        bits = [r["bits_per_client"] for r in rows]
        for col, xs in enumerate((rounds, bits)):
            axes[0][col].semilogy(xs, [max(r["grad_norm"], 1e-300) for r in rows], label=run["label"])
            axes[1][col].plot(xs, [r["loss"] for r in rows], label=run["label"])
    for row, name in enumerate(("||grad f(x)||", "f(x)")):
        axes[row][0].set_ylabel(name)
        for col, xlabel in enumerate(("round", "bits sent per client")):
            axes[row][col].set_xlabel(xlabel)
            axes[row][col].grid(True, which="both", alpha=0.3)
        axes[row][1].set_xscale("log")  # bits span orders of magnitude between methods
    axes[0][0].legend()
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
