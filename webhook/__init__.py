"""The mutating admission webhook: backend env through the downward API, and gang wiring."""
