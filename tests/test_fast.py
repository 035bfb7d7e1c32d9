"""speedups/fast.py: each speed-up gives the numbers of the plain piece it replaces, on the real MiniLM weights."""
import dataclasses

import pytest
import torch
import torch.nn.functional as F

import consert
import data
from speedups import fast
import tsdae
from model import Bert, MultiHeadAttention, SentenceEncoder, attention, load_bert
from lib.corpus import read_corpus



def tsdae_objectives(path: str, tie: bool = True, normalisation: str = "tokens") -> tuple[tsdae.TSDAELoss, ...]:
    """The plain objective and the fast one, as tsdae_train.build_objective builds them, from the same seed."""
    objectives = []
    quick_bert = fast.SparseLookupPackedBert if tie else fast.PackedBert
    for bert_class, decoder_class in ((Bert, tsdae.TSDAEDecoder), (quick_bert, fast.PackedDecoder)):
        torch.manual_seed(0)
        encoder = SentenceEncoder.from_pretrained(path, pooling="cls", max_length=75, bert_class=bert_class)
        objectives.append(tsdae.TSDAELoss(encoder, tie=tie, normalisation=normalisation, decoder_class=decoder_class))
    return tuple(objectives)


def assert_same_gradients(plain: torch.nn.Module, quick: torch.nn.Module, tolerance: float = 1e-5) -> None:
    """Every parameter of the fast objective has the plain one's gradient (the same names); one it freezes
    (SentenceVectorAttention's Q and K) has none, and the plain one's is 0."""
    plain_grads = {name: p.grad for name, p in plain.named_parameters()}
    assert plain_grads.keys() == {name for name, _ in quick.named_parameters()}
    for name, p in quick.named_parameters():
        g = plain_grads[name]
        if not p.requires_grad:
            assert p.grad is None and ".cross_attn." in name and g.abs().max() < 1e-6, name
            continue
        assert p.grad is not None and g is not None, name
        if name.endswith("attn.k.bias"):
            # softmax(q.(k + b)) does not depend on the key bias b: its true gradient is 0, both sides are float noise
            assert p.grad.abs().max() < 1e-6 and g.abs().max() < 1e-6, name
            continue
        assert p.grad.layout == torch.strided, name  # dense, as clipping and the optimiser need it
        scale = max(g.abs().max().item(), 1e-3)
        assert (p.grad - g).abs().max().item() <= tolerance * scale, name


@pytest.fixture(scope="module")
def pairs_batch(minilm_path, sts_sentences) -> dict[str, torch.Tensor]:
    tokenizer = SentenceEncoder.from_pretrained(minilm_path).tokenizer
    dataset = tsdae.DenoisingDataset(sts_sentences[:12], tokenizer, 75)
    batch = tsdae.collate_pairs([dataset[(0, i)] for i in range(12)])
    assert (batch["original_mask"] == 0).any() and (batch["damaged_mask"] == 0).any()  # padding on both sides
    return batch


def test_the_docstring_names_where_each_piece_is_chosen_and_tested():
    """speedups/fast.py's table names every script that builds a fast piece, and its tests the file that holds them."""
    from pathlib import Path

    root, doc = Path(__file__).resolve().parents[1], fast.__doc__
    table = doc[doc.index("chosen where"):doc.index("what each saves")]
    pieces = ("PackedBert", "SparseLookupPackedBert", "PackedDecoder")
    for path in [*root.glob("*.py"), *root.glob("*/*.py")]:
        where = path.relative_to(root).with_suffix("").as_posix()
        code = "\n".join(line for line in path.read_text(encoding="utf-8").splitlines() if not line.lstrip().startswith(
            ("#", '"', "'")))  # calls, not prose
        if where.split("/")[0] not in ("tests", "bench", "docs", "course") and any(f"fast.{c}" in code for c in pieces):
            assert where in table, where
    for tested in ("FusedAttention", "PackedBert", "PackedDecoder", "SentenceVectorAttention",
                   "VocabularyCrossEntropy"):
        files = [name for name in ("test_fast", "test_model", "test_cuda") if f"tests/{name}.py" in doc
                 and f"fast.{tested}" in (root / "tests" / f"{name}.py").read_text(encoding="utf-8")]
        assert files, tested


@pytest.mark.parametrize("tie, normalisation", [(True, "tokens"), (True, "sentence"), (False, "tokens")])
def test_tsdae_fast_equals_plain_loss_and_gradients(minilm_path, pairs_batch, tie, normalisation):
    plain, quick = tsdae_objectives(minilm_path, tie, normalisation)
    plain.eval(), quick.eval()  # eval: dropout off, so both draw nothing
    assert isinstance(quick.encoder.bert, fast.PackedBert) and isinstance(quick.decoder, fast.PackedDecoder)
    assert isinstance(quick.decoder.layers[0].cross_attn, fast.SentenceVectorAttention)
    state, quick_state = plain.state_dict(), quick.state_dict()  # a checkpoint's names, and the same initial values
    assert state.keys() == quick_state.keys() and all(torch.equal(state[n], quick_state[n]) for n in state)
    words = quick.encoder.bert.embeddings.word
    if tie:  # one module: both lookups sparse
        assert quick.decoder.embeddings.word is words and isinstance(words, fast.SparseGradLookup)
    else:  # the encoder keeps the plain lookup: its word matrix would get sparse rows alone
        assert type(words) is torch.nn.Embedding
    losses = []
    for objective in (plain, quick):
        loss = objective(pairs_batch)
        loss.backward()
        losses.append(loss.item())
    assert abs(losses[0] - losses[1]) <= 1e-5 * abs(losses[0])
    assert_same_gradients(plain, quick)
    cross = plain.decoder.layers[0].cross_attn  # what the fast path leaves out has no gradient to give
    assert cross.q.weight.grad.abs().max() < 1e-6 and cross.k.weight.grad.abs().max() < 1e-6


@pytest.mark.parametrize("views", [(("feature_cutoff", 0.2), ("shuffle", 0.0)),
                                   (("token_cutoff", 0.1), ("adversarial", 0.0))])
def test_consert_fast_equals_plain_loss_and_gradients(minilm_path, sts_sentences, views):
    objectives = []
    for bert_class in (Bert, fast.PackedBert):
        encoder = SentenceEncoder.from_pretrained(minilm_path, pooling="mean", max_length=64, bert_class=bert_class)
        consert.switch_off_dropout(encoder)
        objectives.append(consert.AdversarialConSERTLoss(encoder, tuple(consert.View(*view) for view in views),
                                                         adv_norm=1e-2))
    plain, quick = objectives
    ids, mask = data.pad(data.tokenize(encoder.tokenizer, sts_sentences[:10], 64), pad_id=0)  # unbucketed: padding
    losses = []
    for objective in (plain, quick):
        torch.manual_seed(3)  # the views draw the same random numbers on both paths
        loss = objective({"input_ids": ids, "attention_mask": mask, "sentence_keys": torch.arange(len(ids))})
        loss.backward()
        losses.append(loss.item())
    assert abs(losses[0] - losses[1]) <= 1e-5 * abs(losses[0])
    assert_same_gradients(plain, quick)


def test_encode_fast_equals_plain(minilm_path, sts_sentences):
    plain = SentenceEncoder.from_pretrained(minilm_path).encode(sts_sentences, batch_size=16)
    quick = SentenceEncoder.from_pretrained(minilm_path, bert_class=fast.PackedBert).encode(sts_sentences,
                                                                                           batch_size=16)
    torch.testing.assert_close(quick, plain, atol=1e-5, rtol=1e-5)


def test_packed_bert_gives_zeros_at_padding_and_all_layers(minilm_path, sts_sentences):
    bert, packed_bert = load_bert(minilm_path).eval(), load_bert(minilm_path, fast.PackedBert).eval()
    ids, mask = data.pad(data.tokenize(SentenceEncoder.from_pretrained(minilm_path).tokenizer,
                                       sts_sentences[:6], 64), 0)
    with torch.no_grad():
        plain, packed = bert(ids, mask, all_layers=True), packed_bert(ids, mask, all_layers=True)
    assert len(plain) == len(packed) == bert.cfg.num_hidden_layers + 1
    real = mask.bool()
    for a, b in zip(plain, packed):
        torch.testing.assert_close(b[real], a[real], atol=1e-5, rtol=1e-5)
    assert (packed[-1][~real] == 0).all()


def test_sentence_vector_attention_equals_general_attention_over_one_key(tiny_model_dir):
    """SentenceVectorAttention = the MultiHeadAttention it replaces, with the sentence vector as the only key and
    value, whatever Q and K are; in training mode with the same dropout applied to the attention probabilities.
    It works on rows (N, d), each row told its sentence (RowMemory)."""
    cfg = dataclasses.replace(load_bert(tiny_model_dir).cfg, attention_probs_dropout_prob=0.1)
    general = MultiHeadAttention(cfg)
    ours = fast.SentenceVectorAttention(cfg)
    ours.load_state_dict(general.state_dict())  # the same names
    assert not ours.q.weight.requires_grad and not ours.k.bias.requires_grad and ours.v.weight.requires_grad
    B, L, h = 3, 9, cfg.num_attention_heads
    x, s = torch.randn(B, L, cfg.hidden_size), torch.randn(B, 1, cfg.hidden_size)
    rows = fast.RowMemory(s, torch.arange(B).repeat_interleave(L))  # row b * L + t belongs to sentence b
    torch.testing.assert_close(ours.eval()(x.reshape(B * L, -1), memory=rows).view(B, L, -1),
                               general.eval()(x, memory=s))

    ours.train()
    torch.manual_seed(1)
    y = ours(x.reshape(B * L, -1), memory=rows).view(B, L, -1)
    torch.manual_seed(1)
    keep = F.dropout(torch.ones(B * L, 1, h), ours.dropout_p,
                     True).view(B, L, h).transpose(1, 2)[..., None]  # (B, h, L, 1)
    split = lambda t: t.view(B, t.shape[1], h, -1).transpose(1, 2)  # (B, h, L, dh)
    q, k, v = split(general.q(x)), split(general.k(s)), split(general.v(s))
    probs = (q @ k.transpose(-2, -1)).softmax(-1) * keep  # (B, h, L, 1): 1, dropped or scaled
    assert ours.dropout_p > 0 and (keep == 0).any()
    expected = general.out((probs @ v).transpose(1, 2).reshape(B, L, -1))
    torch.testing.assert_close(y, expected)
    torch.testing.assert_close(attention(q, k, v), v.expand_as(q))  # softmax over one key is 1


def test_vocabulary_cross_entropy_equals_the_plain_formula():
    """Loss and all three gradients against F.cross_entropy(F.linear(h, E, b)), in float64, over a vocabulary
    of several chunks (the last one partial) and with an upstream gradient other than 1. E's gradient is written
    into E.grad by the function itself: when E.grad is None, and added when it already holds one."""
    g = torch.Generator().manual_seed(0)
    T, V, d = 7, 2 * fast.VocabularyCrossEntropy.VOCAB_CHUNK + 77, 16
    leaves = [torch.randn(shape, generator=g, dtype=torch.float64, requires_grad=True)
              for shape in ((T, d), (V, d), (V,))]
    y = torch.randint(V, (T,), generator=g)
    y[1] = y[0]  # a repeated label

    def fused(h, E, b):
        return fast.VocabularyCrossEntropy.apply(h, E, b, y)

    def plain(h, E, b):
        return F.cross_entropy(F.linear(h, E, b), y, reduction="sum")

    results = []
    for loss_fn in (fused, plain):
        for leaf in leaves:
            leaf.grad = None
        loss = loss_fn(*leaves)
        (loss * 0.37).backward()
        results.append((loss, *[leaf.grad.clone() for leaf in leaves]))
    for ours, ref in zip(*results):
        torch.testing.assert_close(ours, ref, rtol=1e-12, atol=1e-12)

    E = leaves[1]
    before = E.grad.clone()
    (fused(*leaves) * 0.37).backward()  # a second backward adds, as autograd does
    torch.testing.assert_close(E.grad, 2 * before, rtol=1e-12, atol=1e-12)


def test_word_matrix_gradient_is_summed_without_vocabulary_sized_temporaries(tiny_model_dir, small_corpus):
    """E has three uses (two lookups, the projection). Sparse lookups added into the projection's dense gradient
    give the same gradient as dense lookups, without the (V, d) zero-fills and copies those make."""
    from torch.profiler import profile

    grads, temporaries = [], []
    for bert_class in (fast.SparseLookupPackedBert, fast.PackedBert):  # tied: one lookup module, sparse or not
        torch.manual_seed(0)  # the same cross-attention weights
        encoder = SentenceEncoder.from_pretrained(tiny_model_dir, pooling="cls", bert_class=bert_class)
        obj = tsdae.TSDAELoss(encoder, decoder_class=fast.PackedDecoder).eval()  # eval: no dropout draws
        ds = tsdae.DenoisingDataset(read_corpus(small_corpus), obj.encoder.tokenizer, 64)
        batch = tsdae.collate_pairs([ds[(0, i)] for i in range(8)])
        word = obj.decoder.embeddings.word
        assert obj.encoder.bert.embeddings.word is word
        with profile(record_shapes=True) as prof:
            obj(batch).backward()
        grads.append(word.weight.grad.clone())  # E.grad lives in memory the objective keeps (gradient_memory)
        temporaries.append([e.name for e in prof.events() if e.name in ("aten::fill_", "aten::copy_")
                            and e.input_shapes and list(e.input_shapes[0]) == list(word.weight.shape)])
    assert grads[0].layout == torch.strided  # AdamW needs a dense gradient
    torch.testing.assert_close(grads[0], grads[1])
    assert temporaries[0] == [] and temporaries[1], temporaries  # dense lookups: one zero-fill each


# ---------------------------------------------------------------- the modes the command lines run: AMP, dropout


def gradient_vector(objective: torch.nn.Module) -> torch.Tensor:
    """Every gradient the fast path also has (not the cross-attention's Q and K), in one float64 vector."""
    return torch.cat([p.grad.to_dense().double().flatten() for name, p in sorted(objective.named_parameters())
                      if p.grad is not None and ".cross_attn.q." not in name and ".cross_attn.k." not in name])


def test_fast_equals_plain_under_bf16_autocast(minilm_path, pairs_batch, monkeypatch):
    """Under --amp bf16 the two paths round differently (bf16 keeps 8 significant bits, and the pieces sum in other
    orders), so they cannot agree to 1e-5. The tolerance: fast differs from plain by at most twice what bf16 itself
    moves the plain path away from float32, in the loss and in the whole gradient. And the vocabulary projection,
    the largest matmul of the step, runs in bf16 like the plain F.linear, not in float32."""
    plain, quick = tsdae_objectives(minilm_path)
    plain.eval(), quick.eval()
    results = {}
    for name, objective, amp in (("plain fp32", plain, False), ("plain bf16", plain, True), ("fast bf16", quick, True)):
        objective.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
            loss = objective(pairs_batch)
        loss.backward()
        results[name] = loss.item(), gradient_vector(objective)
    (l32, g32), (lp, gp), (lf, gf) = results.values()
    assert 0 < abs(lp - l32) and abs(lf - lp) <= 2 * abs(lp - l32) + 1e-6 * l32
    assert (gf - gp).norm() <= 2 * (gp - g32).norm()

    projections = []
    real_addmm = torch.addmm

    def addmm(bias, h, E_t, **kw):
        projections.append((h.dtype, E_t.shape[1]))
        return real_addmm(bias, h, E_t, **kw)

    monkeypatch.setattr(torch, "addmm", addmm)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        quick(pairs_batch)
    vocabulary = [dtype for dtype, width in projections if width == fast.VocabularyCrossEntropy.VOCAB_CHUNK]
    assert vocabulary and set(vocabulary) == {torch.bfloat16}


def count_dropouts(monkeypatch) -> list[float]:
    """Every dropout applied from now on, by its rate (nn.Dropout and the attention probabilities both call
    F.dropout)."""
    calls, real = [], F.dropout

    def dropout(x, p=0.5, training=True, inplace=False):
        if training and p > 0:
            calls.append(p)
        return real(x, p, training, inplace)

    monkeypatch.setattr(F, "dropout", dropout)
    return calls


def test_fast_path_applies_dropout_where_the_plain_one_does(minilm_path, pairs_batch, monkeypatch):
    """In train mode the paths draw different dropout masks (PackedBert over packed (N, d) rows, the sentence-vector
    attention over (B, L, h)), so their losses differ draw by draw. What must hold: the same dropouts at the same
    rates, and the same distribution of the loss over many draws (a fast path that skipped a dropout would have a
    lower spread and another mean)."""
    plain, quick = tsdae_objectives(minilm_path)
    plain.train(), quick.train()
    with torch.no_grad():
        calls = {}
        for name, objective in (("plain", plain), ("fast", quick)):
            calls[name] = count_dropouts(monkeypatch)
            objective(pairs_batch)
            monkeypatch.undo()
        layers = plain.encoder.bert.cfg.num_hidden_layers
        assert len(calls["plain"]) == 2 + 3 * layers + 5 * layers  # embeddings twice; encoder and decoder layers
        assert sorted(calls["fast"]) == sorted(calls["plain"])
        draws = 16
        losses = {name: torch.tensor([objective(pairs_batch).item() for _ in range(draws)], dtype=torch.float64)
                  for name, objective in (("plain", plain), ("fast", quick))}
    (mp, sp), (mf, sf) = [(x.mean().item(), x.std().item()) for x in losses.values()]
    assert sp > 0.01 and 0.5 < sf / sp < 2  # both spread over the draws, alike (eval mode: no spread at all)
    assert abs(mf - mp) < 4 * ((sp ** 2 + sf ** 2) / draws) ** 0.5  # the same mean, within the draws' noise
