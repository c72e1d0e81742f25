"""Exception classes raised by ``lastgood.readers.tensors``.

Every error carries a short machine-readable ``code`` (a stable identifier a
reader can switch on) and a human ``message``.  Callers that parse untrusted
checkpoint bytes may rely on the rule that only :class:`TensorsError`
subclasses escape the public functions of this package.
"""

from __future__ import annotations


class TensorsError(Exception):
    """Base class of every error this package raises on bad input."""

    default_code = "TensorsError"

    def __init__(self, code: str | None = None, message: str = "") -> None:
        self.code = code or self.default_code
        self.message = message or self.code
        super().__init__(f"{self.code}: {self.message}")


class DtypeError(TensorsError):
    """An unknown dtype name, or a dtype whose values cannot be decoded."""

    default_code = "UnknownDtype"


class SafetensorsError(TensorsError):
    """A safetensors header failed validation.

    ``code`` is the name of the variant the reference Rust implementation
    (``safetensors::tensor::SafeTensorError``) would report, e.g.
    ``HeaderTooSmall`` or ``MetadataIncompleteBuffer``; index-file problems
    use codes starting with ``Index``.
    """

    default_code = "InvalidHeaderDeserialization"


class PickleError(TensorsError):
    """A pickle stream is malformed or uses a construct the walker refuses."""

    default_code = "BadPickle"


class UnsafeGlobal(PickleError):
    """The pickle names a global that is not in the allowlist.

    Raised before any opcode of the stream is simulated, so nothing that
    depends on the forbidden global can have happened.  ``name`` is the dotted
    ``module.qualname`` the pickle asked for (e.g. ``os.system``).
    """

    default_code = "UnsafeGlobal"

    def __init__(self, name: str, message: str = "") -> None:
        self.name = name
        detail = f" ({message})" if message else ""
        super().__init__("UnsafeGlobal", f"would import {name}{detail}")


class PickleTooLarge(PickleError):
    """The pickle exceeds a work bound (opcodes, memo entries, container size)."""

    default_code = "PickleTooLarge"


class TorchFileError(TensorsError):
    """A ``torch.save`` file is damaged or inconsistent.

    Codes: ``NotATorchFile``, ``TruncatedZip`` (no central directory),
    ``BadZip``, ``NoDataPickle``, ``MissingStorage``, ``StorageTooSmall``,
    ``TensorOutOfBounds``, ``BadLocalHeader``, ``EntryOutOfBounds``,
    ``CompressedEntry``, ``BadTensor``.
    """

    default_code = "BadTorchFile"


class DcpError(TensorsError):
    """A torch.distributed.checkpoint ``.metadata`` file is malformed."""

    default_code = "BadDcpMetadata"
