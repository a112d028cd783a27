"""Neural network modules."""
from .nn_basic import *
from .nn_conv import *

# The sequence and transformer modules are optional: while one of them does not
# exist the core modules above must still import. Any other error is raised.
try:
    from .nn_sequence import *
except ModuleNotFoundError as _error:
    if _error.name != __name__ + ".nn_sequence":
        raise
try:
    from .nn_transformer import *
except ModuleNotFoundError as _error:
    if _error.name != __name__ + ".nn_transformer":
        raise
