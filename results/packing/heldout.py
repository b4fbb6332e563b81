"""English text the reference corpus does not hold, for the packing comparison's probe (BENCHMARKS.md, "Packing"):
the project's data pack's English paragraphs that are not in reference_data/corpus/en.txt, in order, documents kept
apart by blank lines, the first ``--lines`` of them.

    python results/packing/heldout.py ../shared/data/corpus/en.txt /tmp/heldout-en.txt
"""
import argparse

p = argparse.ArgumentParser()
p.add_argument("pack", help="the data pack's corpus/en.txt")
p.add_argument("out")
p.add_argument("--lines", type=int, default=20_000)
args = p.parse_args()
with open("reference_data/corpus/en.txt", encoding="utf-8") as f:
    seen = {line.strip() for line in f if line.strip()}
kept, blank = 0, True
with open(args.pack, encoding="utf-8") as f, open(args.out, "w", encoding="utf-8") as out:
    for line in f:
        text = line.strip()
        if not text:
            if not blank:
                out.write("\n")
            blank = True
        elif text not in seen and kept < args.lines:
            out.write(text + "\n")
            kept, blank = kept + 1, False
print(f"{kept:,} paragraphs written to {args.out}")
