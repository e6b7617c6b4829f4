"""placeholder: replaced by the cache command group."""


def register(commands) -> None:
    pass
