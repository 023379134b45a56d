"""Measurement pieces shared by the tools: the cold-L2 CUDA-graph timer, the same-bytes
ceiling, model-like inputs and model shape presets. ../shared/MEASURING.md is the method."""
