"""Kernels generated from element-wise programs: their meaning in numpy, C for the CPU, CUDA C for a GPU."""
from .program import program_numpy, validate_program
from .c_source import c_source
from .cuda_source import cuda_source
