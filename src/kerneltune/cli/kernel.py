"""placeholder: replaced by the kernel command group."""


def register(commands) -> None:
    pass
