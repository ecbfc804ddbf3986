"""pad_to_max_length: a text classifier fine-tuned on batches padded to the tokenizer's maximum length.

Pathology: a BERT-style encoder (8 pre-norm blocks, width 768, 12 heads, vocab 30522, fp32 weights, bf16
autocast, fused AdamW; 2 classes) fine-tuned on short texts (24 to 160 tokens, uniformly) 64 at a time,
collated the way the tokenizer call in many fine-tuning scripts does it, ``padding="max_length",
max_length=512``: every batch is 64 x 512 token ids, over four fifths of them padding (pad id 0; this
encoder takes no attention mask and pools over every position), and the encoder's GEMMs, attention,
LayerNorms and GELUs run on all of them. The GPU is busy throughout; most of its work is on padding.
Twin (``--fixed``): dynamic padding (``DataCollatorWithPadding(pad_to_multiple_of=8)``): each batch is
padded to its longest text, rounded up to a multiple of 8 (160 tokens): the same texts, under a third of
the tokens.
Trace evidence: per ``step_N`` (``collate``, ``forward``, ``backward``, ``optimizer``): the same kernels,
in the same order, in both; the pathology's GEMMs and attention kernels run on 32,768-row (512-token)
operands where the twin's run on 10,240 rows, each kernel about three times longer; the GPU
busy throughout in both. A pinned ``int64`` upload of the batch in ``collate`` (64 x 512 or 64 x 160).
"""
from __future__ import annotations

from . import _common as c
from . import _nvtx as nv

NCU_KERNEL_FILTER = "regex:gemm|nvjet|flash"
NCU_COUNT = 2
HAS_TWIN = True


def build(cfg: c.RunConfig) -> c.Step:
    import torch
    import torch.nn.functional as F

    layers, width, heads, vocab, batch, max_length, shortest, longest, texts = c.pick(
        cfg, (2, 32, 4, 100, 4, 64, 4, 20, 64), (8, 768, 12, 30522, 64, 512, 24, 160, 4096))
    dev = cfg.device
    torch.manual_seed(0)
    model = c.text_encoder(layers, width, heads, vocab, 2).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-5, fused=cfg.cuda)
    amp = c.bf16_autocast(cfg)
    # the tokenized dataset, on the host: one id list per text, its label
    gen = torch.Generator().manual_seed(0)
    lengths = torch.randint(shortest, longest + 1, (texts,), generator=gen).tolist()
    dataset = [torch.randint(1, vocab, (n,), generator=gen) for n in lengths]
    labels = torch.randint(0, 2, (texts,), generator=gen)
    order = torch.randperm(texts, generator=gen).tolist()

    def collate(i: int) -> tuple[torch.Tensor, torch.Tensor]:
        start = (i % (texts // batch)) * batch
        picked = order[start:start + batch]
        seqs = [dataset[j] for j in picked]
        if cfg.fixed:  # dynamic padding: the batch's longest, rounded up to a multiple of 8
            padded = -(-max(len(s) for s in seqs) // 8) * 8
        else:  # padding="max_length"
            padded = max_length
        ids = torch.zeros(len(seqs), padded, dtype=torch.long)  # pad id 0
        for row, s in enumerate(seqs):
            ids[row, :len(s)] = s
        if cfg.cuda:
            ids = ids.pin_memory()
        return ids.to(dev, non_blocking=True), labels[picked].to(dev, non_blocking=True)

    lens = sorted({-(-max(lengths[j] for j in order[s:s + batch]) // 8) * 8
                   for s in range(0, texts - batch + 1, batch)})
    print(f"[pad_to_max_length] padded length: "
          f"{f'{lens[0]} to {lens[-1]}' if cfg.fixed else max_length} tokens", flush=True)

    def step(i: int) -> None:
        with nv.range("collate"):
            ids, y = collate(i)
        loss = c.forward_backward(opt, lambda: F.cross_entropy(model(ids), y), amp=amp)
        c.optimizer_step(opt)
        del loss

    return step


def main(argv: list[str] | None = None) -> int:
    return c.run_workload("pad_to_max_length", __doc__, build, argv, steps=(2, 20), warmup=(1, 2))


if __name__ == "__main__":
    raise SystemExit(main())
