"""The held-back cases: the judge's (course/judge.py) other shapes, rates and hand-worked values, which a student does
not see. This file stays with the judge: make-student leaves it out of the copy, and the worker's copy never holds
it (judge.worker_copy); its cases' inputs reach the student's function as data only, their source never.
Each case's name says what it checks: that is all a student learns of it (results.json, after publishing)."""
from __future__ import annotations

import torch

from course.judge import (AP_CASES, QUERIES, Case, attention_inputs, by_hand, check_attention, check_attention_dropout,
                          check_chunks, check_cutoff, check_decoder, check_deletion, check_metrics, check_nt_xent,
                          check_pool, check_safetensors, check_shuffle, check_span, check_tsdae, chunk_inputs,
                          decoder_inputs, deletion_inputs, metrics_inputs, nt_xent_inputs, pool_inputs,
                          safetensors_files, saved, tsdae_inputs, view_inputs)

MORE_AP = AP_CASES + [([1, 1, 0, 0], [0.3, 0.3, 0.3, 0.3], 2 / 4), ([0, 0, 1], [0.1, 0.9, 0.2], 1 / 2)]


def cases() -> list[Case]:
    tensors = {"a": torch.arange(12, dtype=torch.float32).reshape(3, 4), "b": torch.tensor([7, -7], dtype=torch.int64),
               "c": torch.linspace(0, 1, 3).half()}
    past_end = bytearray(saved({"w": torch.ones(2)}))
    past_end[:8] = (len(past_end) + 100).to_bytes(8, "little")
    return [
        Case(1, "attention with fewer keys than queries", "attention", attention_inputs(11, lq=6, lk=3, mask=None),
             check_attention, held_back=True),
        Case(1, "dropout on the probabilities", "attention", attention_inputs(12, dropout_p=0.4, mask=None),
             check_attention_dropout, reference=True, held_back=True),
        Case(2, "each pooling mode on other sentences", "pool", pool_inputs(11), check_pool, reference=True,
             held_back=True),
        Case(3, "at a high ratio, each word deleted on its own", "delete_words",
             deletion_inputs(11, 0.9, 300, 40), check_deletion(0.9, 0.02, per_word=True), held_back=True),
        Case(3, "at a low ratio, each word deleted on its own", "delete_words",
             deletion_inputs(12, 0.1, 600, 12), check_deletion(0.1, 0.02, per_word=True), held_back=True),
        Case(4, "no position sees a later token, and every position reads the sentence vector", "decoder_layer",
             decoder_inputs(11, with_changes=True), check_decoder, reference=True, held_back=True),
        Case(5, "the loss with sentence normalisation", "tsdae_loss", tsdae_inputs(11, "sentence"), check_tsdae,
             reference=True, held_back=True),
        Case(6, "every real token cut equally often", "cutoffs", view_inputs(11, 300, "token_cutoff", 0.25),
             check_cutoff("token", uniform=True), held_back=True),
        Case(6, "every feature cut equally often", "cutoffs", view_inputs(12, 300, "feature_cutoff", 0.5),
             check_cutoff("feature", uniform=True), held_back=True),
        Case(7, "the shuffle is a uniform permutation of each sentence's own positions", "shuffle",
             view_inputs(11, 500), check_shuffle(uniform=True), held_back=True),
        Case(8, "NT-Xent on other views", "nt_xent", nt_xent_inputs(11), check_nt_xent, reference=True,
             held_back=True),
        Case(9, "the ranking metrics of other lists, and AP with every score tied", "metrics",
             metrics_inputs(QUERIES, MORE_AP), check_metrics(QUERIES, MORE_AP), held_back=True),
        Case(10, "the span may start anywhere in the sentence, each start equally often", "span",
             view_inputs(11, 400, rate=0.5), check_span(uniform=True), held_back=True),
        Case(11, "tensors whose bytes lie in another order than the header lists them, and a header length past the "
                 "end of the file", "read_safetensors",
             safetensors_files([by_hand(tensors, ["c", "a", "b"]), bytes(past_end)]),
             check_safetensors([tensors, None]), held_back=True),
        Case(12, "the cached gradient of other chunks", "backward_in_chunks", chunk_inputs(11), check_chunks,
             reference=True, held_back=True),
    ]
