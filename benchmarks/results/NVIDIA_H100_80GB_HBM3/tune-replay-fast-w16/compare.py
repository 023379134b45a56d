"""The fast route with run 237's table against without it (replay_fast_config) in run 238, with
flashinfer's best algorithm of each run beside: a markdown table a T, us per call.
Usage: python compare.py TABLE_DIR NONE_DIR"""
import json
import sys


def rows(path):
    return [r for r in json.load(open(f"{path}/bench-replay.json"))["rows"] if r.get("us") is not None]


table, none = rows(sys.argv[1]), rows(sys.argv[2])
for tokens in sorted({r["tokens"] for r in table}):
    batches = sorted({r["batch"] for r in table if r["tokens"] == tokens})

    def us(rs, route, b):
        got = [r["us"] for r in rs if r["tokens"] == tokens and r["batch"] == b and r["route"].startswith(route)]
        return min(got) if got else None

    print(f"T = {tokens}, steady, window 16, us per call\n")
    print("| | " + " | ".join(f"bs {b}" for b in batches) + " |")
    print("|---" * (len(batches) + 1) + "|")
    for name, rs, route in (("with run 237's table", table, "ssmdecode replay fast"),
                            ("replay_fast_config (no table)", none, "ssmdecode replay fast"),
                            ("flashinfer's best, first run", table, "flashinfer"),
                            ("flashinfer's best, second run", none, "flashinfer")):
        cells = [us(rs, route, b) for b in batches]
        print(f"| {name} | " + " | ".join("-" if c is None else f"{c:.2f}" for c in cells) + " |")
    ratio = [us(none, "ssmdecode replay fast", b) / us(table, "ssmdecode replay fast", b) for b in batches]
    print("| no table / table | " + " | ".join(f"{x:.3f}" for x in ratio) + " |\n")
