"""The checks of bench/gpu_check.sh, on CUDA: the parity and fast-vs-plain tests in fp32 and under bf16 autocast,
where the fast path also runs FusedAttention (PyTorch's fused kernel). Skipped on a machine without CUDA."""
import pytest
import torch
import torch.nn.functional as F

import consert
import data
from speedups import fast
import tsdae
from model import Bert, SentenceEncoder

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA on this machine")
CUDA = torch.device("cuda")


def gradients(objective: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.grad.to_dense().double() for n, p in objective.named_parameters()
            if p.grad is not None and ".cross_attn.q." not in n and ".cross_attn.k." not in n
            and not n.endswith("attn.k.bias")}  # its true gradient is 0: softmax ignores a shift of every score


@pytest.fixture(scope="module")
def pairs(minilm_path, sts_sentences) -> dict[str, torch.Tensor]:
    tokenizer = SentenceEncoder.from_pretrained(minilm_path).tokenizer
    dataset = tsdae.DenoisingDataset(sts_sentences[:16], tokenizer, 75)
    return data.to_device(tsdae.collate_pairs([dataset[(0, i)] for i in range(16)], multiple=8), CUDA)


def test_encode_on_cuda_equals_sentence_transformers_on_both_paths(minilm_path, sts_sentences):
    from sentence_transformers import SentenceTransformer

    theirs = SentenceTransformer(minilm_path, device="cuda").encode(sts_sentences, convert_to_tensor=True).cpu()
    for bert_class in (Bert, fast.PackedBert):
        ours = SentenceEncoder.from_pretrained(minilm_path, bert_class=bert_class).to(CUDA)
        assert F.cosine_similarity(ours.encode(sts_sentences), theirs).min() >= 0.9999


@pytest.mark.parametrize("amp", [False, True])
def test_tsdae_fast_equals_plain_on_cuda(minilm_path, pairs, amp, monkeypatch):
    """fp32: within 1e-4 (TF32 may be on); bf16: fast within twice what bf16 moves the plain path from fp32. On CUDA
    the packed attention runs FusedAttention's kernel."""
    objectives = []
    for bert_class, decoder_class in ((Bert, tsdae.TSDAEDecoder), (fast.SparseLookupPackedBert, fast.PackedDecoder)):
        torch.manual_seed(0)  # the same new weights
        encoder = SentenceEncoder.from_pretrained(minilm_path, pooling="cls", max_length=75, bert_class=bert_class)
        objectives.append(tsdae.TSDAELoss(encoder, decoder_class=decoder_class).to(CUDA).eval())
    plain, quick = objectives
    fused, real_attend = [], fast.FusedAttention.attend
    monkeypatch.setattr(fast.FusedAttention, "attend", lambda *a: fused.append(1) or real_attend(*a))
    results = []
    for objective, autocast in ((plain, False), (plain, amp), (quick, amp)):
        objective.zero_grad()
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
            loss = objective(pairs)
        loss.backward()
        results.append((loss.item(), torch.cat([g.flatten() for g in gradients(objective).values()])))
    (l32, g32), (lp, gp), (lf, gf) = results
    assert len(fused) == 2 * plain.encoder.bert.cfg.num_hidden_layers  # encoder and decoder self-attention, fast path
    if amp:
        assert abs(lf - lp) <= 2 * abs(lp - l32) + 1e-6 * l32 and (gf - gp).norm() <= 2 * (gp - g32).norm()
    else:
        assert abs(lf - lp) <= 1e-4 * lp and (gf - gp).norm() <= 1e-3 * gp.norm()


def test_consert_fast_equals_plain_on_cuda(minilm_path, sts_sentences):
    objectives = []
    for bert_class in (Bert, fast.PackedBert):
        encoder = SentenceEncoder.from_pretrained(minilm_path, pooling="mean", max_length=67, bert_class=bert_class)
        consert.switch_off_dropout(encoder)
        views = (consert.View("feature_cutoff", 0.2), consert.View("shuffle"))
        objectives.append(consert.ConSERTLoss(encoder.to(CUDA), views))
    plain, quick = objectives
    ids = data.tokenize(encoder.tokenizer, sts_sentences[:24], 67)
    batch = data.to_device(consert.collate_sentences(ids, multiple=8), CUDA)
    losses = []
    for objective in (plain, quick):
        torch.manual_seed(3)  # the same views on both paths
        loss = objective(batch)
        loss.backward()
        losses.append(loss.item())
    assert abs(losses[0] - losses[1]) <= 1e-4 * losses[0]
    g_plain, g_fast = gradients(plain), gradients(quick)
    assert max((g_fast[n] - g).norm() / (g.norm() + 1e-12) for n, g in g_plain.items()) < 1e-2


def test_the_cached_gradient_on_cuda_with_dropout_on(minilm_path, sts_sentences):
    """The cached gradient replays each chunk from the random state it started from: on CUDA that is the CUDA
    generator's (dropout and the views draw from it there; sentence-transformers' cached losses missed it, their PR
    #3862). With dropout on, the chunks' loss and gradients equal one graph's over the whole batch."""
    from speedups import gradcache

    encoder = SentenceEncoder.from_pretrained(minilm_path, pooling="mean", max_length=67).to(CUDA).train()
    objective = consert.ConSERTLoss(encoder, (consert.View("simcse"), consert.View("feature_cutoff", 0.2)))
    ids = data.tokenize(encoder.tokenizer, sts_sentences[:24], 67)
    batch = data.to_device(consert.collate_sentences(ids), CUDA)
    results = []
    for cache in (False, True):
        chunked = gradcache.ChunkedConSERTLoss(encoder, objective.views, micro_batch=8, cache=cache)
        chunked.zero_grad(set_to_none=True)
        torch.manual_seed(5)  # seeds the CUDA generator too
        loss = chunked(batch)
        loss.backward()
        results.append((loss.item(), gradients(chunked)))
    (whole, g_whole), (cached, g_cached) = results
    assert abs(whole - cached) <= 1e-5 * abs(whole)
    assert max((g_cached[n] - g).norm() / (g.norm() + 1e-12) for n, g in g_whole.items()) < 1e-3
