"""baselines/mlm.py, continued masked-language modelling (BERT, arXiv:1810.04805 §3.1): the masking's statistics, the
loss and its gradient equal to transformers' BertForMaskedLM (on the raw bert-mini and on a tiny random checkpoint
transformers writes itself), the micro-batch weighting, and the command: a run, its resume, its one-line errors."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import data
import train
from baselines import mlm
from lib import cli
from lib.weights import ModelLoadError, read_safetensors
from model import SentenceEncoder
from speedups import fast

ROOT = Path(__file__).resolve().parent.parent
# The raw masked-LM stand-in for bert-base (README, Results), where examples/results.py finds it (--model)
MINI = Path(os.environ.get("MINI") or ROOT.parent / "shared" / "models" / "bert-mini-mlm")
TOPICS = (ROOT / "examples" / "topics.txt").read_text(encoding="utf-8").splitlines()


@pytest.fixture(scope="module")
def tiny_mlm_dir(tmp_path_factory, minilm_path) -> Path:
    """A 2-layer, 32-wide random BertForMaskedLM (encoder + tied MLM head, `cls.predictions.*`) that transformers
    writes with its own save_pretrained, with MiniLM's (bert-base-uncased's) tokenizer; no dropout."""
    import transformers

    folder = tmp_path_factory.mktemp("tiny-mlm") / "model"
    tokenizer = transformers.AutoTokenizer.from_pretrained(minilm_path)
    cfg = transformers.BertConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                  intermediate_size=37, max_position_embeddings=66, hidden_dropout_prob=0.0,
                                  attention_probs_dropout_prob=0.0)
    torch.manual_seed(1)
    hf = transformers.BertForMaskedLM(cfg).eval()
    with torch.no_grad():  # non-trivial biases and LayerNorms (the head's too), so that a mix-up of names would show
        for p in hf.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    hf.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def masked_batch(encoder: SentenceEncoder, sentences: list[str], seed: int = 0) -> dict[str, torch.Tensor]:
    """The sentences padded (with padding) and masked by mask_tokens with a fixed generator."""
    ids, mask = data.pad(data.tokenize(encoder.tokenizer, sentences, 64), encoder.bert.cfg.pad_token_id)
    assert (mask == 0).any()
    tok = encoder.tokenizer
    masked, labels = mlm.mask_tokens(ids, mask, mlm.special_token_ids(tok), data.special_token_id(tok, "mask"),
                                     tok.get_vocab_size(), generator=torch.Generator().manual_seed(seed))
    return {"input_ids": masked, "attention_mask": mask, "labels": labels}


def hf_loss(folder: Path, batch: dict[str, torch.Tensor]):
    """(transformers' BertForMaskedLM of the folder, its loss on the batch), in eval mode."""
    from transformers import BertForMaskedLM

    hf = BertForMaskedLM.from_pretrained(folder).eval()
    return hf, hf(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=batch["labels"]).loss


# ---------------------------------------------------------------- the loss equals transformers'


def test_loss_equals_transformers_on_the_raw_bert_mini():
    if not (MINI / "config.json").exists():
        pytest.skip(f"the raw masked-LM bert-mini is not at {MINI} (set $MINI to its folder)")
    encoder = SentenceEncoder.from_pretrained(MINI).eval()
    objective = mlm.MLMLoss(encoder)
    assert objective.head_from_checkpoint and objective.head is encoder.bert.mlm_head  # its cls.predictions
    batch = masked_batch(encoder, TOPICS[::8])
    _, theirs = hf_loss(MINI, batch)
    packed = mlm.MLMLoss(SentenceEncoder.from_pretrained(MINI, bert_class=fast.PackedBert).eval())
    for ours in (objective, packed):
        with torch.no_grad():
            assert abs(ours(batch).item() - theirs.item()) < 1e-5


def test_loss_and_word_embedding_gradient_equal_transformers_on_a_tiny_checkpoint(tiny_mlm_dir):
    encoder = SentenceEncoder.from_pretrained(tiny_mlm_dir).eval()
    objective = mlm.MLMLoss(encoder)
    assert objective.head_from_checkpoint
    batch = masked_batch(encoder, TOPICS[::10])
    chosen = batch["labels"] != mlm.IGNORE
    assert (batch["input_ids"][chosen] == data.special_token_id(encoder.tokenizer, "mask")).any()
    hf, theirs = hf_loss(tiny_mlm_dir, batch)
    ours = objective(batch)
    assert abs(ours.item() - theirs.item()) < 1e-5
    ours.backward()
    theirs.backward()
    # E is the input lookup AND the output projection: its gradient has both parts only when the two are one tensor
    E, hf_E = encoder.bert.embeddings.word.weight, hf.bert.embeddings.word_embeddings.weight
    assert (E.grad - hf_E.grad).abs().max() < 1e-5
    assert (objective.head.dense.weight.grad - hf.cls.predictions.transform.dense.weight.grad).abs().max() < 1e-5
    assert (objective.head.bias.grad - hf.cls.predictions.bias.grad).abs().max() < 1e-5


def test_micro_batches_give_the_loss_and_gradient_of_the_whole_batch(tiny_mlm_dir):
    """count() is the number of masked positions, so parts of 3 sentences weigh their means right
    (train.micro_batches)."""
    encoder = SentenceEncoder.from_pretrained(tiny_mlm_dir).eval()
    objective = mlm.MLMLoss(encoder)
    batch = masked_batch(encoder, TOPICS[::25], seed=3)
    assert int(objective.count(batch)) == int((batch["labels"] != mlm.IGNORE).sum())
    whole = objective(batch)
    whole.backward()
    grad = encoder.bert.embeddings.word.weight.grad.clone()
    encoder.zero_grad()
    total = 0.0
    for part, weight in train.micro_batches(batch, 3, objective):
        part_loss = objective(part) * weight
        part_loss.backward()
        total += part_loss.item()
    assert abs(total - whole.item()) < 1e-5
    assert (encoder.bert.embeddings.word.weight.grad - grad).abs().max() < 1e-5
    nothing_chosen = {**batch, "labels": torch.full_like(batch["labels"], mlm.IGNORE)}  # L = 0, in parts too
    assert [objective(part).item() * weight for part, weight in train.micro_batches(nothing_chosen, 3, objective)] \
        == [0.0] * len(range(0, len(batch["labels"]), 3))


# ---------------------------------------------------------------- the masking


@pytest.mark.quick
def test_masking_chooses_15_percent_of_ordinary_tokens_then_80_10_10():
    B, V, MASK, specials = 4000, 1000, 3, {0, 1, 2, 3, 4}  # 0 padding, 1 [CLS], 2 [SEP], 3 [MASK], 4 [UNK]
    g = torch.Generator().manual_seed(0)
    n_words = torch.randint(1, 61, (B,), generator=g)  # 1 to 60 tokens between [CLS] and [SEP]
    L = int(n_words.max()) + 2
    ids = torch.randint(5, V, (B, L), generator=g)
    ids[torch.rand(B, L, generator=g) < 0.05] = 4  # a few [UNK] among the words: special, never chosen
    position = torch.arange(L).expand(B, L)
    ids[:, 0] = 1
    ids[position == n_words[:, None] + 1] = 2
    mask = (position <= n_words[:, None] + 1).long()
    ids[mask == 0] = 0
    masked, labels = mlm.mask_tokens(ids, mask, specials, MASK, V, generator=torch.Generator().manual_seed(1))

    chosen = labels != mlm.IGNORE
    ordinary = (mask == 1) & (ids > 4)
    assert not (chosen & ~ordinary).any()  # never [CLS], [SEP], [UNK] or padding
    assert (labels[chosen] == ids[chosen]).all()  # the original token where chosen, -100 exactly elsewhere
    assert (masked[~chosen] == ids[~chosen]).all()  # nothing else changes
    n = ordinary.sum(1)
    expected = torch.where(n > 0, (n * 0.15).round().clamp(min=1), 0).long()  # exactly max(1, round(0.15 n)) each
    assert (chosen.sum(1) == expected).all()
    share = chosen.sum() / ordinary.sum()
    assert abs(share - 0.15) < 0.005, share
    # every ordinary position is as likely as any other: sentences of 40 words, position by position
    forty = n_words == 40
    per_position = chosen[forty][:, 1:41].float().mean(0) / (ordinary[forty][:, 1:41].float().mean(0))
    rate = chosen[forty].sum() / ordinary[forty].sum()
    sd = (rate * (1 - rate) / int(forty.sum())).sqrt()
    assert ((per_position - rate).abs() < 5 * sd).all(), per_position
    # of the chosen: 80% [MASK], 10% a random token (rarely the token itself), 10% unchanged
    N = int(chosen.sum())
    to_mask, same = (masked[chosen] == MASK).float().mean(), (masked[chosen] == ids[chosen]).float().mean()
    other = 1 - to_mask - same
    for observed, p in ((to_mask, 0.8), (other, 0.1 * (1 - 1 / V)), (same, 0.1 + 0.1 / V)):
        assert abs(observed - p) < 5 * (p * (1 - p) / N) ** 0.5, (observed, p)
    replaced = masked[chosen & (masked != MASK) & (masked != ids)]
    assert len(replaced.unique()) > 0.7 * V and int(replaced.max()) < V  # drawn from the whole vocabulary (1 - e^-1.7)
    # the same generator, the same masks; another seed, others
    again = mlm.mask_tokens(ids, mask, specials, MASK, V, generator=torch.Generator().manual_seed(1))
    other_seed = mlm.mask_tokens(ids, mask, specials, MASK, V, generator=torch.Generator().manual_seed(2))
    assert torch.equal(again[0], masked) and torch.equal(again[1], labels)
    assert not torch.equal(other_seed[1], labels)


def test_the_data_set_draws_each_sentences_masks_from_its_seed_epoch_and_index(tiny_mlm_dir):
    tokenizer = SentenceEncoder.from_pretrained(tiny_mlm_dir).tokenizer
    sentences = TOPICS[:40]
    items = lambda seed, epoch: [mlm.MaskedDataset(sentences, tokenizer, 64, seed=seed)[(epoch, i)] for i in range(40)]
    first = items(0, 0)
    assert first == items(0, 0)  # a fresh data set (a resumed run, a DataLoader worker) draws the same
    assert sum(a != b for a, b in zip(first, items(0, 1))) > 30  # fresh masks every epoch
    assert sum(a != b for a, b in zip(first, items(1, 0))) > 30  # and for every seed
    cls_id, sep_id = data.special_token_id(tokenizer, "cls"), data.special_token_id(tokenizer, "sep")
    for (masked, labels), sentence in zip(first, sentences):
        original = data.tokenize(tokenizer, [sentence], 64)[0]
        assert len(masked) == len(labels) == len(original) and masked[0] == cls_id and masked[-1] == sep_id
        assert all(label in (mlm.IGNORE, o) and (label != mlm.IGNORE or m == o)
                   for m, o, label in zip(masked, original, labels))  # chosen: the original; else: unchanged
        assert labels[0] == labels[-1] == mlm.IGNORE and sum(label != mlm.IGNORE for label in labels) >= 1
    batch = mlm.collate_masked(first[:4], pad_id=0)
    assert batch["input_ids"].shape == batch["labels"].shape == batch["attention_mask"].shape
    assert (batch["labels"][batch["attention_mask"] == 0] == mlm.IGNORE).all()


# ---------------------------------------------------------------- the command


@pytest.mark.quick
def test_help_has_a_line_for_every_flag_and_each_default_once():
    parser = mlm.make_parser()
    for action in parser._actions:
        assert action.help, action.option_strings
    text = parser.format_help()
    assert "(default: None)" not in text and "(default: False)" not in text
    for block in re.split(r"\n  (?=-)", text):
        assert block.count("default") <= 1, block


def losses(out: Path) -> list[float]:
    return [json.loads(line)["loss"] for line in (out / "log.jsonl").read_text().splitlines()]


def test_a_run_saves_a_loadable_encoder_and_resumes_to_the_same_losses(tiny_mlm_dir, tiny_model_dir, tmp_path, capsys):
    corpus = tmp_path / "topics.txt"
    corpus.write_text("\n".join(TOPICS[::20]) + "\n", encoding="utf-8")  # 13 lines of the 5 topics: 4 steps an epoch
    common = ["--corpus", str(corpus), "--model", str(tiny_mlm_dir), "--batch-size", "4", "--lr", "1e-3",
              "--device", "cpu", "--save-every", "0"]
    mlm.main(common + ["--out", str(tmp_path / "a"), "--steps", "6"])
    out = capsys.readouterr().out
    assert "MLM head: the checkpoint's" in out
    encoder = SentenceEncoder.from_pretrained(tmp_path / "a" / "model")
    assert encoder.bert.mlm_head is None  # model/ holds the encoder only
    before, after = read_safetensors(tiny_mlm_dir / "model.safetensors"), \
        read_safetensors(tmp_path / "a" / "model" / "model.safetensors")
    word = "embeddings.word_embeddings.weight"
    assert not torch.equal(before[f"bert.{word}"] if f"bert.{word}" in before else before[word], after[word])
    assert "| method | MLM (arXiv:1810.04805) |" in (tmp_path / "a" / "model" / "README.md").read_text(encoding="utf-8")
    from transformers import AutoModel

    hf = AutoModel.from_pretrained(tmp_path / "a" / "model").eval()
    ids, mask = data.pad(data.tokenize(encoder.tokenizer, TOPICS[:4], 64), 0)
    with torch.no_grad():
        assert (hf(input_ids=ids, attention_mask=mask).last_hidden_state[mask.bool()]
                - encoder.eval().bert(ids, mask)[mask.bool()]).abs().max() < 1e-5

    # the finished run resumed: nothing trains, nothing is written
    mlm.main(common + ["--out", str(tmp_path / "a"), "--steps", "6", "--resume"])
    assert "finished at step 6 of 6: nothing to train" in capsys.readouterr().out
    assert read_safetensors(tmp_path / "a" / "model" / "model.safetensors")[word].equal(after[word])
    assert len(losses(tmp_path / "a")) == 6
    # stopped at 3 and resumed to 6 (across an epoch's end): the same masks, batches and losses as straight through
    mlm.main(common + ["--out", str(tmp_path / "b"), "--steps", "3"])
    mlm.main(common + ["--out", str(tmp_path / "b"), "--steps", "6", "--resume"])
    assert losses(tmp_path / "b") == losses(tmp_path / "a")
    # the plain path trains alike (no dropout here), and a checkpoint without a head gets a new one
    mlm.main(common + ["--out", str(tmp_path / "plain"), "--steps", "6", "--plain"])
    assert losses(tmp_path / "plain") == pytest.approx(losses(tmp_path / "a"), abs=1e-5)
    mlm.main(common[:2] + ["--model", str(tiny_model_dir)] + common[4:]
             + ["--out", str(tmp_path / "c"), "--steps", "2"])
    assert "MLM head: a new one" in capsys.readouterr().out and len(losses(tmp_path / "c")) == 2


def test_bad_input_ends_in_one_line(tiny_mlm_dir, tmp_path):
    result = subprocess.run([sys.executable, str(ROOT / "baselines" / "mlm.py"),
                             "--corpus", str(tmp_path / "missing.txt"),
                             "--model", str(tiny_mlm_dir), "--out", str(tmp_path / "run")],
                            capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert len(result.stderr.strip().splitlines()) == 1 and "missing.txt" in result.stderr, result.stderr
    empty = tmp_path / "empty.txt"
    empty.write_text("\n  \n", encoding="utf-8")
    good = tmp_path / "good.txt"
    good.write_text("one line\n", encoding="utf-8")
    for corpus, model, message in ((empty, tiny_mlm_dir, "no non-blank lines"),
                                   (good, tmp_path / "no-model", "does not exist")):
        with pytest.raises(SystemExit) as exit_:
            cli.run(lambda: mlm.main(["--corpus", str(corpus), "--model", str(model), "--out", str(tmp_path / "run")]))
        assert str(exit_.value.code).startswith("error: ") and message in str(exit_.value.code)
        assert len(str(exit_.value.code).splitlines()) == 1
    assert not (tmp_path / "run").exists()  # nothing written
    with pytest.raises(ModelLoadError):  # what cli.run turns into that line
        mlm.main(["--corpus", str(good), "--model", str(tmp_path / "no-model"), "--out", str(tmp_path / "run")])


# ---------------------------------------------------------------- a stand-in a reader can rebuild (docs/standin.md)


def word_embeddings(folder: Path) -> torch.Tensor:
    state = read_safetensors(folder / "model.safetensors")
    return state.get("bert.embeddings.word_embeddings.weight", state.get("embeddings.word_embeddings.weight"))


def test_random_init_pretrains_from_new_weights_and_saves_a_masked_lm_checkpoint(tiny_mlm_dir, tmp_path, capsys):
    from transformers import BertForMaskedLM, BertModel

    corpus = tmp_path / "topics.txt"
    corpus.write_text("\n".join(TOPICS[::20]) + "\n", encoding="utf-8")
    mlm.main(["--corpus", str(corpus), "--model", str(tiny_mlm_dir), "--random-init", "--steps", "3", "--batch-size",
              "4", "--lr", "1e-3", "--device", "cpu", "--save-every", "0", "--out", str(tmp_path / "run")])
    assert "--random-init" in capsys.readouterr().out
    out = tmp_path / "run" / "model"
    # BERT's initialisation, N(0, 0.02), moved by 3 Adam steps of 1e-3 at most: not the source's weights (sd 0.054)
    source, rebuilt = word_embeddings(tiny_mlm_dir), word_embeddings(out)
    assert abs(source.std().item() - 0.054) < 0.005 and abs(rebuilt.std().item() - 0.02) < 0.002
    assert (rebuilt - source).abs().mean() > 0.02
    # model/ is a raw masked-LM checkpoint: our loader finds its head, transformers loads it whole, the same numbers
    encoder = SentenceEncoder.from_pretrained(out).eval()
    assert encoder.tokenizer.get_vocab() == SentenceEncoder.from_pretrained(tiny_mlm_dir).tokenizer.get_vocab()
    assert encoder.bert.mlm_head is not None
    batch = masked_batch(encoder, TOPICS[::10])
    hf, theirs = hf_loss(out, batch)
    _, info = BertForMaskedLM.from_pretrained(out, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    with torch.no_grad():
        assert abs(mlm.MLMLoss(encoder)(batch).item() - theirs.item()) < 1e-5
        states = BertModel.from_pretrained(out).eval()(input_ids=batch["input_ids"],
                                                        attention_mask=batch["attention_mask"]).last_hidden_state
        real = batch["attention_mask"].bool()
        assert (states[real] - encoder.bert(batch["input_ids"], batch["attention_mask"])[real]).abs().max() < 1e-5

    # the folder's weights are never read: its config.json and tokenizer are enough
    config_only = tmp_path / "config-only"
    config_only.mkdir()
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        if (tiny_mlm_dir / name).exists():
            (config_only / name).write_bytes((tiny_mlm_dir / name).read_bytes())
    mlm.main(["--corpus", str(corpus), "--model", str(config_only), "--random-init", "--steps", "1",
              "--batch-size", "4", "--device", "cpu", "--save-every", "0", "--out", str(tmp_path / "from-config")])
    assert SentenceEncoder.from_pretrained(tmp_path / "from-config" / "model").bert.mlm_head is not None


def test_random_init_without_a_config_ends_in_one_line(tmp_path):
    corpus, folder = tmp_path / "good.txt", tmp_path / "no-config"
    corpus.write_text("one line of text\n", encoding="utf-8")
    folder.mkdir()
    result = subprocess.run([sys.executable, str(ROOT / "baselines" / "mlm.py"), "--corpus", str(corpus), "--model",
                             str(folder), "--random-init", "--out", str(tmp_path / "run")],
                            capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert len(result.stderr.strip().splitlines()) == 1 and "no config.json" in result.stderr, result.stderr
    assert not (tmp_path / "run").exists()


def test_the_hub_bert_mini_layout_loads_and_trains(minilm_path, tmp_path):
    """google/bert_uncased_L-4_H-256_A-4 as the Hub serves it (config.json, vocab.txt, a BertForPreTraining
    pytorch_model.bin with the NSP head and pooler), made here with random weights: --model takes it as it is."""
    import transformers

    folder = tmp_path / "bert_uncased_L-4_H-256_A-4"
    cfg = transformers.BertConfig(num_hidden_layers=4, hidden_size=256, num_attention_heads=4, intermediate_size=1024)
    torch.manual_seed(0)
    hf = transformers.BertForPreTraining(cfg).eval()
    cfg.save_pretrained(folder)
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    for key in ("model_type", "architectures", "transformers_version"):  # the Hub's config.json (2020) has none
        config.pop(key, None)
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    torch.save(hf.state_dict(), folder / "pytorch_model.bin")
    (folder / "vocab.txt").write_bytes((Path(minilm_path) / "vocab.txt").read_bytes())
    encoder = SentenceEncoder.from_pretrained(folder).eval()
    assert encoder.bert.cfg.num_hidden_layers == 4 and encoder.bert.cfg.hidden_size == 256
    assert mlm.MLMLoss(encoder).head_from_checkpoint  # its cls.predictions, continued by an MLM run
    ids, mask = data.pad(data.tokenize(encoder.tokenizer, TOPICS[:4], 64), 0)
    with torch.no_grad():
        assert (hf.bert(input_ids=ids, attention_mask=mask).last_hidden_state[mask.bool()]
                - encoder.bert(ids, mask)[mask.bool()]).abs().max() < 1e-5


def test_wiki_sentences_cleans_as_the_stand_ins_readme_says(tmp_path):
    from examples import wiki_sentences

    (tmp_path / "wiki_00").write_text(
        '<doc id="1" url="u" title="Stub">\nStub\n\n</doc>\n'
        '<doc id="2" url="u" title="Ada Park">\nAda Park\n\n'
        'Ada Park is a public park in the town of Dale. It was opened by Dr. Jones in 1921 &amp; renamed later.\n'
        'It has <b>three</b> ponds and a small cafe nearby. Too short here. 12 34 56 78 90 12 34 56 78 aa bb.\n'
        'ADA PARK IS A PUBLIC PARK IN THE TOWN OF DALE.\n</doc>\n', encoding="utf-8")
    out = tmp_path / "sentences.txt"
    assert wiki_sentences.main([str(tmp_path), "--out", str(out)]) == 0
    assert out.read_text(encoding="utf-8").splitlines() == [
        "Ada Park is a public park in the town of Dale.",  # the title line and the stub article give nothing
        "It was opened by Dr. Jones in 1921 & renamed later.",  # no cut after "Dr.", the entity unescaped
        "It has three ponds and a small cafe nearby.",  # the tags removed; 3 words, and 40% letters, dropped
    ]  # and the repeat, in capitals, dropped
    with pytest.raises(SystemExit, match="no wiki_"):
        wiki_sentences.main([str(tmp_path / "missing"), "--out", str(out)])
