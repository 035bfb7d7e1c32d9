"""The labs of LABS.md: each changes one design choice of a method by overriding one named piece of it, beside the
method and never inside it. Each file is its own entry point: `python labs/FILE.py FLAGS` is the run of the method's
command (`python tsdae.py FLAGS` or `python consert.py FLAGS`, whose scripts know nothing of the labs) with the lab's
piece in place: the lab's main runs the steps of tsdae_train.main or consert_train.main (contrastive.py, for the two
ConSERT labs: --strategy unsup) with its own objective or pairs.

  masked_cutoff.py    lab 1: python labs/masked_cutoff.py --view2 token_cutoff_masked   ConSERTLoss.make_view
  noise_once.py       lab 2: python labs/noise_once.py                                 DenoisingDataset.noise_rng
  shared_dropout.py   lab 3: python labs/shared_dropout.py --view1 simcse --view2 simcse  ConSERTLoss.forward
  token_memory.py     lab 5: python labs/token_memory.py          TSDAELoss.memory, each decoder layer's cross_attn
Labs 4 and 6 need no code: flags of the methods themselves (LABS.md).
"""
