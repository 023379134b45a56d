"""Run 310's probe: every replay launch's kernel (the Grams', the main kernel, the flush programs)
asks CUDA for a preferred shared-memory carveout of replay_fast.CARVE percent of the most a
multiprocessor has, set before each launch (CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT;
0, the default: no preference). The rest of the multiprocessor's unified memory is its L1.
Usage, from ../fast-flush-beside/ (sweep36.py's folder): python <this file> TOKENS BATCHES LAWS VARIANTS,
a variant '+CARVE=N' as any other replay_fast knob of sweep36.py."""
import ctypes, runpy, sys
from ssmdecode.ops.selective_state_update import launch as la
from ssmdecode.ops.selective_state_update import replay_fast as rf

rf.CARVE = 0
_run_chain = la.Launch._run_chain
cuda = ctypes.CDLL("libcuda.so.1")


def run_chain_carved(self):
    compiled = self.kernel.warmup(*self.args, grid=self.grid, **self.kwargs)
    compiled._init_handles()
    status = cuda.cuFuncSetAttribute(ctypes.c_void_p(compiled.function), 9, ctypes.c_int(rf.CARVE or -1))
    assert status == 0, status
    return _run_chain(self)


la.Launch._run_chain = run_chain_carved
sys.argv = ["sweep36.py"] + sys.argv[1:]
runpy.run_path("sweep36.py", run_name="__main__")
