"""Shared test fixtures: the real MiniLM folder, the evaluation data, small real sentences."""
import csv
import os
import signal
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lib.weights import default_model_path

DATA_DIR = Path(os.environ.get("EVAL_DATA_DIR", ROOT / "data")).resolve()  # as lib.taskfiles.default_data_dir


@pytest.fixture(autouse=True)
def _fast_and_repeatable():
    torch.manual_seed(0)
    torch.set_num_threads(2)


# Grading (course/assignments.py) gives each test this many seconds: a student's function that never returns fails
# its test as "timed out", and the tests after it still run.
TEST_TIMEOUT = float(os.environ.get("ASSIGNMENTS_TEST_TIMEOUT") or 0)


@pytest.fixture(autouse=True)
def _time_limit():
    if not TEST_TIMEOUT or not hasattr(signal, "setitimer"):
        yield
        return

    def expire(signum, frame):
        pytest.fail(f"timed out after {TEST_TIMEOUT:g} s (an endless loop?)", pytrace=False)

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, TEST_TIMEOUT)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# Each exercise checkable alone (ASSIGNMENTS.md): in a student copy, a test of one exercise may need another that is
# still blank (exercise 4's tests load a model: exercise 11 reads its weights, exercise 1 attends). Every blank exercise
# that is not graded gets its stand-in from tests/stand_ins.py for the whole session. Graded: the exercises `grade`
# names (ASSIGNMENTS_GRADING), else those whose tests (course/assignments.py: TESTS, HELD_BACK) were collected.


def graded_exercises(items: list) -> set[int]:
    from course import assignments

    if os.environ.get("ASSIGNMENTS_GRADING"):
        return {int(n) for n in os.environ["ASSIGNMENTS_GRADING"].split(",")}
    ids = {item.nodeid for item in items} | {item.nodeid.split("[")[0] for item in items}
    return {number for table in (assignments.TESTS, assignments.HELD_BACK) for number, tests in table.items()
            if ids & set(tests)}


def put_stand_ins(monkeypatch: pytest.MonkeyPatch, graded: set[int]) -> None:
    """Every blank exercise not in `graded`: its stand-in wherever the function is bound (each module of this
    repository that imported it by name, a table that lists it) or, for a method, in its class."""
    import importlib

    from course import assignments
    from stand_ins import STAND_INS

    ours = [m for m in list(sys.modules.values())
            if (file := str(getattr(m, "__file__", None) or "")).startswith(str(ROOT))
            and "site-packages" not in file]
    for number, pieces in STAND_INS.items():
        for module_name, attribute, stand_in in pieces:
            owner = importlib.import_module(module_name)
            *cls, name = attribute.split(".")
            if cls:
                owner = getattr(owner, cls[0])
            original = getattr(owner, name)
            if number in graded or assignments.is_written(original):
                continue
            if cls:
                monkeypatch.setattr(owner, name, stand_in)
                continue
            for module in ours:
                for key, value in list(vars(module).items()):
                    if value is original:
                        monkeypatch.setattr(module, key, stand_in)
                    elif isinstance(value, dict) and any(v is original for v in value.values()):
                        for k in [k for k, v in value.items() if v is original]:
                            monkeypatch.setitem(value, k, stand_in)


@pytest.fixture(scope="session", autouse=True)
def _stand_ins_for_blank_exercises(request):
    with pytest.MonkeyPatch.context() as monkeypatch:
        put_stand_ins(monkeypatch, graded_exercises(request.session.items))
        yield


# The oracles' own warnings (weights missing from a reference model built for a comparison, say) are noise in a
# failing test's output: transformers reads this when it is imported.
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


@pytest.fixture(scope="session")
def minilm_path() -> str:
    return default_model_path()


@pytest.fixture(scope="session")
def data_dir() -> Path:
    if not (DATA_DIR / "stsbenchmark").is_dir():
        pytest.fail(f"evaluation data not found at {DATA_DIR}; set EVAL_DATA_DIR, "
                    f"or run python evaluate.py --fetch-data data")
    return DATA_DIR


@pytest.fixture(scope="session")
def sts_sentences(data_dir) -> list[str]:
    """64 real STS-benchmark sentences of varied length (so padding is exercised)."""
    with open(data_dir / "stsbenchmark" / "sts-dev.csv", encoding="utf-8") as f:
        rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    picked = rows[::45][:32]  # spread over the genres: captions, news, forums
    sentences = [r[5] for r in picked] + [r[6] for r in picked]
    lengths = {len(s.split()) for s in sentences}
    assert len(lengths) > 10, "want sentences of many lengths"
    return sentences


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, minilm_path) -> Path:
    """A 2-layer, 32-wide random BERT with MiniLM's vocabulary: training tests run in seconds on it."""
    from lib import weights
    from model import Bert, BertConfig, SentenceEncoder

    cfg = BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                     max_position_embeddings=128, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("tiny") / "model"
    SentenceEncoder(Bert(cfg), weights.load_tokenizer(Path(minilm_path)), "cls", 64,
                    source=Path(minilm_path)).save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def small_corpus(tmp_path_factory) -> Path:
    """16 short distinct sentences."""
    lines = [
        "the cat sat on the mat", "a dog barked at the mailman", "stocks fell sharply on monday",
        "the orchestra played a quiet waltz", "rain is expected over the weekend", "she planted tomatoes in may",
        "the bridge was closed for repairs", "he solved the puzzle in minutes", "our train arrived two hours late",
        "bees carry pollen between flowers", "the recipe needs three eggs", "voters queued outside the school",
        "a comet passed close to earth", "the striker scored twice", "ice melts faster in salt water",
        "the library opens at nine",
    ]
    path = tmp_path_factory.mktemp("corpus") / "small.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture(params=["plain", "fast"])
def on_path(request):
    """Runs a test on both paths: on_path(encoder) is the encoder itself (plain) or the same folder loaded as
    fast.PackedBert, with the same dropout and mode (fast). on_path.name says which."""
    from model import SentenceEncoder
    from speedups import fast

    def convert(encoder):
        if request.param == "plain":
            return encoder
        with torch.random.fork_rng():  # loading draws initial weights: the test's random state stays as it was
            quick = SentenceEncoder.from_pretrained(encoder.source, encoder.pooling, encoder.max_length,
                                                    fast.PackedBert)
        for plain, packed in zip(encoder.bert.modules(), quick.bert.modules()):  # the same dropout rates (ConSERT's
            if isinstance(plain, torch.nn.Dropout):  # switch_off_dropout sets some to 0)
                packed.p = plain.p
            if hasattr(plain, "dropout_p"):
                packed.dropout_p = plain.dropout_p
        return quick.train(encoder.training)

    convert.name = request.param
    return convert


def losses_with_scrambled_token_states(objective, batch: dict) -> list[float]:
    """The objective's loss on `batch` as it is, then with every encoder output but position 0 replaced by noise
    (B, L, d): what the decoder's memory reads of the token states shows in how the two differ."""
    losses = []
    for scramble in (False, True):
        def hook(module, inputs, output):
            if scramble:
                output = output.clone()
                output[:, 1:] = torch.randn_like(output[:, 1:]) * 10
            return output

        handle = objective.encoder.bert.register_forward_hook(hook)
        with torch.no_grad():
            losses.append(objective(batch).item())
        handle.remove()
    return losses


# The quick loop for contributors (`python -m pytest -m quick`): a few fast tests of every module, about a minute on
# 2 cores. The full suite stays CI's command.
QUICK = {
    "test_model.py": ["test_attention_formula_equals_the_fused_kernel", "test_pooling_ignores_padding",
                      "test_safetensors_dtypes_round_trip", "test_truncated_safetensors",
                      "test_wrong_shape_missing_and_unexpected_in_one_error",
                      "test_pad_to_longest_or_multiple_of_8_and_truncate_keeps_sep"],
    "test_tsdae.py": ["test_deletion_removes_60_percent_and_never_everything", "test_decoder_sees_only_the_cls_vector",
                      "test_loss_is_the_cross_entropy_over_real_label_tokens", "test_tied_weights_are_one_tensor",
                      "test_resume_continues_the_same_loss_sequence"],
    "test_fast.py": ["test_vocabulary_cross_entropy_equals_the_plain_formula",
                     "test_sentence_vector_attention_equals_general_attention_over_one_key",
                     "test_word_matrix_gradient_is_summed_without_vocabulary_sized_temporaries"],
    "test_consert.py": ["test_nt_xent_equals_a_double_loop",
                        "test_nt_xent_is_one_matrix_product_with_no_loop_over_the_items",
                        "test_nt_xent_backpropagates_the_double_loops_gradient_to_both_views",
                        "test_a_copy_of_a_sentence_in_the_batch_is_not_its_negative",
                        "test_token_cutoff_zeroes_int_n_rate_real_token_rows_and_nothing_else",
                        "test_feature_cutoff_zeroes_int_d_rate_whole_columns_and_nothing_else",
                        "test_each_strategy_gets_the_official_scripts_settings",
                        "test_official_optimizer_is_adamw_without_bias_correction_warmed_up_from_zero"],
    "test_cli.py": ["test_the_import_graph_has_layers_and_no_cycle", "test_bad_arguments_are_refused_in_one_line"],
    "test_evaluate.py": ["test_average_precision_hand_cases", "test_query_metrics_and_stable_rerank",
                         "test_the_tables_name_the_same_tasks", "test_sts_loaders_counts"],
    "test_useb.py": ["test_trec_eval_ap_by_hand_and_against_pytrec_eval"],
    "test_distributed.py": ["test_sampler_shards_cover_the_corpus_exactly_once"],
    "test_corpus.py": ["test_the_lazy_corpus_reads_what_read_corpus_reads",
                       "test_plain_batches_are_those_of_the_lengths_computed_before"],
    "test_download.py": ["test_fetch_from_mirror_gives_the_same_bytes_and_a_second_call_downloads_nothing",
                         "test_a_corrupt_file_is_refused_and_nothing_is_left_behind"],
    "test_inspect.py": ["test_no_value_can_break_the_yaml", "test_corpus_fingerprint_and_command_line"],
    "test_architectures.py": ["test_an_unsupported_type_names_the_supported_ones"],
    "test_assignments.py": ["test_student_copy_keeps_signatures_and_docstrings_and_blanks_the_rest",
                            "test_what_happened_to_each_test_has_its_own_words",
                            "test_the_marker_rule_is_the_same_for_the_students_check_and_for_grading"],
    "test_docs.py": ["test_command_parses", "test_named_code_exists"],
    "test_walkthrough.py": ["test_the_committed_notebook_is_the_source_run"],
}


def pytest_collection_modifyitems(items):
    for item in items:
        if item.originalname in QUICK.get(item.path.name, ()):
            item.add_marker(pytest.mark.quick)
