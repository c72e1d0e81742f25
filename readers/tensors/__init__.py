"""Pure readers for training-checkpoint tensor formats (stdlib + numpy only).

Modules: :mod:`.dtypes` (dtype tables, byte decoding), :mod:`.safetensors`
(header/index validation matching the reference implementation),
:mod:`.pickle_walk` (safe pickle interpreter), :mod:`.torch_pickle`
(torch handlers and allowlists), :mod:`.torchzip` (``torch.save`` files),
:mod:`.dcp` (torch.distributed.checkpoint metadata), :mod:`.stats`
(chunked tensor statistics and deltas), :mod:`.errors`.
Nothing here imports torch or safetensors, and no checkpoint bytes are ever
unpickled or executed.
"""
