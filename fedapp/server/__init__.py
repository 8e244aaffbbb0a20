"""The server's round machinery, once for every algorithm: between ``fedapp.core`` and ``strategies/``.

By concern: ``discovery`` (the clients, site binding: ``sites``, the seeded sample), ``transport``
and ``exchange`` (the messages, replies within the time-out, spilling to disk: ``spill``, the
simulation engine's pick-up: ``pickup``), ``replies`` (reply validation), ``screens`` (the robust
defence, pure functions), ``rounds`` (one round, the ``Driver`` a strategy holds), ``loop`` (the
rounds of a run and their rows) and ``hooks`` (what all of it calls on a strategy).
"""
