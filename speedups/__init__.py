"""Speed-ups, each a drop-in replacement of named pieces of the plain code (fast.py), and the cached gradient
that trains big contrastive batches in small memory (gradcache.py). A first read skips this folder."""
