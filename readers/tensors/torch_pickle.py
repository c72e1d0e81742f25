"""Torch-specific pickle handlers: storages, tensors and the default allowlists.

``TORCH_ALLOW`` covers what ``torch.save`` writes for state dicts, optimizer
states and trainer side files (checked against files written by torch
2.13.0); ``DCP_ALLOW`` covers ``torch.distributed.checkpoint`` ``.metadata``.
Everything here is pure: no handler imports or calls into torch or numpy
beyond decoding a numeric scalar from bytes.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import PurePosixPath, PureWindowsPath
from typing import Any

import numpy as np

from . import dtypes
from .errors import PickleError
from .pickle_walk import GlobalRef, Handler, PickledOrderedDict, PlainObject, plain, value_only


@dataclass(frozen=True)
class StorageRef:
    """A storage named by a persistent id ``('storage', type, key, location, numel)``."""

    key: str
    dtype: str
    location: str
    numel: int

    @property
    def nbytes(self) -> int:
        """Declared byte size of the storage."""
        return dtypes.nbytes(self.dtype, self.numel)


@dataclass(frozen=True)
class TensorRef:
    """A tensor as a view (shape, stride, offset in elements) of a storage."""

    storage_key: str
    dtype: str
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    storage_offset: int
    requires_grad: bool
    storage_nbytes: int = 0
    location: str = "cpu"
    is_parameter: bool = False

    @property
    def numel(self) -> int:
        """Number of elements."""
        count = 1
        for dim in self.shape:
            count *= dim
        return count

    @property
    def is_contiguous(self) -> bool:
        """True if the elements are laid out densely in C order."""
        expected = 1
        for dim, step in zip(reversed(self.shape), reversed(self.stride)):
            if dim != 1 and step != expected:
                return False
            expected *= dim
        return True

    def extent(self) -> tuple[int, int]:
        """Byte range [start, end) of the storage this tensor touches."""
        size = dtypes.itemsize(self.dtype)
        if self.numel == 0:
            return self.storage_offset * size, self.storage_offset * size
        last = self.storage_offset + sum((d - 1) * s for d, s in zip(self.shape, self.stride))
        return self.storage_offset * size, (last + 1) * size


def _int(value: Any, what: str, minimum: int = 0) -> int:
    """Return ``value`` if it is a plain int ≥ ``minimum``, else raise."""
    if type(value) is not int or value < minimum:
        raise PickleError("BadTensor", f"{what} must be an int >= {minimum}, got {value!r}")
    return value


def _ints(value: Any, what: str) -> tuple[int, ...]:
    """Return ``value`` as a tuple of non-negative ints."""
    if not isinstance(value, (tuple, list)):
        raise PickleError("BadTensor", f"{what} must be a tuple, got {type(value).__name__}")
    return tuple(_int(v, what) for v in value)


def _dtype_of(ref: Any) -> str:
    """Dtype name of a storage-type or dtype global."""
    name = ref.name if isinstance(ref, GlobalRef) else None
    found = dtypes.torch_global_dtype(name) if name else None
    if name == "torch.storage.UntypedStorage":
        return "U8"
    if found is None:
        raise PickleError("BadTensor", f"not a torch dtype or storage type: {ref!r}")
    return found


def torch_persistent_load(pid: Any) -> StorageRef:
    """``persistent_load`` for zip-format torch files."""
    if type(pid) is not tuple or len(pid) != 5 or pid[0] not in ("storage", b"storage"):
        raise PickleError("BadPersistentId", f"unsupported persistent id {pid!r:.80}")
    _, storage_type, key, location, numel = pid
    if not isinstance(key, str) or not isinstance(location, str):
        raise PickleError("BadPersistentId", "storage key and location must be strings")
    return StorageRef(key, _dtype_of(storage_type), location, _int(numel, "numel"))


def _tensor(storage: Any, offset: Any, size: Any, stride: Any, grad: Any, dtype: str | None) -> TensorRef:
    """Validate rebuild arguments and build a :class:`TensorRef`."""
    if not isinstance(storage, StorageRef):
        raise PickleError("BadTensor", f"tensor storage is {type(storage).__name__}")
    shape, strides = _ints(size, "size"), _ints(stride, "stride")
    if len(shape) != len(strides):
        raise PickleError("BadTensor", "size and stride differ in length")
    if type(grad) is not bool:
        raise PickleError("BadTensor", "requires_grad must be a bool")
    return TensorRef(storage.key, dtype or storage.dtype, shape, strides,
                     _int(offset, "storage_offset"), grad, storage.nbytes, storage.location)


def _rebuild_tensor(name: str, args: tuple[Any, ...]) -> TensorRef:
    """``_rebuild_tensor(storage, offset, size, stride)``."""
    return _tensor(args[0], args[1], args[2], args[3], False, None)


def _rebuild_tensor_v2(name: str, args: tuple[Any, ...]) -> TensorRef:
    """``_rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks[, metadata])``."""
    if len(args) not in (6, 7):
        raise PickleError("BadTensor", f"{name} takes 6 or 7 args")
    return _tensor(args[0], args[1], args[2], args[3], args[4], None)


def _rebuild_tensor_v3(name: str, args: tuple[Any, ...]) -> TensorRef:
    """``_rebuild_tensor_v3(storage, offset, size, stride, requires_grad, hooks, dtype[, metadata])``."""
    if len(args) not in (7, 8):
        raise PickleError("BadTensor", f"{name} takes 7 or 8 args")
    return _tensor(args[0], args[1], args[2], args[3], args[4], _dtype_of(args[6]))


def _rebuild_parameter(name: str, args: tuple[Any, ...]) -> TensorRef:
    """``_rebuild_parameter(data, requires_grad, hooks[, state])``."""
    if len(args) not in (3, 4) or not isinstance(args[0], TensorRef) or type(args[1]) is not bool:
        raise PickleError("BadTensor", f"bad arguments to {name}")
    return replace(args[0], requires_grad=args[1], is_parameter=True)


def _parameter_new(name: str, args: tuple[Any, ...]) -> TensorRef:
    """``torch.nn.Parameter(data, requires_grad=True)`` via NEWOBJ."""
    grad = args[1] if len(args) > 1 else True
    return _rebuild_parameter(name, (args[0] if args else None, grad, None))


def _rebuild_from_type_v2(name: str, args: tuple[Any, ...]) -> Any:
    """``_rebuild_from_type_v2(func, new_type, args, state)``: rebuild via ``func``."""
    if len(args) != 4 or not isinstance(args[0], GlobalRef) or type(args[2]) is not tuple:
        raise PickleError("BadTensor", f"bad arguments to {name}")
    result = args[0].handler(args[0].name, args[2])
    if isinstance(result, TensorRef) and isinstance(args[1], GlobalRef) \
            and args[1].name == "torch.nn.parameter.Parameter":
        result = replace(result, is_parameter=True)
    return result


def _ordered_dict(name: str, args: tuple[Any, ...]) -> PickledOrderedDict:
    """``OrderedDict()`` or ``OrderedDict([(k, v), ...])``."""
    result = PickledOrderedDict()
    if args:
        for key, value in args[0]:
            result[key] = value
    return result


def _counter(name: str, args: tuple[Any, ...]) -> Counter[Any]:
    """``Counter(dict)``."""
    if args and not isinstance(args[0], dict):
        raise PickleError("BadCall", "Counter expects a dict")
    return Counter(args[0] if args else {})


def _size(name: str, args: tuple[Any, ...]) -> tuple[int, ...]:
    """``torch.Size((d0, d1, ...))`` → tuple of ints."""
    return _ints(args[0] if args else (), "torch.Size")


def _device(name: str, args: tuple[Any, ...]) -> str:
    """``torch.device('cuda', 0)`` → ``'cuda:0'``."""
    if not args or not all(isinstance(a, (str, int)) for a in args):
        raise PickleError("BadCall", "bad torch.device args")
    return ":".join(str(a) for a in args)


def _codecs_encode(name: str, args: tuple[Any, ...]) -> bytes:
    """``_codecs.encode(text, 'latin1')``: how protocol 2 stores bytes."""
    if len(args) != 2 or not isinstance(args[0], str) or args[1] not in ("latin1", "latin-1"):
        raise PickleError("BadCall", "only _codecs.encode(str, 'latin1') is supported")
    return args[0].encode("latin-1")


def _bytes_like(name: str, args: tuple[Any, ...]) -> bytes | bytearray:
    """``bytes()`` / ``bytearray(b)`` / ``bytearray(str, 'latin-1')``."""
    data = b""
    if args and isinstance(args[0], (bytes, bytearray)):
        data = bytes(args[0])
    elif args:
        data = _codecs_encode(name, args)
    return bytearray(data) if name.endswith("bytearray") else data


def _set(name: str, args: tuple[Any, ...]) -> set[Any] | frozenset[Any]:
    """``set([...])`` / ``frozenset([...])``."""
    items = args[0] if args else []
    if not isinstance(items, (list, tuple, set, frozenset)):
        raise PickleError("BadCall", f"{name} expects a list")
    return frozenset(items) if name.endswith("frozenset") else set(items)


def _complex(name: str, args: tuple[Any, ...]) -> complex:
    """``complex(real, imag)``."""
    if not 1 <= len(args) <= 2 or not all(type(a) in (int, float) for a in args):
        raise PickleError("BadCall", "complex expects numbers")
    return complex(*args)


_NUMPY_SCALAR = re.compile(r"[iu][1248]|f[248]|c8|c16|b1|\?")


def _numpy_scalar(name: str, args: tuple[Any, ...]) -> Any:
    """``numpy...multiarray.scalar(dtype, bytes)`` → Python number for numeric dtypes."""
    if len(args) == 2 and isinstance(args[0], PlainObject) and isinstance(args[1], bytes):
        spec = args[0].get("args") or ("",)
        state = args[0].get("state")
        order = state[1] if isinstance(state, tuple) and len(state) > 1 else "|"
        if isinstance(spec[0], str) and _NUMPY_SCALAR.fullmatch(spec[0]) \
                and order in ("<", ">", "|", "="):
            kind = np.dtype((order if order in "<>" else "") + spec[0])
            if kind.kind in "biufc" and kind.itemsize == len(args[1]):
                return np.frombuffer(args[1], dtype=kind)[0].item()
    return plain(name, args)


def _reconstructor(name: str, args: tuple[Any, ...]) -> Any:
    """``copyreg._reconstructor(cls, object, None)``: protocol 0/1 instances."""
    if len(args) != 3 or not isinstance(args[0], GlobalRef) or args[2] is not None \
            or not isinstance(args[1], GlobalRef) or args[1].name != "builtins.object":
        raise PickleError("BadCall", "only _reconstructor(cls, object, None) is supported")
    return args[0].handler(args[0].name, ())


def _path(name: str, args: tuple[Any, ...]) -> str:
    """``pathlib.PosixPath('/', 'a')`` → ``'/a'`` (pure string joining)."""
    if not all(isinstance(a, str) for a in args):
        raise PickleError("BadCall", "path parts must be strings")
    cls = PureWindowsPath if "Windows" in name else PurePosixPath
    return str(cls(*args))


_TENSOR_PLAIN = [
    "_rebuild_qtensor", "_rebuild_sparse_tensor", "_rebuild_meta_tensor_no_storage",
    "_rebuild_nested_tensor", "_rebuild_wrapper_subclass",
    "_rebuild_device_tensor_from_numpy", "_rebuild_device_tensor_from_cpu_tensor",
]


def _torch_value_globals() -> dict[str, Handler]:
    """Storage classes, dtypes, layouts and memory formats: values, not calls."""
    names = [f"torch.{c}" for c in dtypes.TORCH_STORAGE_DTYPES]
    names += [f"torch.cuda.{c}" for c in dtypes.TORCH_STORAGE_DTYPES]
    names += [f"torch.{d}" for d in dtypes.TORCH_DTYPES]
    names += ["torch.Tensor", "torch.storage.UntypedStorage", "torch.storage.TypedStorage",
              "torch.strided", "torch.sparse_coo", "torch.contiguous_format",
              "torch.channels_last", "torch.preserve_format", "torch.per_tensor_affine",
              "torch.per_channel_affine", "torch.per_tensor_symmetric",
              "torch.per_channel_symmetric", "torch.per_channel_affine_float_qparams"]
    return {n: value_only for n in names}


def _base_allow() -> dict[str, Handler]:
    """Globals both allowlists share."""
    allow = _torch_value_globals()
    allow.update({
        "collections.OrderedDict": _ordered_dict, "collections.Counter": _counter,
        "torch.Size": _size, "torch.device": _device,
        "torch.serialization._get_layout": lambda n, a: a[0] if a else None,
        "_codecs.encode": _codecs_encode, "builtins.bytes": _bytes_like,
        "builtins.bytearray": _bytes_like, "builtins.set": _set,
        "builtins.frozenset": _set, "builtins.complex": _complex,
        "pathlib.PosixPath": _path, "pathlib.PurePosixPath": _path,
        "pathlib.WindowsPath": _path, "pathlib.PureWindowsPath": _path,
        "copyreg._reconstructor": _reconstructor, "builtins.object": value_only,
    })
    return allow


def _torch_allow() -> dict[str, Handler]:
    """Build :data:`TORCH_ALLOW`."""
    allow = _base_allow()
    allow.update({
        "torch._utils._rebuild_tensor": _rebuild_tensor,
        "torch._utils._rebuild_tensor_v2": _rebuild_tensor_v2,
        "torch._utils._rebuild_tensor_v3": _rebuild_tensor_v3,
        "torch._utils._rebuild_parameter": _rebuild_parameter,
        "torch._utils._rebuild_parameter_with_state": _rebuild_parameter,
        "torch._tensor._rebuild_from_type_v2": _rebuild_from_type_v2,
        "torch.nn.parameter.Parameter": _parameter_new,
    })
    allow.update({f"torch._utils.{n}": plain for n in _TENSOR_PLAIN})
    for module in ("numpy.core.multiarray", "numpy._core.multiarray"):
        allow[f"{module}.scalar"] = _numpy_scalar
        allow[f"{module}._reconstruct"] = plain
    allow.update({n: plain for n in (
        "numpy.dtype", "numpy.ndarray", "argparse.Namespace",
        "transformers.training_args.TrainingArguments",
        "transformers.training_args_seq2seq.Seq2SeqTrainingArguments",
        "transformers.trainer_utils.IntervalStrategy",
        "transformers.trainer_utils.SaveStrategy",
        "transformers.trainer_utils.HubStrategy",
        "transformers.trainer_utils.SchedulerType",
        "transformers.training_args.OptimizerNames",
        "transformers.debug_utils.DebugOption",
        "transformers.trainer_pt_utils.AcceleratorConfig",
        "accelerate.utils.dataclasses.DistributedType",
        "accelerate.state.PartialState",
    )})
    return allow


def _dcp_allow() -> dict[str, Handler]:
    """Build :data:`DCP_ALLOW`."""
    allow = _base_allow()
    module = "torch.distributed.checkpoint.metadata"
    for cls in ("Metadata", "TensorStorageMetadata", "BytesStorageMetadata",
                "ChunkStorageMetadata", "TensorProperties", "MetadataIndex",
                "StorageMeta", "_MEM_FORMAT_ENCODING"):
        allow[f"{module}.{cls}"] = plain
    allow["torch.distributed.checkpoint.filesystem._StorageInfo"] = plain
    return allow


TORCH_ALLOW: Mapping[str, Handler] = _torch_allow()
DCP_ALLOW: Mapping[str, Handler] = _dcp_allow()


def iter_tensors(obj: Any, prefix: str = "") -> Iterator[tuple[str, TensorRef]]:
    """Yield (dotted path, TensorRef) for every tensor inside ``obj``, depth first.

    Dict keys and list indexes form the path (``state.0.exp_avg``); containers
    reached twice (shared or cyclic) are visited once.
    """
    seen: set[int] = set()
    stack: list[tuple[str, Any]] = [(prefix, obj)]
    while stack:
        path, node = stack.pop()
        if isinstance(node, TensorRef):
            yield path, node
            continue
        if isinstance(node, (dict, list, tuple)):
            if id(node) in seen:
                continue
            seen.add(id(node))
            items = node.items() if isinstance(node, dict) else enumerate(node)
            children = [(f"{path}.{k}" if path else str(k), v) for k, v in items]
            stack.extend(reversed(children))
