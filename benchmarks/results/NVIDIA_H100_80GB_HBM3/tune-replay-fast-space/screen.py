"""screen.md: each candidate's screen and the leaders' re-timed medians from run 242's tune.json.
Usage: python screen.py > screen.md"""
import json

print("Each candidate's screen (one timing a bucket, us per call) and the leaders' re-timed medians, from the two runs' tune.json.\n")
for f in ("tune-t4-run242/tune.json", "tune-t1-run242/tune.json"):
    d = json.load(open(f))
    for key, rs in d["keys"].items():
        for r in rs:
            print(f"### {key}, bs {r['batch']} (`{f}`)\n")
            print("| config | screen us | re-timed us |\n|---|---|---|")
            for k, v in sorted(r["screen_us"].items(), key=lambda kv: kv[1]):
                lead = r["leaders"].get(k, {}).get("us")
                print(f"| {k} | {v:.2f} | " + ("-" if lead is None else f"{lead:.2f}") + " |")
            print(f"\nChoice: {r['choice_label']} ({r['reason']})\n")
