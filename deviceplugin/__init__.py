"""The kubelet device plugin advertising fluxion.flux-framework.org/<type> on every node."""
