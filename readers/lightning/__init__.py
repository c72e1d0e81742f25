"""PyTorch Lightning checkpoint folders: :mod:`.layout` (runs, ``.ckpt`` files, the head as
``fit(ckpt_path="last")`` resolves it), :mod:`.reader` (the ``lightning`` reader) and :mod:`.recovery`
(``last.ckpt`` replaced atomically, the old one archived; undo byte for byte)."""
