"""Secure aggregation on the coordinator (docs/SECAGG.md): the rounds' state machine
(``rounds.py``), the policy that judges faults and closes steps (``policy.py``), the
message log (``log.py``), the replay after a restart (``replay.py``) and the read-side view
of a round (``view.py``)."""
