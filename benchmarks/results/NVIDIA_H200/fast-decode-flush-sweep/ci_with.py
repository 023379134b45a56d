"""Run benchmarks/compile_info.py with replay.fast_launch taken from a scratch module:
python .scratch/ci_with.py MODULE.py [NAME=VALUE ...] -- compile_info args"""
import os, sys, runpy, importlib.util
os.environ.pop("TRITON_INTERPRET", None)
i = sys.argv.index("--")
mod_path, sets, rest = sys.argv[1], sys.argv[2:i], sys.argv[i + 1:]
import ssmdecode.ops.selective_state_update.replay as rp
if mod_path != "none":
    spec = importlib.util.spec_from_file_location("scratch_rf", mod_path)
    m = importlib.util.module_from_spec(spec); sys.modules["scratch_rf"] = m; spec.loader.exec_module(m)
    rp.fast_launch = m.fast_launch
    for s in sets:
        k, v = s.split("="); setattr(m, k, int(v))
sys.argv = ["benchmarks/compile_info.py"] + rest
runpy.run_path("benchmarks/compile_info.py", run_name="__main__")
