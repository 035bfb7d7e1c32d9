"""Print the nearest neighbours of a few sentences under a trained encoder.

    python examples/neighbours.py --model runs/tsdae/model --corpus examples/topics.txt
"""
import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch.nn.functional as F  # noqa: E402

import data  # noqa: E402
from model import ModelLoadError, SentenceEncoder, default_model_path  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=None, help="model folder (default: the shipped all-MiniLM-L6-v2)")
    p.add_argument("--corpus", required=True, help="sentences to search, one per line")
    p.add_argument("--queries", nargs="*", default=None, help="sentences to look up (default: 5 from the corpus)")
    p.add_argument("-k", type=int, default=3, help="neighbours per query")
    args = p.parse_args()
    sentences = data.read_corpus(args.corpus)
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


if __name__ == "__main__":
    try:
        main()
    except (data.CorpusError, ModelLoadError) as e:
        sys.exit(f"error: {e}")
