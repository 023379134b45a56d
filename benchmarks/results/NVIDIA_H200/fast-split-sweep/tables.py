"""The markdown tables of a fast-route sweep's JSON (rows of T, batch, variant, us and the
accuracy at bs 64 and 512): a table of us per call a T, a variant a row, a batch a column;
then the worst accuracy of each variant. Usage: python tables.py sweep.json"""
import json
import sys


def main(path: str) -> None:
    rows = [r for r in json.load(open(path)) if "us" in r]
    for T in sorted({r["T"] for r in rows}, key=lambda t: [1, 2, 4, 8].index(t) if t in (1, 2, 4, 8) else t):
        sub = [r for r in rows if r["T"] == T]
        batches = sorted({r["batch"] for r in sub})
        variants = list(dict.fromkeys(r["variant"] for r in sub))
        print(f"### T = {T}, us per call\n")
        print("| variant | " + " | ".join(f"bs {b}" for b in batches) + " |")
        print("|---|" + "---|" * len(batches))
        for v in variants:
            cells = []
            for b in batches:
                hit = [r["us"] for r in sub if r["variant"] == v and r["batch"] == b]
                cells.append(f"{hit[0]:.2f}" if hit else "-")
            print(f"| {v} | " + " | ".join(cells) + " |")
        print()
    acc = [r for r in rows if r.get("floored") is not None]
    if acc:
        print("### Accuracy (bs 64 and 512, worst over them)\n")
        print("| T | variant | out max, floored | out mean / bf16's mean | state max rel |")
        print("|---|---|---|---|---|")
        for key in dict.fromkeys((r["T"], r["variant"]) for r in acc):
            sel = [r for r in acc if (r["T"], r["variant"]) == key]
            fl = max(r["floored"] for r in sel)
            ratio = max(r["out_mean"] / r["bf16_mean"] for r in sel)
            st = [r["state_rel"] for r in sel if r.get("state_rel") is not None]
            print(f"| {key[0]} | {key[1]} | {fl:.3f} | {ratio:.3f} | {max(st):.1e} |" if st else
                  f"| {key[0]} | {key[1]} | {fl:.3f} | {ratio:.3f} | - |")


if __name__ == "__main__":
    main(sys.argv[1])
