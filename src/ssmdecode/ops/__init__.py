"""Triton kernels, one op per module: kernel, launcher, public function."""
