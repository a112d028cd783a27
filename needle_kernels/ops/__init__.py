"""Every op of needle_kernels: a class with compute/gradient and a lowercase function."""
from .ops_tuple import *
from .ops_mathematic import *
from .ops_logarithmic import *
from .ops_conv import *
from .ops_pooling import *
from .ops_softplus import *
from .ops_norm import *
from .ops_conv_bn import *
from .ops_lstm import *
from .ops_embedding import *
