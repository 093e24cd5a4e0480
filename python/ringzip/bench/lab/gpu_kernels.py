"""GPU kernel benchmarks of the ringzip codecs (run by bench/gpu_check.sh).

Reports GB/s counting bytes read + written, next to a measured device-to-device copy (median of
>= 20 event-timed runs after warm-up), with the targets set for them: encode, decode-accumulate and
decode-add-encode of q8/q4/q2/q1 >= 0.8 x copy, fp16/bf16 >= 0.9 x; top-k 1% of 1e8 floats
>= 3 x torch.topk (also against torch.topk(sorted=False)), same indices. The share of a 256 MB
q4 all-reduce's time in codec kernels on a 10 Gbit/s link is a MODEL (measured kernel times
against bytes over an assumed link), not a measured all-reduce.
"""
import argparse
import json
import sys

import torch

import ringzip

G = ringzip._C.cuda
C = ringzip._C.codec


def timed(fn, reps=25, warm=3):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b) / 1e3)
    ts.sort()
    return ts[len(ts) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=256, help="tensor size for the codec kernels")
    ap.add_argument("--topk-n", type=int, default=100_000_000)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    dev = torch.cuda.get_device_name()
    n = a.mb * (1 << 20) // 4
    x = torch.randn(n, device="cuda")
    y = torch.empty_like(x)
    rows = []
    t_copy = timed(lambda: y.copy_(x))
    copy_gbs = 2 * x.nbytes / t_copy / 1e9
    rows.append({"kernel": "d2d copy", "codec": "-", "seconds": t_copy, "gbs": copy_gbs, "of_copy": 1.0})
    S, Q, K = 1, 2, 3
    times = {}
    for spec in ["q8", "q4", "q2", "q1", "fp16", "bf16"]:
        p = G.encode(spec, x, S, Q, K)
        pb = p.numel()
        t = timed(lambda: G.encode(spec, x, S, Q, K))
        times[(spec, "encode")] = t
        rows.append({"kernel": "encode", "codec": spec, "seconds": t, "gbs": (x.nbytes + pb) / t / 1e9})
        acc = torch.zeros_like(x)
        t = timed(lambda: G.decode_accumulate(spec, p, acc, S, Q, K))
        times[(spec, "decode_accumulate")] = t
        rows.append({"kernel": "decode_accumulate", "codec": spec, "seconds": t, "gbs": (pb + 2 * x.nbytes) / t / 1e9})
        t = timed(lambda: G.decode(spec, p, n, S, Q, K))
        times[(spec, "decode")] = t
        rows.append({"kernel": "decode", "codec": spec, "seconds": t, "gbs": (pb + x.nbytes) / t / 1e9})
        t = timed(lambda: G.decode_add_encode(spec, p, x, S, Q, K, K + 1))
        times[(spec, "decode_add_encode")] = t
        rows.append({"kernel": "decode_add_encode", "codec": spec, "seconds": t, "gbs": (2 * pb + x.nbytes) / t / 1e9})
    for r in rows:
        r["of_copy"] = r["gbs"] / copy_gbs
    del acc, y

    # top-k selection on 1e8 floats at 1%
    tn = a.topk_n
    big = torch.randn(tn, device="cuda")
    k = tn // 100
    t_rz = timed(lambda: G.topk_indices(big, k), reps=20)
    t_torch = timed(lambda: torch.topk(big.abs(), k), reps=20)
    t_torch_unsorted = timed(lambda: torch.topk(big.abs(), k, sorted=False), reps=20)
    t_enc = timed(lambda: G.encode("topk:0.01", big, S, Q, K), reps=20)
    same = torch.equal(G.topk_indices(big, k).long(), torch.topk(big.abs(), k).indices.sort().values)
    topk = {"n": tn, "k": k, "ringzip_select_s": t_rz, "ringzip_encode_s": t_enc, "torch_topk_s": t_torch,
            "torch_topk_unsorted_s": t_torch_unsorted, "speedup_vs_torch": t_torch / t_rz,
            "speedup_vs_torch_unsorted": t_torch_unsorted / t_rz, "same_indices": bool(same)}
    del big

    # 256 MB q4 all-reduce on 10 Gbit/s, 8 ranks, SRA: encode S once toward owners, decode-accumulate
    # (n-1)/n S, encode the owned S/n for the gather, decode S. Kernel times scale linearly with size.
    ranks, link = 8, 10e9 / 8
    size_scale = (256 * (1 << 20)) / x.nbytes
    codec_s = size_scale * (times[("q4", "encode")] * (1 + 1 / ranks) + times[("q4", "decode_accumulate")] * (ranks - 1) / ranks
                            + times[("q4", "decode")])
    wire_bytes = 2 * (ranks - 1) / ranks * C.encoded_bytes("q4", 64 << 20)
    wire_s = wire_bytes / link
    share = {"ranks": ranks, "link_gbit": 10, "codec_seconds": codec_s, "wire_seconds": wire_s,
             "codec_fraction": codec_s / (codec_s + wire_s)}

    print(f"device: {dev}, torch {torch.__version__}, tensor {a.mb} MB")
    print(f"{'kernel':<20}{'codec':<8}{'ms':>9}{'GB/s':>10}{'x copy':>8}")
    for r in rows:
        print(f"{r['kernel']:<20}{r['codec']:<8}{r['seconds'] * 1e3:>9.3f}{r['gbs']:>10.1f}{r['of_copy']:>8.2f}")
    print(f"topk 1% of {tn:.0e}: ringzip select {t_rz * 1e3:.2f} ms (encode {t_enc * 1e3:.2f} ms), torch.topk "
          f"{t_torch * 1e3:.2f} ms (unsorted {t_torch_unsorted * 1e3:.2f} ms): x{topk['speedup_vs_torch']:.1f} "
          f"(x{topk['speedup_vs_torch_unsorted']:.1f} unsorted), same indices: {same}")
    print(f"MODEL (kernel times vs bytes over an assumed link, not measured): 256 MB q4 all-reduce, {ranks} ranks, 10 Gbit/s: codec {codec_s * 1e3:.2f} ms, wire {wire_s * 1e3:.1f} ms, "
          f"codec fraction {share['codec_fraction'] * 100:.2f}%")
    def target(r):
        if r["kernel"] == "d2d copy" or r["kernel"] == "decode":
            return None
        return 0.9 if r["codec"] in ("fp16", "bf16") else 0.8
    missed = [f"{r['kernel']} {r['codec']} {r['of_copy']:.2f}" for r in rows
              if target(r) is not None and r["of_copy"] < target(r)]
    print(f"target kernels >= 0.8 x copy (q-codecs), >= 0.9 x (fp16/bf16): "
          f"{'MET' if not missed else 'NOT MET: ' + ', '.join(missed)}")
    print(f"target topk >= 3x torch.topk: {'MET' if topk['speedup_vs_torch'] >= 3 else 'NOT MET'} "
          f"(x{topk['speedup_vs_torch']:.2f}; unsorted x{topk['speedup_vs_torch_unsorted']:.2f}; same indices {same})")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"device": dev, "torch": torch.__version__, "copy_gbs": copy_gbs, "rows": rows, "topk": topk,
                       "allreduce_q4_10gbit": share}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
