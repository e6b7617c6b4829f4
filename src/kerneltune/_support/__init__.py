"""Private plumbing every layer shares; nothing here is public API.

Owns the argument checks (:mod:`.checks`), the atomic writer and the writers' lock
(:mod:`.files`), the one reader of versioned documents (:mod:`.documents`),
cache-line-aligned arrays (:mod:`.aligned`) and the version (:mod:`.version`).
May import only :mod:`kerneltune.errors` and third-party libraries.
"""
