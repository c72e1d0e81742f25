"""Folders of safetensors weights (reader name ``safetensors``): a ``save_pretrained`` folder
(one ``model.safetensors``, or shards named by ``model.safetensors.index.json``), a PEFT adapter
folder (``adapter_model.safetensors`` + ``adapter_config.json``), or a plain folder of
``.safetensors`` files. Recognised by contents (an 8-byte little-endian header length, then a
JSON object). Read-only: nothing in these folders says what a run resumes from.
"""
