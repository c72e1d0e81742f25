"""DeepSpeed ``engine.save_checkpoint`` folders (reader name ``deepspeed``).

A save folder holds one folder per tag (``global_step15/``: ``mp_rank_00_model_states.pt`` — the
module's state dict and the engine's counters —, ``zero_pp_rank_{dp}_mp_rank_{mp}_optim_states.pt``
per data-parallel rank under ZeRO), and ``latest``: the tag ``engine.load_checkpoint(dir,
tag=None)`` resumes from (read and stripped; written without a newline). DeepSpeed also copies
its ``zero_to_fp32.py`` recovery script into the folder: Lastgood never runs it (nor anything
else in a checkpoint). A run is a save folder (the store, or folders below it); a checkpoint is a
tag; the head is the tag ``latest`` names. Recovery rewrites ``latest`` (:mod:`.recovery`).
"""
