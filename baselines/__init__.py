"""Baselines the papers compare TSDAE and ConSERT with, outside the reading path of the two methods (a first read
skips this folder). Each file holds one method and its command, in the house's order.

  mlm.py    continued masked-language modelling (BERT, Devlin et al. 2019, §3.1) on the same corpus: the
            pre-training step TSDAE is compared with before supervised training (TSDAE paper §6, fig. 2).
            `python baselines/mlm.py --corpus FILE --model DIR --out runs/mlm`
"""
