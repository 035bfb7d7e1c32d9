"""ConSERT: the views on real weights, NT-Xent against a double loop, FGV, supervised fusion, training, CLI."""
import dataclasses
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from types import SimpleNamespace
import torch
import torch.nn.functional as F

import consert
import data
import train
from commands import consert_train
from lib.run import finished
from consert import AdversarialConSERTLoss, ConSERTLoss, SupervisedConSERTLoss, View, nt_xent
from model import SentenceEncoder, pool
from lib.corpus import read_corpus
from lib import datafiles
from lib import errors

ROOT = Path(__file__).resolve().parent.parent
ONE_THREAD = {**os.environ, "OMP_NUM_THREADS": "1"}


@pytest.fixture(autouse=True)
def _one_thread():
    """On 2 cores shared with other jobs, 2 threads spin-wait on each other: 1 thread ran these steps 5-8x faster."""
    torch.set_num_threads(1)


@pytest.fixture(scope="module")
def minilm(minilm_path) -> SentenceEncoder:
    """The real all-MiniLM-L6-v2 with its dropout switched off, as in the official ConSERT runs."""
    encoder = SentenceEncoder.from_pretrained(minilm_path, pooling="mean", max_length=64)
    consert.switch_off_dropout(encoder)
    return encoder.train()


@pytest.fixture(scope="module")
def batch(minilm, sts_sentences) -> tuple[torch.Tensor, torch.Tensor]:
    ids, mask = data.pad(data.tokenize(minilm.tokenizer, sts_sentences[:16], 64), pad_id=0)
    assert (mask == 0).any() and len(set(mask.sum(1).tolist())) > 5  # padding and many lengths
    return ids, mask


@pytest.fixture(scope="module")
def hf_minilm(minilm_path):
    from transformers import BertModel

    return BertModel.from_pretrained(minilm_path).eval()


def embedding_output(encoder: SentenceEncoder, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return encoder.bert.embeddings(ids)  # (B, L, d): what the embedding hook receives


def objective(encoder: SentenceEncoder, view1=("none", 0.0), view2=("none", 0.0), **kw) -> ConSERTLoss:
    """The class consert_train.build_objective picks: with NLI classes the supervised one, with the adversarial view
    (or its norm) the adversarial one, else ConSERT's unsupervised objective."""
    views = (View(*view1), View(*view2))
    if "nli_classes" in kw:
        return SupervisedConSERTLoss(encoder, views, **kw)
    if "adversarial" in (view1[0], view2[0]) or "adv_norm" in kw:
        return AdversarialConSERTLoss(encoder, views, **kw)
    return ConSERTLoss(encoder, views, **kw)


def collate(ids: torch.Tensor, mask: torch.Tensor) -> dict[str, torch.Tensor]:
    keys = consert.sentence_keys([row[m.bool()].tolist() for row, m in zip(ids, mask)])
    return {"input_ids": ids, "attention_mask": mask, "sentence_keys": keys}


# ---------------------------------------------------------------- views on the real MiniLM weights


def test_shuffle_permutes_real_positions_and_equals_hf_with_those_position_ids(minilm, hf_minilm, batch, on_path):
    ids, mask = batch
    torch.manual_seed(5)
    positions = consert.shuffled_positions(mask)
    n, L = mask.sum(1), mask.shape[1]
    for b in range(len(ids)):
        real = positions[b, : n[b]]
        assert sorted(real.tolist()) == list(range(n[b]))  # a permutation of the real tokens' positions
        assert positions[b, n[b]:].tolist() == list(range(n[b], L))  # padding untouched
    assert (positions[:, 0] != 0).any()  # [CLS] (and [SEP]) take part in the shuffle
    assert (positions != torch.arange(L)).any(dim=1).sum() >= len(ids) - 1  # (almost) every row moved
    with torch.no_grad():
        torch.manual_seed(5)  # encode draws the same permutation
        ours = objective(on_path(minilm)).encode(ids, mask, View("shuffle"))
        states = hf_minilm(input_ids=ids, attention_mask=mask, position_ids=positions).last_hidden_state
        plain = objective(on_path(minilm)).encode(ids, mask, View("none"))
    torch.testing.assert_close(ours, pool(states, mask, "mean"), atol=2e-5, rtol=1e-4)
    assert (ours - plain).abs().max() > 1e-2  # word order matters to the encoder


def zero_rows(x: torch.Tensor) -> torch.Tensor:
    return (x == 0).all(dim=-1)  # (B, L)


def assert_gradient_is_the_kept_part(cutoff, x: torch.Tensor, mask: torch.Tensor) -> None:
    """The gradient check of a cutoff view: the encoder trains through it, so the gradient of the view's sum
    reaches x: 1 at every entry kept, 0 at every entry cut."""
    leaf = x.clone().requires_grad_()
    y = cutoff(leaf, mask, 0.2)
    assert y.requires_grad, f"no gradient: {cutoff.__name__}'s output is cut from x (.detach(), torch.no_grad()?)"
    y.sum().backward()
    assert leaf.grad is not None and torch.equal(leaf.grad, (y != 0).to(x.dtype)), (
        f"the gradient of {cutoff.__name__} with respect to x must be 1 where x is kept and 0 where it is cut")


def test_token_cutoff_zeroes_int_n_rate_real_token_rows_and_nothing_else(minilm, batch):
    ids, mask = batch
    x = embedding_output(minilm, ids)
    assert not zero_rows(x).any()
    for rate in (0.1, 0.2, 0.5):
        y = consert.token_cutoff(x, mask, rate)
        cut = zero_rows(y)
        for b in range(len(ids)):
            n = int(mask[b].sum())
            assert cut[b].sum() == int(n * rate) and not cut[b, n:].any()  # among the real tokens only
        assert torch.equal(y[~cut], x[~cut])  # every other row is untouched
    assert_gradient_is_the_kept_part(consert.token_cutoff, x, mask)


def test_feature_cutoff_zeroes_int_d_rate_whole_columns_and_nothing_else(minilm, batch):
    ids, mask = batch
    x = embedding_output(minilm, ids)
    d = x.shape[-1]
    y = consert.feature_cutoff(x, mask, 0.2)
    cut = (y == 0).all(dim=1)  # (B, d): columns zero at every position
    assert (cut.sum(1) == int(d * 0.2)).all()
    assert len({tuple(row.nonzero().flatten().tolist()) for row in cut}) == len(ids)  # chosen per sentence
    keep = ~cut[:, None, :].expand_as(x)
    assert torch.equal(y[keep], x[keep])
    assert_gradient_is_the_kept_part(consert.feature_cutoff, x, mask)


def test_cutoffs_cut_every_real_token_and_feature_equally_often_at_any_rate():
    """Held back (assignments.HELD_BACK). Rate 0 cuts nothing, rate 1 every real token row (or every feature
    column) and no padding row; at rate r each real token is cut int(n r) / n of the time, each feature
    int(d r) / d of the time, and padding never."""
    x = torch.randn(3, 6, 10)
    mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 0], [1, 0, 0, 0, 0, 0]])
    assert torch.equal(consert.token_cutoff(x, mask, 0.0), x) and torch.equal(consert.feature_cutoff(x, mask, 0.0), x)
    assert torch.equal(zero_rows(consert.token_cutoff(x, mask, 1.0)), mask.bool())
    assert (consert.feature_cutoff(x, mask, 1.0) == 0).all()
    many_x, many_mask = x.repeat(5000, 1, 1), mask.repeat(5000, 1)  # 5000 copies of the batch: 5000 draws
    token_share = zero_rows(consert.token_cutoff(many_x, many_mask, 0.4)).view(5000, 3, 6).double().mean(0)
    expected = torch.tensor([[2 / 6] * 6, [2 / 5] * 5 + [0], [0.0] * 6], dtype=torch.float64)  # int(6 * 0.4) = 2, ...
    torch.testing.assert_close(token_share, expected, atol=0.04, rtol=0)
    feature_share = (consert.feature_cutoff(many_x, many_mask, 0.3) == 0).all(1).view(5000, 3, 10).double().mean(0)
    torch.testing.assert_close(feature_share, torch.full((3, 10), 0.3, dtype=torch.float64), atol=0.04, rtol=0)


def test_shuffle_is_a_uniform_permutation_of_each_sentences_positions():
    """Held back (assignments.HELD_BACK). Each real token takes each of its sentence's n positions 1/n of the
    time; padding, and a sentence of one token, never move."""
    mask = torch.tensor([[1, 1, 1, 1, 0, 0], [1, 0, 0, 0, 0, 0], [1, 1, 1, 1, 1, 1]])
    draws = consert.shuffled_positions(mask.repeat(4000, 1)).view(4000, 3, 6)  # 4000 copies of the batch
    assert (draws[:, 0, 4:] == torch.tensor([4, 5])).all() and (draws[:, 1] == torch.arange(6)).all()
    for b, n in ((0, 4), (2, 6)):
        assert (draws[:, b, :n].sort(-1).values == torch.arange(n)).all()  # a permutation of 0..n-1
        share = F.one_hot(draws[:, b, :n], n).double().mean(0)  # (token, position)
        torch.testing.assert_close(share, torch.full((n, n), 1 / n, dtype=torch.float64), atol=0.04, rtol=0)


def test_span_starts_anywhere_in_the_sentence_equally_often():
    """Held back (assignments.HELD_BACK). Every start from 0 to n - keep is drawn equally often, the span has
    keep = max(int(n (1 - rate)), 1) tokens, and a sentence of one token keeps it."""
    mask = torch.tensor([[1] * 10, [1] + [0] * 9, [1] * 4 + [0] * 6])
    draws = consert.span_mask(mask.repeat(4000, 1), 0.5).view(4000, 3, 10)  # 4000 copies of the batch
    assert (draws[:, 1] == mask[1]).all()
    for b, n, keep in ((0, 10, 5), (2, 4, 2)):
        assert (draws[:, b].sum(-1) == keep).all()
        starts = draws[:, b].argmax(-1)  # the span's first position
        share = torch.bincount(starts, minlength=n - keep + 1).double() / len(draws)
        torch.testing.assert_close(share, torch.full((n - keep + 1,), 1 / (n - keep + 1), dtype=torch.float64),
                                   atol=0.04, rtol=0)


def test_span_keeps_one_contiguous_run_of_the_promised_length(minilm, batch, on_path):
    ids, mask = batch
    for rate in (0.1, 0.5, 0.9):
        kept = consert.span_mask(mask, rate)
        for b in range(len(ids)):
            n = int(mask[b].sum())
            where = kept[b].nonzero().flatten().tolist()
            assert len(where) == max(int(n * (1 - rate)), 1)
            assert where == list(range(where[0], where[0] + len(where))) and where[-1] < n  # one run, inside
    with torch.no_grad():  # the pooled vector is the span's own: masked tokens neither attend nor are pooled
        obj = objective(on_path(minilm))
        torch.manual_seed(6)
        keep = consert.span_mask(mask, 0.5)[0].bool()
        torch.manual_seed(6)  # encode draws the same span
        z = obj.encode(ids, mask, View("span", 0.5))
        x = obj.encoder.bert.embed(ids[:1, keep], position_ids=keep.nonzero().T)  # sentence 0's span alone
        alone = obj.layers_and_pool(x, torch.ones(1, int(keep.sum()), dtype=torch.long))
    torch.testing.assert_close(z[:1], alone, atol=1e-5, rtol=1e-4)


def test_dropout_view_zeroes_int_n_d_rate_real_entries_without_rescaling(minilm, batch):
    ids, mask = batch
    x = embedding_output(minilm, ids)
    d = x.shape[-1]
    y = consert.embedding_dropout(x, mask, 0.1)
    changed = y != x
    assert (y[changed] == 0).all()  # zeroed, and every other entry is exactly as it was (no 1/(1-p) factor)
    for b in range(len(ids)):
        n = int(mask[b].sum())
        assert changed[b].sum() == int(n * d * 0.1) and not changed[b, n:].any()


def test_views_draw_fresh_randomness_on_every_call(minilm, batch):
    ids, mask = batch
    x = embedding_output(minilm, ids)
    assert not torch.equal(consert.shuffled_positions(mask), consert.shuffled_positions(mask))
    assert not torch.equal(consert.span_mask(mask, 0.5), consert.span_mask(mask, 0.5))
    for view in (consert.token_cutoff, consert.feature_cutoff, consert.embedding_dropout):
        assert not torch.equal(view(x, mask, 0.2), view(x, mask, 0.2)), view.__name__
    view = View("feature_cutoff", 0.2)  # the same view draws anew on every pass
    assert not torch.equal(consert.augment(x, mask, view)[0], consert.augment(x, mask, view)[0])


def test_simcse_passes_differ_only_through_the_encoders_own_dropout(minilm_path, minilm, batch):
    ids, mask = batch[0][:4], batch[1][:4]
    with torch.no_grad():
        off = objective(minilm)  # dropout switched off: two plain passes are identical
        unaugmented = [off.encode(ids, mask, View("none")) for _ in range(2)]
        assert torch.equal(*unaugmented)
        on = objective(SentenceEncoder.from_pretrained(minilm_path).train())  # the checkpoint's dropout 0.1
        z1, z2 = on.encode(ids, mask, View("simcse")), on.encode(ids, mask, View("simcse"))
    assert 0.7 < F.cosine_similarity(z1, z2).min() and (z1 - z2).abs().max() > 1e-3


def test_switch_off_dropout_leaves_the_saved_config_alone(minilm, tmp_path):
    assert all(m.p == 0 for m in minilm.bert.modules() if isinstance(m, torch.nn.Dropout))
    minilm.save_pretrained(tmp_path / "m")
    assert json.loads((tmp_path / "m" / "config.json").read_text())["hidden_dropout_prob"] == 0.1


# ---------------------------------------------------------------- NT-Xent


def nt_xent_double_loop(z1: torch.Tensor, z2: torch.Tensor, t: float, same: torch.Tensor | None = None,
                        normalise: bool = True, with_itself: bool = False, both_views: bool = True) -> torch.Tensor:
    """The textbook definition, one item at a time, in float64 (a scalar tensor, its graph kept for the gradient
    check); candidates that are copies of the item's sentence (same[i, j]) are left out, except its own other view.
    normalise=False, with_itself=True, both_views=False: three of the usual mistakes, to name them."""
    z1, z2 = (F.normalize(z.double(), dim=-1) if normalise else z.double() for z in (z1, z2))
    N, total = len(z1), 0.0
    same = torch.eye(N, dtype=torch.bool) if same is None else same
    for anchors, others in ((z1, z2), (z2, z1))[: 2 if both_views else 1]:
        direction = 0.0
        for i in range(N):
            candidates = [others[i]] + [others[j] for j in range(N) if not same[i, j]] \
                + [anchors[k] for k in range(N) if not same[i, k] or (with_itself and k == i)]
            scores = torch.stack([anchors[i] @ c / t for c in candidates])
            direction = direction - (scores[0] - scores.logsumexp(0))  # positive: others[i]
        total = total + direction / N
    return total


def nt_xent_mistakes(z1: torch.Tensor, z2: torch.Tensor, t: float, same: torch.Tensor | None) -> dict[str, float]:
    """{the likely cause: the loss it gives} for the usual mistakes (ASSIGNMENTS.md, exercise 8)."""
    loop = lambda **kw: nt_xent_double_loop(z1, z2, kw.pop("t", t), same, **kw).item()
    right = loop()
    return {
        "the vectors not normalised: sim(a, b) is the cosine over the temperature (F.normalize each row first)":
            loop(normalise=False),
        "the temperature multiplied instead of divided: sim = cosine / temperature": loop(t=1 / t),
        "no temperature: sim = cosine / temperature": loop(t=1.0),
        "each item among its own candidates (self-similarity): leave j = k out, e.g. the diagonal set to -inf":
            loop(with_itself=True),
        "a sentence's copies left among its candidates: same[i, j] leaves them out (both views), all but the "
        "positive": nt_xent_double_loop(z1, z2, t).item() if same is not None else float("nan"),
        "the mean over all 2N items: the official code sums the mean over view 1's rows and the mean over view 2's "
        "(twice that)": right / 2,
        "a sum over the items: the loss is the mean over view 1's rows plus the mean over view 2's": right * len(z1),
        "one direction only: add view 2's rows against view 1 (the mean over both views)": loop(both_views=False),
    }


def assert_nt_xent(z1: torch.Tensor, z2: torch.Tensor, t: float, same: torch.Tensor | None = None) -> None:
    """nt_xent equals the double loop; when it does not, the message names the likely cause first (robust to NaN
    and inf: a comparison with NaN is false, so the test asks for closeness, never for a difference)."""
    yours = (nt_xent(z1, z2, t, same) if same is not None else nt_xent(z1, z2, t)).item()
    expected = nt_xent_double_loop(z1, z2, t, same).item()
    if abs(yours - expected) <= 1e-5 * expected:
        return
    causes = [what for what, loss in nt_xent_mistakes(z1, z2, t, same).items()
              if math.isfinite(loss) and abs(yours - loss) <= 1e-4 * abs(loss)]
    hint = f"likely {causes[0]}" if causes else ("it is not a number (NaN or inf): a log of 0, or a division by 0?"
                                                 if not math.isfinite(yours) else
                                                 "it matches none of the usual mistakes (normalisation, temperature, "
                                                 "self-similarity, copies, the mean over both views)")
    pytest.fail(f"{hint}. nt_xent gives {yours:.6g} for N = {len(z1)}, temperature {t}"
                f"{', with a copy in the batch' if same is not None else ''}; the double loop gives {expected:.6g}",
                pytrace=False)


def test_nt_xent_equals_a_double_loop():
    torch.manual_seed(1)
    for N, t in ((5, 0.1), (8, 0.05), (2, 1.0)):
        assert_nt_xent(torch.randn(N, 16), torch.randn(N, 16), t)


def test_nt_xent_backpropagates_the_double_loops_gradient_to_both_views():
    """The loss trains the encoder only through its gradient with respect to the vectors: it must reach z1 and z2
    and equal the double loop's."""
    torch.manual_seed(3)
    z1, z2 = torch.randn(6, 16, requires_grad=True), torch.randn(6, 16, requires_grad=True)
    loss = nt_xent(z1, z2, 0.1)
    if not loss.requires_grad:
        pytest.fail("no gradient: nt_xent's loss is cut from z1 and z2 (a .detach(), torch.no_grad(), .item() or a "
                    "new tensor built from the values inside it): training would not move the encoder", pytrace=False)
    loss.backward()
    reference = [z.detach().double().requires_grad_() for z in (z1, z2)]
    expected = nt_xent_double_loop(*reference, 0.1)
    expected.backward()
    same_loss = abs(loss.item() - expected.item()) <= 1e-5 * expected.item()
    for name, z, ref in (("z1", z1, reference[0]), ("z2", z2, reference[1])):
        assert z.grad is not None and (z.grad != 0).any(), f"no gradient reaches {name}: it is cut inside nt_xent"
        difference = (z.grad.double() - ref.grad).abs().max().item()
        assert difference <= 1e-5 * ref.grad.abs().max().item(), (
            f"the gradient with respect to {name} differs from the double loop's by up to {difference:.3g}: "
            + ("the losses agree, so a part of the loss is computed without its graph (.detach() on a term?)"
               if same_loss else "so does the loss; test_nt_xent_equals_a_double_loop names the likely cause"))


def test_nt_xent_is_one_matrix_product_with_no_loop_over_the_items():
    """ASSIGNMENTS.md asks for one matrix product, no Python loop over the items: the PyTorch calls nt_xent makes
    (each function, method and operator, counted) do not grow with the batch."""
    from torch.overrides import TorchFunctionMode

    class Counted(TorchFunctionMode):
        calls = 0

        def __torch_function__(self, func, types, args=(), kwargs=None):
            Counted.calls += 1
            return func(*args, **(kwargs or {}))

    calls = {}
    for N in (8, 64):
        torch.manual_seed(N)
        z1, z2 = torch.randn(N, 16), torch.randn(N, 16)
        Counted.calls = 0
        with Counted():
            nt_xent(z1, z2, 0.1)
        calls[N] = Counted.calls
    assert calls[64] <= calls[8] + 8, (
        f"a Python loop over the items: nt_xent makes {calls[8]} PyTorch calls for N = 8 and {calls[64]} for N = 64; "
        "ASSIGNMENTS.md asks for one matrix product over all 2N items (r @ r.T), with no loop")


def test_nt_xent_is_lower_for_identical_views_than_for_views_shuffled_across_sentences():
    torch.manual_seed(2)
    z = torch.randn(32, 64)
    matched, shuffled = nt_xent(z, z, 0.1), nt_xent(z, z[torch.randperm(32)], 0.1)
    assert matched < 2 * math.log(2 * 32 - 1) < shuffled  # below chance level, and above it


def test_nt_xent_by_hand_on_orthogonal_views_and_its_symmetries():
    """Held back (assignments.HELD_BACK). One sentence: its only candidate is its positive, the loss is 0.
    N orthogonal unit vectors as both views: each item scores 1/t with its positive and 0 with the 2N - 2 others,
    so each direction's loss is log(1 + (2N - 2) e^(-1/t)). The loss ignores the vectors' lengths and which view
    comes first."""
    assert nt_xent(torch.randn(1, 8), torch.randn(1, 8), 0.1).item() == pytest.approx(0.0, abs=1e-6)
    N, t = 6, 0.2
    e = torch.eye(N, 10)
    assert nt_xent(e, e, t).item() == pytest.approx(2 * math.log(1 + (2 * N - 2) * math.exp(-1 / t)), rel=1e-5)
    torch.manual_seed(8)
    z1, z2 = torch.randn(7, 16), torch.randn(7, 16)
    loss = nt_xent(z1, z2, 0.1).item()
    assert nt_xent(z1 * (0.1 + 5 * torch.rand(7, 1)), 3 * z2, 0.1).item() == pytest.approx(loss, rel=1e-5)
    assert nt_xent(z2, z1, 0.1).item() == pytest.approx(loss, rel=1e-5)


# ---------------------------------------------------------------- adversarial view (FGV)


def test_adversarial_view_raises_the_supervised_loss_and_has_the_given_norm(minilm, data_dir):
    pairs = datafiles.read_nli(data_dir / "sick" / "SICK_trial.txt")[:8]
    obj = objective(minilm, ("none", 0), ("adversarial", 0), nli_classes=3, adv_norm=1e-2)
    b = consert.collate_nli([consert.NLIDataset(pairs, minilm.tokenizer, 64)[(0, i)] for i in range(8)])
    premise_mask = b["premise_mask"]
    v = obj.encode(b["hypothesis_ids"], b["hypothesis_mask"], View("none")).detach()

    def supervised_loss(u):
        return F.cross_entropy(obj.classifier(consert.nli_features(u, v, obj.nli_feature_kind)), b["labels"])

    premise = obj.unaugmented(b["premise_ids"], premise_mask)
    u, x = premise.z, premise.embedding_output  # x: the premises' embedding output
    loss = supervised_loss(u)
    r = consert.fgv_perturbation(loss, x, norm=1e-2)
    norms = r.norm(dim=-1)
    real = premise_mask.bool()
    torch.testing.assert_close(norms[real], torch.full_like(norms[real], 1e-2), atol=1e-7, rtol=1e-5)
    assert (norms[~real] == 0).all()  # padding gets no perturbation
    (g,) = torch.autograd.grad(loss, x, retain_graph=True)
    with torch.no_grad():
        plus_r, minus_r = obj.layers_and_pool(x + r, premise_mask), obj.layers_and_pool(x - r, premise_mask)
        raised, lowered = supervised_loss(plus_r) - loss, supervised_loss(minus_r) - loss
    first_order = (g * r).sum()
    assert raised > 0 > lowered
    assert abs(raised - first_order) < 0.1 * first_order  # the step is small: the linear term dominates


def test_unsupervised_adversarial_view_raises_the_contrastive_loss(minilm, batch):
    """This project's extension: without labels, FGV on the contrastive loss against the other view."""
    ids, mask = batch
    obj = objective(minilm, ("shuffle", 0), ("adversarial", 0), adv_norm=1e-2)
    other = obj.encode(ids, mask, View("shuffle")).detach()
    unaugmented = obj.unaugmented(ids, mask)
    z, x = unaugmented.z, unaugmented.embedding_output
    loss = nt_xent(z, other, 0.1)
    r = consert.fgv_perturbation(loss, x, 1e-2)
    with torch.no_grad():
        attacked = nt_xent(obj.layers_and_pool(x + r, mask), other, 0.1)
    assert attacked > loss
    assert obj(collate(ids, mask)).isfinite()  # and the objective runs end to end with it


def test_last_two_layers_mean_equals_hf_hidden_states(minilm, hf_minilm, sts_sentences, on_path):
    ids, mask = data.pad(data.tokenize(minilm.tokenizer, sts_sentences[:8], 64), pad_id=0)
    with torch.no_grad():
        states = hf_minilm(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states
    expected = (pool(states[-1], mask, "mean") + pool(states[-2], mask, "mean")) / 2
    encoder = on_path(minilm)
    ours = SentenceEncoder(encoder.bert, encoder.tokenizer, "last2-mean", 64).encode(sts_sentences[:8])
    torch.testing.assert_close(ours, expected, atol=2e-5, rtol=1e-4)
    assert minilm.training  # encode() gives the training mode back


# ---------------------------------------------------------------- data


def test_sts_corpus_is_the_official_89192_sentences(data_dir):
    sentences = datafiles.sts_corpus(data_dir)
    assert len(sentences) == 89192 and all(s.strip() == s and s for s in sentences)


def test_nli_readers(tmp_path, data_dir):
    sick = datafiles.read_nli(data_dir / "sick" / "SICK_train.txt")
    assert len(sick) == 4500 and {label for *_, label in sick} == {0, 1, 2}
    assert len(datafiles.read_nli(data_dir / "sick" / "SICK.txt")) == 9840  # the full release: entailment_label
    snli = datafiles.read_nli(data_dir / "nli" / "snli_dev.jsonl")
    assert len(snli) == 9842
    f = tmp_path / "raw.jsonl"  # SNLI's own field names; '-' = no gold label, skipped
    f.write_text('{"sentence1": "a", "sentence2": "b", "gold_label": "neutral"}\n\n'
                 '{"sentence1": "c", "sentence2": "d", "gold_label": "-"}\n', encoding="utf-8")
    assert datafiles.read_nli(f) == [("a", "b", datafiles.NLI_LABELS["neutral"])]


@pytest.mark.parametrize("content, message", [
    (b'{"premise": "a", "hypothesis": "b", "label": "maybe"}\n', "line 1: label 'maybe' is not entailment"),
    (b'{"premise": "a", "hypothesis": "b", "label": "neutral"}\n{"premise": "a"\n', "line 2 is not valid JSON"),
    (b'{"premise": "a", "label": "neutral"}\n', 'expected string fields "premise", "hypothesis" and "label"'),
    (b"just a sentence\n", "not an NLI file"),
    (b"pair_ID\tsentence_A\tsentence_B\tentailment_judgment\n1\ta b\n", "line 2 has 2 tab-separated fields"),
    (b'{"premise": "a", "hypothesis": "b", "label": "-"}\n', "has no labelled NLI pairs"),
])
def test_bad_nli_file_gets_a_clear_error(content, message, tmp_path):
    nli = tmp_path / "nli.jsonl"
    nli.write_bytes(content)
    with pytest.raises(errors.CorpusError) as err:
        datafiles.read_nli(nli)
    assert message in str(err.value) and "\n" not in str(err.value)


# ---------------------------------------------------------------- training


def run(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "consert.py"), *map(str, args)], capture_output=True, text=True,
                          timeout=600, env=ONE_THREAD)


def log(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]


def losses(out: Path) -> list[float]:
    return [record["loss"] for record in log(out)]


def tiny(model_dir, out, *extra) -> list[str]:
    return ["--model", str(model_dir), "--out", str(out), "--batch-size", "8", "--save-every", "0", *map(str, extra)]


def test_tiny_model_lowers_the_contrastive_loss(tiny_model_dir, small_corpus, tmp_path):
    consert_train.main(["--corpus", str(small_corpus), *tiny(tiny_model_dir, tmp_path, "--batch-size", 16,
                                                             "--steps", 60, "--lr", "3e-3", "--cl-weight", 1)])
    curve = losses(tmp_path)
    chance = 2 * math.log(2 * 16 - 1)
    assert sum(curve[:5]) / 5 > 0.5 * chance and sum(curve[-5:]) / 5 < 0.3 * sum(curve[:5]) / 5


@pytest.mark.parametrize("strategy", ["sup", "joint", "sup-unsup", "joint-unsup"])
def test_fusion_strategies_train_on_sick(strategy, tiny_model_dir, small_corpus, data_dir, tmp_path):
    views = ["--nli-view2", "adversarial", "--view1", "none", "--view2", "adversarial"]  # FGV: on NLI, then without
    views = views if strategy == "joint-unsup" else []
    contrastive = ["--corpus", str(small_corpus), "--steps", 2] if "-" in strategy else []  # sup, joint: none
    consert_train.main(["--strategy", strategy, "--nli", str(data_dir / "sick" / "SICK_train.txt"),
                        *tiny(tiny_model_dir, tmp_path, "--nli-steps", 3, *contrastive, *views)])
    if "-" in strategy:  # stage 1 on NLI into OUT/stage1, stage 2 contrastive from its model into OUT
        assert len(losses(tmp_path / "stage1")) == 3 and len(losses(tmp_path)) == 2
        state = torch.load(tmp_path / "stage1" / "checkpoint" / "training_state.pt", weights_only=True)
        assert any(k.startswith("classifier.") for k in state["objective"])
        assert not any(k.startswith("classifier.") for k in
                       torch.load(tmp_path / "checkpoint" / "training_state.pt", weights_only=True)["objective"])
    else:
        assert len(losses(tmp_path)) == 3
    assert all(math.isfinite(x) for x in losses(tmp_path))
    SentenceEncoder.from_pretrained(tmp_path / "model")


def test_joint_loss_is_supervised_plus_weighted_contrastive(tiny_model_dir, data_dir):
    encoder = SentenceEncoder.from_pretrained(tiny_model_dir, pooling="mean")
    pairs = datafiles.read_nli(data_dir / "sick" / "SICK_trial.txt")[6:12]  # pairs 8 and 11: the same premise
    b = consert.collate_nli([consert.NLIDataset(pairs, encoder.tokenizer, 64)[(0, i)] for i in range(6)])
    joint = objective(encoder, ("none", 0), ("none", 0), nli_classes=3, joint=True, cl_weight=0.5)
    sup = objective(encoder, nli_classes=3)
    sup.classifier = joint.classifier
    with torch.no_grad():
        plain = [joint.encode(b[f"{side}_ids"], b[f"{side}_mask"], View("none")) for side in ("premise", "hypothesis")]
        same = [b[f"{side}_keys"][:, None] == b[f"{side}_keys"][None, :] for side in ("premise", "hypothesis")]
        assert same[0].sum() > 6  # SICK repeats premises: the masking of copies is part of the check
        cl = nt_xent(plain[0], plain[0], 0.1, same[0]) + nt_xent(plain[1], plain[1], 0.1, same[1])
        torch.testing.assert_close(joint(b), sup(b) + 0.5 * cl)


def test_resume_continues_the_same_loss_sequence_across_both_stages(tiny_model_dir, small_corpus, data_dir, tmp_path,
                                                                     monkeypatch):
    nli = data_dir / "sick" / "SICK_trial.txt"
    common = ["--strategy", "joint-unsup", "--nli", str(nli), "--corpus", str(small_corpus), "--nli-steps", 5,
              "--steps", 6, "--view1", "feature_cutoff", "--view2", "shuffle", "--lr", "1e-3"]
    consert_train.main(tiny(tiny_model_dir, tmp_path / "a", *common))

    calls = {"n": 0}

    def stopping(real_forward):
        def forward(self, batch):  # Ctrl-C at the given calls: in stage 1 (call 3), then in stage 2 (call 4 + 3)
            calls["n"] += 1
            if calls["n"] in calls.get("stop", ()):
                raise KeyboardInterrupt
            return real_forward(self, batch)
        return forward

    for stage_class in (SupervisedConSERTLoss, ConSERTLoss):  # joint, then unsup
        monkeypatch.setattr(stage_class, "forward", stopping(stage_class.forward))
    calls["stop"] = (3,)
    with pytest.raises(SystemExit):
        consert_train.main(tiny(tiny_model_dir, tmp_path / "b", *common))
    calls.update(n=0, stop=(5,))  # resumed: stage 1 does steps 3-5 (calls 1-3), stage 2 stops at its step 2
    with pytest.raises(SystemExit):
        consert_train.main(tiny(tiny_model_dir, tmp_path / "b", *common, "--resume"))
    calls.update(n=0, stop=())
    consert_train.main(tiny(tiny_model_dir, tmp_path / "b", *common, "--resume"))  # stage 1 finished:
    # only stage 2 goes on
    assert calls["n"] == 6 - 1
    assert losses(tmp_path / "a" / "stage1") == losses(tmp_path / "b" / "stage1")
    assert losses(tmp_path / "a") == losses(tmp_path / "b")


def test_eval_data_keeps_the_best_dev_checkpoint(tiny_model_dir, small_corpus, data_dir, tmp_path):
    consert_train.main(["--corpus", str(small_corpus), *tiny(tiny_model_dir, tmp_path, "--steps", 3, "--lr", "1e-3",
                                                       "--eval-data", data_dir, "--eval-every", 2,
                                                       "--eval-pooling", "last2-mean")])
    scores = [r["eval"] for r in log(tmp_path) if "eval" in r]
    assert len(scores) == 1  # at step 2 of 3: best/ holds step 2, model/ step 3
    from evaluate import evaluate

    best = SentenceEncoder.from_pretrained(tmp_path / "best")
    assert best.pooling == "mean"  # saved with plain mean pooling; last2-mean is applied at evaluation only
    last2 = SentenceEncoder(best.bert, best.tokenizer, "last2-mean", best.max_length,
                            source=best.source)  # its Normalize too
    assert abs(evaluate(last2, ["stsb-dev"], data_dir)["stsb-dev"] - scores[0]) < 1e-6
    final = SentenceEncoder.from_pretrained(tmp_path / "model")
    assert not torch.equal(final.bert.layers[0].ffn.up.weight, best.bert.layers[0].ffn.up.weight)


@pytest.mark.parametrize("args, message", [
    (["--corpus", "{missing}"], "does not exist"),
    (["--sts-corpus", "{tmp}"], "--sts-corpus: missing"),
    (["--corpus", "{corpus}", "--eval-data", "{tmp}"], "--eval-task stsb-dev: missing data file"),
    (["--strategy", "joint", "--nli", "{missing}"], "does not exist"),
])
def test_bad_input_stops_before_training(args, message, tmp_path, small_corpus, tiny_model_dir):
    paths = {"missing": tmp_path / "nope.txt", "tmp": tmp_path, "corpus": small_corpus}
    with pytest.raises(errors.UsageError, match=message):
        consert_train.main([a.format(**paths) for a in args]
                           + ["--model", str(tiny_model_dir), "--out", str(tmp_path / "o")])
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("nli, message", [
    (b'{"premise": "a", "hypothesis": "b", "label": "maybe"}\n', "line 1: label 'maybe' is not entailment"),
    (None, "does not exist"),
])
def test_bad_input_gets_one_line_error_from_the_cli(nli, message, tmp_path, tiny_model_dir):
    path = tmp_path / "nli.jsonl"
    if nli is not None:
        path.write_bytes(nli)
    result = run("--strategy", "sup", "--nli", path, "--model", tiny_model_dir, "--out", tmp_path / "o")
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("argv, message", [
    (["--strategy", "joint"], "needs --nli"),
    ([], "needs exactly one of --corpus and --sts-corpus"),
    (["--corpus", "x", "--view1", "adversarial", "--view2", "adversarial"], "only one view"),
    (["--corpus", "x", "--view1", "simcse", "--encoder-dropout", "off"], "simcse"),
    (["--corpus", "x", "--rate1", "1.0"], "--rate1 must be in [0, 1)"),
    (["--strategy", "sup", "--nli", "x", "--nli-view2", "shuffle"], "--nli-view2 would change nothing"),
    (["--strategy", "sup-unsup", "--nli", "x", "--corpus", "x", "--nli-rate1", "0.1"], "--nli-rate1 would change"),
    (["--strategy", "joint", "--nli", "x", "--nli-view1", "simcse", "--nli-view2", "simcse"], "compare each vector"),
    (["--strategy", "joint", "--nli", "x", "--nli-view2", "none"], "both the one unaugmented pass"),
    (["--strategy", "sup", "--nli", "x", "--lr", "1e-5", "--steps", "100"], "no contrastive stage: --lr, --steps"),
    (["--strategy", "joint", "--nli", "x", "--corpus", "x"], "no contrastive stage: --corpus"),
    (["--corpus", "x", "--nli", "x", "--nli-lr", "1e-5"], "no NLI stage: --nli, --nli-lr would change nothing"),
    (["--corpus", "x", "--nli-features", "u,v,|u-v|"], "no NLI stage: --nli-features"),
    (["--corpus", "x", "--rate2", "0.3"], "--rate2 would change nothing: the shuffle view takes no rate"),
    (["--corpus", "x", "--view1", "simcse", "--rate1", "0.1"], "--rate1 would change nothing: the simcse view"),
    (["--strategy", "joint", "--nli", "x", "--nli-view1", "none", "--nli-rate1", "0.2"], "--nli-rate1 would change"),
    (["--strategy", "sup", "--nli", "x", "--few-shot", "100"], "no contrastive stage: --few-shot"),
    (["--strategy", "joint", "--nli", "x", "--few-shot", "100", "--upsample"], "--few-shot, --upsample would"),
    (["--strategy", "sup", "--nli", "x", "--temperature", "0.05"], "no contrastive loss: --temperature would"),
    (["--strategy", "sup", "--nli", "x", "--cl-weight", "1"], "no contrastive loss: --cl-weight would"),
    (["--corpus", "x", "--adv-norm", "0.5"], "--adv-norm would change nothing: no view is adversarial"),
    (["--strategy", "sup", "--nli", "x", "--adv-norm", "0.5"], "--adv-norm would change nothing"),
    (["--corpus", "x", "--patience", "3"], "nothing is evaluated (no --eval-data, --heldout or dev file of your own): "
                                           "--patience would change nothing"),
    (["--corpus", "x", "--eval-pooling", "last2-mean"], "nothing is evaluated"),
    (["--corpus", "x", "--log-alignment"], "--log-alignment logs on STS-b dev in --eval-data: give --eval-data too"),
    (["--corpus", "x", "--eval-every", "50"], "--eval-every would change nothing: nothing is evaluated"),
    (["--sts-corpus", "data", "--bad-lines", "skip"], "--bad-lines would change nothing: --sts-corpus"),
    (["--corpus", "x", "--bucketing", "--plain"], "--plain would change nothing: with --bucketing"),
])
def test_flag_combinations_are_checked(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        consert_train.parse_args(argv)
    assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_cli_on_default_model_writes_a_sentence_transformers_model(tmp_path, sts_sentences):
    from sentence_transformers import SentenceTransformer

    corpus = tmp_path / "sentences.txt"
    corpus.write_text("\n".join(sts_sentences) + "\n", encoding="utf-8")
    result = run("--corpus", corpus, "--steps", 6, "--batch-size", 8, "--out", tmp_path / "out")
    assert result.returncode == 0, result.stderr[-2000:]
    assert len(losses(tmp_path / "out")) == 6
    ours = SentenceEncoder.from_pretrained(tmp_path / "out" / "model")
    assert ours.pooling == "mean" and ours.max_length == 64 + 3  # the official count: min(n, 64) + 3 tokens
    st = SentenceTransformer(str(tmp_path / "out" / "model"), device="cpu")
    theirs = st.encode(sts_sentences, convert_to_tensor=True)
    assert F.cosine_similarity(ours.encode(sts_sentences), theirs).min() >= 0.99999


# ---------------------------------------------------------------- as the official code trains (yym6472/ConSERT)


def test_default_batches_are_a_uniform_shuffle_not_length_buckets(tiny_model_dir, data_dir):
    """The official loader is DataLoader(shuffle=True): within a batch, sentence lengths spread as in a random
    draw. Length buckets (--bucketing) make the batch's sentences nearly equal in length."""
    sentences = datafiles.sts_corpus(data_dir)[:4800]
    encoder = SentenceEncoder.from_pretrained(tiny_model_dir)
    lengths = torch.tensor(data.token_lengths(encoder.tokenizer, sentences, 64), dtype=torch.float)

    def mean_spread(batches) -> float:  # the mean over batches of (longest - shortest) sentence
        return sum(float(lengths[b].max() - lengths[b].min()) for b in batches) / len(batches)

    spreads = {}
    for name, argv in (("default", []), ("bucketing", ["--bucketing"])):
        args = consert_train.parse_args(["--corpus", "x", *argv])
        loader = consert_train.stage_loader(consert_train.stages(args)[0], sentences, encoder, args,
                                            torch.device("cpu"))
        spreads[name] = mean_spread([[i for _, i in keys] for keys in loader.batch_sampler])
    shuffled = torch.randperm(len(sentences), generator=torch.Generator().manual_seed(0)).split(96)
    spreads["random"] = mean_spread([b.tolist() for b in shuffled])
    assert abs(spreads["default"] - spreads["random"]) < 0.1 * spreads["random"], spreads
    assert spreads["bucketing"] < 0.1 * spreads["default"], spreads


def test_a_copy_of_a_sentence_in_the_batch_is_not_its_negative(minilm, sts_sentences):
    """nt_xent leaves a sentence's copies out of its candidates: with sentence 3 repeated as sentence 0 the loss
    equals the double loop without those pairs. The objective finds copies by their token ids (sentence_keys)."""
    torch.manual_seed(4)
    z1, z2 = torch.randn(6, 16), torch.randn(6, 16)
    z1[3], z2[3] = z1[0] + 0.1 * torch.randn(16), z2[0] + 0.1 * torch.randn(16)  # its views differ, as views do
    same = torch.eye(6, dtype=torch.bool)
    same[0, 3] = same[3, 0] = True
    assert_nt_xent(z1, z2, 0.1, same)
    assert abs(nt_xent(z1, z2, 0.1).item() - nt_xent_double_loop(z1, z2, 0.1, same).item()) > 1e-3  # a negative

    ids, mask = data.pad(data.tokenize(minilm.tokenizer, sts_sentences[:5] + sts_sentences[:1], 64), pad_id=0)
    batch = collate(ids, mask)
    keys = batch["sentence_keys"]
    assert keys[0] == keys[5] and len(set(keys[:5].tolist())) == 5
    obj = objective(minilm, ("none", 0), ("none", 0), cl_weight=1.0)  # dropout off: both views equal
    with torch.no_grad():
        z = obj.encode(ids, mask, View("none"))
        assert torch.isclose(obj(batch), nt_xent(z, z, 0.1, keys[:, None] == keys[None, :]))
        assert not torch.isclose(obj(batch), nt_xent(z, z, 0.1))


@pytest.mark.parametrize("strategy, expected", [
    ("unsup", [("unsup", (("feature_cutoff", 0.2), ("shuffle", 0.0)), 5e-7, 10, False, 10)]),
    ("sup", [("sup", (("none", 0.0), ("token_cutoff", 0.1)), 2e-5, 1, True, 0)]),
    ("joint", [("joint", (("none", 0.0), ("token_cutoff", 0.1)), 2e-5, 1, True, 0)]),
    ("sup-unsup", [("sup", (("none", 0.0), ("token_cutoff", 0.1)), 2e-5, 1, True, 0),
                   ("unsup", (("none", 0.0), ("feature_cutoff", 0.1)), 5e-7, 25, True, 10)]),
    ("joint-unsup", [("joint", (("none", 0.0), ("token_cutoff", 0.1)), 2e-5, 1, True, 0),
                     ("unsup", (("none", 0.0), ("shuffle", 0.0)), 5e-7, 25, True, 10)]),
])
def test_each_strategy_gets_the_official_scripts_settings(strategy, expected):
    """scripts/{unsup,sup-sbert,sup-consert-joint,...}-base.sh of yym6472/ConSERT: views, lr, epochs, BERT's
    dropout (on unless --no_dropout, which only the unsupervised script passes), early-stopping patience."""
    argv = ["--strategy", strategy] + (["--nli", "x"] if strategy != "unsup" else []) \
        + (["--corpus", "y"] if "unsup" in strategy else [])
    stages = consert_train.stages(consert_train.parse_args(argv))
    got = [(s.kind, tuple((v.name, v.rate) for v in s.views), s.lr, s.epochs, s.dropout, s.patience) for s in stages]
    assert got == expected
    args = consert_train.parse_args(argv)
    assert args.nli_features == "u,v,|u-v|,max(u,v)^2" and not args.bucketing
    off = ["--encoder-dropout", "off"] if "unsup" in strategy else []  # sup, joint: no contrastive stage
    off += ["--nli-encoder-dropout", "off"] if strategy != "unsup" else []  # unsup: no NLI stage
    assert consert_train.stages(consert_train.parse_args(argv + off))[-1].dropout is False


def test_nli_classifier_reads_u_v_abs_difference_and_max_squared(tiny_model_dir, data_dir):
    encoder = SentenceEncoder.from_pretrained(tiny_model_dir, pooling="mean")
    pairs = datafiles.read_nli(data_dir / "sick" / "SICK_trial.txt")[:4]
    b = consert.collate_nli([consert.NLIDataset(pairs, encoder.tokenizer, 64)[(0, i)] for i in range(4)])
    d = encoder.bert.cfg.hidden_size
    for features, width in (("u,v,|u-v|,max(u,v)^2", 4 * d), ("u,v,|u-v|", 3 * d)):
        obj = objective(encoder, nli_classes=3, nli_features=features).eval()
        assert obj.classifier.in_features == width
        with torch.no_grad():
            u, v = (obj.encode(b[f"{side}_ids"], b[f"{side}_mask"], View("none")) for side in ("premise", "hypothesis"))
            x = torch.cat([u, v, (u - v).abs()] + ([torch.maximum(u, v) ** 2] if width == 4 * d else []), dim=-1)
            torch.testing.assert_close(obj(b), F.cross_entropy(obj.classifier(x), b["labels"]))


def test_a_run_that_evaluated_names_its_best_score_and_folder(tiny_model_dir, small_corpus, tmp_path, capsys):
    consert_train.main(["--corpus", str(small_corpus), *tiny(tiny_model_dir, tmp_path, "--steps", 2, "--heldout", 4,
                                                       "--eval-every", 1)])
    best = min(r["eval"] for r in log(tmp_path) if "eval" in r)  # heldout-loss: lower is better
    assert f"best heldout-loss {best:.4g}: encoder saved to {tmp_path / 'best'}" in capsys.readouterr().out
    assert (tmp_path / "best" / "model.safetensors").exists()


def test_stage_two_trains_with_its_own_settings_from_stage_one(tiny_model_dir, small_corpus, data_dir, tmp_path):
    consert_train.main(["--strategy", "sup-unsup", "--nli", str(data_dir / "sick" / "SICK_trial.txt"), "--corpus",
                  str(small_corpus), *tiny(tiny_model_dir, tmp_path, "--nli-steps", 10, "--steps", 10)])
    peak = lambda folder: max(record["lr"] for record in log(folder))
    assert peak(tmp_path / "stage1") == pytest.approx(2e-5) and peak(tmp_path) == pytest.approx(5e-7)


def test_early_stopping_after_patience_evaluations_without_a_better_score(tiny_model_dir, small_corpus, tmp_path):
    """The official schedule (sentence-transformers' fit, which the ConSERT code runs): every eval_every steps of
    each epoch, and at each epoch's end; an epoch's last step that is also an eval_every step is evaluated twice,
    the second time without improvement, and patience counts both."""
    scores = iter([50.0, 52.0, 51.0, 51.5, 60.0, 70.0])

    def eval_fn(encoder):
        return next(scores)

    encoder = SentenceEncoder.from_pretrained(tiny_model_dir)
    obj = objective(encoder, ("shuffle", 0.0), ("feature_cutoff", 0.2))
    args = consert_train.parse_args(["--corpus", str(small_corpus), "--batch-size", "4"])  # 16 sentences: 4 steps
    loader = consert_train.stage_loader(consert_train.stages(args)[0], read_corpus(small_corpus), encoder, args,
                                       torch.device("cpu"))
    settings = train.TrainSettings(out=tmp_path, steps=100, lr=1e-4, eval_every=2, eval_fn=eval_fn, keep_best=True,
                                   patience=2)
    state = train.train(encoder, obj, loader, settings, torch.device("cpu"))
    # step 2: 50; step 4 (every 2nd step AND the epoch's end): 52, best, counted again: 1 without improvement;
    # step 6: 51, 2 without improvement: patience ran out
    assert state.step == 6 and state.best == 52.0 and state.done
    assert [(r["step"], r["eval"]) for r in log(tmp_path) if "eval" in r] == [(2, 50.0), (4, 52.0), (6, 51.0)]
    assert finished(tmp_path) and (tmp_path / "best").exists()
    settings.eval_every, settings.out, scores = 3, tmp_path / "b", iter(range(100))  # steps 3 and 4 of each epoch
    train.train(encoder, obj, loader, dataclasses.replace(settings, steps=9, eval_fn=lambda e: next(scores)),
                torch.device("cpu"))
    assert [r["step"] for r in log(tmp_path / "b") if "eval" in r] == [3, 4, 7, 8]


def test_adversarial_view_perturbs_the_unaugmented_pass_itself(minilm_path, batch):
    """As the official code: the adversarial view is the unaugmented pass's own embedding output (its dropout draw;
    the gradient flows through it) plus r, run through the layers again; no fresh embedding pass."""
    ids, mask = batch
    encoder = SentenceEncoder.from_pretrained(minilm_path, pooling="mean").train()  # dropout on, as in NLI stages
    obj = objective(encoder, ("none", 0), ("adversarial", 0), adv_norm=1e-2, cl_weight=1.0)
    outputs, real_embed = [], encoder.bert.embed

    def embed(*args, **kw):
        outputs.append(real_embed(*args, **kw))
        return outputs[-1]

    encoder.bert.embed = embed
    loss = obj(collate(ids, mask))
    (g,) = torch.autograd.grad(loss, outputs[0])
    assert len(outputs) == 1  # one embedding pass serves view 1 and the attack
    assert g[mask.bool()].abs().sum(-1).min() > 0  # both views' gradients flow into it


def test_official_optimizer_is_adamw_without_bias_correction_warmed_up_from_zero(tmp_path):
    """--optimizer official: transformers' old AdamW(correct_bias=False), decay after the update, and the linear
    warm-up of get_linear_schedule_with_warmup, which starts at lr 0."""
    p = torch.nn.Parameter(torch.tensor([1.0, -2.0]))
    opt = consert_train.OfficialAdamW([{"params": [p], "weight_decay": 0.01}], lr=0.1, eps=1e-6)
    m = v = torch.zeros(2)
    expected = p.detach().clone()
    for g in (torch.tensor([0.5, 0.25]), torch.tensor([-0.1, 0.3])):
        p.grad = g.clone()
        opt.step()
        m, v = 0.9 * m + 0.1 * g, 0.999 * v + 0.001 * g * g
        expected = expected - 0.1 * m / (v.sqrt() + 1e-6)
        expected = expected - 0.1 * 0.01 * expected
    torch.testing.assert_close(p.detach(), expected)
    settings = train.TrainSettings(out=tmp_path, steps=95, lr=1.0, warmup_ratio=0.1, schedule="linear",
                                   lr_factor_fn=train.linear_schedule_with_warmup)  # warm-up: ceil(9.5) = 10 steps
    assert [train.lr_factor(step, settings) for step in (0, 5, 10)] == [0.0, 0.5, 1.0]
    assert train.lr_factor(0, dataclasses.replace(settings, lr_factor_fn=None)) == 1 / 9  # int(9.5) steps
    assert consert_train.parse_args(["--corpus", "x"]).optimizer == "official"  # the default


@pytest.mark.parametrize("flag, stepped", [([], "official"), (["--optimizer", "pytorch"], "pytorch")])
def test_the_chosen_optimizer_is_the_one_that_steps(flag, stepped, tiny_model_dir, small_corpus, tmp_path, monkeypatch):
    """--optimizer reaches training: the default run steps OfficialAdamW with the official warm-up from lr 0,
    --optimizer pytorch steps torch's AdamW."""
    calls = {"official": 0, "pytorch": 0}
    official_step, torch_step = consert_train.OfficialAdamW.step, torch.optim.AdamW.step

    def count(name, real):
        def step(self, *a, **kw):
            calls[name] += 1
            return real(self, *a, **kw)
        return step

    monkeypatch.setattr(consert_train.OfficialAdamW, "step", count("official", official_step))
    monkeypatch.setattr(torch.optim.AdamW, "step", count("pytorch", torch_step))
    consert_train.main(["--corpus", str(small_corpus), "--model", str(tiny_model_dir), "--out", str(tmp_path),
                        "--batch-size", "4", "--steps", "3", *flag])
    assert calls[stepped] == 3 and sum(calls.values()) == 3
    first_lr = json.loads((tmp_path / "log.jsonl").read_text().splitlines()[0])["lr"]
    assert (first_lr == 0.0) == (stepped == "official")  # the official warm-up starts at lr 0


@pytest.mark.quick
def test_few_shot_upsampling_fills_an_epoch_of_the_full_corpus():
    """§5.3 with the official --do_upsampling: N sentences repeated up to the corpus's size, each floor or ceil of
    (size / N) times, so an epoch holds as many batches as on the full corpus; without it, the N sentences once."""
    from collections import Counter

    from lib.corpus import few_shot

    corpus = [f"sentence {i}" for i in range(1003)]
    for n in (1, 7, 100, 1003):
        upsampled = few_shot(corpus, n, seed=3, upsample=True)
        counts = Counter(upsampled)
        assert len(upsampled) == len(corpus) and len(counts) == n
        assert set(counts.values()) <= {len(corpus) // n, -(-len(corpus) // n)}
        assert len(data.BatchSampler(len(upsampled), 96)) == len(data.BatchSampler(len(corpus), 96))
        once = few_shot(corpus, n, seed=3)
        assert len(once) == n and set(once) == set(counts)  # the same N sentences, in the corpus's order
        assert once == sorted(once, key=corpus.index)
    assert set(few_shot(corpus, 100, seed=3)) != set(few_shot(corpus, 100, seed=4))


def test_few_shot_run_trains_an_epoch_of_the_full_corpus(tiny_model_dir, small_corpus, tmp_path, capsys):
    consert_train.main(["--corpus", str(small_corpus), *tiny(tiny_model_dir, tmp_path / "up", "--batch-size", 4,
                                                             "--epochs", 1, "--few-shot", 3, "--upsample")])
    assert "ConSERT unsup: 16 sentences" in capsys.readouterr().out
    assert len((tmp_path / "up" / "log.jsonl").read_text().splitlines()) == 4  # 16 sentences, batches of 4
    consert_train.main(["--corpus", str(small_corpus), *tiny(tiny_model_dir, tmp_path / "once", "--batch-size", 4,
                                                             "--epochs", 1, "--few-shot", 3)])
    assert "ConSERT unsup: 3 sentences" in capsys.readouterr().out


# ---------------------------------------------------------------- the flags of the NLI stage and of the attack


def test_the_nli_stage_flags_reach_its_views_lr_and_epochs(tmp_path):
    """--nli-view1, --nli-rate1, --nli-rate2, --nli-lr and --nli-epochs replace the official NLI stage's entries
    (consert_train.stages); its lr is the optimiser's (stage_settings), its epochs the steps' count (run_stage)."""
    official = consert_train.stages(consert_train.parse_args(["--nli", "pairs.jsonl", "--strategy", "joint-unsup",
                                                              "--corpus", "c.txt"]))
    flags = ["--nli", "pairs.jsonl", "--strategy", "joint-unsup", "--corpus", "c.txt", "--nli-view1", "feature_cutoff",
             "--nli-rate1", "0.3", "--nli-rate2", "0.25", "--nli-lr", "3e-5", "--nli-epochs", "2"]
    args = consert_train.parse_args(flags)
    nli, unsup = consert_train.stages(args)
    assert official[0].views == consert_train.NLI_VIEWS and (official[0].lr, official[0].epochs) == (2e-5, 1)
    assert nli.views == (View("feature_cutoff", 0.3), View("token_cutoff", 0.25))  # view 2 stays the official one
    assert (nli.lr, nli.epochs) == (3e-5, 2)
    assert unsup == official[1]  # the contrastive stage keeps its own settings
    pairs = [("a man plays", "a person plays", 0)]
    four_batches = SimpleNamespace(batch_sampler=range(4))  # what stage_settings reads of the loader: its length
    settings = consert_train.stage_settings(nli, tmp_path, False, four_batches, args, flags, pairs, None)
    assert (settings.lr, settings.steps) == (3e-5, 2 * 4)  # --nli-lr, and --nli-epochs passes over 4 batches


def test_a_view_named_without_a_rate_gets_one_only_if_it_takes_one():
    """--view1 NAME without --rate1: 0.2 for the cutoffs, span and dropout, none for the others (a SimCSE run's
    first line says "views simcse + simcse", not "simcse 0.2")."""
    stage = consert_train.stages(consert_train.parse_args(["--corpus", "c.txt", "--view1", "simcse", "--view2",
                                                           "simcse"]))[0]
    assert stage.views == (View("simcse"), View("simcse"))
    assert "views simcse + simcse," in consert_train.describe(stage, ["a"] * 10)
    stage = consert_train.stages(consert_train.parse_args(["--corpus", "c.txt", "--view1", "span", "--view2",
                                                           "shuffle"]))[0]
    assert stage.views == (View("span", 0.2), View("shuffle"))


def test_adv_norm_is_the_length_of_the_adversarial_perturbation(tiny_model_dir, small_corpus, monkeypatch):
    """--adv-norm reaches the objective build_objective picks for an adversarial view, and every real token of the
    view moves by that length (fgv_perturbation)."""
    args = consert_train.parse_args(["--corpus", str(small_corpus), "--view2", "adversarial", "--adv-norm", "0.05",
                                     "--plain"])
    stage = consert_train.stages(args)[0]
    encoder = consert_train.build_encoder(stage, tiny_model_dir, args)
    obj = consert_train.build_objective(stage, encoder, args, world=1)
    assert type(obj) is AdversarialConSERTLoss and obj.adv_norm == 0.05
    perturbations, real_fgv = [], consert.fgv_perturbation
    monkeypatch.setattr(consert, "fgv_perturbation", lambda *a: perturbations.append(real_fgv(*a)) or perturbations[-1])
    ids = data.tokenize(encoder.tokenizer, read_corpus(small_corpus)[:4], 32)
    obj(consert.collate_sentences(ids))
    (r,) = perturbations
    lengths = r.norm(dim=-1)[consert.collate_sentences(ids)["attention_mask"].bool()]  # (real tokens,)
    assert torch.allclose(lengths, torch.full_like(lengths, 0.05), rtol=1e-3)


@pytest.mark.parametrize("optimizer", ["official", "pytorch"])
def test_a_constant_schedule_keeps_the_peak_lr_and_a_longer_run_resumes_the_shorter(optimizer, tiny_model_dir,
                                                                                   small_corpus, tmp_path):
    """--schedule constant: the peak lr at every step (no warm-up, no decay), so a run to 4 steps resumed to 8 logs
    the same steps as one run to 8 (examples/domain_claim.py's learning curves grow so); the official schedule
    warms up and decays over the run's length instead."""
    def trained(out, steps, *more):
        consert_train.main(["--corpus", str(small_corpus), "--model", str(tiny_model_dir), "--out", str(out),
                            "--batch-size", "4", "--steps", str(steps), "--optimizer", optimizer, "--lr", "1e-3",
                            "--save-every", "0", *more])
        return [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]

    assert [r["lr"] for r in trained(tmp_path / "once", 8, "--schedule", "constant")] == [1e-3] * 8
    trained(tmp_path / "twice", 4, "--schedule", "constant")
    resumed = trained(tmp_path / "twice", 8, "--schedule", "constant", "--resume")
    once = [json.loads(line) for line in (tmp_path / "once" / "log.jsonl").read_text().splitlines()]
    assert [(r["step"], r["lr"]) for r in resumed] == [(r["step"], r["lr"]) for r in once]
    assert [r["loss"] for r in resumed] == pytest.approx([r["loss"] for r in once], rel=1e-5)
    official = [r["lr"] for r in trained(tmp_path / "official", 8)]
    assert official[-1] < 1e-3  # decay toward 0 over the run's length (8 steps: no warm-up step for pytorch's)
