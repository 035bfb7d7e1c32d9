"""What does TSDAE's sentence vector remember? Damage a sentence as training did, encode it into ONE vector, and let
the decoder rebuild the sentence from that vector alone (arXiv:2104.06979 §3.2): once with the trained run, once
with the run's untrained starting point (the same base model, the decoder as it was at step 0), side by side.

    python examples/reconstruct.py runs/tsdae-topics                       # 5 sentences of the run's corpus
    python examples/reconstruct.py runs/tsdae-topics "the cat sat on the mat" --beam 4
    python examples/reconstruct.py runs/tsdae-topics --corpus examples/topics.txt -n 8 --seed 3
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch

from lib import cli
from lib.corpus import read_corpus
from lib.errors import CorpusError
import tsdae
from model import SentenceEncoder


def make_parser() -> cli.ArgumentParser:
    p = cli.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=cli.HelpFormatter)
    p.add_argument("run", type=Path, help="a run folder of tsdae.py (it holds model/ and decoder/)")
    p.add_argument("sentences", nargs="*", help="sentences to damage and rebuild (default: -n of --corpus)")
    p.add_argument("--corpus", help="take the sentences from this file (default: the run's corpus)")
    p.add_argument("-n", type=int, default=5, help="how many sentences of the corpus, spread over it")
    p.add_argument("--beam", type=int, default=1, help="beam width (1: greedy decoding)")
    p.add_argument("--seed", type=int, default=0, help="seed of the damage (deletion as in training)")
    p.add_argument("--max-tokens", type=int, default=40, help="decode at most this many tokens")
    p.add_argument("--no-untrained", action="store_true", help="leave out the untrained starting point")
    return p


def main(argv: list[str] | None = None) -> int:
    p = make_parser()
    args = p.parse_args(argv)
    cli.check_arguments(p, args, at_least_one=("n", "beam", "max_tokens"))
    torch.set_grad_enabled(False)
    trained, settings = tsdae.load_decoder(args.run)
    corpus = args.corpus or settings.get("corpus")
    if not args.sentences and not corpus:
        raise CorpusError(f"{args.run}: its decoder/decoder.json names no corpus; give sentences or --corpus")
    sentences = args.sentences or spread(read_corpus(corpus), args.n)
    systems = {"trained": trained}
    if not args.no_untrained:  # as tsdae.py built it at step 0: the same seed, then the base model, then the decoder
        torch.manual_seed(settings["seed"])
        base = SentenceEncoder.from_pretrained(settings["base_model"], pooling=trained.encoder.pooling,
                                               max_length=trained.encoder.max_length)
        systems["untrained"] = tsdae.TSDAELoss(base, tie=settings["tie"]).eval()
    tokenizer = trained.encoder.tokenizer
    damage = tsdae.DenoisingDataset(sentences, tokenizer, trained.encoder.max_length, noise=settings["noise"],
                                    ratio=settings["noise_ratio"], seed=args.seed)
    for i, sentence in enumerate(sentences):
        damaged, _ = damage[(0, i)]
        print(f"\noriginal   {sentence}\ndamaged    {tokenizer.decode(damaged)}")
        for name, objective in systems.items():
            rebuilt = tsdae.reconstruct(objective, damaged, args.beam, args.max_tokens)
            print(f"{name:<10} {tokenizer.decode(rebuilt)}{'' if rebuilt[-1] == damaged[-1] else ' ...'}")
    return 0


def spread(sentences: list[str], n: int) -> list[str]:
    """n sentences spread over the list (a fixed pick: every len/n-th)."""
    step = max(1, len(sentences) // n)
    return sentences[step // 2 :: step][:n]


if __name__ == "__main__":
    cli.run(main)
