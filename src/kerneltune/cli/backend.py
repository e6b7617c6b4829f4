"""placeholder: replaced by the backend command group."""


def register(commands) -> None:
    pass
