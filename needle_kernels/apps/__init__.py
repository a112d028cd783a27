"""Reference applications: the solutions of the homework, used by lectures and tests.

``simple_ml`` (hw0 in numpy, hw4 training loops), ``mlp_resnet`` (hw2) and
``models`` (hw4: ResNet9, LanguageModel) and ``gan`` (generator, discriminator,
the alternating training step). Submodules load on first use.
"""
import importlib

__all__ = ["simple_ml", "mlp_resnet", "models", "gan"]


def __getattr__(name):
    if name in __all__:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
