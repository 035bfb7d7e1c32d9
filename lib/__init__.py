"""What the methods stand on and a first read skips: files, formats and the machinery of a run.

  errors.py       the one-line errors a user sees          corpus.py     the corpus file, read lazily
  weights.py      model folders: safetensors, names         datafiles.py  the data sets' files (STS, NLI, ...)
  card.py         the model card of a trained folder        useb.py       USEB's files and retrieval protocol
  cli.py          the command-line kit of the scripts       download.py   fetching the evaluation sets
  distributed.py  torchrun: global means, gathered negatives, summed gradients
  run.py          the run folder: checkpoints, log, Ctrl-C    selection.py  best/, early stopping, --heldout's signals
  embed.py        sentences to unit vectors, once each      taskfiles.py  which files a task reads
  align_uniform.py  alignment and uniformity
Nothing here imports a file outside lib/ (model.py, data.py, the methods, train.py, evaluate.py, commands/): what
run.py and selection.py need of train.py's settings and model.py's encoder they name as Protocols.
"""
