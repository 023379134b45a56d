"""e2e --replay at bs 64 with PROGRAMS_TAKE = argv[1], then every compiled replay_fast kernel's registers and spills."""
import sys
from ssmdecode.ops.selective_state_update import replay_fast as rf
rf.PROGRAMS_TAKE = int(sys.argv[1])
from ssmdecode.cli import main
main(['e2e', '--preset', 'nemotron3-super', '--tp', '8', '--replay', '--config', 'table', '--batch', '64', '--out', sys.argv[2]])
for name in ('_selective_state_replay_fast_kernel', '_gram_kernel'):
    fn = getattr(rf, name, None)
    while fn is not None and not hasattr(fn, 'device_caches'):
        fn = getattr(fn, 'fn', None)
    if fn is None:
        continue
    for dev, caches in fn.device_caches.items():
        for key, ck in caches[0].items():
            ck._init_handles()
            k = str(key)
            i = k.find('ROLE')
            print(name, 'regs', ck.n_regs, 'spills', ck.n_spills, 'warps', ck.metadata.num_warps, 'cubin', len(ck.asm['cubin']), k[i:i+60] if i >= 0 else '')
