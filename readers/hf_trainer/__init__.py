"""Hugging Face ``transformers.Trainer`` output folders (reader name ``hf-trainer``).

A run is an output folder (the store itself, or folders a few levels below it: a sweep); a
checkpoint is each ``checkpoint-N/`` it holds (id ``checkpoint-N``, step N). What
``Trainer.train(resume_from_checkpoint=True)`` resumes from is
``transformers.trainer_utils.get_last_checkpoint``: the ``checkpoint-N`` folder with the highest
N, contents unchecked — that is the run's head. Recovery moves the later folders aside (see
:mod:`.recovery`); a prune moves pruned folders into ``.lastgood/archive/<action>/`` (see
:mod:`.retention`). Modules: :mod:`.layout` (folders, ids, heads), :mod:`.trainer_state`
(``trainer_state.json``: triggers, logged metrics, loss spikes), :mod:`.reader`,
:mod:`.recovery`, :mod:`.retention`.
"""
