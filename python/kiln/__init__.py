"""kiln: PyTorch front end of the kiln inference compiler.

    import kiln
    engine = kiln.convert_method_to_engine(model, "forward", inputs=[kiln.Input(
        min_shape=(1, 784), opt_shape=(8, 784), max_shape=(64, 784))])
    trt_like = kiln.EngineModule(engine)      # a torch.nn.Module running the engine
    y = trt_like(torch.randn(8, 784))
    kiln.save(trt_like, "mlp.kiln")           # runnable with `kiln run mlp.kiln --random-inputs`

A ctypes binding of libkiln (include/kiln.h): no compiled extension. libkiln is found
through $KILN_LIBRARY, next to this package, or under the install prefix (see
kiln._lib). PyTorch Lightning support is in kiln.lightning.
"""

from ._compat import MIN_TORCH
from ._convert import EngineBytes, UnsupportedOperatorError, convert_method_to_engine
from ._export import Input
from ._lib import KilnError, LibraryNotFoundError, Status, library_path
from ._module import EngineModule, compile, load, save

__version__ = "0.1.0"

__all__ = [
    "Input", "EngineModule", "EngineBytes", "KilnError", "UnsupportedOperatorError",
    "LibraryNotFoundError", "Status", "convert_method_to_engine", "compile", "save", "load",
    "library_path", "library_version", "MIN_TORCH",
]


def library_version():
    """Version string of the loaded libkiln ("0.1.0")."""
    from ._lib import lib

    return lib().kiln_version_string().decode()
