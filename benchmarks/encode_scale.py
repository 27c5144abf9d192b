"""Corpus encoding at scale: time and peak RSS for text files built by repeating Tiny Shakespeare.

Usage: python benchmarks/encode_scale.py [--sizes-mb 100 1000] [--tmp DIR] [--tokenizer bpe --vocab-size 512]

Each size is encoded in a fresh subprocess (empty token cache) so its peak RSS is its own; prints
seconds, MB/s, peak RSS and RSS / file size, and the time ratio between sizes (~linear expected).
With ``--tokenizer bpe`` the time is the BPE part alone (training the tokenizer on the train split
plus encoding both splits; the character pass it starts from is timed apart); size 1 means the
embedded 1 MB corpus itself.
Targets (issue 2): 100 MB in <= 15 s with peak RSS <= 3x the file; (issue 11) BPE: 100 MB in <= 60 s
with memory bounded as for chars.
"""

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = """
import sys, time
from depthlab.config import DataConfig
from depthlab.data import load_corpus
t = time.perf_counter()
c = load_corpus(DataConfig(path=sys.argv[1], cache_dir=sys.argv[2]))
dt = time.perf_counter() - t
if sys.argv[3] == "bpe":
    t = time.perf_counter()
    c = load_corpus(DataConfig(path=sys.argv[1], cache_dir=sys.argv[2], tokenizer="bpe", vocab_size=int(sys.argv[4])))
    print(f"   (character pass first: {dt:.2f} s; BPE vocabulary {c.tokenizer.vocab_size}, "
          f"{c.n_chars / len(c.tokens):.2f} characters/token)")
    dt = time.perf_counter() - t
hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM")][0].split()[1]
print(dt, len(c.tokens), c.tokens.dtype, int(hwm) * 1024)
"""


def make_file(path: Path, mb: int) -> None:
    from depthlab.data import embedded_corpus_path

    base = embedded_corpus_path().read_bytes()
    target = mb * 1_000_000 if mb > 1 else len(base)  # 1 = the embedded corpus as it is
    with open(path, "wb") as f:
        written = 0
        while written < target:
            chunk = base[: target - written]
            f.write(chunk)
            written += len(chunk)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes-mb", type=int, nargs="+", default=[100, 1000])
    ap.add_argument("--tmp", default=None)
    ap.add_argument("--tokenizer", choices=["char", "bpe"], default="char")
    ap.add_argument("--vocab-size", type=int, default=512)
    a = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).parent))
    from _common import machine_info

    print(machine_info())
    results = []
    with tempfile.TemporaryDirectory(dir=a.tmp) as d:
        # baseline RSS of an interpreter that only imported depthlab (torch, numpy)
        # ru_maxrss survives fork+exec on Linux, so read the child's own high-water mark (VmHWM)
        base = subprocess.run([sys.executable, "-c", "import depthlab.data;print(int([l for l in "
                               "open('/proc/self/status') if l.startswith('VmHWM')][0].split()[1])*1024)"],
                              capture_output=True, text=True, check=True)
        base_rss = int(base.stdout.split()[-1])
        print(f"interpreter + imports: {base_rss / 1e6:.0f} MB RSS")
        for mb in a.sizes_mb:
            p = Path(d) / f"corpus-{mb}mb.txt"
            make_file(p, mb)
            r = subprocess.run([sys.executable, "-c", CHILD, str(p), str(Path(d) / f"cache-{mb}"), a.tokenizer,
                                str(a.vocab_size)], capture_output=True, text=True, check=True)
            *notes, last = r.stdout.strip().splitlines()
            print("\n".join(notes)) if notes else None
            dt, n, dtype, rss = last.split()
            dt, rss, size = float(dt), int(rss), p.stat().st_size
            tok_bytes = os.path.getsize(next((Path(d) / f"cache-{mb}").glob(
                "*/ids-*/tokens.bin" if a.tokenizer == "bpe" else "*/tokens.bin")))
            results.append((mb, dt))
            print(f"{mb:5d} MB: {dt:6.2f} s ({size / 1e6 / dt:6.1f} MB/s), {int(n):,} tokens ({dtype}, "
                  f"{tok_bytes / int(n):.0f} byte/token), peak RSS {rss / 1e6:.0f} MB = {rss / size:.2f}x file "
                  f"({(rss - base_rss) / 1e6:.0f} MB above the bare interpreter)")
            p.unlink()
    if len(results) > 1:
        (m0, t0), (m1, t1) = results[0], results[-1]
        print(f"time ratio {m1} MB / {m0} MB: {t1 / t0:.2f} (size ratio {m1 / m0:.0f})")


if __name__ == "__main__":
    main()
