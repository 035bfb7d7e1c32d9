"""Supervised fine-tuning (finetune.py): the three losses against sentence-transformers' on fixed vectors and on
the real MiniLM's batches, the batches, and the command (commands/finetune_train.py) on the user's files."""
import csv
import json
import os
import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import finetune
from commands import finetune_train
from lib import cli, datafiles
from finetune import SupervisedLoss, cosent_loss, cosine_regression_loss, in_batch_negatives_loss
from model import SentenceEncoder

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


def st_losses():
    from sentence_transformers.sentence_transformer import losses

    return losses


def vectors(n: int, d: int = 16, seed: int = 0) -> torch.Tensor:
    return torch.randn(n, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64).float()


# ----------------------------------------------------------------------------
# The losses on the same vectors: sentence-transformers' compute_loss_from_embeddings is the oracle


@pytest.mark.quick
@pytest.mark.parametrize("negatives", [False, True])
def test_in_batch_negatives_equal_multiple_negatives_ranking_loss(negatives):
    anchors, positives, hard = vectors(12, seed=1), vectors(12, seed=2), vectors(12, seed=3)
    columns = [anchors, positives] + ([hard] if negatives else [])
    reference = st_losses().MultipleNegativesRankingLoss(model=None, scale=20.0)
    theirs = reference.compute_loss_from_embeddings(columns, labels=None)
    ours = in_batch_negatives_loss(anchors, torch.cat(columns[1:]), scale=20.0)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-6)


def test_in_batch_negatives_by_hand():
    """The loss of anchor i over its candidates, one row at a time (and not NT-Xent: the anchors are no
    candidates of each other)."""
    a, p, n = vectors(5, seed=4), vectors(5, seed=5), vectors(5, seed=6)
    candidates = torch.cat([p, n])
    by_hand = []
    for i in range(5):
        s = torch.stack([20 * F.cosine_similarity(a[i], c, dim=0) for c in candidates])
        by_hand.append(-(s[i] - torch.logsumexp(s, 0)))
    torch.testing.assert_close(in_batch_negatives_loss(a, candidates), torch.stack(by_hand).mean())


@pytest.mark.quick
def test_cosent_equals_the_reference_with_ties():
    u, v = vectors(16, seed=7), vectors(16, seed=8)
    scores = torch.tensor([0.0, 1.2, 3.4, 5.0, 2.2, 2.2, 4.8, 0.0, 1.2, 3.4, 5.0, 2.2, 2.6, 4.8, 0.4, 3.9])  # ties
    theirs = st_losses().CoSENTLoss(model=None, scale=20.0).compute_loss_from_embeddings([u, v], scores)
    torch.testing.assert_close(cosent_loss(u, v, scores, scale=20.0), theirs, rtol=0, atol=1e-6)


def test_cosent_reads_only_the_order_of_the_scores():
    u, v = vectors(10, seed=9), vectors(10, seed=10)
    scores = torch.arange(10.0).flip(0)
    torch.testing.assert_close(cosent_loss(u, v, scores), cosent_loss(u, v, scores.exp()))  # the same order
    assert not torch.isclose(cosent_loss(u, v, scores), cosent_loss(u, v, scores.flip(0)))


def test_cosine_regression_equals_cosine_similarity_loss():
    u, v = vectors(16, seed=11), vectors(16, seed=12)
    scores = torch.rand(16, generator=torch.Generator().manual_seed(0))
    theirs = st_losses().CosineSimilarityLoss(model=None).compute_loss_from_embeddings([u, v], scores)
    torch.testing.assert_close(cosine_regression_loss(u, v, scores), theirs, rtol=0, atol=1e-6)


def test_normalise_scores_maps_the_range_to_0_1():
    assert finetune.normalise_scores([0.0, 2.5, 5.0], 0.0, 5.0) == [0.0, 0.5, 1.0]
    assert finetune.normalise_scores([-1.0, 1.0], -1.0, 1.0) == [0.0, 1.0]


# ----------------------------------------------------------------------------
# The objective on real batches: our encoder's batch against sentence-transformers' model and loss


@pytest.fixture(scope="module")
def models(minilm_path):
    from sentence_transformers import SentenceTransformer

    ours = SentenceEncoder.from_pretrained(minilm_path, max_length=64).eval()
    theirs = SentenceTransformer(minilm_path, device="cpu").eval()
    theirs.max_seq_length = 64
    return ours, theirs


def batch_of(rows, columns, encoder):
    dataset = finetune.ExampleDataset(rows, columns, encoder.tokenizer, encoder.max_length)
    return finetune.collate_examples([dataset[(0, i)] for i in range(len(rows))], pad_id=0)


def st_features(theirs, texts):
    return theirs.tokenize(texts)


@pytest.mark.parametrize("kind", ["pairs", "triplets", "tuples", "cosent", "cosine"])
def test_objective_equals_the_reference_on_minilm(models, data_dir, kind, tmp_path):
    """Eval mode (no dropout): the same batch through our encoder and SupervisedLoss, and through
    sentence-transformers' model and loss, to 1e-5 (the two encoders' vectors differ by about 1e-7); the
    gradient with respect to the word embeddings too. tuples: a file as mine_hard_negatives(output_format=
    "n-tuple") writes it (anchor, positive, negative_1 ... negative_3), every negative column in the loss."""
    ours, theirs = models
    pairs = datafiles.load_stsb(data_dir / "stsbenchmark" / "sts-dev.csv")[::100][:12]
    if kind == "tuples":
        path = tmp_path / "mined.jsonl"
        path.write_text("".join(json.dumps({"anchor": a, "positive": b, **{f"negative_{k}": pairs[(i + 3 * k) % 12][1]
                                                                           for k in (1, 2, 3)}}) + "\n"
                                for i, (a, b, _) in enumerate(pairs)), encoding="utf-8")
        _, rows, unused = datafiles.read_training_file(path)
        columns, labels = finetune_train.columns_of("tuples", rows), None
        assert columns == ("anchor", "positive", "negative_1", "negative_2", "negative_3") and not unused
        texts = [[row[k] for row in rows] for k in range(len(columns))]
        reference, objective = st_losses().MultipleNegativesRankingLoss(theirs), SupervisedLoss(ours)
    elif kind in ("cosent", "cosine"):
        rows = [(a, b, s / 5 if kind == "cosine" else s) for a, b, s in pairs]
        columns, texts = ("sentence1", "sentence2", "score"), [[a for a, _, _ in rows], [b for _, b, _ in rows]]
        labels = torch.tensor([s for *_, s in rows])
        reference = (st_losses().CoSENTLoss(theirs) if kind == "cosent" else st_losses().CosineSimilarityLoss(theirs))
        objective = SupervisedLoss(ours, loss=kind)
    else:
        rows = [(a, b) + ((pairs[(i + 5) % 12][1],) if kind == "triplets" else ()) for i, (a, b, _) in enumerate(pairs)]
        columns = ("anchor", "positive", "negative")[: len(rows[0])]
        texts, labels = [[row[k] for row in rows] for k in range(len(columns))], None
        reference, objective = st_losses().MultipleNegativesRankingLoss(theirs), SupervisedLoss(ours)
    ours_loss = objective(batch_of(rows, columns, ours))
    theirs_loss = reference([st_features(theirs, t) for t in texts], labels)
    torch.testing.assert_close(ours_loss, theirs_loss, rtol=0, atol=1e-5)
    ours_loss.backward()
    theirs_loss.backward()
    ours_grad = ours.bert.embeddings.word.weight.grad
    theirs_grad = theirs[0].auto_model.embeddings.word_embeddings.weight.grad
    torch.testing.assert_close(ours_grad, theirs_grad, rtol=0, atol=1e-5 * theirs_grad.abs().max().item())
    ours.zero_grad()
    theirs.zero_grad()


def test_collate_pads_each_column_on_its_own(minilm_path):
    encoder = SentenceEncoder.from_pretrained(minilm_path, max_length=64)
    rows = [("a b c d e f g", "x", 4.0), ("a", "x y z", 1.0)]
    batch = batch_of(rows, ("sentence1", "sentence2", "score"), encoder)
    assert batch["sentence1_ids"].shape[1] == 9 and batch["sentence2_ids"].shape[1] == 5
    assert batch["scores"].tolist() == [4.0, 1.0] and batch["scores"].dtype == torch.float32
    assert batch["sentence1_mask"].sum(1).tolist() == [9, 3]


# ----------------------------------------------------------------------------
# The command (commands/finetune_train.py) on the user's files


def run_finetune(*argv) -> None:
    """finetune_train.main as `python finetune.py` runs it: a user's mistake ends in SystemExit("error: ...")."""
    with pytest.raises(SystemExit) as stopped:
        cli.run(lambda: finetune_train.main([str(a) for a in argv]))
    if stopped.value.code != 0:
        raise stopped.value


def one_line_error(*argv) -> str:
    with pytest.raises(SystemExit) as stopped:
        run_finetune(*argv)
    message = str(stopped.value.code)
    assert message.startswith("error: ") and "\n" not in message and "Traceback" not in message, message
    return message


@pytest.fixture(scope="module")
def files(tmp_path_factory, data_dir):
    """A scored training file (CSV), a dev file (TSV) and a triplet file (JSONL) from STS-b dev pairs."""
    folder = tmp_path_factory.mktemp("files")
    pairs = datafiles.load_stsb(data_dir / "stsbenchmark" / "sts-dev.csv")
    with open(folder / "train.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["sentence1", "sentence2", "score"])
        writer.writerows(pairs[:24])
    (folder / "dev.tsv").write_text("sentence1\tsentence2\tscore\n" + "".join(
        f"{a}\t{b}\t{s}\n" for a, b, s in pairs[100:130]), encoding="utf-8")
    (folder / "triplets.jsonl").write_text("".join(
        json.dumps({"anchor": a, "positive": b, "negative": pairs[i + 50][1]}) + "\n"
        for i, (a, b, _) in enumerate(pairs[:24])), encoding="utf-8")
    return folder


def test_fine_tuning_writes_a_model_sentence_transformers_loads(tiny_model_dir, files, tmp_path):
    """Scored pairs with CoSENT, selected on the user's own dev file (sts:PATH): model/, best/, the log's dev scores,
    a card that says so; sentence-transformers loads model/ and gives our vectors; --resume of it trains nothing."""
    from sentence_transformers import SentenceTransformer

    out = tmp_path / "ft"
    common = ["--pairs", files / "train.csv", "--model", tiny_model_dir, "--batch-size", 8, "--epochs", 2,
              "--lr", 1e-3, "--eval-task", f"sts:{files / 'dev.tsv'}", "--eval-every", 2, "--out", out]
    run_finetune(*common)
    log = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    assert len(log) == 6 and sum("eval" in record for record in log) == 4 and (out / "best").is_dir()
    card = (out / "model" / "README.md").read_text()
    assert "fine-tuning (arXiv:1908.10084)" in card and "train.csv: 24 lines" in card
    ours = SentenceEncoder.from_pretrained(out / "model").encode(["A man is playing a guitar.", "A dog runs."])
    theirs = SentenceTransformer(str(out / "model"), device="cpu").encode(
        ["A man is playing a guitar.", "A dog runs."], convert_to_tensor=True)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-5)
    before = (out / "model" / "model.safetensors").read_bytes()
    run_finetune(*common, "--resume")
    assert (out / "model" / "model.safetensors").read_bytes() == before


def test_triplets_cosine_regression_nli_and_sample(tiny_model_dir, files, tmp_path, capsys):
    """Triplets from JSONL; --loss cosine with the scores mapped by --score-range; NLI triples; --sample K."""
    run_finetune("--pairs", files / "triplets.jsonl", "--model", tiny_model_dir, "--steps", 2, "--batch-size", 8,
                 "--out", tmp_path / "triplets")
    assert "24 triplets (in-batch negatives)" in capsys.readouterr().out
    run_finetune("--pairs", files / "train.csv", "--model", tiny_model_dir, "--steps", 1, "--loss", "cosine",
                 "--score-range", "0,5", "--sample", 10, "--out", tmp_path / "cosine")
    assert "10 scored (cosine)" in capsys.readouterr().out
    nli = tmp_path / "nli.jsonl"
    nli.write_text("".join(json.dumps({"premise": p, "hypothesis": h, "label": label}) + "\n" for p, h, label in [
        ("A man plays.", "Someone plays.", "entailment"), ("A man plays.", "Nobody plays.", "contradiction"),
        ("A cat sleeps.", "An animal rests.", "entailment"), ("A cat sleeps.", "The cat runs.", "contradiction"),
        ("A dog barks.", "A dog is loud.", "entailment")]), encoding="utf-8")
    run_finetune("--nli", nli, "--model", tiny_model_dir, "--steps", 1, "--out", tmp_path / "nli")
    assert "2 triplets" in capsys.readouterr().out  # the dog has no contradiction: no triple


def test_held_out_rows_select_without_a_dev_file(tiny_model_dir, files, tmp_path, capsys):
    """--heldout N: N rows (and every row sharing one of their sentences) never train; their loss selects best/."""
    out = tmp_path / "heldout"
    run_finetune("--pairs", files / "triplets.jsonl", "--model", tiny_model_dir, "--steps", 4, "--batch-size", 4,
                 "--heldout", 4, "--eval-every", 2, "--out", out)
    printed = capsys.readouterr().out
    kept, dropped = (int(n) for n in re.search(r"--heldout 4: (\d+) rows kept out of training, and (\d+) more",
                                                printed).groups())
    assert kept == 4 and f"fine-tuning: {24 - 4 - dropped} triplets" in printed
    log = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    assert [record["step"] for record in log if "eval" in record] == [2, 4] and (out / "best").is_dir()
    assert all("heldout-uniformity" in record for record in log if "eval" in record)


@pytest.mark.quick
def test_normalised_scores_reach_the_loss(files):
    args = finetune_train.parse_args(["--pairs", str(files / "train.csv"), "--loss", "cosine", "--score-range", "0,5"])
    kind, rows = finetune_train.read_examples(args)
    assert kind == "scored" and [round(r[2] * 5, 6) for r in rows] == [round(s, 6) for *_, s in datafiles.load_stsb(
        Path(os.environ["EVAL_DATA_DIR"]) / "stsbenchmark" / "sts-dev.csv")[:24]]


@pytest.mark.quick
@pytest.mark.parametrize("content, expected", [
    ("sentence1\tscore\nA man plays.\t3.0\n", "sentence2"),                           # a missing column
    ("sentence1\tsentence2\tscore\nA man plays.\tA man sings.\thigh\n", "line 2"),   # a non-numeric score
    ("", "empty"),                                                                   # an empty file
    ('sentence1\tsentence2\tscore\n"A man\tplays."\tA man sings.\t3\n', "tab"),       # a tab inside a quote
])
def test_bad_training_files_fail_in_one_line(tmp_path, content, expected):
    path = tmp_path / "bad.tsv"
    path.write_text(content, encoding="utf-8")
    message = one_line_error("--pairs", path, "--out", tmp_path / "out")
    assert str(path) in message and expected in message, message
    assert not (tmp_path / "out").exists()  # nothing loaded, nothing written


def test_bad_flags_and_dev_files_fail_in_one_line(files, tmp_path):
    bad_dev = tmp_path / "dev.tsv"
    bad_dev.write_text("sentence1\tsentence2\tscore\nA.\tB.\tnot a number\n", encoding="utf-8")
    assert "line 2" in one_line_error("--pairs", files / "train.csv", "--eval-task", f"sts:{bad_dev}",
                                      "--out", tmp_path / "a")
    assert "--sample 100" in one_line_error("--pairs", files / "train.csv", "--sample", 100, "--out", tmp_path / "b")
    with pytest.raises(SystemExit) as stopped:  # argparse's own exit: code 2, one line on stderr
        finetune_train.parse_args(["--pairs", "x.tsv", "--score-range", "5,0"])
    assert stopped.value.code == 2


def test_fine_tuning_has_no_plain_flag(capsys):
    """Fine-tuning has one path (no speedups/fast.py pieces), so it has no --plain to leave it by."""
    with pytest.raises(SystemExit) as stopped:
        finetune_train.parse_args(["--pairs", "x.tsv", "--plain"])
    assert stopped.value.code == 2 and "unrecognized arguments: --plain" in capsys.readouterr().err


# ----------------------------------------------------------------------------
# The optimiser and the schedule: sentence-transformers' fit


@pytest.mark.quick
@pytest.mark.parametrize("steps", [25, 7, 100])
def test_the_schedule_and_the_optimizer_are_those_of_sentence_transformers_fit(steps, tmp_path):
    """finetune's lr factors are transformers' get_linear_schedule_with_warmup with warmup_steps = ceil(10% of the
    steps) (the reference examples' setting): from 0, step by step; its AdamW is fit's default (PyTorch's: eps 1e-8),
    with fit's weight decay and gradient clipping."""
    import inspect
    import math

    import train
    from commands import experiment
    from sentence_transformers import SentenceTransformer
    from transformers import get_linear_schedule_with_warmup

    parameter = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([parameter], lr=1.0)
    schedule = get_linear_schedule_with_warmup(optimizer, num_warmup_steps=math.ceil(0.1 * steps),
                                               num_training_steps=steps)
    theirs = []
    for _ in range(steps):
        theirs.append(optimizer.param_groups[0]["lr"])  # the lr the optimiser's step uses
        optimizer.step()
        schedule.step()
    settings = train.TrainSettings(out=tmp_path, steps=steps, lr=1.0, **experiment.FIT)
    ours = [train.lr_factor(step, settings) for step in range(steps)]
    assert ours == pytest.approx(theirs, abs=1e-12)
    fit = inspect.signature(SentenceTransformer.fit).parameters
    assert fit["optimizer_class"].default is torch.optim.AdamW and "eps" not in fit["optimizer_params"].default
    adamw = train.make_optimizer(torch.nn.Linear(2, 2), settings, torch.device("cpu"))
    assert isinstance(adamw, torch.optim.AdamW)
    assert adamw.defaults["eps"] == inspect.signature(torch.optim.AdamW).parameters["eps"].default == 1e-8
    assert settings.weight_decay == fit["weight_decay"].default and settings.grad_clip == fit["max_grad_norm"].default


def test_epochs_with_a_short_last_batch_decay_as_sentence_transformers_fit_schedules_them(tiny_model_dir, tmp_path,
                                                                                        monkeypatch):
    """README's 175 pairs, batch 16, 3 epochs: fit (6.2) schedules rows // batch * epochs = 30 steps while its trainer
    trains every batch, the short last one too (ceil: 33 steps): the lr reaches 0 at step 30, warm-up over
    ceil(10% of the 33) steps, as its examples set warmup_steps."""
    import dataclasses
    import inspect
    import math

    import train
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.training_args import SentenceTransformerTrainingArguments
    from transformers import get_linear_schedule_with_warmup

    fit = inspect.getsource(SentenceTransformer.fit)  # the oracle's own arithmetic, as installed
    assert "len(train_dataset) // batch_size" in fit and "int(steps_per_epoch * epochs)" in fit
    drop_last = {f.name: f.default for f in dataclasses.fields(SentenceTransformerTrainingArguments)}
    assert drop_last["dataloader_drop_last"] is False  # the short last batch trains
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("sentence1\tsentence2\tscore\n"
                     + "".join(f"sentence {i}\tanother {i}\t{i % 5}\n" for i in range(175)),
                     encoding="utf-8")
    runs = []
    monkeypatch.setattr(train, "train", lambda encoder, objective, loader, run, device: runs.append(run))
    finetune_train.main(["--pairs", str(pairs), "--model", str(tiny_model_dir), "--out", str(tmp_path / "out"),
                         "--batch-size", "16", "--epochs", "3", "--score-range", "0,5"])
    (run,) = runs
    parameter = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([parameter], lr=1.0)
    schedule = get_linear_schedule_with_warmup(optimizer, num_warmup_steps=math.ceil(0.1 * 33), num_training_steps=30)
    theirs = []
    for _ in range(33):
        theirs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        schedule.step()
    assert run.steps == 33 and theirs[29] > 0 == theirs[30]
    assert [train.lr_factor(step, run) for step in range(33)] == pytest.approx(theirs, abs=1e-12)


@pytest.mark.parametrize("kind", ["bert", "distilbert", "roberta", "electra", "mpnet", "modernbert"])
def test_weight_decay_skips_the_parameters_sentence_transformers_fit_skips(kind, minilm_path, tmp_path):
    """fit's rule (any name with "bias", "LayerNorm.bias" or "LayerNorm.weight", as transformers names the
    parameter), on every family with its masked-LM head: MPNet's relative_attention_bias is not decayed,
    ModernBERT's and DistilBERT's norm weights are."""
    import inspect

    from sentence_transformers import SentenceTransformer
    from test_architectures import write_checkpoint
    from transformers import AutoModelForMaskedLM

    import train
    from lib.weights import ARCHITECTURES
    from model import load_bert

    assert 'no_decay = ["bias", "LayerNorm.bias", "LayerNorm.weight"]' in inspect.getsource(SentenceTransformer.fit)
    write_checkpoint(kind, tmp_path / kind, minilm_path, with_head=True)
    theirs = {name.removeprefix(ARCHITECTURES[kind].prefix): "decay" if not any(part in name for part in train.NO_DECAY)
              else "no decay" for name, _ in AutoModelForMaskedLM.from_pretrained(tmp_path / kind).named_parameters()}
    bert = load_bert(tmp_path / kind)
    settings = train.TrainSettings(out=tmp_path, steps=1, lr=1.0, weight_decay=0.01)
    decay, no_decay = (group["params"]
                       for group in train.make_optimizer(bert, settings, torch.device("cpu")).param_groups)
    names = train.fit_names(bert)
    fused = lambda name: re.sub(r"\.Wqkv\.[qkv]\.", ".Wqkv.", name)  # ModernBERT's q, k, v: one Wqkv in transformers
    ours = {fused(names[p]): "decay" for p in decay} | {fused(names[p]): "no decay" for p in no_decay}
    assert ours.items() <= theirs.items()  # each of ours a transformers parameter, decayed as fit decays it
    assert set(theirs) - set(ours) <= {"cls.predictions.decoder.weight", "generator_lm_head.weight",
                                       "lm_head.decoder.weight", "vocab_projector.weight", "decoder.weight"}  # tied
    if kind == "mpnet":
        assert ours["encoder.relative_attention_bias.weight"] == "no decay"
    if kind == "modernbert":
        assert ours["layers.1.attn_norm.weight"] == ours["final_norm.weight"] == "decay"


# ----------------------------------------------------------------------------
# What the file holds and the command does not use, or should not get


@pytest.mark.quick
def test_columns_the_command_does_not_read_are_named_in_one_line(tmp_path, capsys):
    path = tmp_path / "mined.tsv"
    path.write_text("id\tanchor\tpositive\tnegative_2\tnegative_1\tsource\n7\ta\tb\tn2\tn1\tweb\n", encoding="utf-8")
    kind, rows = finetune_train.read_examples(finetune_train.parse_args(["--pairs", str(path)]))
    assert (kind, rows) == ("tuples", [("a", "b", "n1", "n2")])  # every negative, in their numbers' order
    assert capsys.readouterr().out == f"--pairs {path}: not used: the columns id, source\n"


@pytest.mark.quick
def test_a_one_line_error_that_echoes_a_4_kb_header_is_cut_to_its_start_and_end(tmp_path):
    path = tmp_path / "wide.tsv"
    columns = [f"column_{i:03d}" for i in range(400)]  # 4,399 characters of header
    path.write_text("\t".join(columns) + "\n" + "\t".join("x" * 400) + "\n", encoding="utf-8")
    message = one_line_error("--pairs", path, "--out", tmp_path / "out")
    assert len(message) < 350 and message.startswith(f"error: {path}: want the columns ")
    assert "column_000, column_001" in message and message.endswith("column_398, column_399")
    assert re.search(r" \[\.\.\. [\d,]+ characters \.\.\.\] ", message)


@pytest.mark.quick
def test_a_flag_that_nothing_reads_for_the_data_given_is_refused(tmp_path, capsys):
    """--loss and --score-range act on scored pairs alone, --scale on in-batch negatives and CoSENT: each given
    where nothing would read it is refused in one line, before a model is loaded."""
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("anchor\tpositive\na\tb\nc\td\n", encoding="utf-8")
    for flags in (["--loss", "cosine"], ["--score-range", "0,5"]):
        message = one_line_error("--pairs", pairs, *flags, "--out", tmp_path / "out")
        assert message == (f"error: --pairs {pairs}: pairs have no scores (they train with in-batch negatives): "
                           f"{flags[0]} would change nothing")
    for argv, expected in ((["--nli", "x.jsonl", "--loss", "cosine"], "--nli trains triplets, which have no scores: "
                                                                      "--loss would change nothing"),
                           (["--nli", "x.jsonl", "--score-range", "0,5"], "--score-range would change nothing"),
                           (["--pairs", "x.tsv", "--loss", "cosine", "--scale", "10"], "--scale would change nothing"),
                           (["--pairs", "x.tsv", "--bad-lines", "skip"], "--bad-lines would change nothing"),
                           (["--pairs", "x.tsv", "--eval-every", "7"], "--eval-every would change nothing")):
        with pytest.raises(SystemExit) as stopped:
            finetune_train.parse_args(argv)
        assert stopped.value.code == 2 and expected in capsys.readouterr().err, argv
    assert not (tmp_path / "out").exists()


@pytest.mark.quick
def test_cosine_targets_are_mapped_by_the_whole_files_range_whatever_sample_draws(tmp_path):
    """--loss cosine without --score-range maps the scores by the file's lowest and highest, as its help says: a
    --sample K that misses the highest row maps each score as the full file does."""
    path = tmp_path / "scored.tsv"
    path.write_text("sentence1\tsentence2\tscore\na\tb\t0\nc\td\t1\ne\tf\t2\ng\th\t5\n", encoding="utf-8")
    missed_the_top = 0
    for seed in range(8):
        args = finetune_train.parse_args(["--pairs", str(path), "--loss", "cosine", "--sample", "3",
                                          "--seed", str(seed)])
        _, rows = finetune_train.read_examples(args)
        assert {(s1, score) for s1, _, score in rows} <= {("a", 0.0), ("c", 0.2), ("e", 0.4), ("g", 1.0)}, seed
        missed_the_top += "g" not in [s1 for s1, _, _ in rows]
    assert missed_the_top  # a draw without the score 5 (what a mapping by the drawn rows would get wrong)


@pytest.mark.quick
@pytest.mark.parametrize("loss", ["cosine", "cosent"])
def test_a_score_outside_the_score_range_is_refused_with_its_line(tmp_path, loss):
    path = tmp_path / "scored.tsv"
    path.write_text("sentence1\tsentence2\tscore\na\tb\t4.5\n\nc\td\t-0.4\n", encoding="utf-8")
    message = one_line_error("--pairs", path, "--loss", loss, "--score-range", "0,5", "--out", tmp_path / "out")
    assert message == f"error: {path} line 4: score '-0.4' is outside the score range 0,5"
    path.write_text("sentence1\tsentence2\tscore\na\tb\t5\nc\td\t0\ne\tf\t5.25\n", encoding="utf-8")  # above the top
    message = one_line_error("--pairs", path, "--loss", loss, "--score-range", "0,5", "--out", tmp_path / "out")
    assert message == f"error: {path} line 4: score '5.25' is outside the score range 0,5"  # 0 and 5 themselves pass
    assert not (tmp_path / "out").exists()
