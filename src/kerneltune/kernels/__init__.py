"""The kernel library "kerneltune_cpu": pythran kernels compiled per ISA variant."""
