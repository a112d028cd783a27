"""Neural network modules."""
from .nn_basic import *
from .nn_conv import *
from .nn_sequence import *
from .nn_transformer import *
from .nn_checkpoint import *
from .nn_gan import *
