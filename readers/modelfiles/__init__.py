"""Files of training checkpoints and saved models, shared by the readers of folder formats
(Hugging Face Trainer output folders, safetensors folders, DeepSpeed save folders).

- :mod:`.fsio` — a checkpoint folder on any fsspec URL: cached listings, bounded small reads,
  range reads (headers are read with two small reads, never the whole file);
- :mod:`.discover` — the runs of a store: the folders (the root, or subfolders a few levels
  down: a sweep) that hold a format's checkpoints;
- :mod:`.weights` — where a folder's model weights are (one safetensors file, shards named by a
  ``*.index.json``, a PEFT adapter, ``pytorch_model*.bin`` torch zips) and their tensors;
- :mod:`.fastpaths` — quick acceptance paths in front of ``lastgood.readers.tensors``'s exact
  parsers (a plain safetensors header, a protocol-2 pickle's globals): anything unusual goes to
  the exact parser, so verdicts never differ;
- :mod:`.checks` — structure findings (headers, index ↔ shards ↔ headers, torch zips, pickles
  with globals outside the allowlist, zero-byte files);
- :mod:`.datascan` — the data-depth pass: every file streamed once in bounded chunks (zip
  CRC-32s, every tensor's statistics and sha256; the file's sha256 when a recorded checksum is
  there to compare it with) → findings and ``TensorSummary`` rows;
- :mod:`.folderreader` — the reader base the three formats share (tensors capability,
  checks driver, states);
- :mod:`.filejournal` — recovery as file operations (renames, atomic replaces) over the shared
  journal inside the store (``.lastgood/journal/``, :mod:`lastgood.readers.common.filejournal`).

Nothing here unpickles, imports torch, or reads a whole tensor file into memory.
"""
