"""Each command's flags and run, around its method: `python tsdae.py` runs tsdae_train.py, `python consert.py`
consert_train.py, `python finetune.py` finetune_train.py; experiment.py holds the steps they share."""
