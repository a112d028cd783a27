"""Initialization: constants, random tensors and weight initializers."""
from .init_basic import *
from .init_initializers import *
