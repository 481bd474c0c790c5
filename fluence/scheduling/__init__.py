"""The scheduling core: units with one reason to change each, and the ledger coordinates them.

``record`` (the allocation record and its seal), ``holdings`` (who holds what, job ids,
shared devices), ``request`` (one group's placement and its outcome), ``match`` (one
all-or-nothing match split into a holding per pod), ``topology`` (which zones and racks),
``queue`` and ``reservations`` (the waiting groups and the capacity held for the first),
``backfill`` (how many of them are protected: conservative or EASY),
``preemption`` (victims and who is going), ``recovery`` (holdings that follow the API
server's pods). Kubernetes plumbing (reflectors, clients, events, names) lives beside it
in ``fluence``; the units know pods only through the slim structs of :mod:`fluence.pods`.
"""
