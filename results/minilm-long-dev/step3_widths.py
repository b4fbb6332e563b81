"""What rounding Step 3's cut widths up to 8 (fb5e6a6) costs in columns: lohelp's English training inputs in
all-MiniLM-L6-v2's tokenizer, shuffled into micro-batches of 16 (a rank's, in the MiniLM runs) 20 times; the mean cut
width before and after rounding. Run from a checkout with runs/models/all-MiniLM-L6-v2 linked (BENCHMARKS.md)."""
import json

import numpy as np
from tokenizers import Tokenizer

tok = Tokenizer.from_file("runs/models/all-MiniLM-L6-v2/tokenizer.json")
tok.no_padding()
tok.no_truncation()
texts = [json.loads(line)["text"] for line in open("reference_data/tasks/lohelp/train.en.jsonl")]
lengths = np.array([min(128, len(e.ids)) for e in tok.encode_batch(texts)])
rng = np.random.default_rng(0)
cut = []
for _ in range(20):
    order = rng.permutation(len(lengths))
    cut += [lengths[order[i:i + 16]].max() for i in range(0, len(order) - 15, 16)]
cut = np.array(cut)
rounded = np.minimum(128, -(-cut // 8) * 8)
print(f"{len(lengths)} inputs, mean {lengths.mean():.1f} tokens; mean cut width {cut.mean():.1f}, rounded up to 8 "
      f"{rounded.mean():.1f}: {100 * (rounded.sum() / cut.sum() - 1):.1f}% more columns")
