"""The markdown tables of a decode-step (T = 1) probe's JSON (rows of law, batch, variant, rep,
us and the accuracy at bs 64 and 512): a table a cursor law, a variant a row, a batch a column,
each cell the first repeat's us per call (the second's in parentheses where there is one); then
the accuracy of each variant. Usage: python tables.py sweep.json [...]"""
import json
import sys


def main(paths: list[str]) -> None:
    rows = [r for p in paths for r in json.load(open(p)) if "us" in r]
    for law in dict.fromkeys(r["law"] for r in rows):
        sub = [r for r in rows if r["law"] == law]
        batches = sorted({r["batch"] for r in sub})
        variants = list(dict.fromkeys(r["variant"] for r in sub))
        print(f"### {law} cursors, us per call\n")
        print("| variant | " + " | ".join(f"bs {b}" for b in batches) + " |")
        print("|---|" + "---|" * len(batches))
        for v in variants:
            cells = []
            for b in batches:
                hit = {r["rep"]: r["us"] for r in sub if r["variant"] == v and r["batch"] == b}
                cell = f"{hit[0]:.2f}" if 0 in hit else "-"
                cells.append(cell + (f" ({hit[1]:.2f})" if 1 in hit else ""))
            print(f"| {v} | " + " | ".join(cells) + " |")
        print()
        acc = [r for r in sub if r.get("floored") is not None]
        if acc:
            print(f"{law} cursors, accuracy at bs 64 and 512 (worst): out in units of numerics.out_resolution "
                  "(bar <= 1), flushed states' max error over max |state| (bar 1e-5)\n")
            print("| variant | out max, floored | state max rel |")
            print("|---|---|---|")
            for v in dict.fromkeys(r["variant"] for r in acc):
                sel = [r for r in acc if r["variant"] == v]
                st = [r["state_rel"] for r in sel if r.get("state_rel") is not None]
                print(f"| {v} | {max(r['floored'] for r in sel):.3f} | " + (f"{max(st):.1e} |" if st else "- |"))
            print()


if __name__ == "__main__":
    main(sys.argv[1:])
