"""The labs of LABS.md: each changes one design choice of a method by overriding one named piece of it, beside the
method and never inside it. The experiments' flags choose them (tsdae_train.py, consert_train.py).

  masked_cutoff.py    lab 1: the view token_cutoff_masked    ConSERTLoss.encode
  noise_once.py       lab 2: --noise-once                    DenoisingDataset.noise_rng
  shared_dropout.py   lab 3: --shared-dropout                ConSERTLoss.forward
  token_memory.py     lab 5: --decoder-memory tokens         TSDAELoss.memory, each decoder layer's cross_attn
Labs 4 and 6 need no code: flags of the methods themselves (LABS.md).
"""
