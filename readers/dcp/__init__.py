"""torch.distributed.checkpoint (DCP) folders: :mod:`.reader` (the ``torch-dcp`` reader; ``.metadata``
walked with the DCP allowlist, items read as the torch zips they are) and :mod:`.recovery` (later
step folders moved aside, and back)."""
