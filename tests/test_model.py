"""The hand-written BERT against transformers / sentence-transformers, on real and on small weights."""
import json
import shutil
import struct
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import data
from speedups import fast
from lib.weights import ModelLoadError, load_tokenizer, read_safetensors, write_safetensors
from model import Bert, BertConfig, MultiHeadAttention, SentenceEncoder, attention, load_bert, pool


def hf_batch(tokenizer_path, sentences, max_length=256):
    tok = load_tokenizer(Path(tokenizer_path))
    return data.pad(data.tokenize(tok, sentences, max_length), pad_id=0)


# ---------------------------------------------------------------- the math


def test_attention_formula_equals_the_fused_kernel():
    """model.attention = PyTorch's fused kernel, with a padding mask and a causal one; so does MultiHeadAttention,
    on the formula, and fast.FusedAttention, on the kernel."""
    cfg = BertConfig(hidden_size=32, num_attention_heads=4, attention_probs_dropout_prob=0.0)
    attn = MultiHeadAttention(cfg).eval()
    fused_attn = fast.FusedAttention(cfg).eval()
    fused_attn.load_state_dict(attn.state_dict())
    x = torch.randn(3, 7, 32)
    mask = torch.ones(3, 7, dtype=torch.bool)
    mask[0, 5:] = False
    mask[2, 2:] = False
    split = lambda t: t.view(3, 7, 4, 8).transpose(1, 2)  # (B, h, L, dh)
    q, k, v = split(attn.q(x)), split(attn.k(x)), split(attn.v(x))
    merge = lambda y: attn.out(y.transpose(1, 2).reshape(3, 7, 32))
    padding, causal = mask[:, None, None, :], torch.ones(7, 7, dtype=torch.bool).tril()
    for attn_mask in (padding, causal):
        fused = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
        torch.testing.assert_close(attention(q, k, v, attn_mask), fused, atol=1e-6, rtol=1e-5)
        torch.testing.assert_close(attn(x, attn_mask), merge(fused), atol=1e-6, rtol=1e-5)
        torch.testing.assert_close(fused_attn(x, attn_mask), merge(fused), atol=1e-6, rtol=1e-5)
    unmasked = (q @ k.transpose(-2, -1) / 8 ** 0.5).softmax(-1) @ v  # the textbook line, no mask
    torch.testing.assert_close(attention(q, k, v), unmasked)
    # the gradient check: attention trains the encoder through its gradient, which must reach q, k and v as the kernel's
    yours, kernel = [[t.detach().clone().requires_grad_() for t in (q, k, v)] for _ in range(2)]
    weights = torch.randn(3, 4, 7, 8)
    out = attention(*yours, padding)
    assert out.requires_grad, "no gradient: attention's output is cut from q, k and v (.detach(), torch.no_grad()?)"
    (out * weights).sum().backward()
    (F.scaled_dot_product_attention(*kernel, attn_mask=padding) * weights).sum().backward()
    for name, a, b in zip("qkv", yours, kernel):
        assert a.grad is not None, f"no gradient reaches {name}"
        torch.testing.assert_close(a.grad, b.grad, atol=1e-5, rtol=1e-4, msg=lambda m: (
            f"the gradient with respect to {name} differs from the fused kernel's (a part computed without its graph?) "
            f"{m}"))


def test_the_other_families_pieces_come_after_berts_ideas():
    """model.py reads as BERT first (sections 1-7); what MPNet and ModernBERT add is section 8, a later read."""
    import inspect

    import model

    source = inspect.getsource(model)
    later = source.index("# 8. A later read")
    assert source.index("class SentenceEncoder(") < later
    for piece in (model.PreNormEncoderLayer, model.RelativePositionBias, model.Rotary):
        assert source.index(f"class {piece.__name__}(") > later, piece
    assert "norm_first" not in inspect.getsource(model.EncoderLayer)  # BERT's layer is post-LayerNorm only


def test_attention_with_fewer_keys_than_queries_and_dropout_on_the_probabilities():
    """Held back (assignments.HELD_BACK). 5 queries over 3 keys under a padding mask, against the softmax written
    out for one query at a time in float64. With dropout: with a single key a query's one probability is dropped
    (its row is 0) or kept and scaled by 1/(1 - p), and over many draws the mean is the output without dropout."""
    torch.manual_seed(3)
    q, k, v = torch.randn(2, 2, 5, 4), torch.randn(2, 2, 3, 4), torch.rand(2, 2, 3, 4)
    keys = torch.tensor([[True, True, True], [True, False, False]])  # sentence 1 has one real key
    out = attention(q, k, v, keys[:, None, None, :])
    for b in range(2):
        for h in range(2):
            scores = q[b, h].double() @ k[b, h, keys[b]].double().T / 4 ** 0.5  # (5 queries, its keys)
            torch.testing.assert_close(out[b, h].double(), scores.softmax(-1) @ v[b, h, keys[b]].double())
    many = lambda t: t.repeat(10000, 1, 1, 1)  # 10000 copies of the batch: 10000 dropout draws in one call
    draws = attention(many(q), many(k), many(v), many(keys[:, None, None, :]), dropout_p=0.5).view(10000, *out.shape)
    rows = draws[:, 1]  # (draws, h, 5, dh): sentence 1, whose only key is key 0
    dropped, kept = (rows == 0).all(-1), torch.isclose(rows, 2 * v[1, :, None, 0]).all(-1)
    assert (dropped | kept).all() and 0.4 < dropped.double().mean() < 0.6
    torch.testing.assert_close(draws.mean(0), out, atol=0.06, rtol=0)


def test_pooling_equals_a_loop_over_each_sentences_real_tokens():
    """Held back (assignments.HELD_BACK). Sentences of 9, 1, 4 and 6 tokens in float64, every state negative (so
    a max pooling that counts padding as 0 is wrong): each mode against the same reduction over the real tokens."""
    lengths = [9, 1, 4, 6]
    h = -1 - torch.rand(4, 9, 5, dtype=torch.float64)
    mask = (torch.arange(9)[None, :] < torch.tensor(lengths)[:, None]).long()  # (4, 9)
    for mode, reduce in (("cls", lambda rows: rows[0]), ("mean", lambda rows: rows.mean(0)),
                         ("max", lambda rows: rows.amax(0))):
        expected = torch.stack([reduce(h[b, :n]) for b, n in enumerate(lengths)])
        torch.testing.assert_close(pool(h, mask, mode), expected)


def test_pooling_ignores_padding():
    h = torch.randn(2, 6, 4)
    mask = torch.tensor([[1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 1]])
    h_padded = h.clone()
    h_padded[0, 3:] = 1e4  # garbage on padding must not leak into mean or max
    for mode in ("cls", "mean", "max"):
        torch.testing.assert_close(pool(h, mask, mode), pool(h_padded, mask, mode))
    torch.testing.assert_close(pool(h, mask, "mean")[0], h[0, :3].mean(0))
    torch.testing.assert_close(pool(h, mask, "max")[0], h[0, :3].amax(0))
    torch.testing.assert_close(pool(h, mask, "cls"), h[:, 0])
    # the gradient check: pooling trains the encoder through its gradient, which must reach the real tokens' states
    # as it does through each sentence's own slice
    n = mask.sum(1).tolist()
    by_slice = {"cls": lambda t: t[:, 0], "mean": lambda t: torch.stack([t[b, : n[b]].mean(0) for b in range(2)]),
                "max": lambda t: torch.stack([t[b, : n[b]].amax(0) for b in range(2)])}
    for mode, reference in by_slice.items():
        yours, sliced = h.clone().requires_grad_(), h.clone().requires_grad_()
        out, weights = pool(yours, mask, mode), torch.randn(2, 4)
        assert out.requires_grad, f"no gradient: pool(..., {mode!r}) is cut from the hidden states (.detach()?)"
        (out * weights).sum().backward()
        (reference(sliced) * weights).sum().backward()
        torch.testing.assert_close(yours.grad, sliced.grad, msg=lambda m: (
            f"the gradient of {mode} pooling with respect to the hidden states is wrong (padding must get none) {m}"))


def test_pad_to_longest_or_multiple_of_8_and_truncate_keeps_sep(minilm_path):
    tok = load_tokenizer(Path(minilm_path))
    ids = data.tokenize(tok, ["a b c", "word " * 300], max_length=20)
    assert len(ids[0]) == 5 and len(ids[1]) == 20
    assert ids[1][0] == 101 and ids[1][-1] == 102  # [CLS] ... [SEP]
    input_ids, mask = data.pad(ids, pad_id=0, multiple=8)
    assert input_ids.shape == (2, 24) and mask.sum(1).tolist() == [5, 20]
    assert (input_ids[0, 5:] == 0).all() and (mask[0, 5:] == 0).all()
    assert data.pad([[1] * 9], 0, multiple=8)[0].shape == (1, 16)
    assert data.pad(ids, 0)[0].shape == (2, 20)  # CPU default: the longest, no rounding


def test_vocab_txt_tokenizer_equals_tokenizer_json(minilm_path, tmp_path, sts_sentences):
    for name in ("vocab.txt", "tokenizer_config.json"):
        shutil.copy(Path(minilm_path) / name, tmp_path / name)
    from_json = data.tokenize(load_tokenizer(Path(minilm_path)), sts_sentences, 128)
    from_vocab = data.tokenize(load_tokenizer(tmp_path), sts_sentences, 128)
    assert from_json == from_vocab


# ---------------------------------------------------------------- real weights


@pytest.fixture(scope="module")
def minilm(minilm_path):
    return SentenceEncoder.from_pretrained(minilm_path).eval()


def test_minilm_hidden_states_equal_transformers(minilm, minilm_path, sts_sentences, on_path):
    from transformers import BertModel

    ref = BertModel.from_pretrained(minilm_path).eval()
    ids, mask = hf_batch(minilm_path, sts_sentences)
    assert (mask == 0).any(), "the batch must contain padding"
    with torch.no_grad():
        ours = on_path(minilm).bert(ids, mask)
        theirs = ref(input_ids=ids, attention_mask=mask).last_hidden_state
    real = mask.bool()
    assert (ours[real] - theirs[real]).abs().max() < 1e-4


def test_minilm_encode_equals_sentence_transformers(minilm, minilm_path, sts_sentences, on_path):
    from sentence_transformers import SentenceTransformer

    theirs = SentenceTransformer(minilm_path, device="cpu").encode(sts_sentences, convert_to_tensor=True)
    ours = on_path(minilm).encode(sts_sentences, batch_size=16)
    assert ours.dtype == torch.float32 and ours.shape == (len(sts_sentences), 384)
    assert F.cosine_similarity(ours, theirs).min() >= 0.99999


def test_encode_keeps_input_order(minilm, sts_sentences):
    full = minilm.encode(sts_sentences, batch_size=7)
    one_by_one = torch.cat([minilm.encode([s]) for s in sts_sentences[:5]])
    torch.testing.assert_close(full[:5], one_by_one, atol=1e-5, rtol=1e-4)


def test_save_pretrained_round_trip(minilm, tmp_path, sts_sentences):
    from sentence_transformers import SentenceTransformer
    from transformers import AutoModel

    out = tmp_path / "saved"
    minilm.pooling = "cls"  # the pooling must travel with the folder
    try:
        minilm.save_pretrained(out)
        ours = minilm.encode(sts_sentences)
    finally:
        minilm.pooling = "mean"
    st = SentenceTransformer(str(out), device="cpu").encode(sts_sentences, convert_to_tensor=True)
    assert F.cosine_similarity(ours, st).min() >= 0.99999
    ids, mask = hf_batch(out, sts_sentences)
    with torch.no_grad():
        cls = AutoModel.from_pretrained(out).eval()(input_ids=ids, attention_mask=mask).last_hidden_state[:, 0]
    assert (F.normalize(cls, dim=-1) - ours).abs().max() < 1e-4  # encode applies MiniLM's Normalize
    reloaded = SentenceEncoder.from_pretrained(out)
    assert reloaded.pooling == "cls"
    torch.testing.assert_close(reloaded.encode(sts_sentences), ours)


def test_save_is_atomic(minilm, tmp_path, monkeypatch):
    out = tmp_path / "model"
    minilm.save_pretrained(out)
    before = (out / "model.safetensors").read_bytes()

    def crash(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr("lib.weights.write_safetensors", crash)
    with pytest.raises(KeyboardInterrupt):
        minilm.save_pretrained(out)
    assert (out / "model.safetensors").read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]  # no temporary folder left behind


# ---------------------------------------------------------------- checkpoints written by transformers


def small_hf_model(kind: str):
    import transformers

    cfg = transformers.BertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                  intermediate_size=37, max_position_embeddings=40)
    torch.manual_seed(1)
    model = getattr(transformers, kind)(cfg).eval()
    with torch.no_grad():  # make biases and LayerNorms non-trivial so a mix-up would show
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return model


def write_hf_folder(model, folder: Path, fmt: str, rename=None) -> None:
    folder.mkdir()
    model.config.save_pretrained(folder)
    if fmt == "safetensors":
        model.save_pretrained(folder)
    else:  # the classic layout: torch.save of the state dict
        state = {rename(k) if rename else k: v for k, v in model.state_dict().items()}
        torch.save(state, folder / "pytorch_model.bin")


@pytest.mark.parametrize("fmt", ["safetensors", "bin"])
@pytest.mark.parametrize("kind", ["BertModel", "BertForMaskedLM"])
def test_small_transformers_checkpoints_load_exactly(kind, fmt, tmp_path):
    ref = small_hf_model(kind)
    write_hf_folder(ref, tmp_path / "m", fmt)
    if kind == "BertForMaskedLM":
        assert any(k.startswith("bert.") for k in ref.state_dict())
    ours = load_bert(tmp_path / "m").eval()
    ids = torch.randint(1, 99, (3, 11))
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0
    with torch.no_grad():
        out = ref(input_ids=ids, attention_mask=mask, output_hidden_states=True)
        h = ours(ids, mask)
    real = mask.bool()
    assert (h[real] - out.hidden_states[-1][real]).abs().max() < 1e-5
    if kind == "BertForMaskedLM":
        assert ours.mlm_head is not None
        assert (ours.mlm_head(h, ours.embeddings.word.weight)[real] - out.logits[real]).abs().max() < 1e-4
    else:
        assert ours.mlm_head is None


def test_old_gamma_beta_layernorm_names_load(tmp_path):
    ref = small_hf_model("BertForMaskedLM")
    rename = lambda k: k.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta")
    write_hf_folder(ref, tmp_path / "m", "bin", rename)
    assert "bert.embeddings.LayerNorm.gamma" in torch.load(tmp_path / "m" / "pytorch_model.bin")
    ours = load_bert(tmp_path / "m")
    torch.testing.assert_close(ours.embeddings.norm.weight, ref.bert.embeddings.LayerNorm.weight)
    torch.testing.assert_close(ours.mlm_head.norm.bias, ref.cls.predictions.transform.LayerNorm.bias)


def test_safetensors_dtypes_round_trip(tmp_path):
    tensors = {"f32": torch.randn(3, 4), "f16": torch.randn(5).half(), "bf16": torch.randn(2, 2).bfloat16(),
               "i64": torch.arange(7), "empty": torch.zeros(0, 3)}
    write_safetensors(tensors, tmp_path / "t.safetensors")
    back = read_safetensors(tmp_path / "t.safetensors")
    for k, t in tensors.items():
        assert back[k].dtype == t.dtype and torch.equal(back[k], t)
    from safetensors.torch import load_file  # the reference reader agrees

    for k, t in load_file(str(tmp_path / "t.safetensors")).items():
        assert torch.equal(back[k], t)


def test_safetensors_by_hand_with_the_bytes_in_another_order_than_the_header(tmp_path):
    """Held back (assignments.HELD_BACK). A file written byte by byte: the header lists a, metadata, b, c while the
    bytes hold b, a, c; c is a scalar (shape []). Each tensor must come from its own data_offsets."""
    a = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    b = torch.tensor([-1, 2**40], dtype=torch.int64)
    c = torch.tensor(0.5, dtype=torch.float16)
    header = {"a": {"dtype": "F32", "shape": [2, 3], "data_offsets": [16, 40]}, "__metadata__": {"format": "pt"},
              "b": {"dtype": "I64", "shape": [2], "data_offsets": [0, 16]},
              "c": {"dtype": "F16", "shape": [], "data_offsets": [40, 42]}}
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)  # the header is padded with spaces to a multiple of 8 bytes
    body = b.numpy().tobytes() + a.numpy().tobytes() + c.numpy().tobytes()
    (tmp_path / "x.safetensors").write_bytes(struct.pack("<Q", len(text)) + text + body)
    back = read_safetensors(tmp_path / "x.safetensors")
    assert sorted(back) == ["a", "b", "c"]
    for name, t in {"a": a, "b": b, "c": c}.items():
        assert back[name].dtype == t.dtype and back[name].shape == t.shape and torch.equal(back[name], t), name
    from safetensors.torch import load_file  # the reference reader agrees

    assert all(torch.equal(back[name], t) for name, t in load_file(str(tmp_path / "x.safetensors")).items())


def test_half_precision_checkpoint_loads_as_float32(tmp_path):
    ref = small_hf_model("BertModel")
    write_hf_folder(ref.half(), tmp_path / "m", "safetensors")
    ours = load_bert(tmp_path / "m")
    assert ours.embeddings.word.weight.dtype == torch.float32
    torch.testing.assert_close(ours.embeddings.word.weight, ref.embeddings.word_embeddings.weight.float())


# ---------------------------------------------------------------- bad folders: one clear line each


@pytest.fixture
def good_folder(tmp_path):
    write_hf_folder(small_hf_model("BertModel"), tmp_path / "m", "safetensors")
    return tmp_path / "m"


def load_error(folder) -> str:
    with pytest.raises(ModelLoadError) as e:
        load_bert(folder)
    msg = str(e.value)
    assert "\n" not in msg
    return msg


def test_missing_folder_and_config(good_folder, tmp_path):
    assert "does not exist" in load_error(tmp_path / "nope")
    (good_folder / "config.json").unlink()
    assert "no config.json" in load_error(good_folder)


def test_missing_weights(good_folder):
    (good_folder / "model.safetensors").unlink()
    assert "no model.safetensors or pytorch_model.bin" in load_error(good_folder)


def test_truncated_safetensors(good_folder):
    f = good_folder / "model.safetensors"
    f.write_bytes(f.read_bytes()[:-100])
    assert "truncated" in load_error(good_folder)
    f.write_bytes(b"\x01\x02")
    assert "truncated or not a safetensors file" in load_error(good_folder)


def test_corrupt_bin(tmp_path):
    write_hf_folder(small_hf_model("BertModel"), tmp_path / "m", "bin")
    f = tmp_path / "m" / "pytorch_model.bin"
    f.write_bytes(f.read_bytes()[:500])
    assert "truncated or corrupt" in load_error(tmp_path / "m")


def test_wrong_shape_missing_and_unexpected_in_one_error(good_folder):
    state = read_safetensors(good_folder / "model.safetensors")
    state["encoder.layer.0.intermediate.dense.weight"] = torch.zeros(36, 32)
    del state["encoder.layer.1.output.dense.bias"]
    state["encoder.layer.9.extra.weight"] = torch.zeros(2)
    write_safetensors(state, good_folder / "model.safetensors")
    msg = load_error(good_folder)
    assert "wrong shape: encoder.layer.0.intermediate.dense.weight [36, 32] (expected [37, 32])" in msg
    assert "missing: encoder.layer.1.output.dense.bias" in msg
    assert "unexpected: encoder.layer.9.extra.weight" in msg


def test_an_unknown_hidden_act_is_refused(good_folder):
    cfg = json.loads((good_folder / "config.json").read_text())
    cfg["hidden_act"] = "relu"
    (good_folder / "config.json").write_text(json.dumps(cfg))
    assert "hidden_act 'relu' is not supported" in load_error(good_folder)


def test_header_length_past_end_of_file(tmp_path):
    (tmp_path / "x.safetensors").write_bytes(struct.pack("<Q", 10**9) + b"{}")
    with pytest.raises(ModelLoadError, match="truncated"):
        read_safetensors(tmp_path / "x.safetensors")


def test_mlm_head_weights_come_from_checkpoint(tmp_path):
    ref = small_hf_model("BertForMaskedLM")
    write_hf_folder(ref, tmp_path / "m", "safetensors")
    ours = load_bert(tmp_path / "m")
    torch.testing.assert_close(ours.mlm_head.bias, ref.cls.predictions.bias)
    torch.testing.assert_close(ours.mlm_head.dense.weight, ref.cls.predictions.transform.dense.weight)
    assert isinstance(ours, Bert)


# ---------------------------------------------------------------- Hugging Face Hub ids, offline from the cache


def test_hub_id_loads_offline_from_a_hand_built_cache(tmp_path, minilm_path, minilm, sts_sentences):
    """--model sentence-transformers/all-MiniLM-L6-v2 with HF_HUB_OFFLINE=1: read from the cache layout that
    huggingface_hub writes (models--org--name/refs/main -> snapshots/<commit>/), no network. An id that is not
    in the cache gets one line."""
    import os
    import subprocess
    import sys

    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "hub" / "models--sentence-transformers--all-MiniLM-L6-v2"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    shutil.copytree(minilm_path, repo / "snapshots" / commit)
    env = {**os.environ, "HF_HUB_CACHE": str(tmp_path / "hub"), "HF_HUB_OFFLINE": "1"}
    code = ("import sys, torch; from model import SentenceEncoder; "
            "e = SentenceEncoder.from_pretrained(sys.argv[1]); torch.save(e.encode(sys.argv[3:]), sys.argv[2])")
    root = Path(__file__).resolve().parent.parent
    result = subprocess.run([sys.executable, "-c", code, "sentence-transformers/all-MiniLM-L6-v2",
                             str(tmp_path / "out.pt"), *sts_sentences[:8]], cwd=root, env=env, capture_output=True,
                            text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    torch.testing.assert_close(torch.load(tmp_path / "out.pt"), minilm.encode(sts_sentences[:8]))
    result = subprocess.run([sys.executable, str(root / "evaluate.py"), "--model", "bert-base-uncased", "--tasks",
                             "stsb-dev"], cwd=root, env=env, capture_output=True, text=True)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines() == [result.stderr.strip()]  # one line
    assert "bert-base-uncased is neither a local folder nor a model the Hugging Face Hub could give" in result.stderr
