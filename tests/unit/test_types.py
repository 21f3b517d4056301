"""pjrt_hub.abi.types: PJRT element types and numpy dtypes, both ways."""

from __future__ import annotations

import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

from pjrt_hub.abi import InvalidArgument
from pjrt_hub.abi.types import BufferType, from_numpy_dtype, to_numpy_dtype


@pytest.mark.parametrize("kind, dtype", [
    (BufferType.PRED, np.bool_), (BufferType.S8, np.int8), (BufferType.U64, np.uint64),
    (BufferType.F16, np.float16), (BufferType.F32, np.float32), (BufferType.C128, np.complex128),
    (BufferType.BF16, ml_dtypes.bfloat16), (BufferType.F8E4M3FN, ml_dtypes.float8_e4m3fn),
    (BufferType.S4, ml_dtypes.int4),
])
def test_each_type_maps_to_its_dtype_and_back(kind, dtype):
    assert to_numpy_dtype(kind) == np.dtype(dtype)
    assert from_numpy_dtype(dtype) is kind


def test_types_numpy_lacks_or_pjrt_lacks_are_invalid_arguments():
    with pytest.raises(InvalidArgument, match="TOKEN has no numpy dtype"):
        to_numpy_dtype(BufferType.TOKEN)
    with pytest.raises(InvalidArgument, match="unknown PJRT_Buffer_Type value 999"):
        to_numpy_dtype(999)
    with pytest.raises(InvalidArgument, match="numpy dtype <U3 has no PJRT element type"):
        from_numpy_dtype("U3")


def test_numpys_own_types_do_not_import_ml_dtypes():
    # Importing ml_dtypes costs a process most of a second: a pjrt-hub run of float32 data
    # should not pay it.
    script = ("import sys\nimport numpy as np\n"
              "from pjrt_hub.abi.types import BufferType, from_numpy_dtype, to_numpy_dtype\n"
              "assert to_numpy_dtype(BufferType.F32) == np.float32 and from_numpy_dtype(np.int8) is BufferType.S8\n"
              "assert 'ml_dtypes' not in sys.modules\n"
              "assert to_numpy_dtype(BufferType.BF16).name == 'bfloat16'\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
