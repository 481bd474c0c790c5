"""``kubectl fluence``: what the extender's Fluxion graph holds, and why pods wait."""
