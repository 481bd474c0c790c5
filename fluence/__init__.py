"""Kubernetes-side logic shared by the fluence binaries: names, settings, graph building,
placement, ledger."""
