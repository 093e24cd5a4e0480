"""none / fp16 / bf16 wire casts (round-to-nearest-even; NaN -> sign | canonical quiet NaN)."""
import torch


def _bytes(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.uint8).reshape(-1).clone()


def encode(kind: str, x: torch.Tensor) -> torch.Tensor:
    if kind == "none":
        return _bytes(x.float())
    if kind == "fp16":
        h = x if x.dtype == torch.float16 else x.float().to(torch.float16)
        bits = h.view(torch.int16).to(torch.int32) & 0xFFFF
        if x.dtype != torch.float16:
            sign = (x.float().view(torch.int32) >> 16) & 0x8000
            bits = torch.where(torch.isnan(x.float()), sign | 0x7E00, bits)
        return _bytes(bits.to(torch.int16))
    if kind == "bf16":
        b = x if x.dtype == torch.bfloat16 else x.float().to(torch.bfloat16)
        bits = b.view(torch.int16).to(torch.int32) & 0xFFFF
        if x.dtype != torch.bfloat16:
            sign = (x.float().view(torch.int32) >> 16) & 0x8000
            bits = torch.where(torch.isnan(x.float()), sign | 0x7FC0, bits)
        return _bytes(bits.to(torch.int16))
    raise ValueError(kind)


def decode(kind: str, payload: torch.Tensor, n: int) -> torch.Tensor:
    if kind == "none":
        return payload.clone().view(torch.float32)[:n].clone()
    h = payload.clone().view(torch.int16)
    if kind == "fp16":
        return h.view(torch.float16).float()
    if kind == "bf16":
        return (h.to(torch.int32) << 16).view(torch.float32)
    raise ValueError(kind)
