"""The scheduling core: who holds what, and the records that let a restart find it again.

Kubernetes plumbing (reflectors, clients, events, names) lives beside it in
``fluence``; the units here know pods only through the slim structs of
:mod:`fluence.pods`.
"""
