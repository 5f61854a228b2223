"""The code interpreter: a stateful Python session in the sandbox, as in a notebook.

``Lease.run_code`` and ``Lease.code_context`` hand over to ``CodeContext``
(``_context``): a kernel of this package (``_kernel`` and ``_kernel_display``, sent
to the sandbox and run by its ``python3``) kept running as a background process,
one input request per cell, its framed answers (``_frames``) read from the
process's output stream; ``Execution`` and ``Result`` (``_results``) are what a
cell gives back; ``_magics`` is the ``%%createos`` magic of IPython (the root
package hands it ``Lease`` and ``lease``, which live above this layer).
"""

from ._context import CodeContext, OnCodeOutput
from ._results import CodeFailed, Execution, ExecutionError, Result

__all__ = [
    "CodeContext",
    "CodeFailed",
    "Execution",
    "ExecutionError",
    "OnCodeOutput",
    "Result",
]
