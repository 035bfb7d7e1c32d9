"""The TSDAE paper's other checkpoints (arXiv:2104.06979 app. C): DistilBERT, RoBERTa / XLM-R and ELECTRA besides BERT,
and the encoders used now, MPNet (all-mpnet-base-v2's) and ModernBERT; each a tiny random checkpoint that transformers
itself writes with save_pretrained, with a tokenizer of its own family beside it (WordPiece; byte-level BPE and
SentencePiece-style Unigram built with tokenizers and wrapped in transformers' fast tokenizer class). Our encoder
equals transformers'; both methods train from each, and fine-tuning and evaluation run on what they save; the saved
model loads in transformers as the same model_type and in sentence-transformers with equal embeddings."""
import json
import random
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from scipy.stats import spearmanr

from lib import weights
import consert
import data
import evaluate
from commands import consert_train, finetune_train, tsdae_train
from speedups import fast
import tsdae
from lib.weights import ModelLoadError
import model
from model import SentenceEncoder, load_bert, pool

KINDS = ["bert", "distilbert", "roberta", "xlm-roberta", "electra", "mpnet", "modernbert"]
SENTENCES = ["The cat sat on the mat.", "A dog barked at the mailman!", "Stocks fell sharply on Monday morning.",
             "Rain is expected over the weekend, they said.", "Bees carry pollen.", "The library opens at nine.",
             "She planted tomatoes in May and harvested them in August.", "Our train arrived two hours late."]


def config_of(kind: str, vocab_size: int):
    import transformers

    small = dict(vocab_size=vocab_size, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37,
                 max_position_embeddings=66, hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)
    if kind == "distilbert":
        return transformers.DistilBertConfig(vocab_size=vocab_size, dim=32, n_layers=2, n_heads=4, hidden_dim=37,
                                             max_position_embeddings=64)
    if kind == "electra":  # embeddings narrower than the layers: an embeddings_project linear
        return transformers.ElectraConfig(**small, embedding_size=16, hidden_size=32)
    if kind == "mpnet":  # RoBERTa's positions from pad_token_id + 1 = 2, a relative position bias of 32 buckets
        return transformers.MPNetConfig(**small, hidden_size=32, pad_token_id=1, bos_token_id=0, eos_token_id=2)
    if kind == "modernbert":  # layers 0 and 2 global, 1 local with a window of 2 positions each side (sentences
        # are longer); no dropout (its published configs have none)
        return transformers.ModernBertConfig(vocab_size=vocab_size, hidden_size=32, num_hidden_layers=3,
                                             num_attention_heads=4, intermediate_size=37, max_position_embeddings=64,
                                             local_attention=4, global_attn_every_n_layers=2, pad_token_id=1,
                                             bos_token_id=0, eos_token_id=2, cls_token_id=0, sep_token_id=2)
    if kind in ("roberta", "xlm-roberta"):  # position ids from pad_token_id + 1 = 2: 64 usable positions
        cls = transformers.RobertaConfig if kind == "roberta" else transformers.XLMRobertaConfig
        return cls(**small, hidden_size=32, type_vocab_size=1, pad_token_id=1, bos_token_id=0, eos_token_id=2)
    return transformers.BertConfig(**small, hidden_size=32)


def family_tokenizer(kind: str, minilm_path: str, folder: Path) -> int:
    """Save a tokenizer of the family into folder; returns its vocabulary size."""
    import transformers
    from tokenizers import ByteLevelBPETokenizer, SentencePieceUnigramTokenizer, processors

    corpus = SENTENCES * 20
    if kind == "mpnet":  # WordPiece with <s> <pad> </s> <unk> first and <mask> last, as all-mpnet-base-v2's
        words = (Path(minilm_path) / "vocab.txt").read_text(encoding="utf-8").split("\n")[:-1]
        vocab = ["<s>", "<pad>", "</s>", "<unk>", *words, "<mask>"]
        wrapped = transformers.MPNetTokenizer(vocab={w: i for i, w in enumerate(vocab)})
    elif kind == "modernbert":  # byte-level BPE with BERT's special tokens, as ModernBERT's
        trainer = ByteLevelBPETokenizer()
        trainer.train_from_iterator(corpus, vocab_size=300, min_frequency=1,
                                    special_tokens=["[CLS]", "[PAD]", "[SEP]", "[UNK]", "[MASK]"])
        raw = trainer._tokenizer
        raw.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]",
                                                           special_tokens=[("[CLS]", 0), ("[SEP]", 2)])
        wrapped = transformers.PreTrainedTokenizerFast(tokenizer_object=raw, cls_token="[CLS]", sep_token="[SEP]",
                                                       pad_token="[PAD]", unk_token="[UNK]", mask_token="[MASK]")
    elif kind == "roberta":  # byte-level BPE, as roberta-base
        trainer = ByteLevelBPETokenizer()
        trainer.train_from_iterator(corpus, vocab_size=300, min_frequency=1,
                                    special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
        raw = trainer._tokenizer
        raw.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
        wrapped = transformers.RobertaTokenizerFast(tokenizer_object=raw, bos_token="<s>", eos_token="</s>",
                                                    pad_token="<pad>", unk_token="<unk>", mask_token="<mask>")
    elif kind == "xlm-roberta":  # SentencePiece-style Unigram, as xlm-roberta-base
        trainer = SentencePieceUnigramTokenizer()
        trainer.train_from_iterator(corpus, vocab_size=200, special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"],
                                    unk_token="<unk>")
        raw = trainer._tokenizer
        raw.post_processor = processors.TemplateProcessing(single="<s> $A </s>",
                                                           special_tokens=[("<s>", 0), ("</s>", 2)])
        wrapped = transformers.XLMRobertaTokenizerFast(tokenizer_object=raw, bos_token="<s>", eos_token="</s>",
                                                       pad_token="<pad>", unk_token="<unk>", mask_token="<mask>")
    else:  # WordPiece (BERT's uncased vocabulary, MiniLM's)
        wrapped = transformers.AutoTokenizer.from_pretrained(minilm_path)
    wrapped.save_pretrained(folder)
    return len(wrapped)


def write_checkpoint(kind: str, folder: Path, minilm_path: str, with_head: bool = False, **config) -> None:
    """The family's tiny random checkpoint (config_of's settings; `config`: other values of its config)."""
    import transformers

    folder.mkdir(parents=True)
    vocab_size = family_tokenizer(kind, minilm_path, folder)
    cfg = config_of(kind, vocab_size)
    for key, value in config.items():
        setattr(cfg, key, value)
    name = {"bert": "Bert", "distilbert": "DistilBert", "roberta": "Roberta", "xlm-roberta": "XLMRoberta",
            "electra": "Electra", "mpnet": "MPNet", "modernbert": "ModernBert"}[kind]
    torch.manual_seed(1)
    hf = getattr(transformers, f"{name}ForMaskedLM" if with_head else f"{name}Model")(cfg).eval()
    with torch.no_grad():  # non-trivial biases and LayerNorms, so that a mix-up of names would show
        for p in hf.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    hf.save_pretrained(folder)


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory, minilm_path) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("architectures")
    folders = {}
    for kind in KINDS:
        write_checkpoint(kind, root / kind, minilm_path)
        write_checkpoint(kind, root / f"{kind}-mlm", minilm_path, with_head=True)
        folders[kind], folders[f"{kind}-mlm"] = root / kind, root / f"{kind}-mlm"
    return folders


def hf_model(folder: Path):
    from transformers import AutoModel

    return AutoModel.from_pretrained(folder).eval()


def batch(encoder: SentenceEncoder) -> tuple[torch.Tensor, torch.Tensor]:
    ids, mask = data.pad(data.tokenize(encoder.tokenizer, SENTENCES, 64), encoder.bert.cfg.pad_token_id)
    assert (mask == 0).any()  # padding, with the family's own pad id
    return ids, mask


@pytest.mark.parametrize("kind", KINDS)
def test_encoder_equals_transformers_on_both_paths(kind, checkpoints):
    folder = checkpoints[kind]
    encoder = SentenceEncoder.from_pretrained(folder, pooling="mean").eval()
    assert encoder.bert.cfg.model_type == kind
    ids, mask = batch(encoder)
    with torch.no_grad():
        theirs = hf_model(folder)(input_ids=ids, attention_mask=mask).last_hidden_state
    real = mask.bool()
    for ours in (encoder, SentenceEncoder.from_pretrained(folder, pooling="mean", bert_class=fast.PackedBert).eval()):
        with torch.no_grad():
            states = ours.bert(ids, mask)
        assert (states[real] - theirs[real]).abs().max() < 1e-5
        vectors = ours.encode(SENTENCES)
        assert F.cosine_similarity(vectors, pool(theirs, mask, "mean")).min() >= 0.99999


class SeededDropout:
    """F.dropout whose k-th call draws its mask from a generator seeded k. Two models that drop out at the same
    places, in the same order, on tensors of the same shapes and rates get the same masks and equal outputs;
    a dropout missing, added or moved changes every mask after it."""

    def __init__(self):
        self.calls = []  # (shape, rate) of each call that dropped something

    def __call__(self, x: torch.Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> torch.Tensor:
        if not training or p == 0:
            return x
        keep = torch.rand(x.shape, generator=torch.Generator().manual_seed(len(self.calls))) >= p
        self.calls.append((tuple(x.shape), p))
        return x * keep / (1 - p)


class FusedBert(model.Bert):
    """Bert whose attention runs as PyTorch's fused kernel (fast.FusedAttention, which PackedAttention uses on CUDA)."""

    attention_class = fast.FusedAttention


@pytest.mark.parametrize("kind", KINDS)
def test_the_fused_kernel_sees_the_familys_positions(kind, checkpoints):
    """fast.FusedAttention (the CUDA path) gets MPNet's float mask and ModernBERT's turned q and k and local windows
    as the written-out formula does: the same states, here on CPU."""
    folder = checkpoints[kind]
    plain, fused = load_bert(folder).eval(), load_bert(folder, FusedBert).eval()
    ids, mask = batch(SentenceEncoder(plain, weights.load_tokenizer(folder)))
    with torch.no_grad():
        assert (plain(ids, mask)[mask.bool()] - fused(ids, mask)[mask.bool()]).abs().max() < 1e-5


@pytest.mark.parametrize("kind", [k for k in KINDS if k != "modernbert"])  # ModernBERT: no dropout (refused below)
def test_train_mode_dropout_sits_where_transformers_puts_it(kind, checkpoints, monkeypatch):
    """In training mode, with the same masks at the same places: the same states as transformers' model (eager
    attention, whose dropout on the attention probabilities is a call of F.dropout). DistilBERT has no dropout
    after attention; ELECTRA drops out before its embeddings' projection."""
    from transformers import AutoModel

    folder = checkpoints[kind]
    encoder = SentenceEncoder.from_pretrained(folder, pooling="mean").train()
    reference = AutoModel.from_pretrained(folder, attn_implementation="eager").train()
    ids, mask = batch(encoder)
    ours, theirs = SeededDropout(), SeededDropout()
    monkeypatch.setattr(F, "dropout", ours)
    states = encoder.bert(ids, mask)
    monkeypatch.setattr(F, "dropout", theirs)
    expected = reference(input_ids=ids, attention_mask=mask).last_hidden_state
    per_layer = 2 if kind == "distilbert" else 3  # attention probabilities, (attention output), feed-forward output
    assert len(ours.calls) == 1 + 2 * per_layer and ours.calls == theirs.calls
    real = mask.bool()
    assert (states[real] - expected[real]).abs().max() < 1e-5


@pytest.mark.parametrize("kind", ["roberta", "xlm-roberta"])
def test_left_padding_gets_the_positions_transformers_gives(kind, checkpoints):
    """RoBERTa / XLM-R count positions over the real tokens (transformers' create_position_ids_from_input_ids): a
    left-padded batch gives the same real-token states as RobertaModel, and as the same batch padded on the right."""
    folder = checkpoints[kind]
    encoder = SentenceEncoder.from_pretrained(folder, pooling="mean").eval()
    ids, mask = batch(encoder)
    pad = encoder.bert.cfg.pad_token_id
    lengths = mask.sum(1)
    left_ids, left_mask = torch.full_like(ids, pad), torch.zeros_like(mask)
    for b, n in enumerate(lengths.tolist()):
        left_ids[b, ids.shape[1] - n:], left_mask[b, ids.shape[1] - n:] = ids[b, :n], 1
    with torch.no_grad():
        theirs = hf_model(folder)(input_ids=left_ids, attention_mask=left_mask).last_hidden_state
        ours, right = encoder.bert(left_ids, left_mask), encoder.bert(ids, mask)
    assert (ours[left_mask.bool()] - theirs[left_mask.bool()]).abs().max() < 1e-5
    assert (ours[left_mask.bool()] - right[mask.bool()]).abs().max() < 1e-5


@pytest.mark.parametrize("kind", KINDS)
def test_masked_lm_head_loads_and_the_tsdae_decoder_starts_from_it(kind, checkpoints):
    """A *ForMaskedLM checkpoint: our head's logits equal transformers' (ELECTRA: its generator's head, which
    predicts from embedding_size); the TSDAE decoder's LM head IS that head. Without one it starts fresh."""
    from transformers import AutoModelForMaskedLM

    folder = checkpoints[f"{kind}-mlm"]
    bert = load_bert(folder).eval()
    assert bert.mlm_head is not None and load_bert(checkpoints[kind]).mlm_head is None
    encoder = SentenceEncoder(bert, weights.load_tokenizer(folder), "mean", 64)
    ids, mask = batch(encoder)
    with torch.no_grad():
        theirs = AutoModelForMaskedLM.from_pretrained(folder).eval()(input_ids=ids, attention_mask=mask).logits
        ours = bert.mlm_head(bert(ids, mask), bert.embeddings.word.weight)
    real = mask.bool()
    assert (ours[real] - theirs[real]).abs().max() < 1e-4
    assert tsdae.TSDAELoss(encoder).decoder.lm_head is bert.mlm_head
    for path in ([], ["--plain"]):  # and so does the objective `python tsdae.py --model FOLDER` trains, on each path
        args = tsdae_train.make_parser().parse_args(["--corpus", "corpus.txt", "--model", str(folder), *path])
        head = tsdae_train.build_objective(args).decoder.lm_head
        assert torch.equal(head.dense.weight, bert.mlm_head.dense.weight) and torch.equal(head.bias, bert.mlm_head.bias)


@pytest.mark.parametrize("kind", KINDS)
def test_both_methods_train_and_save_in_the_familys_own_layout(kind, checkpoints, tmp_path):
    from sentence_transformers import SentenceTransformer
    from transformers import AutoConfig

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    common = ["--corpus", str(corpus), "--model", str(checkpoints[kind]), "--steps", "2", "--batch-size", "4",
              "--save-every", "0", "--device", "cpu"]
    tsdae_train.main([*common, "--out", str(tmp_path / "tsdae"), "--lr", "1e-3"])
    consert_train.main([*common, "--out", str(tmp_path / "consert"), "--lr", "1e-3"])
    for run in ("tsdae", "consert"):
        saved = tmp_path / run / "model"
        assert AutoConfig.from_pretrained(saved).model_type == kind
        names = set(weights.read_safetensors(saved / "model.safetensors"))
        assert names == set(weights.read_safetensors(checkpoints[kind] / "model.safetensors"))  # the pooler too
        ours = SentenceEncoder.from_pretrained(saved)
        ids, mask = batch(ours)
        with torch.no_grad():
            theirs = hf_model(saved)(input_ids=ids, attention_mask=mask).last_hidden_state
            states = ours.bert.eval()(ids, mask)
        assert (states[mask.bool()] - theirs[mask.bool()]).abs().max() < 1e-5
        st = SentenceTransformer(str(saved), device="cpu").encode(SENTENCES, convert_to_tensor=True)
        assert F.cosine_similarity(ours.encode(SENTENCES), st).min() >= 0.99999
    trained = SentenceEncoder.from_pretrained(tmp_path / "tsdae" / "model").bert.layers[0].ffn.up.weight
    assert not torch.equal(trained, load_bert(checkpoints[kind]).layers[0].ffn.up.weight)  # it did train

    # then the labels (TSDAE §6): fine-tuning the TSDAE model, saved in the family's layout, and its evaluation
    pairs, test = tmp_path / "pairs.tsv", tmp_path / "test.tsv"
    pairs.write_text("anchor\tpositive\n" + "".join(f"{a}\t{b}\n" for a, b in zip(SENTENCES[::2], SENTENCES[1::2])))
    test.write_text("sentence1\tsentence2\tscore\n" + "".join(
        f"{a}\t{b}\t{i % 3}\n" for i, (a, b) in enumerate(zip(SENTENCES, SENTENCES[1:] + SENTENCES[:1]))))
    finetune_train.main(["--pairs", str(pairs), "--model", str(tmp_path / "tsdae" / "model"), "--epochs", "1",
                         "--batch-size", "2", "--save-every", "0", "--device", "cpu", "--out", str(tmp_path / "ft")])
    tuned = tmp_path / "ft" / "model"
    assert AutoConfig.from_pretrained(tuned).model_type == kind
    scores = evaluate.evaluate(SentenceEncoder.from_pretrained(tuned), f"sts:{test}")
    vectors = SentenceTransformer(str(tuned), device="cpu").encode(SENTENCES, convert_to_tensor=True)
    cosines = F.cosine_similarity(vectors, vectors.roll(-1, 0)).tolist()  # sentence i with i + 1,
    # the last with the first
    gold = [i % 3 for i in range(len(SENTENCES))]
    assert scores[f"sts:{test}"] == pytest.approx(100 * spearmanr(cosines, gold).statistic, abs=1e-3)


@pytest.mark.parametrize("kind", KINDS)
def test_fast_tsdae_loss_equals_the_plain_one(kind, checkpoints):
    plain = tsdae.TSDAELoss(SentenceEncoder.from_pretrained(checkpoints[f"{kind}-mlm"], pooling="cls")).eval()
    torch.manual_seed(0)  # the same new weights
    plain = tsdae.TSDAELoss(SentenceEncoder.from_pretrained(checkpoints[f"{kind}-mlm"], pooling="cls")).eval()
    torch.manual_seed(0)
    quick_encoder = SentenceEncoder.from_pretrained(checkpoints[f"{kind}-mlm"], pooling="cls",
                                                    bert_class=fast.SparseLookupPackedBert)
    quick = tsdae.TSDAELoss(quick_encoder, decoder_class=fast.PackedDecoder).eval()
    dataset = tsdae.DenoisingDataset(SENTENCES, plain.encoder.tokenizer, 64)
    pairs = tsdae.collate_pairs([dataset[(0, i)] for i in range(len(SENTENCES))], plain.encoder.bert.cfg.pad_token_id)
    losses, grads = [], []
    for objective in (plain, quick):
        objective.zero_grad()
        loss = objective(pairs)
        loss.backward()
        losses.append(loss.item())
        grads.append(plain.encoder.bert.embeddings.word.weight.grad.to_dense().clone())
    assert abs(losses[0] - losses[1]) <= 1e-5 * losses[0]
    torch.testing.assert_close(grads[1], grads[0], atol=1e-6, rtol=1e-4)


def test_words_are_real_words_in_every_tokenizer_family(checkpoints):
    """TSDAE deletes words: WordPiece and byte-level BPE split words and punctuation, SentencePiece splits at
    spaces; a word's tokens stay together."""
    sentence = "Stocks fell unbelievably on Monday."
    expected = {"bert": ["stocks", "fell", "unbelievably", "on", "monday", "."],
                "roberta": ["Stocks", " fell", " unbelievably", " on", " Monday", "."],
                "xlm-roberta": ["Stocks", "fell", "unbelievably", "on", "Monday."]}
    for kind, words in expected.items():
        tokenizer = weights.load_tokenizer(checkpoints[kind])
        head, found, tail = tsdae.words_of(tokenizer, sentence)
        assert len(head) == 1 and len(tail) == 1  # [CLS] / <s> and [SEP] / </s>
        assert [tokenizer.decode(w).replace("▁", " ").strip() if kind == "xlm-roberta" else tokenizer.decode(w)
                for w in found] == words, kind
        assert any(len(w) > 1 for w in found)  # some word of several tokens, kept whole
        rng = random.Random(0)
        kept = tsdae.delete_words(found, 0.6, rng)
        assert 1 <= len(kept) <= len(found) and all(w in found for w in kept)
        mask_id = data.special_token_id(tokenizer, "mask")
        assert tokenizer.id_to_token(mask_id) in ("[MASK]", "<mask>")
        special = {tokenizer.token_to_id(t) for t in ("[PAD]", "[CLS]", "<s>", "<pad>", "</s>", "<mask>")} - {None}
        assert not special & set(tsdae.ordinary_token_ids(tokenizer))


def test_roberta_token_shuffle_counts_positions_from_the_offset(checkpoints):
    """ConSERT's shuffle permutes positions 0..n-1; RoBERTa's position ids are those + pad_token_id + 1."""
    folder = checkpoints["roberta"]
    encoder = SentenceEncoder.from_pretrained(folder, pooling="mean")
    consert.switch_off_dropout(encoder)
    objective = consert.ConSERTLoss(encoder.eval(), (consert.View("shuffle"), consert.View("none")))
    ids, mask = batch(encoder)
    torch.manual_seed(3)
    permuted = consert.shuffled_positions(mask)  # (B, L), 0-based
    torch.manual_seed(3)
    with torch.no_grad():
        ours = objective.encode(ids, mask, consert.View("shuffle"))
        hf_positions = torch.where(mask.bool(), permuted + 2, 1)  # pad_token_id 1
        theirs = hf_model(folder)(input_ids=ids, attention_mask=mask, position_ids=hf_positions).last_hidden_state
    torch.testing.assert_close(ours, pool(theirs, mask, "mean"), atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("kind", ["roberta", "xlm-roberta"])
def test_max_length_stays_inside_the_position_table_once_the_offset_is_counted(kind, checkpoints):
    """66 position rows, of which positions start at pad_token_id + 1 = 2: a sentence may hold 64 tokens. A longer
    --max-length is cut to 64, and a long sentence encodes without reading past the table."""
    encoder = SentenceEncoder.from_pretrained(checkpoints[kind], max_length=512)
    assert encoder.max_length == 64
    vectors = encoder.encode([" ".join(SENTENCES * 4)])  # far more than 64 tokens
    assert vectors.shape == (1, 32) and torch.isfinite(vectors).all()


def test_an_unsupported_type_names_the_supported_ones(checkpoints, tmp_path):
    folder = tmp_path / "albert"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "albert", "hidden_size": 32}))
    with pytest.raises(ModelLoadError) as e:
        load_bert(folder)
    message = str(e.value)
    assert "\n" not in message and "model_type 'albert' is not supported" in message
    assert "bert, roberta, xlm-roberta, distilbert, electra" in message


def test_the_model_flag_names_every_family():
    """--model's help in each command that trains from a checkpoint names the families lib/weights.py loads."""
    from baselines import mlm

    assert set(weights.FAMILY_NAMES) == set(weights.ARCHITECTURES)
    for parser in (tsdae_train.make_parser(), consert_train.make_parser(), mlm.make_parser()):
        (text,) = [action.help for action in parser._actions if "--model" in action.option_strings]
        assert all(name in text for name in weights.FAMILY_NAMES.values()), text


def test_mpnet_adds_one_relative_position_bias_to_every_layer(checkpoints):
    """MPNet's bias table is one for all the layers (transformers' encoder.relative_attention_bias): changing it
    changes the states, and our buckets are T5's: exact below 8, then logarithmic, the sign its own half."""
    from transformers.models.mpnet.modeling_mpnet import MPNetEncoder

    bert = load_bert(checkpoints["mpnet"]).eval()
    distances = torch.tensor([0, 1, 7, 8, 12, 127, 128, 1000, -1, -8, -1000])
    assert model.RelativePositionBias.bucket(distances).tolist() == [0, 1, 7, 8, 9, 15, 15, 15, 17, 24, 31]
    every = torch.arange(-300, 301)
    ours = model.RelativePositionBias.bucket(every)
    assert torch.equal(ours, MPNetEncoder.relative_position_bucket(-every))  # transformers': key - query
    starts = [int(every[(every >= 0) & (ours == k)].min()) for k in range(8, 16)]
    assert starts == [8, 12, 16, 23, 32, 46, 64, 91]  # model.RelativePositionBias's docstring: the last from 91
    ids, mask = batch(SentenceEncoder(bert, weights.load_tokenizer(checkpoints["mpnet"])))
    with torch.no_grad():
        before = bert(ids, mask)
        bert.relative_bias.table.weight[0, 0] += 1.0  # head 0's bias for distance 0 (a query to itself), in every layer
        after = bert(ids, mask)
    assert (before - after)[mask.bool()].abs().max() > 1e-3


def test_mpnet_with_another_pad_id_takes_id_1_for_padding_as_transformers_does(minilm_path, tmp_path):
    """transformers' MPNet counts positions over the ids that are not 1, and gives id 1 the padding rows of its word
    and position tables, whatever config.json's pad_token_id says: so do we (here pad_token_id 0, and an id 1 inside
    a sentence, which takes position 1 and moves the positions after it)."""
    folder = tmp_path / "mpnet-pad0"
    write_checkpoint("mpnet", folder, minilm_path, pad_token_id=0)
    encoder = SentenceEncoder.from_pretrained(folder, pooling="mean").eval()
    assert encoder.bert.cfg.pad_token_id == 0
    ids, mask = batch(encoder)
    ids[0, 2] = 1
    reference = hf_model(folder)
    assert encoder.bert.embeddings.word.padding_idx == reference.embeddings.word_embeddings.padding_idx == 1
    assert encoder.bert.embeddings.position.padding_idx == reference.embeddings.position_embeddings.padding_idx == 1
    with torch.no_grad():
        theirs = reference(input_ids=ids, attention_mask=mask).last_hidden_state
        ours = encoder.bert(ids, mask)
    assert (ours[mask.bool()] - theirs[mask.bool()]).abs().max() < 1e-5
    saved = tmp_path / "saved"
    encoder.save_pretrained(saved)  # back in transformers' layout, its pad_token_id kept
    config = json.loads((saved / "config.json").read_text())
    assert config["pad_token_id"] == 0 and "embedding_pad_id" not in config


def test_modernbert_with_the_tanh_gelu_equals_transformers(minilm_path, tmp_path):
    """hidden_activation "gelu_pytorch_tanh" (transformers' GELUTanh): the feed-forward's GELU in its tanh form,
    the same states as transformers' ModernBERT, and not those of the erf form; saved back under the same name."""
    folder = tmp_path / "modernbert-tanh"
    write_checkpoint("modernbert", folder, minilm_path, hidden_activation="gelu_pytorch_tanh")
    encoder = SentenceEncoder.from_pretrained(folder, pooling="mean").eval()
    erf = SentenceEncoder(load_bert(folder), encoder.tokenizer).eval()
    for layer in erf.bert.layers:
        layer.ffn.approximate = "none"
    ids, mask = batch(encoder)
    with torch.no_grad():
        theirs = hf_model(folder)(input_ids=ids, attention_mask=mask).last_hidden_state[mask.bool()]
        ours, exact = encoder.bert(ids, mask)[mask.bool()], erf.bert(ids, mask)[mask.bool()]
    assert (ours - theirs).abs().max() < 1e-5 < (exact - theirs).abs().max()
    encoder.save_pretrained(tmp_path / "saved")
    assert json.loads((tmp_path / "saved" / "config.json").read_text())["hidden_activation"] == "gelu_pytorch_tanh"
    bad = json.loads((folder / "config.json").read_text()) | {"hidden_activation": "relu"}
    (folder / "config.json").write_text(json.dumps(bad))
    with pytest.raises(ModelLoadError, match="'relu' is not supported; use 'gelu' or 'gelu_pytorch_tanh'"):
        load_bert(folder)


def test_modernbert_local_layers_see_a_window_only(checkpoints):
    """Layer 1 is local (global_attn_every_n_layers 2), with a window of local_attention // 2 = 2 positions each side;
    layers 0 and 2 are global, and no layer adds position vectors (rotary): transformers agrees (above) only if so."""
    bert = load_bert(checkpoints["modernbert"])
    assert [layer.attn.rotary.window for layer in bert.layers] == [None, 2, None]
    assert bert.embeddings.position is None and bert.final_norm is not None
    assert isinstance(bert.layers[0].attn_norm, torch.nn.Identity)
    assert all(type(layer) is model.PreNormEncoderLayer for layer in bert.layers)  # model.py's section 8
    assert all(p.dim() != 1 or name.endswith("norm.weight") or name == "mlm_head.bias"
               for name, p in bert.named_parameters())  # no biases


def test_modernbert_reads_the_first_releases_config_keys_and_refuses_what_it_does_not_do(checkpoints, tmp_path):
    """answerdotai/ModernBERT-base's config.json states global_attn_every_n_layers / global_rope_theta /
    local_rope_theta (transformers 5 writes layer_types / rope_parameters); dropout or biases are refused."""
    raw = json.loads((checkpoints["modernbert"] / "config.json").read_text())
    first = {k: v for k, v in raw.items() if k not in ("layer_types", "rope_parameters")}
    first.update(global_attn_every_n_layers=2, global_rope_theta=1000.0, local_rope_theta=50.0)
    values = weights.modernbert_config(first, tmp_path)
    assert values == {"global_rope_theta": 1000.0, "local_rope_theta": 50.0, "local_attention": 4,
                      "global_attn_every_n_layers": 2}
    assert weights.modernbert_config(raw, tmp_path)["global_rope_theta"] == 160_000.0
    for bad in ({"mlp_dropout": 0.1}, {"attention_bias": True}, {"layer_types": ["full_attention", "full_attention",
                                                                                  "sliding_attention"]}):
        with pytest.raises(ModelLoadError) as e:
            weights.modernbert_config({**raw, **bad}, tmp_path)
        assert "\n" not in str(e.value) and str(e.value).startswith(str(tmp_path))


def test_modernbert_token_shuffle_shows_the_tokens_in_the_shuffled_order(checkpoints):
    """ConSERT's token shuffle on a model without position vectors: each token's row is placed at its shuffled
    position, so the mean-pooled view equals transformers' ModernBERT on the tokens reordered."""
    folder = checkpoints["modernbert"]
    encoder = SentenceEncoder.from_pretrained(folder, pooling="mean").eval()
    objective = consert.ConSERTLoss(encoder, (consert.View("shuffle"), consert.View("none")))
    ids, mask = batch(encoder)
    torch.manual_seed(3)
    positions = consert.shuffled_positions(mask)  # (B, L): token t goes to position positions[b, t]
    torch.manual_seed(3)
    with torch.no_grad():
        ours = objective.encode(ids, mask, consert.View("shuffle"))
        reordered = torch.empty_like(ids).scatter_(1, positions, ids)
        theirs = hf_model(folder)(input_ids=reordered, attention_mask=mask).last_hidden_state
        unshuffled = objective.encode(ids, mask, consert.View("none"))
    torch.testing.assert_close(ours, pool(theirs, mask, "mean"), atol=1e-5, rtol=1e-4)
    assert (ours - unshuffled).abs().max() > 1e-4  # the order matters to the model
