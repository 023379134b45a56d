"""The share of requests that flush a step under the tune's law (bench.spec: accepted counts
uniform in 1..T, the cursors advancing), at windows 8 and 16: bench.spec.flush_fraction over 64
steps, bs 512, 4 sets, seed 0, under Triton's interpreter (no GPU needed).
Usage: TRITON_INTERPRET=1 PYTHONPATH=src python flush_law.py"""
import torch

from ssmdecode.bench.spec import flush_fraction, make_spec_inputs
from ssmdecode.shapes import Shape

shape = Shape(1, 4, 8, 1, torch.float32, torch.bfloat16)  # the cursors do not depend on the shape
print("| T | window 8 | window 16 |\n|---|---|---|")
for tokens in (1, 3, 4, 8):
    shares = [
        flush_fraction(make_spec_inputs(shape, 512, tokens, "replay", torch.device("cpu"), 0, rotation=4, window=w))
        for w in (8, 16)
    ]
    print(f"| {tokens} | " + " | ".join(f"{s:.3f}" for s in shares) + " |")
