"""torch.save files (zip format; the legacy format recognised, not decoded), read without
unpickling: :mod:`.reader` (the ``torch-files`` reader), :mod:`.torchfile` (one torch zip as
findings, plain state, tensors and statistics — shared with the Lightning and DCP readers),
:mod:`.files` (inspections by range, cached)."""
