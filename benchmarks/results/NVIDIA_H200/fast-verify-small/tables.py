"""The markdown tables of sweep29's JSON: a table a T, a variant a row, a batch a column, us per
call. Usage: python tables.py sweep29_small_batch.json"""
import json
import sys

rows = json.load(open(sys.argv[1]))
for T in dict.fromkeys(r["tokens"] for r in rows):
    sub = [r for r in rows if r["tokens"] == T]
    batches = sorted({r["batch"] for r in sub})
    print(f"### T = {T}, steady cursors, us per call\n")
    print("| variant | " + " | ".join(f"bs {b}" for b in batches) + " |")
    print("|---|" + "---|" * len(batches))
    for v in dict.fromkeys(r["variant"] for r in sub):
        hit = {r["batch"]: r.get("us") for r in sub if r["variant"] == v}
        print(f"| {v} | " + " | ".join("-" if hit.get(b) is None else f"{hit[b]:.2f}" for b in batches) + " |")
    print()
