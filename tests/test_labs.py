"""The labs of LABS.md (labs/), each its own entry point beside the paper's scripts: the masked token cutoff (lab 1),
noise drawn once (lab 2), shared dropout masks (lab 3), a decoder that reads the token states (lab 5); SimCSE without
dropout (lab 4), flags of ConSERT itself; and lab 6's finding, that the two loss normalisations train alike when every
step is clipped."""
import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn as nn

import consert
import train
import tsdae
from commands import consert_train, tsdae_train
from conftest import losses_with_scrambled_token_states
from labs import contrastive, masked_cutoff, noise_once, shared_dropout, token_memory
from labs.masked_cutoff import MaskedCutoffConSERTLoss, masked_token_cutoff
from labs.noise_once import NoiseOnceDataset
from labs.shared_dropout import SharedDropoutConSERTLoss
from labs.token_memory import TokenMemoryTSDAELoss, TokenStates
from consert import ConSERTLoss, View
from model import Bert, MultiHeadAttention, SentenceEncoder
from speedups import fast
from lib.weights import load_tokenizer
from lib.corpus import read_corpus
from lib import errors


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


# ---------------------------------------------------------------- lab 1: token cutoff, masked


def test_masked_token_cutoff_zeroes_and_masks_out_the_same_int_n_rate_tokens():
    torch.manual_seed(1)
    lengths = [12, 7, 3, 9, 1]
    mask = (torch.arange(12)[None, :] < torch.tensor(lengths)[:, None]).long()  # (5, 12)
    x = torch.randn(5, 12, 16)
    for rate in (0.1, 0.3, 0.5, 0.9):
        y, new_mask = masked_token_cutoff(x, mask, rate)
        cut = (mask == 1) & (new_mask == 0)  # (B, L)
        assert ((new_mask == 1) <= (mask == 1)).all()  # only real tokens leave the mask
        assert torch.equal((y == 0).all(-1), cut)  # the zeroed rows are exactly the masked-out ones
        assert [int(c) for c in cut.sum(1)] == [int(n * rate) for n in lengths]
        assert torch.equal(y[~cut], x[~cut])  # every other row untouched


@pytest.mark.parametrize("path", ["plain", "fast"])
def test_a_masked_cut_token_is_neither_attended_to_nor_pooled(tiny_model_dir, path):
    """The view's vector of a sentence is that of the sentence without its cut tokens (the others keep their
    positions); the official token_cutoff's is not."""
    from speedups import fast

    bert_class = Bert if path == "plain" else fast.PackedBert
    encoder = SentenceEncoder.from_pretrained(tiny_model_dir, pooling="mean", bert_class=bert_class)
    obj = MaskedCutoffConSERTLoss(encoder, (View("none"), View("token_cutoff_masked", 0.4))).eval()
    ids = torch.randint(1000, 2000, (2, 10))
    mask = torch.ones(2, 10, dtype=torch.long)
    mask[1, 6:] = 0
    with torch.no_grad():
        torch.manual_seed(6)
        _, kept = masked_token_cutoff(torch.zeros(2, 10, 1), mask, 0.4)
        for name in ("token_cutoff_masked", "token_cutoff"):
            torch.manual_seed(6)  # encode draws the same cut
            z = obj.encode(ids, mask, View(name, 0.4))  # (2, d)
            for b in range(2):
                keep = kept[b].bool()
                x = obj.encoder.bert.embed(ids[b : b + 1, keep], position_ids=keep.nonzero().T)
                alone = obj.layers_and_pool(x, torch.ones(1, int(keep.sum()), dtype=torch.long))  # (1, d)
                if name == "token_cutoff_masked":
                    torch.testing.assert_close(z[b : b + 1], alone, atol=1e-5, rtol=1e-4)
                else:
                    assert (z[b] - alone[0]).abs().max() > 1e-3


# ---------------------------------------------------------------- lab 2: TSDAE noise drawn once


def test_noise_once_gives_every_epoch_the_same_damaged_sentence(minilm_path, sts_sentences):
    tokenizer = load_tokenizer(Path(minilm_path))
    once = NoiseOnceDataset(sts_sentences, tokenizer, 75, seed=3)
    assert [once[(0, i)] for i in range(20)] == [once[(1, i)] for i in range(20)] == [once[(7, i)] for i in range(20)]
    assert len({tuple(once[(0, i)][0]) for i in range(20)}) == 20  # still each sentence its own noise
    fresh = tsdae.DenoisingDataset(sts_sentences, tokenizer, 75, seed=3)  # the default: new noise each epoch
    assert [fresh[(0, i)][0] for i in range(20)] != [fresh[(1, i)][0] for i in range(20)]


# ---------------------------------------------------------------- labs 3 and 4: SimCSE's dropout masks


def with_dropout(model_dir, p: float = 0.1) -> SentenceEncoder:
    encoder = SentenceEncoder.from_pretrained(model_dir, pooling="mean")  # the tiny model has dropout 0
    for module in encoder.bert.modules():
        if isinstance(module, nn.Dropout):
            module.p = p
        if isinstance(module, MultiHeadAttention):
            module.dropout_p = p
    return encoder.train()


@pytest.mark.parametrize("shared", [False, True])
def test_shared_dropout_makes_the_two_simcse_views_one_tensor(tiny_model_dir, small_corpus, shared, monkeypatch):
    encoder = with_dropout(tiny_model_dir)
    objective = SharedDropoutConSERTLoss if shared else ConSERTLoss
    obj = objective(encoder, (View("simcse"), View("simcse"))).train()
    items = [consert.SentenceDataset(read_corpus(small_corpus), encoder.tokenizer, 64)[(0, i)] for i in range(8)]
    batch = consert.collate_sentences(items)
    seen = []
    loss = obj.contrastive
    monkeypatch.setattr(obj, "contrastive", lambda z1, z2, keys: seen.append((z1, z2)) or loss(z1, z2, keys))
    obj(batch).backward()
    (z1, z2), = seen
    if shared:
        assert z2 is z1  # one pass, the same dropout masks
    else:
        assert (z1 - z2).abs().max() > 1e-3  # two passes, two draws of the masks


def test_shared_dropout_is_for_two_simcse_views_only(tiny_model_dir, capsys):
    """labs/shared_dropout.py runs consert_train with its objective, which takes the views simcse and simcse only;
    `python consert.py`, the paper's script, has no lab flag."""
    encoder = SentenceEncoder.from_pretrained(tiny_model_dir)
    with pytest.raises(ValueError, match="choose from simcse"):
        SharedDropoutConSERTLoss(encoder, (View("simcse"), View("shuffle")))
    args = contrastive.parse_args(["--corpus", "x", "--view1", "simcse", "--view2", "simcse"], SharedDropoutConSERTLoss)
    assert consert_train.stages(args)[0].dropout
    for argv, lab, message in (
            (["--view1", "none", "--view2", "simcse"], SharedDropoutConSERTLoss,
             "argument --view1: invalid choice: 'none'"),
            ([], SharedDropoutConSERTLoss,  # the official views, not named on the command line
             "SharedDropoutConSERTLoss: unknown view in ['feature_cutoff', 'shuffle']; choose from simcse (the "
             "official views: give --view1, --view2)"),
            (["--strategy", "sup", "--nli", "x"], SharedDropoutConSERTLoss, "--strategy unsup only (got sup)"),
            (["--view1", "simcse", "--view2", "simcse", "--micro-batch", "2"], SharedDropoutConSERTLoss,
             "--micro-batch"),
            (["--view1", "simcse", "--view2", "simcse", "--strategy", "joint-unsup", "--nli", "x"],
             SharedDropoutConSERTLoss, "--strategy unsup only"),
            (["--view1", "none", "--view2", "token_cutoff_masked"], None, "invalid choice: 'token_cutoff_masked'"),
            (["--view1", "simcse", "--view2", "simcse", "--shared-dropout"], None, "unrecognized arguments")):
        with pytest.raises(SystemExit):  # None: the paper's script, which knows no lab
            (contrastive.parse_args(["--corpus", "x", *argv], lab) if lab
             else consert_train.parse_args(["--corpus", "x", *argv]))
        assert message in capsys.readouterr().err, argv


def test_a_labs_view_named_without_a_rate_gets_the_default_rate():
    """--view2 token_cutoff_masked alone cuts 0.2 of the tokens, as --view2 token_cutoff alone does (rate 0 would
    cut none: the lab would compare the official view with no view at all)."""
    for objective_class, view in ((MaskedCutoffConSERTLoss, "token_cutoff_masked"), (ConSERTLoss, "token_cutoff")):
        args = contrastive.parse_args(["--corpus", "x", "--view1", "none", "--view2", view], objective_class)
        assert consert_train.stages(args)[0].views == (View("none"), View(view, 0.2))


def test_simcse_without_dropout_is_two_none_views_with_the_dropout_off():
    """Lab 4 needs no option: --view1 none --view2 none --encoder-dropout off is accepted (simcse with the dropout
    off is refused: the simcse view is the dropout)."""
    args = consert_train.parse_args(["--corpus", "x", "--view1", "none", "--view2", "none", "--encoder-dropout", "off"])
    (stage,) = consert_train.stages(args)
    assert [v.name for v in stage.views] == ["none", "none"] and not stage.dropout


# ---------------------------------------------------------------- lab 5: the decoder reads the token states


def test_a_token_memory_decoder_reads_every_real_token_state_and_no_padding(tiny_model_dir):
    decoder = TokenMemoryTSDAELoss(SentenceEncoder.from_pretrained(tiny_model_dir)).eval().decoder
    torch.manual_seed(7)
    ids, states = torch.randint(1000, 2000, (2, 8)), torch.randn(2, 6, 32)  # 8 decoder tokens, 6 encoder states
    mask = torch.ones(2, 6, dtype=torch.long)
    mask[1, 4:] = 0  # sentence 1: 4 real tokens, then padding
    padding_changed, real_changed = states.clone(), states.clone()
    padding_changed[1, 4:] += 5.0
    real_changed[:, 2] += 1.0
    with torch.no_grad():
        out = decoder(ids, TokenStates(states, mask))  # (2, 8, d)
        torch.testing.assert_close(decoder(ids, TokenStates(padding_changed, mask)), out)
        moved = decoder(ids, TokenStates(real_changed, mask)) - out
    assert moved.abs().amax(-1).min() > 1e-4  # every position of every sentence reads token 2


def test_the_token_memory_loss_reads_the_states_the_vector_loss_never_sees(tiny_model_dir, small_corpus):
    """With CLS pooling the vector loss ignores every encoder output but position 0 (test_tsdae.py); the token
    memory loss reads them all, through a cross-attention memory of shape (B, Ld, d)."""
    encoder = SentenceEncoder.from_pretrained(tiny_model_dir, pooling="cls")
    obj = TokenMemoryTSDAELoss(encoder).eval()
    ds = tsdae.DenoisingDataset(read_corpus(small_corpus), encoder.tokenizer, 64)
    batch = tsdae.collate_pairs([ds[(0, i)] for i in range(4)])
    memories = []
    obj.decoder.layers[0].cross_attn.register_forward_pre_hook(
        lambda module, args, kwargs: memories.append(kwargs["memory"].states.shape), with_kwargs=True)
    losses = losses_with_scrambled_token_states(obj, batch)
    assert memories[0] == (4, batch["damaged_ids"].shape[1], 32)
    assert abs(losses[0] - losses[1]) > 1e-3
    vector = tsdae.TSDAELoss(encoder).eval()  # the same weights, the memory of one vector
    vector.decoder.load_state_dict(obj.decoder.state_dict())
    with torch.no_grad():
        assert abs(vector(batch).item() - losses[0]) > 1e-4


def test_the_tsdae_labs_train_from_their_own_entry_points(tiny_model_dir, small_corpus, tmp_path, monkeypatch):
    """labs/token_memory.py and labs/noise_once.py: two steps each of `python tsdae.py`'s run with the lab's piece;
    the token memory on the plain path (speedups/fast.py's decoder reads one vector), the noise once on the fast one."""
    from labs import noise_once, token_memory

    seen = []
    real_train = train.train

    def spy(encoder, objective, loader, settings, device):
        seen.append((objective, loader.dataset))
        return real_train(encoder, objective, loader, settings, device)

    monkeypatch.setattr(train, "train", spy)
    common = ["--corpus", str(small_corpus), "--model", str(tiny_model_dir), "--steps", "2", "--batch-size", "4",
              "--save-every", "0"]
    assert token_memory.main([*common, "--out", str(tmp_path / "tokens")]) == 0
    assert noise_once.main([*common, "--out", str(tmp_path / "once")]) == 0
    (tokens, plain_pairs), (vector, once) = seen
    assert type(tokens) is TokenMemoryTSDAELoss and type(tokens.decoder).__bases__ == (tsdae.TSDAEDecoder,)
    assert type(plain_pairs) is tsdae.DenoisingDataset and type(once) is NoiseOnceDataset
    assert type(vector) is tsdae.TSDAELoss and type(vector.decoder) is fast.PackedDecoder
    log = [json.loads(line) for line in (tmp_path / "tokens" / "log.jsonl").read_text().splitlines()]
    assert len(log) == 2 and all(torch.isfinite(torch.tensor(r["loss"])) for r in log)
    with pytest.raises(errors.UsageError, match="trained by TokenMemoryTSDAELoss"):
        tsdae.load_decoder(tmp_path / "tokens")
    with pytest.raises(SystemExit):  # the paper's script keeps only its own choices
        tsdae_train.parse_args(["--corpus", "x", "--noise-once"])


def test_a_lab_runs_as_a_script_with_the_methods_flags():
    """`python labs/masked_cutoff.py --help`: the lab file runs from the repository root, with consert.py's flags and
    its own view among the choices."""
    root = Path(__file__).resolve().parents[1]
    result = subprocess.run([sys.executable, "labs/masked_cutoff.py", "--help"], cwd=root, capture_output=True,
                            text=True)
    assert result.returncode == 0, result.stderr
    assert "token_cutoff_masked" in result.stdout and "--temperature" in result.stdout


@pytest.mark.parametrize("lab", [masked_cutoff, shared_dropout, noise_once, token_memory])
def test_a_labs_help_opens_with_the_lab_and_what_it_accepts(lab):
    """--help of a lab says which lab it is (not the method's description) and offers no option it refuses: a
    ConSERT lab's says which views and strategy it takes (its views' choices are those its parse_args accepts), the
    token-memory lab has no --plain."""
    text = lab.make_parser().format_help()
    opening = " ".join(text.split("\n\n")[1].split())  # after the usage block, filled to the terminal's width
    assert opening.startswith(lab.__doc__.splitlines()[0])  # the lab
    if lab in (masked_cutoff, shared_dropout):
        objective_class = {masked_cutoff: MaskedCutoffConSERTLoss, shared_dropout: SharedDropoutConSERTLoss}[lab]
        said = re.search(r"--view1 and --view2 (?:among|both) ([\w, ]+);", " ".join(text.split())).group(1).split(", ")
        assert said == list(objective_class.view_names) and "adversarial" not in said
        assert "--strategy unsup" in " ".join(text.split())
        for view in said:
            lab.parse_args(["--corpus", "x", "--view1", view, "--view2", view])
        assert not re.search(r"\{[^}]*adversarial", text)  # nor among any flag's choices
    assert ("--plain" in text) == (lab is not token_memory)  # the token-memory lab runs the plain path only


# ---------------------------------------------------------------- lab 6: the two loss normalisations under clipping


@pytest.mark.parametrize("clip", [True, False])
def test_the_two_loss_normalisations_train_alike_when_every_step_is_clipped(tiny_model_dir, small_corpus, tmp_path,
                                                                           monkeypatch, clip):
    """LABS.md, lab 6: the token mean and the per-sentence sum divide the same sum, so they differ by one factor per
    batch (its mean sentence length). A step clipped to norm 1 loses that factor: the runs are the same. Without
    clipping AdamW sees it, and they are not. log.jsonl's grad_norm is the norm before clipping."""
    real_train, objectives = train.train, {}

    def with_clip(encoder, objective, loader, settings, device):
        objectives[objective.normalisation] = objective
        return real_train(encoder, objective, loader, dataclasses.replace(settings, grad_clip=1.0 if clip else None),
                          device)

    monkeypatch.setattr(train, "train", with_clip)
    logs = {}
    for normalisation in ("tokens", "sentence"):
        tsdae_train.main(["--corpus", str(small_corpus), "--model", str(tiny_model_dir),
                          "--out", str(tmp_path / normalisation),
                          "--steps", "4", "--batch-size", "4", "--lr", "1e-3", "--save-every", "0",
                          "--loss-normalisation", normalisation])
        logs[normalisation] = [json.loads(line)
                               for line in (tmp_path / normalisation / "log.jsonl").read_text().splitlines()]
    factors = [s["loss"] / t["loss"] for t, s in zip(logs["tokens"], logs["sentence"])]
    assert max(factors) - min(factors) > 0.2  # the batches' mean lengths differ: the factor is not one constant
    tokens, sentence = (dict(objectives[n].named_parameters()) for n in ("tokens", "sentence"))
    difference = max((tokens[k] - sentence[k]).abs().max().item() for k in tokens)
    if clip:
        assert all(r["grad_norm"] > 1 for n in logs for r in logs[n])  # every step was rescaled
        assert difference < 1e-5
    else:
        assert not any("grad_norm" in r for r in logs["tokens"])
        assert difference > 1e-4
