"""The cached gradient (speedups/gradcache.py): the whole batch's loss and gradient in chunks, in training mode with its
random draws, for every view and every strategy; the refusal where it is not exact."""
from pathlib import Path

import pytest
import torch

import consert
import finetune
from commands import consert_train
from speedups import gradcache
from lib import weights
from model import Bert, BertConfig, SentenceEncoder

# every view but the adversarial one, each in some pair; ConSERT's official unsupervised pair first
VIEW_PAIRS = [("feature_cutoff", "shuffle"), ("none", "token_cutoff"), ("span", "dropout"), ("simcse", "simcse")]
CHUNK = 3  # sentences per chunk: 8 sentences make chunks of 3, 3 and 2


@pytest.fixture(scope="module")
def encoder(minilm_path) -> SentenceEncoder:
    """A small random BERT with dropout, so that training mode draws masks in every layer."""
    cfg = BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                     max_position_embeddings=128, hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)
    torch.manual_seed(0)
    return SentenceEncoder(Bert(cfg), weights.load_tokenizer(Path(minilm_path)), "mean", 64)


@pytest.fixture(scope="module")
def sentences(sts_sentences) -> list[str]:
    return sts_sentences[:8]


def sentence_batch(encoder: SentenceEncoder, sentences: list[str]) -> dict[str, torch.Tensor]:
    dataset = consert.SentenceDataset(sentences, encoder.tokenizer, encoder.max_length)
    return consert.collate_sentences([dataset[(0, i)] for i in range(len(sentences))])


def nli_batch(encoder: SentenceEncoder, sentences: list[str]) -> dict[str, torch.Tensor]:
    pairs = [(sentences[i], sentences[(i + 3) % len(sentences)], i % 3) for i in range(len(sentences))]
    dataset = consert.NLIDataset(pairs, encoder.tokenizer, encoder.max_length)
    return consert.collate_nli([dataset[(0, i)] for i in range(len(pairs))])


def loss_and_gradients(objective: torch.nn.Module, batch: dict, seed: int = 1,
                       bf16: bool = False) -> tuple[float, dict]:
    """The loss and every gradient, as train.py makes them: the forward (under bf16 autocast if asked), then the
    backward outside autocast."""
    objective.zero_grad(set_to_none=True)
    torch.manual_seed(seed)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        loss = objective(batch)
    loss.backward()
    return loss.item(), {name: p.grad.clone() for name, p in objective.named_parameters() if p.grad is not None}


def assert_same(a: tuple[float, dict], b: tuple[float, dict], tolerance: float = 1e-5) -> None:
    assert a[0] == pytest.approx(b[0], abs=tolerance)
    assert a[1].keys() == b[1].keys() and len(a[1]) > 30  # every parameter of the encoder (and the classifier)
    for name in a[1]:
        assert (a[1][name] - b[1][name]).abs().max() < tolerance, name


def chunked(objective: consert.ConSERTLoss, size: int, cache: bool = True) -> consert.ConSERTLoss:
    """The objective as consert_train.build_objective builds it for --micro-batch: the same encoder (in its mode),
    settings and classifier."""
    settings = dict(temperature=objective.temperature, cl_weight=objective.cl_weight, micro_batch=size, cache=cache)
    if isinstance(objective, consert.SupervisedConSERTLoss):
        twin = gradcache.ChunkedSupervisedConSERTLoss(objective.encoder, objective.views,
                                                      objective.classifier.out_features, joint=objective.joint,
                                                      **settings)
        twin.classifier = objective.classifier
    else:
        twin = gradcache.ChunkedConSERTLoss(objective.encoder, objective.views, **settings)
    return twin  # the encoder's mode is the one the test set


def strategies(encoder: SentenceEncoder, sentences: list[str], views: tuple[str, str]):
    """(name, objective, batch) of the three objectives a stage can have: sup-unsup and joint-unsup are a sup or
    joint stage followed by an unsup one."""
    pair = (consert.View(views[0], 0.2), consert.View(views[1], 0.2))
    yield "unsup", consert.ConSERTLoss(encoder, pair), sentence_batch(encoder, sentences)
    yield "sup", consert.SupervisedConSERTLoss(encoder, pair, nli_classes=3), nli_batch(encoder, sentences)
    yield "joint", consert.SupervisedConSERTLoss(encoder, pair, nli_classes=3, joint=True), \
        nli_batch(encoder, sentences)


@pytest.mark.parametrize("views", VIEW_PAIRS)
def test_the_cached_gradient_is_the_gradient_of_the_whole_batch(encoder, sentences, views):
    """Training mode, dropout on: the cached step's loss and gradients equal one graph over the whole batch with the
    same draws (the chunks encoded with their graphs kept: the memory the cached gradient saves)."""
    for name, objective, batch in strategies(encoder, sentences, views):
        objective.train()
        whole = loss_and_gradients(chunked(objective, CHUNK, cache=False), batch)
        cached = loss_and_gradients(chunked(objective, CHUNK), batch)
        assert_same(whole, cached)


def test_without_random_draws_it_is_the_plain_objective(encoder, sentences):
    """Nothing drawn (no dropout, views without randomness): chunks or not, the same loss and gradients as
    consert.ConSERTLoss on the whole batch, unsupervised and joint."""
    quiet = SentenceEncoder(encoder.bert, encoder.tokenizer, "mean", 64)
    quiet.bert.eval()  # eval mode: no dropout
    for name, objective, batch in strategies(quiet, sentences, ("none", "none")):
        assert_same(loss_and_gradients(objective, batch),
                    loss_and_gradients(chunked(objective, CHUNK), batch))


def test_the_replay_of_the_random_state_is_what_makes_it_exact(encoder, sentences, monkeypatch):
    """Encoded again from another random state (the sentence-transformers bug), the gradient is another one."""
    objective = consert.ConSERTLoss(encoder, (consert.View("simcse"), consert.View("simcse"))).train()
    batch = sentence_batch(encoder, sentences)
    whole = loss_and_gradients(chunked(objective, CHUNK, cache=False), batch)
    monkeypatch.setattr(gradcache, "set_random_state", lambda state, device: None)
    stale = loss_and_gradients(chunked(objective, CHUNK), batch)
    assert stale[0] == pytest.approx(whole[0], abs=1e-6)  # the forward is the same ...
    assert max((stale[1][n] - whole[1][n]).abs().max() for n in whole[1]) > 1e-3  # ... the gradient is not


def test_the_random_state_goes_on_as_without_chunks(encoder, sentences):
    """The replay happens inside fork_rng: after the step, the run's generator is where the forward left it."""
    objective = chunked(
        consert.ConSERTLoss(encoder, (consert.View("simcse"), consert.View("shuffle"))).train(), CHUNK)
    torch.manual_seed(4)
    loss = objective(sentence_batch(encoder, sentences))
    after_forward = torch.get_rng_state()
    loss.backward()
    assert torch.equal(torch.get_rng_state(), after_forward)


def test_under_bf16_autocast_the_replay_runs_in_bf16_too(encoder, sentences, monkeypatch):
    """As train.py runs it: the forward under autocast, the backward outside it, so the replay must enter autocast
    itself: every chunk's vectors replayed in the backward are the forward's to the last bit. (Replayed in float32
    they differ by bf16's rounding, and the gradients by about 0.02 of their largest entry, which the bf16 noise
    between one graph and the chunks, about 0.013, would hide.)"""
    objective = consert.ConSERTLoss(encoder, (consert.View("feature_cutoff", 0.2), consert.View("shuffle"))).train()
    batch = sentence_batch(encoder, sentences)
    whole = loss_and_gradients(chunked(objective, CHUNK, cache=False), batch, bf16=True)
    encoded, real_encode = [], consert.ConSERTLoss.encode

    def recording(self, *args):
        z = real_encode(self, *args)
        encoded.append(z.detach().clone())
        return z

    monkeypatch.setattr(consert.ConSERTLoss, "encode", recording)
    cached = loss_and_gradients(chunked(objective, CHUNK), batch, bf16=True)
    forward, replayed = encoded[: len(encoded) // 2], encoded[len(encoded) // 2 :]  # 2 views x 3 chunks each
    assert len(replayed) == 6 and all(any(torch.equal(z, f) for f in forward) for z in replayed)
    # One graph sums the chunks' gradients of a bf16 weight copy in bf16 (autocast casts each weight once per
    # region); the cached step adds each chunk's in float32. So: equal within a few bf16 steps (2^-8 each) of the
    # largest entry, not to the digit.
    assert whole[0] == pytest.approx(cached[0], abs=1e-6)
    for name in whole[1]:
        assert (whole[1][name] - cached[1][name]).abs().max() <= 2 ** -5 * whole[1][name].abs().max() + 1e-7, name


def test_the_adversarial_view_is_refused_in_one_line(encoder, small_corpus, capsys):
    adversarial = (consert.View("none"), consert.View("adversarial"))
    with pytest.raises(ValueError, match="--micro-batch cannot take the adversarial view"):
        gradcache.ChunkedSupervisedConSERTLoss(encoder, adversarial, 3, micro_batch=4, joint=True)
    with pytest.raises(ValueError, match="unknown view"):  # ConSERTLoss makes no adversarial view, chunked or not
        gradcache.ChunkedConSERTLoss(encoder, adversarial, micro_batch=4)
    with pytest.raises(SystemExit) as exit_:
        consert_train.parse_args(["--corpus", str(small_corpus), "--view2", "adversarial", "--micro-batch", "4"])
    assert exit_.value.code == 2
    assert "error: --micro-batch cannot take the adversarial view" in capsys.readouterr().err
    # the sup stage trains the classifier alone: its views, adversarial or not, are never made
    assert gradcache.ChunkedSupervisedConSERTLoss(encoder, adversarial, 3, micro_batch=4).micro_batch == 4


@pytest.mark.parametrize("kind", ["triplets", "cosent"])
def test_supervised_fine_tuning_in_chunks_is_the_whole_batch(encoder, sentences, kind):
    """finetune.SupervisedLoss through the cached gradient (--micro-batch): with dropout on, the same loss and
    gradients as one graph over the whole batch with the same draws; without dropout, as the plain objective."""
    rows = [(sentences[i], sentences[(i + 3) % 8]) + ((sentences[(i + 5) % 8],) if kind == "triplets" else (i % 4,))
            for i in range(8)]
    columns = ("anchor", "positive", "negative") if kind == "triplets" else ("sentence1", "sentence2", "score")
    dataset = finetune.ExampleDataset(rows, columns, encoder.tokenizer, encoder.max_length)
    batch = finetune.collate_examples([dataset[(0, i)] for i in range(8)])
    chunked = lambda enc, cache: gradcache.ChunkedSupervisedLoss(enc, micro_batch=CHUNK, cache=cache)
    encoder.train()
    assert_same(loss_and_gradients(chunked(encoder, False), batch), loss_and_gradients(chunked(encoder, True), batch))
    quiet = SentenceEncoder(encoder.bert, encoder.tokenizer, "mean", 64).eval()
    assert_same(loss_and_gradients(finetune.SupervisedLoss(quiet), batch),
                loss_and_gradients(chunked(quiet, True), batch))
    encoder.train()
