"""placeholder: replaced by the report command group."""


def register(commands) -> None:
    pass
