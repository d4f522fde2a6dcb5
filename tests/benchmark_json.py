"""What the benchmarks' tests share: the flags of a tiny run and the reading of a benchmark's JSON."""

import json

# A one-block model, one repeat, a short minimum time and a small matmul for the peak.
TINY = ["--num_layers=1", "--repeats=1", "--min_seconds=0.01", "--matmul_size=64"]


def read_json(path):
    """A benchmark's JSON (`--out`)."""
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def table_rows(data, index=0):
    """The rows of the JSON's `index`-th table."""
    return data["tables"][index]["rows"]
