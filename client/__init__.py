"""The hospital side of a federated run: ``data`` loads and validates records, ``agent``
follows the rounds and privatizes on this machine, ``ledger`` keeps the privacy spent and
the exact bytes of every report. See docs/FEDERATED.md.
"""
