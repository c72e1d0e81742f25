"""What the readers of training-checkpoint folders share (torch-files, lightning, torch-dcp, orbax).

- :mod:`.folder`: a store folder on any fsspec URL — a bounded walk that never follows a link out
  of the store, range reads of one file (a window of it), small bounded reads;
- :mod:`.stamps`: scan tokens made of ``size:mtime`` stamps (an append is listed incrementally);
- :mod:`.journal`: recovery as a format's plan over the shared journal inside the store
  (``.lastgood/journal/``, :mod:`lastgood.readers.common.filejournal`);
- :mod:`.moves`: the recovery backend of formats whose "latest" is the newest step folder (DCP,
  Orbax): later step folders are moved aside into ``.lastgood/quarantine/<action>/`` and back;
- :mod:`.retention`: prune of every training store (HF Trainer, DCP, Orbax, DeepSpeed, Lightning):
  checkpoint folders or files renamed into ``.lastgood/archive/<action>/`` and back, journaled;
  :mod:`.export`: with ``--archive URL``, copied there (sha256-verified), then deleted, and copied back.

Nothing here reads checkpoint contents; :mod:`lastgood.readers.tensors` does.
"""

LASTGOOD_DIR = ".lastgood"  # everything Lastgood writes inside a store lives under this folder
