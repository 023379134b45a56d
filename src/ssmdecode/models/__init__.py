"""Small models built from ssmdecode's kernels, for end-to-end measurement and checks
(`ssmdecode e2e`): mamba2.py holds a Mamba2 decode layer stack and a random-weight LM;
mamba2_spec.py the same stack's verify step of speculative decoding (buffer, vLLM dst and
replay ways) with its accept step, for `ssmdecode e2e --spec`."""
