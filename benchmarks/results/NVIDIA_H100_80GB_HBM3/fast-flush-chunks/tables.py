"""Markdown tables of sweep34's JSON: a table a (file, cursor law, T), a variant a row (a variant
timed twice in one process gets "(2)"), a batch a column (us per call), then each variant's
worst accuracy where it was measured.
Usage: python tables.py FILE..."""
import json
import sys

for path in sys.argv[1:]:
    rows = [r for r in json.load(open(path)) if "us" in r]
    print(f"### {path}\n")
    for law, tokens in dict.fromkeys((r["law"], r["tokens"]) for r in rows):
        sel = [r for r in rows if r["law"] == law and r["tokens"] == tokens]
        batches = sorted({r["batch"] for r in sel})
        us, seen, variants = {}, {}, []
        for r in sel:
            k = (r["variant"], r["batch"])
            seen[k] = seen.get(k, 0) + 1
            name = r["variant"] if seen[k] == 1 else f"{r['variant']} ({seen[k]})"
            us[name, r["batch"]] = r["us"]
            r["name"] = name
            if name not in variants:
                variants.append(name)
        print(f"T = {tokens}, {law} cursors, us per call\n")
        print("| variant | " + " | ".join(f"bs {b}" for b in batches) + " |")
        print("|---" * (len(batches) + 1) + "|")
        for v in variants:
            print(f"| {v} | " + " | ".join(f"{us[v, b]:.2f}" if (v, b) in us else "-" for b in batches) + " |")
        acc = [r for r in sel if r.get("floored") is not None]
        if acc:
            print("\nAccuracy (worst over the batches measured, 128 and below): out in units of "
                  "numerics.out_resolution (bar <= 1), flushed states' max error over max |state| (bar 1e-5)\n")
            print("| variant | out max, floored | state max rel |\n|---|---|---|")
            for v in variants:
                a = [r for r in acc if r["name"] == v]
                if a:
                    rel = [r["state_rel"] for r in a if r.get("state_rel") is not None]
                    rel = f"{max(rel):.1e}" if rel else "- (nothing flushed)"
                    print(f"| {v} | {max(r['floored'] for r in a):.3f} | {rel} |")
        print()
