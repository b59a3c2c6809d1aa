"""The paper's own figures, shown beside ours for context.

These are quoted, not measured here; the report labels them as the paper's and never mixes them
into our tables or ratios.
"""

SOURCE = ("Burlachenko & Richtarik (2025), BurTorch, its benchmark tables (AMD EPYC, AVX2, "
          "one core pinned; medians of 3-9 runs)")

COLUMNS = ("workload", "BurTorch C++ (authors')", "PyTorch eager", "micrograd")

ROWS = (
    ("W1, 100K iterations", "0.0103 s (best variant; 0.042 s plain backward)", "32.3 s", "4.79 s"),
    ("W2, 20K iterations", "0.026 s", "13.9 s", "3.27 s"),
    ("W3, 5,000 saves / loads", "0.087 s / 0.059 s", "torch.save 6.4 s", ""),
    ("W4 e=4, b=1 / b=64, ms per step", "0.068 / 1.55", "3.25 / 17.8", ""),
    ("W4 e=64", "0.614 / 27.1", "3.71 / 30.0", ""),
    ("W4 e=1024", "15.0 / 606", "11.7 / 220", ""),
    ("W5 b=1 / b=8 / b=64, ms per step", "1.84 / 13.5 / 105", "33.1 / 37.2 / 53.1", ""),
    ("peak RSS, W5", "18.8 MB", "~330 MB", ""),
    ("init, process start to one W5 step done", "0.021 s", "~5 s", ""),
)

OTHERS = "JAX jit: W1 35.6 s, W2 8.8 s; autograd: W1 89 s; MLX-cpu: W1 7.7-36 s."
