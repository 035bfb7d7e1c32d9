"""TSDAE: loss and gradient parity with sentence-transformers (plain and fast path), tying, noise, training, resume,
bad input."""
import json
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import data
from speedups import fast
import train
from lib.run import read_progress
import tsdae
from commands import tsdae_train
from lib import weights
from lib.weights import load_tokenizer
from model import Bert, BertConfig, SentenceEncoder
from conftest import losses_with_scrambled_token_states
from lib.errors import TrainingStopped
from tsdae import TSDAELoss
from lib.corpus import read_corpus
from lib import datafiles

ROOT = Path(__file__).resolve().parent.parent


# ---------------------------------------------------------------- parity with the reference


def copy_reference_decoder_weights(ours: TSDAELoss, ref_decoder) -> None:
    """The reference's freshly initialised decoder-only weights (cross-attention, LM-head transform, bias) into ours."""
    sd = ref_decoder.state_dict()
    names = {"q": "self.query", "k": "self.key", "v": "self.value", "out": "output.dense"}
    with torch.no_grad():
        for i, layer in enumerate(ours.decoder.layers):
            pre = f"bert.encoder.layer.{i}.crossattention."
            for ours_name, hf_name in names.items():
                getattr(layer.cross_attn, ours_name).weight.copy_(sd[pre + hf_name + ".weight"])
                getattr(layer.cross_attn, ours_name).bias.copy_(sd[pre + hf_name + ".bias"])
            layer.cross_attn_norm.weight.copy_(sd[pre + "output.LayerNorm.weight"])
            layer.cross_attn_norm.bias.copy_(sd[pre + "output.LayerNorm.bias"])
        head = ours.decoder.lm_head
        head.dense.weight.copy_(sd["cls.predictions.transform.dense.weight"])
        head.dense.bias.copy_(sd["cls.predictions.transform.dense.bias"])
        head.norm.weight.copy_(sd["cls.predictions.transform.LayerNorm.weight"])
        head.norm.bias.copy_(sd["cls.predictions.transform.LayerNorm.bias"])
        head.bias.copy_(sd["cls.predictions.bias"])


@pytest.mark.parametrize("path", ["plain", "fast"])
def test_loss_and_gradients_equal_sentence_transformers(minilm_path, sts_sentences, path):
    from sentence_transformers import SentenceTransformer, models
    from sentence_transformers.sentence_transformer.losses import DenoisingAutoEncoderLoss

    torch.manual_seed(0)
    transformer = models.Transformer(minilm_path, max_seq_length=75)
    st = SentenceTransformer(modules=[transformer, models.Pooling(384, "cls")], device="cpu")
    ref = DenoisingAutoEncoderLoss(st, tie_encoder_decoder=True).eval()

    ours = TSDAELoss(SentenceEncoder.from_pretrained(minilm_path, pooling="cls", max_length=75))
    copy_reference_decoder_weights(ours, ref.decoder)
    if path == "fast":
        ours = fast_twin(ours)
    ours.eval()

    dataset = tsdae.DenoisingDataset(sts_sentences[:16], ours.encoder.tokenizer, 75)
    batch = tsdae.collate_pairs([dataset[(0, i)] for i in range(16)])
    assert (batch["original_mask"] == 0).any() \
        and (batch["damaged_ids"] != batch["original_ids"][:, : batch["damaged_ids"].shape[1]]).any()
    loss = ours(batch)
    features = lambda ids, mask: {"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids)}
    ref_loss = ref([features(batch["damaged_ids"], batch["damaged_mask"]),
                    features(batch["original_ids"], batch["original_mask"])], None)
    assert abs(loss.item() - ref_loss.item()) < 1e-4, (
        f"the TSDAE loss on 16 real sentences is {loss.item():.5f}, sentence-transformers' {ref_loss.item():.5f}: "
        "compared are the two losses on the same damaged and original token ids, in eval mode. Likely causes: the "
        "decoder layer (exercise 4: test_decoder_layer_is_its_three_post_norm_blocks names the mistake), the labels "
        "shifted the wrong way or padding counted (exercise 5)")

    loss.backward()
    ref_loss.backward()
    ref_params = dict(st[0].auto_model.named_parameters())
    for name, p in ours.encoder.bert.named_parameters():
        g_ref = ref_params[weights.hf_name(name)].grad
        if name.endswith("attn.k.bias"):
            # softmax(q.(k + b)) does not depend on the key bias b: its true gradient is 0, both sides are float noise
            assert p.grad.abs().max() < 1e-6 and g_ref.abs().max() < 1e-6
            continue
        assert (p.grad - g_ref).abs().max() <= 1e-4 * g_ref.abs().max(), (
            f"the gradient of the encoder's {name} differs from sentence-transformers' (the losses agree): a block "
            "whose output does not reach the loss the same way, e.g. a residual or the causal mask")
    ref_decoder = dict(ref.decoder.named_parameters())
    for i, layer in enumerate(ours.decoder.layers):  # the cross-attention (the fast path keeps only v and out)
        for ours_name, hf_name in [("v", "self.value"), ("out", "output.dense")]:
            for kind in ("weight", "bias"):
                g_ref = ref_decoder[f"bert.encoder.layer.{i}.crossattention.{hf_name}.{kind}"].grad
                g = getattr(getattr(layer.cross_attn, ours_name), kind).grad
                assert (g - g_ref).abs().max() <= 1e-4 * g_ref.abs().max(), (i, ours_name, kind)
        if path == "plain":  # over one key the softmax is 1: q and k get no gradient, here or in the reference
            assert layer.cross_attn.q.weight.grad.abs().max() < 1e-6 \
                and layer.cross_attn.k.weight.grad.abs().max() < 1e-6


# ---------------------------------------------------------------- tying and the bottleneck


@pytest.fixture
def tiny_objective(tiny_model_dir):
    return TSDAELoss(SentenceEncoder.from_pretrained(tiny_model_dir, pooling="cls"))


@pytest.fixture(params=["plain", "fast"])
def tiny_objective_on_path(request, tiny_objective):
    return tiny_objective if request.param == "plain" else fast_twin(tiny_objective)


def test_tied_weights_are_one_tensor(tiny_objective):
    bert, dec = tiny_objective.encoder.bert, tiny_objective.decoder
    assert dec.embeddings.word.weight is bert.embeddings.word.weight
    for enc_layer, dec_layer in zip(bert.layers, dec.layers):
        for a, b in [(enc_layer.attn, dec_layer.self_attn), (enc_layer.ffn, dec_layer.ffn),
                     (enc_layer.attn_norm, dec_layer.self_attn_norm), (enc_layer.ffn_norm, dec_layer.ffn_norm)]:
            assert all(x is y for x, y in zip(a.parameters(), b.parameters()))
        assert not any(x is y for x in dec_layer.cross_attn.parameters() for y in bert.parameters())
    shared = {id(p) for p in bert.parameters()}
    own = [n for n, p in tiny_objective.decoder.named_parameters() if id(p) not in shared]
    assert all(".cross_attn" in n or "lm_head." in n for n in own) and own


def test_untied_decoder_is_a_separate_copy(tiny_model_dir):
    obj = TSDAELoss(SentenceEncoder.from_pretrained(tiny_model_dir), tie=False)
    assert obj.decoder.embeddings.word.weight is not obj.encoder.bert.embeddings.word.weight
    torch.testing.assert_close(obj.decoder.embeddings.word.weight, obj.encoder.bert.embeddings.word.weight)


def test_an_untied_run_trains_both_word_matrices(tiny_model_dir, small_corpus, tmp_path):
    """--untie on the command line's (fast) path: the step clips and updates the encoder's own word matrix."""
    tsdae_train.main(["--corpus", str(small_corpus), "--model", str(tiny_model_dir), "--out", str(tmp_path),
                      "--untie", "--steps", "2", "--batch-size", "4", "--lr", "1e-3", "--save-every", "0"])
    before = SentenceEncoder.from_pretrained(tiny_model_dir).bert.embeddings.word.weight
    after = SentenceEncoder.from_pretrained(tmp_path / "model").bert.embeddings.word.weight
    assert len(losses(tmp_path)) == 2 and not torch.equal(before, after)


def test_a_step_changes_encoder_and_decoder_together(tiny_objective, small_corpus):
    sentences = read_corpus(small_corpus)
    ds = tsdae.DenoisingDataset(sentences, tiny_objective.encoder.tokenizer, 64)
    w = tiny_objective.decoder.layers[0].ffn.up.weight
    before = w.detach().clone()
    opt = torch.optim.SGD(tiny_objective.parameters(), lr=1.0)
    tiny_objective(tsdae.collate_pairs([ds[(0, i)] for i in range(8)])).backward()
    opt.step()
    assert not torch.equal(w, before)
    assert torch.equal(tiny_objective.encoder.bert.layers[0].ffn.up.weight, w)


def test_decoder_sees_only_the_cls_vector(tiny_objective_on_path, small_corpus):
    """Change every encoder output except position 0: with CLS pooling the logits must not move."""
    obj = tiny_objective_on_path.eval()
    ds = tsdae.DenoisingDataset(read_corpus(small_corpus), obj.encoder.tokenizer, 64)
    batch = tsdae.collate_pairs([ds[(0, i)] for i in range(4)])
    unchanged, scrambled = losses_with_scrambled_token_states(obj, batch)
    assert unchanged == scrambled, (
        f"with every encoder state but [CLS] replaced by noise the loss moved ({unchanged:.5f} -> {scrambled:.5f}): "
        "the decoder must read the sentence vector alone (the memory), never the token states")


def test_loss_is_the_cross_entropy_over_real_label_tokens(tiny_objective_on_path, small_corpus):
    obj = tiny_objective_on_path.eval()
    ds = tsdae.DenoisingDataset(read_corpus(small_corpus), obj.encoder.tokenizer, 64)
    b = tsdae.collate_pairs([ds[(0, i)] for i in range(6)])
    with torch.no_grad():
        loss = obj(b)
        states = obj.decoder(b["original_ids"][:, :-1], obj.encoder(b["damaged_ids"], b["damaged_mask"])[:, None, :])
        logits = obj.decoder.logits(states)  # every position, pads included
        full = F.cross_entropy(logits.flatten(0, 1), b["original_ids"][:, 1:].flatten(), ignore_index=0)
    assert abs(loss.item() - full.item()) < 1e-5
    obj.normalisation = "sentence"
    with torch.no_grad():
        per_sentence = obj(b)
    n_tokens = b["original_mask"][:, 1:].sum()
    assert abs(per_sentence.item() - full.item() * n_tokens.item() / 6) < 1e-3


def decoder_layer_variants(layer, x: torch.Tensor, memory: torch.Tensor, causal: torch.Tensor) -> dict:
    """{what: the output} of tsdae.DecoderLayer's three post-LayerNorm blocks written out, x = LN(x + dropout(block(x)))
    (what), and of the usual mistakes (the others). Each starts from the same seed: in training mode every version
    draws its dropout masks in the order its blocks run."""
    sa, ca, ff = (lambda h: layer.self_attn(h, causal)), (lambda h: layer.cross_attn(h, memory=memory)), layer.ffn
    norms, drop, same = (layer.self_attn_norm, layer.cross_attn_norm, layer.ffn_norm), layer.dropout, lambda h: h

    def run(blocks=(sa, ca, ff), dropout=drop, residual=(True, True, True), post_norm=True):
        torch.manual_seed(11)
        h = x
        for block, norm, keep in zip(blocks, norms, residual):
            if post_norm:
                h = norm((h if keep else 0) + dropout(block(h)))
            else:  # pre-LN, as GPT-2: the norm inside the residual branch
                h = (h if keep else 0) + dropout(block(norm(h)))
        return h

    return {
        "the three blocks": run(),
        "no self.dropout on the blocks' outputs: apply it to each block's output before adding the residual": run(
            dropout=same),
        "no residual around the self-attention: x = LN(x + dropout(SelfAttn(x)))": run(residual=(False, True, True)),
        "no residual around the cross-attention": run(residual=(True, False, True)),
        "no residual around the feed-forward block": run(residual=(True, True, False)),
        "the LayerNorm before the block (pre-LN); BERT's blocks are post-LN: LN(x + dropout(block(x)))": run(
            post_norm=False),
        "self-attention without the causal mask: pass `causal` to self.self_attn": run(
            blocks=(lambda h: layer.self_attn(h, None), ca, ff)),
        "the causal mask inverted (~causal): True means the position may be seen, pass `causal` as it is": run(
            blocks=(lambda h: layer.self_attn(h, ~causal), ca, ff)),
        "cross-attention reading x instead of the memory: self.cross_attn(x, memory=memory)": run(
            blocks=(sa, lambda h: layer.cross_attn(h), ff)),
    }


@pytest.mark.parametrize("mode", ["eval", "train"])
def test_decoder_layer_is_its_three_post_norm_blocks(tiny_model_dir, mode):
    """Exercise 4: DecoderLayer.forward against its three blocks written out, in eval mode and in training mode with
    dropout on (the same random draws). When they differ the message names the likely cause: the output equals
    one of the usual mistakes."""
    cfg = BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=64,
                     hidden_dropout_prob=0.2, attention_probs_dropout_prob=0.2)
    torch.manual_seed(3)
    layer = tsdae.DecoderLayer(Bert(cfg).layers[0], cfg).train(mode == "train")
    x, memory = torch.randn(2, 6, 32), torch.randn(2, 1, 32)
    causal = torch.ones(6, 6, dtype=torch.bool).tril()
    with torch.no_grad():
        variants = decoder_layer_variants(layer, x, memory, causal)
        torch.manual_seed(11)
        yours = layer(x, memory, causal)
    expected = variants.pop("the three blocks")
    if not torch.allclose(yours, expected, atol=1e-5):  # false on NaN and inf too (a `>` test would let them pass)
        causes = [what for what, out in variants.items() if torch.allclose(yours, out, atol=1e-5, equal_nan=True)]
        hint = (f"it equals the layer with {causes[0]}" if causes else
                "it matches none of the usual mistakes (" + "; ".join(w.split(":")[0] for w in variants) + ")")
        broken = (~yours.isfinite()).sum().item()
        how = (f"gives {broken} NaN or inf values" if broken else
               f"differs by up to {(yours - expected).abs().max().item():.3g}")
        pytest.fail(f"{hint}. DecoderLayer.forward({mode} mode) {how} against x = LN(x + dropout(block(x))) for "
                    "self-attention, cross-attention and feed-forward", pytrace=False)


def test_decoder_is_causal_and_every_position_reads_the_sentence_vector(tiny_objective):
    """Held back (assignments.HELD_BACK). Change the tokens from position 5 on: the states before 5 must not move,
    the states from 5 on must. Change the sentence vector: every position's state must move."""
    decoder = tiny_objective.eval().decoder
    torch.manual_seed(7)
    ids, vector = torch.randint(1000, 2000, (2, 8)), torch.randn(2, 1, 32)  # the memory: one vector a sentence
    later = ids.clone()
    later[:, 5:] += 1
    with torch.no_grad():
        states, with_later, with_other_vector = decoder(ids, vector), decoder(later, vector), decoder(ids, -vector)
    torch.testing.assert_close(with_later[:, :5], states[:, :5])
    assert (with_later[:, 5:] - states[:, 5:]).abs().amax(-1).min() > 1e-4
    assert (with_other_vector - states).abs().amax(-1).min() > 1e-4


def test_the_batch_loss_is_its_sentences_losses_weighted_by_their_label_tokens(tiny_objective_on_path, small_corpus):
    """Held back (assignments.HELD_BACK). Each sentence alone (no padding) against the padded batch of all five:
    token normalisation weights each sentence's loss by its label tokens; sentence normalisation averages the
    sentences' summed losses."""
    obj = tiny_objective_on_path.eval()
    ds = tsdae.DenoisingDataset(read_corpus(small_corpus), obj.encoder.tokenizer, 64)
    pairs = [ds[(0, i)] for i in range(5)]
    batch, alone = tsdae.collate_pairs(pairs), [tsdae.collate_pairs([pair]) for pair in pairs]
    tokens = [int(b["original_mask"][:, 1:].sum()) for b in alone]
    assert len(set(tokens)) > 2  # the batch has padding
    with torch.no_grad():
        means = [obj(b).item() for b in alone]
        assert obj(batch).item() == pytest.approx(sum(m * t for m, t in zip(means, tokens)) / sum(tokens), rel=1e-4)
        obj.normalisation = "sentence"
        sums = [obj(b).item() for b in alone]
        assert sums == pytest.approx([m * t for m, t in zip(means, tokens)], rel=1e-4)
        assert obj(batch).item() == pytest.approx(sum(sums) / 5, rel=1e-4)


def gradients_in_parts(objective, batch: dict, size: int) -> tuple[float, dict]:
    """What the training loop does with --micro-batch: each part's loss times its weight, backward, summed."""
    objective.zero_grad(set_to_none=True)
    total = 0.0
    for part, weight in train.micro_batches(batch, size, objective):
        loss = objective(part) * weight
        loss.backward()
        total += loss.item()
    return total, {name: p.grad.clone() for name, p in objective.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("normalisation", ["tokens", "sentence"])
def test_micro_batches_give_the_whole_batchs_loss_and_gradients(tiny_objective_on_path, small_corpus, normalisation):
    """--micro-batch: parts of 1, 4 and 5 of an 11-sentence batch, each weighted by its share of the batch's label
    tokens (or sentences), give the whole batch's loss and every gradient; averaging the parts' losses would not."""
    obj = tiny_objective_on_path.eval()
    obj.normalisation = normalisation
    ds = tsdae.DenoisingDataset(read_corpus(small_corpus), obj.encoder.tokenizer, 64)
    batch = tsdae.collate_pairs([ds[(0, i)] for i in range(11)])
    whole = gradients_in_parts(obj, batch, 0)
    for size in (1, 4, 5):
        total, grads = gradients_in_parts(obj, batch, size)
        assert total == pytest.approx(whole[0], abs=1e-5)
        assert grads.keys() == whole[1].keys() and len(grads) > 20
        for name in grads:
            assert (grads[name] - whole[1][name]).abs().max() < 1e-5, (size, name)
    with torch.no_grad():
        parts = list(train.micro_batches(batch, 4, obj))
        averaged = np.mean([obj(part).item() for part, _ in parts])
    if normalisation == "tokens":  # the weights are the parts' shares of the tokens, not of the sentences ...
        assert [round(w, 3) for _, w in parts] != [round(4 / 11, 3), round(4 / 11, 3), round(3 / 11, 3)]
        assert abs(averaged - whole[0]) > 1e-4  # ... and plain accumulation gives another loss (a random model's
        # losses all lie near log V, so the difference is small here, yet 10x the tolerance above)


def test_micro_batches_drop_out_like_the_whole_batch(minilm_path, small_corpus, monkeypatch):
    """In training mode each part makes the dropout calls the whole batch makes, at the same rates, on its own rows
    (the masks are drawn per part, so the loss is another draw of the same distribution)."""
    cfg = BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                     max_position_embeddings=128, hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)
    encoder = SentenceEncoder(Bert(cfg), weights.load_tokenizer(Path(minilm_path)), "cls", 64)
    obj = TSDAELoss(encoder).train()
    ds = tsdae.DenoisingDataset(read_corpus(small_corpus), encoder.tokenizer, 64)
    batch = tsdae.collate_pairs([ds[(0, i)] for i in range(10)])
    calls, real = [], torch.nn.functional.dropout
    monkeypatch.setattr(torch.nn.functional, "dropout", lambda x, p=0.5, training=True, inplace=False: (
        calls.append((len(x), p)) or real(x, p, training, inplace)))
    obj(batch)
    whole, parts = calls[:], []
    for part, _ in train.micro_batches(batch, 4, obj):
        calls.clear()
        obj(part)
        parts.append(calls[:])
    assert len(whole) > 10 and all(len(calls) == len(whole) for calls in parts)
    for k, (rows, rate) in enumerate(whole):
        assert [calls[k][1] for calls in parts] == [rate] * 3 and sum(calls[k][0] for calls in parts) == rows


def test_the_micro_batch_flag_trains_like_the_whole_batch(tiny_model_dir, small_corpus, tmp_path):
    common = ["--corpus", str(small_corpus), "--model", str(tiny_model_dir), "--batch-size", "8", "--steps", "4",
              "--lr", "1e-3"]
    tsdae_train.main(common + ["--out", str(tmp_path / "whole")])
    tsdae_train.main(common + ["--out", str(tmp_path / "parts"), "--micro-batch", "3"])
    assert losses(tmp_path / "whole") == pytest.approx(losses(tmp_path / "parts"), abs=1e-5)
    a = SentenceEncoder.from_pretrained(tmp_path / "whole" / "model").bert.state_dict()
    b = SentenceEncoder.from_pretrained(tmp_path / "parts" / "model").bert.state_dict()
    assert all((a[name] - b[name]).abs().max() < 1e-5 for name in a)


# ---------------------------------------------------------------- noise


@pytest.fixture(scope="module")
def tokenizer(minilm_path):
    return load_tokenizer(Path(minilm_path))


def test_deletion_removes_60_percent_and_never_everything(tokenizer, sts_sentences):
    rng = random.Random(0)
    deleted = total = 0
    for rep in range(30):
        for s in sts_sentences:
            _, words, _ = tsdae.words_of(tokenizer, s)
            kept = tsdae.delete_words(words, 0.6, rng)
            assert 1 <= len(kept) <= len(words)
            assert all(w in words for w in kept)
            if len(words) >= 5:  # short sentences are skewed by the keep-one rule
                deleted += len(words) - len(kept)
                total += len(words)
    assert abs(deleted / total - 0.6) <= 0.02, (
        f"at ratio 0.6, {deleted / total:.3f} of the words were deleted: each word is deleted with probability ratio "
        "(one rng.random() per word, deleted when it is below ratio)")
    assert tsdae.delete_words([[7]], 0.99, rng) == [[7]]  # a one-word sentence survives


def test_deletion_returns_a_new_list_of_survivors_in_order_and_a_random_one_when_all_go():
    """Exercise 3's contract (ASSIGNMENTS.md): `words` is left as it was; the survivors keep their order; when every
    word is deleted, the one kept is drawn at random, not always the same; an empty sentence stays empty."""
    rng = random.Random(1)
    words = [[1000 + i] for i in range(12)]
    before = [list(w) for w in words]
    kept = tsdae.delete_words(words, 0.5, rng)
    assert words == before, "delete_words changed the list it was given: build a new list instead"
    assert kept == [w for w in words if w in kept], "the survivors must keep their order in the sentence"
    at_one = [tsdae.delete_words(words, 1.0, rng) for _ in range(60)]
    sizes = sorted({len(kept) for kept in at_one})
    assert sizes == [1], (f"at ratio 1 every word is deleted, then one kept: got sentences of {sizes} words (a word "
                          "is deleted with probability ratio: when rng.random() < ratio)")
    survivors = {tuple(kept[0]) for kept in at_one}
    assert len(survivors) > 3, "at ratio 1 every word goes: keep one drawn at random (rng.choice), not always the same"
    try:
        empty = tsdae.delete_words([], 0.6, rng)
    except (IndexError, ValueError) as e:
        pytest.fail(f"an empty sentence must stay empty: delete_words([], 0.6, rng) raised {type(e).__name__} "
                    f"({e}), as rng.choice([]) does: keep one word only when there was one", pytrace=False)
    assert empty == [], f"an empty sentence must stay empty: delete_words([], 0.6, rng) gave {empty!r}"


def test_deletion_keeps_the_survivors_in_order_at_any_ratio():
    """Held back (assignments.HELD_BACK). Ratio 0 keeps every word, ratio 1 exactly one. At ratio 0.3 each of
    n = 31 words is deleted on its own: the count deleted is binomial, mean 0.3 n and variance 0.3 * 0.7 n. The
    survivors keep their order (a word of two WordPieces stays whole)."""
    rng = random.Random(5)
    words = [[1000 + i] for i in range(30)] + [[2000, 2001]]
    assert tsdae.delete_words(words, 0.0, rng) == words
    for _ in range(50):
        survivor = tsdae.delete_words(words, 1.0, rng)
        assert len(survivor) == 1 and survivor[0] in words
    deleted = []
    for _ in range(400):
        kept = tsdae.delete_words(words, 0.3, rng)
        assert kept == [w for w in words if w in kept]  # in their order, each at most once
        deleted.append(len(words) - len(kept))
    n, mean = len(words), sum(deleted) / len(deleted)
    assert abs(mean / n - 0.3) <= 0.02
    variance = sum((d - mean) ** 2 for d in deleted) / (len(deleted) - 1)
    assert abs(variance / (0.3 * 0.7 * n) - 1) < 0.3


def test_words_are_the_tokenizers_words(tokenizer):
    head, words, tail = tsdae.words_of(tokenizer, "Unbelievably, it works!")
    assert head == [101] and tail == [102]
    assert [tokenizer.decode(w) for w in words] == ["unbelievably", ",", "it", "works", "!"]
    assert len(words[0]) > 1  # a word of several WordPieces is one unit for the noise


def test_other_noise_types_do_what_their_names_say(tokenizer):
    rng = random.Random(1)
    words = [[i] for i in range(1000, 1040)]
    swapped = tsdae.swap_words(words, 0.5, rng)
    assert sorted(swapped) == words and swapped != words
    masked = tsdae.mask_words(words, 0.5, rng, mask_id=103)
    assert all(m == w or m == [103] for m, w in zip(masked, words)) and 5 < sum(m == [103] for m in masked) < 35
    vocab = tsdae.ordinary_token_ids(tokenizer)
    replaced = tsdae.replace_words(words, 0.5, rng, vocab=vocab)
    assert len(replaced) == len(words) and 5 < sum(r != w for r, w in zip(replaced, words)) < 35
    added = tsdae.add_words(words, 0.5, rng, vocab=vocab)
    assert [w for w in added if w in words] == words and 45 < len(added) < 75
    assert 100 not in vocab and 0 not in vocab  # [UNK], [PAD] are never inserted


def test_noise_is_fresh_each_epoch_and_repeatable(tokenizer, sts_sentences):
    ds = tsdae.DenoisingDataset(sts_sentences, tokenizer, 75, seed=3)
    assert [ds[(0, i)] for i in range(20)] == [ds[(0, i)] for i in range(20)]
    assert [ds[(0, i)][0] for i in range(20)] != [ds[(1, i)][0] for i in range(20)]


# ---------------------------------------------------------------- training


def run(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "tsdae.py"), *map(str, args)], capture_output=True, text=True,
                          timeout=600)


def losses(out: Path) -> list[float]:
    return [json.loads(line)["loss"] for line in (out / "log.jsonl").read_text().splitlines()]


def test_tiny_model_overfits_16_sentences(tiny_model_dir, small_corpus, tmp_path):
    """The default command trains: python tsdae.py (TSDAELoss.forward, with speedups/fast.py's pieces inside)."""
    tsdae_train.main(["--corpus", str(small_corpus), "--model", str(tiny_model_dir), "--out", str(tmp_path),
                      "--steps", "150", "--batch-size", "16", "--lr", "5e-3", "--save-every", "0"])
    assert sum(losses(tmp_path)[-10:]) / 10 < 0.5


def test_resume_continues_the_same_loss_sequence(tiny_model_dir, small_corpus, tmp_path):
    common = ["--corpus", str(small_corpus), "--model", str(tiny_model_dir), "--batch-size", "4", "--lr", "1e-3"]
    tsdae_train.main(common + ["--out", str(tmp_path / "a"), "--steps", "10"])
    tsdae_train.main(common + ["--out", str(tmp_path / "b"), "--steps", "6"])  # crosses an epoch boundary
    # (4 steps/epoch)
    tsdae_train.main(common + ["--out", str(tmp_path / "b"), "--steps", "10", "--resume"])
    assert losses(tmp_path / "a") == losses(tmp_path / "b")
    tsdae_train.main(common + ["--out", str(tmp_path / "b"), "--steps", "3", "--overwrite"])  # a fresh run, same folder
    assert losses(tmp_path / "b") == losses(tmp_path / "a")[:3]  # starts a fresh log
    result = run(*common, "--out", tmp_path / "b", "--steps", "5", "--resume", "--untie")  # other parameters
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert "does not fit this run's settings" in result.stderr.strip().splitlines()[-1]
    # --plain: the same parameters under the same names (fast.py's classes keep the plain ones'), so it resumes
    result = run(*common, "--out", tmp_path / "b", "--steps", "5", "--resume", "--plain")
    assert result.returncode == 0 and len(losses(tmp_path / "b")) == 5, result.stderr


def test_nan_loss_stops_and_keeps_last_checkpoint(tiny_model_dir, small_corpus, tmp_path, monkeypatch):
    real_forward = tsdae.TSDAELoss.forward  # the command line's default path
    calls = {"n": 0}

    def forward(self, batch):
        calls["n"] += 1
        loss = real_forward(self, batch)
        return loss * float("nan") if calls["n"] == 5 else loss

    monkeypatch.setattr(tsdae.TSDAELoss, "forward", forward)
    with pytest.raises(TrainingStopped, match="loss became nan at step 5"):
        tsdae_train.main(["--corpus", str(small_corpus), "--model", str(tiny_model_dir), "--out", str(tmp_path),
                    "--steps", "10", "--save-every", "2"])
    assert read_progress(tmp_path / "checkpoint").step == 4
    SentenceEncoder.from_pretrained(tmp_path / "checkpoint" / "encoder")  # a loadable model


@pytest.mark.parametrize("how", ["ctrl-c", "sigterm"])
def test_ctrl_c_or_sigterm_saves_a_checkpoint_and_the_model(how, tiny_model_dir, small_corpus, tmp_path, monkeypatch):
    real_forward = tsdae.TSDAELoss.forward
    calls = {"n": 0}

    def forward(self, batch):
        calls["n"] += 1
        if calls["n"] == 4:
            if how == "sigterm":
                os.kill(os.getpid(), signal.SIGTERM)  # as `kill` or `timeout` would
            else:
                raise KeyboardInterrupt
        return real_forward(self, batch)

    monkeypatch.setattr(tsdae.TSDAELoss, "forward", forward)
    with pytest.raises(SystemExit):
        tsdae_train.main(["--corpus", str(small_corpus), "--model", str(tiny_model_dir), "--out", str(tmp_path),
                    "--steps", "10", "--save-every", "0"])
    # Ctrl-C inside a step stops at once; SIGTERM lets the step finish first
    assert read_progress(tmp_path / "checkpoint").step == (3 if how == "ctrl-c" else 4)
    saved = SentenceEncoder.from_pretrained(tmp_path / "model").bert.state_dict()
    for name, tensor in SentenceEncoder.from_pretrained(tmp_path / "checkpoint" / "encoder").bert.state_dict().items():
        assert torch.equal(saved[name], tensor), name  # OUT/model is the interrupted run's encoder


@pytest.mark.parametrize("content, message", [
    (None, "does not exist"),
    (b"", "has no non-blank lines"),
    (b"\n   \n\t\n", "has no non-blank lines"),
    (b"good line\n\xff\xfe bad bytes\n", "line 2 is not valid UTF-8"),
    (b"\x00\x01\x02binary", "looks like a binary file"),
    ("two lines\nof text\n".encode("utf-16-le"), "looks like UTF-16 without a byte-order mark"),
])
def test_bad_corpus_gets_one_line_error(content, message, tmp_path, tiny_model_dir):
    corpus = tmp_path / "corpus.txt"
    if content is not None:
        corpus.write_bytes(content)
    result = run("--corpus", corpus, "--model", tiny_model_dir, "--out", tmp_path / "out", "--steps", "1")
    assert result.returncode != 0
    assert message in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_bad_model_folder_gets_one_line_error(tmp_path, small_corpus):
    result = run("--corpus", small_corpus, "--model", tmp_path, "--out", tmp_path / "out", "--steps", "1")
    assert result.returncode != 0 and "no config.json" in result.stderr and "Traceback" not in result.stderr


def test_awkward_lines_train(tiny_model_dir, tmp_path):
    """One-word lines, very long lines (truncated), bad bytes replaced, a corpus smaller than a batch."""
    corpus = tmp_path / "c.txt"
    corpus.write_bytes(b"hello\n\n" + b"very long line " * 200 + b"\nbad \xff byte\n")
    tsdae_train.main(["--corpus", str(corpus), "--model", str(tiny_model_dir), "--out", str(tmp_path / "o"),
                "--steps", "3", "--batch-size", "8", "--bad-lines", "replace", "--max-length", "32"])
    assert len(losses(tmp_path / "o")) == 3
    assert read_corpus(corpus, "skip") == ["hello", " ".join(["very long line"] * 200)]
    corpus.write_text("héllo wörld\r\nsecond line\n", encoding="utf-16")  # with its byte-order mark
    assert read_corpus(corpus) == ["héllo wörld", "second line"]
    corpus.write_bytes("\ufeffa UTF-8 file with a BOM\n".encode("utf-8"))
    assert read_corpus(corpus) == ["a UTF-8 file with a BOM"]


def test_cli_on_default_model_writes_a_sentence_transformers_model(tmp_path, sts_sentences):
    from sentence_transformers import SentenceTransformer

    corpus = tmp_path / "sentences.txt"
    corpus.write_text("\n".join(sts_sentences) + "\n", encoding="utf-8")
    result = run("--corpus", corpus, "--steps", 8, "--out", tmp_path / "out")
    assert result.returncode == 0, result.stderr[-2000:]
    assert len(losses(tmp_path / "out")) == 8
    ours = SentenceEncoder.from_pretrained(tmp_path / "out" / "model")
    assert ours.pooling == "cls"
    theirs = SentenceTransformer(str(tmp_path / "out" / "model"), device="cpu").encode(sts_sentences,
                                                                                      convert_to_tensor=True)
    assert F.cosine_similarity(ours.encode(sts_sentences), theirs).min() >= 0.99999


def test_default_batches_are_a_uniform_shuffle_and_bucketing_is_opt_in(tiny_model_dir, data_dir):
    """As the reference's DataLoader(shuffle=True): within a batch, lengths spread as in a random draw, and the
    short last batch is kept. --bucketing makes a batch's sentences nearly equal in length."""
    sentences = datafiles.sts_corpus(data_dir)[:4004]
    encoder = SentenceEncoder.from_pretrained(tiny_model_dir)
    lengths = torch.tensor(data.token_lengths(encoder.tokenizer, sentences, 75), dtype=torch.float)

    def mean_spread(batches) -> float:  # the mean over batches of (longest - shortest) sentence
        return sum(float(lengths[b].max() - lengths[b].min()) for b in batches) / len(batches)

    spreads = {}
    for name, argv in (("default", []), ("bucketing", ["--bucketing"])):
        args = tsdae_train.parse_args(["--corpus", "x", *argv])
        loader = tsdae_train.pair_loader(tsdae_train.denoising_pairs(sentences, encoder, args), encoder, args,
                                         torch.device("cpu"))
        batches = [[i for _, i in keys] for keys in loader.batch_sampler]
        assert [len(b) for b in batches[-1:]] == [4] or name == "bucketing"  # 4004 = 500 x 8 + 4
        assert len(batches) == len(loader.batch_sampler) == 501 and sorted(sum(batches, [])) == list(range(4004))
        spreads[name] = mean_spread(batches)
    shuffled = torch.randperm(len(sentences), generator=torch.Generator().manual_seed(0)).split(8)
    spreads["random"] = mean_spread([b.tolist() for b in shuffled])
    assert abs(spreads["default"] - spreads["random"]) < 0.1 * spreads["random"], spreads
    assert spreads["bucketing"] < 0.25 * spreads["default"], spreads


# ---------------------------------------------------------------- what the vector remembers; the model card


@pytest.fixture(scope="module")
def copy_run(tmp_path_factory, tiny_model_dir) -> Path:
    """A tiny TSDAE trained to copy (no noise) three short sentences, with --eval-data for a dev score."""
    folder = tmp_path_factory.mktemp("copy")
    corpus = folder / "corpus.txt"
    corpus.write_text("the cat sat on the mat\nbees carry pollen\nthe library opens at nine\n", encoding="utf-8")
    tsdae_train.main(["--corpus", str(corpus), "--model", str(tiny_model_dir), "--out", str(folder / "run"),
                "--steps", "200", "--batch-size", "3", "--lr", "5e-3", "--noise-ratio", "0", "--save-every", "0",
                "--device", "cpu"])
    return folder / "run"


def test_the_decoder_is_kept_and_greedy_decoding_rebuilds_a_copied_sentence(copy_run, tiny_model_dir):
    objective, settings = tsdae.load_decoder(copy_run)
    assert settings["tie"] and settings["base_model"] == str(tiny_model_dir) and settings["noise_ratio"] == 0
    saved = torch.load(copy_run / "checkpoint" / "training_state.pt", weights_only=True)["objective"]
    for name, p in objective.decoder.named_parameters():  # the decoder reloads as it was trained
        if ".cross_attn.q." not in name and ".cross_attn.k." not in name:  # fast path: no Q, K (never trained)
            torch.testing.assert_close(p, saved[f"decoder.{name}"], msg=name)
    tokenizer = objective.encoder.tokenizer
    for sentence in ("the cat sat on the mat", "bees carry pollen"):
        ids = data.tokenize(tokenizer, [sentence], 64)[0]
        assert tokenizer.decode(tsdae.reconstruct(objective, ids)) == sentence
        assert tokenizer.decode(tsdae.reconstruct(objective, ids, beam=3)) == sentence
    result = subprocess.run([sys.executable, str(ROOT / "examples" / "reconstruct.py"), str(copy_run), "-n", "2"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    blocks = [dict(line.split(None, 1) for line in block.splitlines()) for block in result.stdout.strip().split("\n\n")]
    assert len(blocks) == 2 and all(b["trained"] == b["original"] and "untrained" in b for b in blocks), result.stdout


def test_every_saved_model_has_a_model_card(copy_run, tiny_model_dir, data_dir, tmp_path):
    """README.md in the Hub's format: YAML front matter that parses, then the method, the base model, the corpus,
    the settings and the command; sentence-transformers still loads the folder as it did."""
    import yaml
    from sentence_transformers import SentenceTransformer

    text = (copy_run / "model" / "README.md").read_text(encoding="utf-8")
    _, header, body = text.split("---\n", 2)
    meta = yaml.safe_load(header)
    assert meta["library_name"] == "sentence-transformers" and meta["pipeline_tag"] == "sentence-similarity"
    assert "tsdae" in meta["tags"]
    for expected in ("arXiv:2104.06979", str(tiny_model_dir), "3 lines, SHA-256", "| steps | 200 |", "| --lr | 0.005 |",
                     "| --noise-ratio | 0.0 |", "python ", "SentenceEncoder.from_pretrained", "SentenceTransformer("):
        assert expected in body, expected
    sentences = ["the cat sat on the mat", "a dog"]
    ours = SentenceEncoder.from_pretrained(copy_run / "model").encode(sentences)
    theirs = SentenceTransformer(str(copy_run / "model"), device="cpu").encode(sentences, convert_to_tensor=True)
    assert F.cosine_similarity(ours, theirs).min() >= 0.99999
    out = tmp_path / "run"  # with an evaluation: best/ has a card with its dev score; --log-alignment logs both
    tsdae_train.main(["--corpus", str(copy_run.parent / "corpus.txt"), "--model", str(tiny_model_dir),
                "--out", str(out), "--steps", "2", "--batch-size", "3", "--save-every", "0", "--device", "cpu",
                "--eval-data", str(data_dir), "--eval-every", "1", "--log-alignment"])
    record = json.loads((out / "log.jsonl").read_text().splitlines()[0])
    assert {"eval", "alignment", "uniformity"} <= set(record)
    assert "stsb-dev" in (out / "best" / "README.md").read_text(encoding="utf-8")


def fast_twin(objective: tsdae.TSDAELoss) -> tsdae.TSDAELoss:
    """The objective as tsdae_train.build_objective builds it by default (fast.SparseLookupPackedBert and
    fast.PackedDecoder), with the given one's weights (the same names) and mode."""
    encoder = objective.encoder
    quick = tsdae.TSDAELoss(SentenceEncoder.from_pretrained(encoder.source, encoder.pooling, encoder.max_length,
                                                            fast.SparseLookupPackedBert),
                            normalisation=objective.normalisation, decoder_class=fast.PackedDecoder)
    quick.load_state_dict(objective.state_dict())
    return quick.train(objective.training)
