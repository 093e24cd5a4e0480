"""Entry point of group ``torch.distributed.backends``: torch >= 2.14 calls it to load ringzip by name."""


def backend_entry() -> None:
    from ._registry import register

    register()
