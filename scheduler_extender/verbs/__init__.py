"""One module per extender verb; each only translates between the wire and the Scheduler."""
