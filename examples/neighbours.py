"""Print the nearest neighbours of a few sentences under an encoder, and (with --labels) how often a sentence's
nearest neighbours share its label.

    python examples/neighbours.py --corpus examples/topics.txt --labels examples/topics_labels.txt
    python examples/neighbours.py --model runs/tsdae-topics/model --corpus examples/topics.txt --labels examples/topics_labels.txt
"""  # noqa: E501
import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch
import torch.nn.functional as F

from lib.corpus import read_corpus
from lib.errors import CorpusError
from lib.weights import ModelLoadError, default_model_path
from model import SentenceEncoder


def label_agreement(scores: torch.Tensor, labels: list[str], k: int) -> float:
    """Share of each sentence's k nearest neighbours (itself excluded) that carry its label, over all sentences."""
    scores = scores.clone().fill_diagonal_(float("-inf"))  # (N, N) cosines; a sentence is not its own neighbour
    nearest = scores.topk(k, dim=1).indices  # (N, k)
    same = [labels[j] == labels[i] for i, row in enumerate(nearest.tolist()) for j in row]
    return sum(same) / len(same)


def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=None, help="model folder or Hub id (default: the shipped all-MiniLM-L6-v2)")
    p.add_argument("--corpus", required=True, help="sentences to search, one per line")
    p.add_argument("--labels", default=None, help="one label per corpus line (e.g. its topic): report label agreement")
    p.add_argument("--queries", nargs="*", default=None, help="sentences to look up (default: 5 from the corpus)")
    p.add_argument("-k", type=int, default=3, help="neighbours per query and for the label agreement")
    p.add_argument("--json", default=None, help="also write the label agreement (%%) to this JSON file")
    return p


def main() -> None:
    args = make_parser().parse_args()
    sentences = read_corpus(args.corpus)
    step = max(1, len(sentences) // 5)
    queries = args.queries or sentences[step // 2 :: step][:5]  # spread over the file
    encoder = SentenceEncoder.from_pretrained(args.model or default_model_path())
    corpus_vecs = F.normalize(encoder.encode(sentences), dim=-1)  # (N, d)
    query_vecs = F.normalize(encoder.encode(queries), dim=-1)  # (Q, d)
    scores = query_vecs @ corpus_vecs.T  # (Q, N) cosine similarities
    for q, row in zip(queries, scores):
        print(f"\n{q}")
        ranked = [i for i in row.argsort(descending=True).tolist() if sentences[i] != q][: args.k]
        for i in ranked:
            print(f"  {row[i]:.3f}  {sentences[i]}")
    if args.labels:
        labels = read_corpus(args.labels)
        if len(labels) != len(sentences):
            raise CorpusError(f"{args.labels} has {len(labels)} labels for {len(sentences)} sentences")
        agreement = label_agreement(corpus_vecs @ corpus_vecs.T, labels, args.k)
        print(f"\nlabel agreement of the {args.k} nearest neighbours: {100 * agreement:.1f}%")
        if args.json:
            Path(args.json).parent.mkdir(parents=True, exist_ok=True)
            Path(args.json).write_text(json.dumps({"k": args.k, "agreement": 100 * agreement}) + "\n", encoding="utf-8")


if __name__ == "__main__":
    try:
        main()
    except (CorpusError, ModelLoadError) as e:
        sys.exit(f"error: {e}")
